"""Synthetic data for the few-shot classification chapters (offline stand-ins for land-use sets).

* :func:`anisotropic_classes` -- Gaussian classes sharing an anisotropic covariance (a few
  dominant directions), the setting where Simple CNAPS' Mahalanobis rule beats a Euclidean nearest
  mean (Gominski thesis eq. 5.2). ``scale`` shrinks everything, to show that the ``+ I`` regulariser
  of eq. 5.2 then swamps the covariances and the two rules coincide.
* :func:`make_multi_dataset` -- several "datasets" drawing their classes from a shared pool of
  latent concepts, each with its own nuisance directions and rendering offset, seen through one
  fixed random nonlinear map (:class:`rank_lab.data.RandomNonlinearMap`); some concepts are shared
  by several datasets, as land-use classes are across UCM, AID, RESISC45... (Gominski thesis §5.3).
  A model trained on some datasets is tested k-shot all-ways on an unseen one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.data import RandomNonlinearMap

__all__ = ["anisotropic_classes", "MultiDataset", "make_multi_dataset"]


def anisotropic_classes(
    n_classes: int = 30,
    per_class: int = 40,
    dim: int = 32,
    *,
    mean_std: float = 0.35,
    eigenvalues: Sequence[float] = (3.0, 2.0, 1.5, 1.0),
    floor: float = 0.05,
    isotropic: bool = False,
    scale: float = 1.0,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian classes ``x = scale (mu_c + e)``, ``e ~ N(0, Sigma)`` shared by all classes.

    ``Sigma`` has ``eigenvalues`` along random orthonormal directions and ``floor`` elsewhere;
    ``isotropic=True`` replaces it by the multiple of ``I`` with the same trace.

    Returns:
        ``(x (C * per_class, dim) float64, y (C * per_class,) long)``.

    Raises:
        TypeError, ValueError: ``n_classes``, ``per_class`` or ``dim`` not a positive int;
            ``mean_std``, ``floor`` or an eigenvalue not a finite number >= 0; ``scale`` not finite;
            more eigenvalues than ``dim``.
    """
    c, n, d = (
        check_positive_int(n_classes, "n_classes"),
        check_positive_int(per_class, "per_class"),
        check_positive_int(dim, "dim"),
    )
    mean_std, floor = (
        check_float(mean_std, "mean_std", low=0.0),
        check_float(floor, "floor", low=0.0),
    )
    scale = check_float(scale, "scale")
    eigenvalues = [check_float(e, "eigenvalues", low=0.0) for e in eigenvalues]
    if len(eigenvalues) > d:
        raise ValueError(f"{len(eigenvalues)} eigenvalues for dim={d}")
    g = torch.Generator().manual_seed(int(seed))
    ev = torch.full((d,), float(floor), dtype=torch.float64)
    ev[: len(eigenvalues)] = torch.tensor(list(eigenvalues), dtype=torch.float64)
    if isotropic:
        ev = torch.full((d,), float(ev.mean()), dtype=torch.float64)
    basis, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    mu = mean_std * torch.randn(c, d, generator=g, dtype=torch.float64)
    noise = torch.randn(c * n, d, generator=g, dtype=torch.float64) * ev.sqrt() @ basis.T
    y = torch.arange(c).repeat_interleave(n)
    return scale * (mu[y] + noise), y


@dataclass
class MultiDataset:
    """Several labelled datasets in one array.

    Attributes:
        x: ``(n, input_dim)`` float32 features.
        labels: ``(n,)`` class *within* its dataset.
        dataset_ids: ``(n,)`` dataset of each row.
        concepts: ``(n,)`` latent concept of each row (shared meaning across datasets).
    """

    x: torch.Tensor
    labels: torch.Tensor
    dataset_ids: torch.Tensor
    concepts: torch.Tensor

    def __post_init__(self) -> None:
        """Check ``x (n, d)`` (finite; integer features are cast to float) and three ``(n,)``
        integer label vectors of the same length (``TypeError`` / ``ValueError`` naming the
        field)."""
        self.x = check_embeddings(self.x, "x")
        n = self.x.shape[0]
        for name in ("labels", "dataset_ids", "concepts"):
            y = check_labels(getattr(self, name), n, name)
            if y.ndim != 1:
                raise ValueError(f"{name} must have shape (n,), got {tuple(y.shape)}")
            setattr(self, name, y)

    def select(self, datasets: Sequence[int]) -> MultiDataset:
        """The rows of the given datasets."""
        keep = torch.isin(self.dataset_ids, torch.as_tensor(list(datasets)))
        return MultiDataset(
            self.x[keep], self.labels[keep], self.dataset_ids[keep], self.concepts[keep]
        )


