"""Synthetic descriptor sets for the image-search chapters (digest 004 §6 R3-R5, §7.2).

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

They use ``numpy.random.default_rng(seed)`` in the same order as the digest's prototype, so its
reference numbers can be checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["DescriptorSet", "bridged_clusters", "multi_view_descriptors", "biased_home_descriptors"]


@dataclass
class DescriptorSet:
    """Descriptors of ``n`` images.

    Attributes:
        features: list of ``V`` tensors ``(n, d)`` (one per descriptor), L2-normalised, float32.
        labels: ``(n,)`` class labels.
        domains: ``(n,)`` domain / source labels.
    """

    features: list[torch.Tensor]
    labels: torch.Tensor
    domains: torch.Tensor

    @property
    def x(self) -> torch.Tensor:
        """The first descriptor."""
        return self.features[0]


def _l2n(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _pack(xs: list[np.ndarray], y: list[int] | np.ndarray, dom: list[int] | np.ndarray) -> DescriptorSet:
    return DescriptorSet(
        [torch.from_numpy(np.asarray(x, dtype=np.float32)) for x in xs],
        torch.as_tensor(np.asarray(y), dtype=torch.long),
        torch.as_tensor(np.asarray(dom), dtype=torch.long),
    )


def bridged_clusters(
    n_classes: int = 30, per_stage: int = 10, dim: int = 64, step: float = 1.5, sigma: float = 0.3, seed: int = 0
) -> DescriptorSet:
    """Bent chains ``mu -> mu + step D1 -> mu + step (D1 + D2)`` (digest R3; prototype ``bridged``).

    Stage 0/1/2 ("ground / oblique / vertical") is the domain; every stage spreads along its
    segment (``t ~ U(-0.3, 0.3)``) with isotropic noise ``sigma``.

    Returns:
        A :class:`DescriptorSet` with ``n = 3 * n_classes * per_stage`` items and one descriptor.
    """
    rng = np.random.default_rng(seed)
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
                xs.append(mu + step * (a * d1 + b * d2) + t * step * (d1 if st < 2 else d2) + sigma * rng.normal(size=dim))
                y.append(c)
                dom.append(st)
    return _pack([_l2n(np.array(xs))], y, dom)


def multi_view_descriptors(
    n_classes: int = 30, per_class: int = 12, dim: int = 32, n_views: int = 3, good: float = 0.25, bad: float = 0.9, seed: int = 0
) -> DescriptorSet:
    """``n_views`` descriptors; view ``v`` has noise ``good`` on domain ``v`` and ``bad`` elsewhere (R4).

    Domains are assigned at random (``n_views`` of them). Every view has its own class centres,
    i.e. an independent "embedding" of the same images.
    """
    rng = np.random.default_rng(seed)
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
    """
    rng = np.random.default_rng(seed)
    n = n_classes * per_class
    y = np.repeat(np.arange(n_classes), per_class)
    h = rng.integers(0, n_domains, n_classes)
    dom = np.where(rng.random(n) < home, h[y], rng.integers(0, n_domains, n))
    xs = []
    for _ in range(n_views):
        mu = _l2n(rng.normal(size=(n_classes, dim)))
        b = _l2n(rng.normal(size=(n_domains, dim)))
        xs.append(_l2n(mu[y] + beta * b[dom] + sigma * rng.normal(size=(n, dim)) / np.sqrt(dim) * 3))
    return _pack(xs, y, dom)
