"""Synthetic descriptor sets for the image-search chapters (the settings of the Gominski thesis
§3.4.2, Fig. 3.18, and §4.2).

Each generator returns L2-normalised descriptors, class labels and a domain ("source") label, with
the structure that makes one claim of the Gominski thesis visible:

* :func:`bridged_clusters` (R3, Fig. 3.18): every class is a bent chain ground -> oblique ->
  vertical; the two ends are far apart (``cos(A, C)`` below the similarity to other classes) and
  only the middle stage bridges them, so graph diffusion visibly helps.
* :func:`multi_view_descriptors` (R4, Table 4.3): ``V`` descriptors of the same images, descriptor
  ``v`` clean on domain ``v`` and noisy elsewhere (like GeM-GLD good on Internet, GeM-SF300 good on
  Photothèque), so fusing them (MD) beats the best single one.
* :func:`biased_home_descriptors` (R5, Fig. 4.6): each class lives mostly in a "home" domain and
  every domain adds a shared offset, so same-domain negatives outrank cross-domain positives (a
  large mAPD) -- the setting of cMD's lambda trade-off.

They use ``numpy.random.default_rng(seed)`` in a fixed order, so the chapters'
numbers are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rank_lab._validation import check_embeddings, check_float, check_labels, check_positive_int

__all__ = ["DescriptorSet", "bridged_clusters", "multi_view_descriptors", "biased_home_descriptors"]


@dataclass
class DescriptorSet:
    """Descriptors of ``n`` images.

    Attributes:
        features: list of ``V`` tensors ``(n, d)`` (one per descriptor), L2-normalised, float32.
        labels: ``(n,)`` class labels.
        domains: ``(n,)`` domain / source labels.

    Raises:
        ValueError / TypeError: no descriptor, a non-finite or empty one, or ``n`` differing
            between the descriptors, ``labels`` and ``domains``.
    """

    features: list[torch.Tensor]
    labels: torch.Tensor
    domains: torch.Tensor

    def __post_init__(self) -> None:
        if not self.features:
            raise ValueError("features is empty (at least one descriptor)")
        xs = [check_embeddings(x, f"features[{v}]") for v, x in enumerate(self.features)]
        n = xs[0].shape[0]
        for v, x in enumerate(xs):
            if x.shape[0] != n:
                raise ValueError(f"features[{v}] has {x.shape[0]} rows but features[0] has {n}")
        self.features = xs
        self.labels = check_labels(self.labels, n, "labels")
        self.domains = check_labels(self.domains, n, "domains")

    @property
    def x(self) -> torch.Tensor:
        """The first descriptor."""
        return self.features[0]


def _check_sizes(**sizes: int) -> None:
    for name, v in sizes.items():
        check_positive_int(v, name)


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return int(seed)


def _l2n(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _pack(
    xs: list[np.ndarray], y: list[int] | np.ndarray, dom: list[int] | np.ndarray
) -> DescriptorSet:
    return DescriptorSet(
        [torch.from_numpy(np.asarray(x, dtype=np.float32)) for x in xs],
        torch.as_tensor(np.asarray(y), dtype=torch.long),
        torch.as_tensor(np.asarray(dom), dtype=torch.long),
    )


def bridged_clusters(
    n_classes: int = 30,
    per_stage: int = 10,
    dim: int = 64,
    step: float = 1.5,
    sigma: float = 0.3,
    seed: int = 0,
) -> DescriptorSet:
    """Bent chains ``mu -> mu + step D1 -> mu + step (D1 + D2)`` (the bridged views of Fig. 3.18 of
    the Gominski thesis).

    Stage 0/1/2 ("ground / oblique / vertical") is the domain; every stage spreads along its
    segment (``t ~ U(-0.3, 0.3)``) with isotropic noise ``sigma``.

    Returns:
        A :class:`DescriptorSet` with ``n = 3 * n_classes * per_stage`` items and one descriptor.

    Raises:
        ValueError / TypeError: non-positive counts, ``dim < 3`` (two directions orthogonal to the
            centre are needed), a negative or non-finite ``step`` / ``sigma``, a negative seed.
    """
    _check_sizes(n_classes=n_classes, per_stage=per_stage, dim=dim)
    if dim < 3:
        raise ValueError(f"dim must be >= 3 (a centre and two orthogonal directions), got {dim}")
    check_float(step, "step", low=0.0)
    check_float(sigma, "sigma", low=0.0)
    rng = np.random.default_rng(_check_seed(seed))
    xs, y, dom = [], [], []
    for c in range(n_classes):
        mu = _l2n(rng.normal(size=(1, dim)))[0]
        d1 = rng.normal(size=dim)
        d1 -= d1 @ mu * mu
        d1 /= np.linalg.norm(d1)
        d2 = rng.normal(size=dim)
        d2 -= d2 @ mu * mu + d2 @ d1 * d1
        d2 /= np.linalg.norm(d2)
        for st, (a, b) in enumerate([(0, 0), (1, 0), (1, 1)]):
            for _ in range(per_stage):
                t = rng.uniform(-0.3, 0.3)
                xs.append(
                    mu
                    + step * (a * d1 + b * d2)
                    + t * step * (d1 if st < 2 else d2)
                    + sigma * rng.normal(size=dim)
                )
                y.append(c)
                dom.append(st)
    return _pack([_l2n(np.array(xs))], y, dom)


def multi_view_descriptors(
    n_classes: int = 30,
    per_class: int = 12,
    dim: int = 32,
    n_views: int = 3,
    good: float = 0.25,
    bad: float = 0.9,
    seed: int = 0,
) -> DescriptorSet:
    """``n_views`` descriptors; view ``v`` has noise ``good`` on domain ``v`` and ``bad`` elsewhere
    (R4).

    Domains are assigned at random (``n_views`` of them). Every view has its own class centres,
    i.e. an independent "embedding" of the same images.

    Raises:
        ValueError / TypeError: non-positive counts, a negative or non-finite noise level, a
            negative seed.
    """
    _check_sizes(n_classes=n_classes, per_class=per_class, dim=dim, n_views=n_views)
    check_float(good, "good", low=0.0)
    check_float(bad, "bad", low=0.0)
    rng = np.random.default_rng(_check_seed(seed))
    n = n_classes * per_class
    y = np.repeat(np.arange(n_classes), per_class)
    dom = np.tile(np.arange(n_views), n // n_views + 1)[:n]
    rng.shuffle(dom)
    xs = []
    for v in range(n_views):
        mu = _l2n(rng.normal(size=(n_classes, dim)))
        sig = np.where(dom == v, good, bad)[:, None]
        xs.append(_l2n(mu[y] + sig * rng.normal(size=(n, dim)) / np.sqrt(dim) * 4))
    return _pack(xs, y, dom)


def biased_home_descriptors(
    n_classes: int = 30,
    per_class: int = 12,
    dim: int = 32,
    n_views: int = 3,
    n_domains: int = 4,
    beta: float = 0.6,
    sigma: float = 0.5,
    home: float = 0.8,
    seed: int = 0,
) -> DescriptorSet:
    """Classes concentrated in a home domain plus a shared per-domain offset ``beta`` (R5).

    A fraction ``home`` of each class' images is in its home domain, the rest in random domains.

    Raises:
        ValueError / TypeError: non-positive counts, a non-finite ``beta``, a negative or
            non-finite ``sigma``, ``home`` outside [0, 1], a negative seed.
    """
    _check_sizes(
        n_classes=n_classes, per_class=per_class, dim=dim, n_views=n_views, n_domains=n_domains
    )
    check_float(beta, "beta")
    check_float(sigma, "sigma", low=0.0)
    check_float(home, "home", low=0.0, high=1.0)
    rng = np.random.default_rng(_check_seed(seed))
    n = n_classes * per_class
    y = np.repeat(np.arange(n_classes), per_class)
    h = rng.integers(0, n_domains, n_classes)
    dom = np.where(rng.random(n) < home, h[y], rng.integers(0, n_domains, n))
    xs = []
    for _ in range(n_views):
        mu = _l2n(rng.normal(size=(n_classes, dim)))
        b = _l2n(rng.normal(size=(n_domains, dim)))
        xs.append(
            _l2n(mu[y] + beta * b[dom] + sigma * rng.normal(size=(n, dim)) / np.sqrt(dim) * 3)
        )
    return _pack(xs, y, dom)