def make_multi_dataset(
    n_datasets: int = 6,
    n_concepts: int = 40,
    classes_per_dataset: int = 10,
    per_class: int = 30,
    *,
    dim: int = 16,
    concept_dim: int = 8,
    input_dim: int = 32,
    concept_std: float = 1.0,
    noise: float = 0.5,
    nuisance_rank: int = 4,
    nuisance_std: float = 2.5,
    style_std: float = 0.5,
    obs_noise: float = 0.05,
    seed: int = 0,
) -> MultiDataset:
    """``n_datasets`` datasets of ``classes_per_dataset`` classes drawn from shared latent concepts.

    A row of dataset ``d`` and concept ``c`` is ``g(z_c + s_d + U_d a + noise * e)``: ``z_c``
    the concept centre (in the first ``concept_dim`` latent coordinates), ``s_d`` a dataset offset
    ("rendering style"), ``U_d`` ``nuisance_rank`` dataset-specific directions *in the other
    coordinates* with coefficients ``a ~ N(0, nuisance_std^2)``, and ``g`` a fixed random
    nonlinear map ``R^dim -> R^input_dim`` shared by all datasets (plus observation noise). A model
    trained on several datasets can learn to ignore every nuisance direction; one trained on a
    single dataset only learns to ignore that dataset's.

    Returns:
        A :class:`MultiDataset` (rows grouped by dataset, then class).

    Raises:
        TypeError, ValueError: a count or dimension not a positive int (``nuisance_rank`` an int
            >= 0), a standard deviation not a finite number >= 0, ``classes_per_dataset >
            n_concepts``, or ``concept_dim`` / ``nuisance_rank`` that do not fit in ``dim``.
    """
    nd, nc = (
        check_positive_int(n_datasets, "n_datasets"),
        check_positive_int(n_concepts, "n_concepts"),
    )
    cpd, n = (
        check_positive_int(classes_per_dataset, "classes_per_dataset"),
        check_positive_int(per_class, "per_class"),
    )
    dim, input_dim = check_positive_int(dim, "dim"), check_positive_int(input_dim, "input_dim")
    concept_dim, nuisance_rank = (
        check_positive_int(concept_dim, "concept_dim"),
        check_nonneg_int(nuisance_rank, "nuisance_rank"),
    )
    concept_std, noise = (
        check_float(concept_std, "concept_std", low=0.0),
        check_float(noise, "noise", low=0.0),
    )
    nuisance_std, style_std = (
        check_float(nuisance_std, "nuisance_std", low=0.0),
        check_float(style_std, "style_std", low=0.0),
    )
    obs_noise = check_float(obs_noise, "obs_noise", low=0.0)
    if cpd > nc:
        raise ValueError(f"classes_per_dataset={cpd} exceeds n_concepts={nc}")
    if not 0 < concept_dim < dim or nuisance_rank > dim - concept_dim:
        raise ValueError(
            "need 0 < concept_dim < dim and nuisance_rank <= dim - concept_dim, got "
            f"{concept_dim}, {dim}, {nuisance_rank}"
        )
    g = torch.Generator().manual_seed(int(seed))
    z = torch.zeros(nc, dim, dtype=torch.float64)
    z[:, :concept_dim] = concept_std * torch.randn(
        nc, concept_dim, generator=g, dtype=torch.float64
    )
    gmap = RandomNonlinearMap(
        dim,
        input_dim,
        input_scale=math.sqrt(concept_std**2 + noise**2 + nuisance_std**2),
        seed=int(seed) + 1,
    )
    xs, ys, ds, cs = [], [], [], []
    for d in range(nd):
        concepts = torch.randperm(nc, generator=g)[:cpd]
        style = style_std * torch.randn(dim, generator=g, dtype=torch.float64)
        u = torch.zeros(dim, nuisance_rank, dtype=torch.float64)
        u[concept_dim:], _ = torch.linalg.qr(
            torch.randn(dim - concept_dim, nuisance_rank, generator=g, dtype=torch.float64)
        )
        cc = concepts.repeat_interleave(n)
        a = nuisance_std * torch.randn(cpd * n, nuisance_rank, generator=g, dtype=torch.float64)
        h = (
            z[cc]
            + style
            + a @ u.T
            + noise * torch.randn(cpd * n, dim, generator=g, dtype=torch.float64)
        )
        xs.append(
            gmap(h) + obs_noise * torch.randn(cpd * n, input_dim, generator=g, dtype=torch.float64)
        )
        ys.append(torch.arange(cpd).repeat_interleave(n))
        ds.append(torch.full((cpd * n,), d))
        cs.append(cc)
    return MultiDataset(torch.cat(xs).float(), torch.cat(ys), torch.cat(ds), torch.cat(cs))
