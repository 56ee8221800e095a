"""Feature-space OOD scorers: Mahalanobis, SSD, GMM, KNN, ViM and Residual.

Same convention as :mod:`rank_lab.ood.scorers`: ``fit(data)`` on ID training data, ``score(data) ->
(N,)`` with **higher = more OOD**; ``data["features"]`` are the penultimate features ``(N, d)``.
"""

from __future__ import annotations

from typing import Any

import torch

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_float,
    check_labels,
    check_magnitude,
    check_positive_int,
    unit_rows,
)
from rank_lab.metrics import knn_search
from rank_lab.ood.energies import ClassGaussianEnergy
from rank_lab.ood.scorers import Data, OODScorer

__all__ = ["Mahalanobis", "SSD", "GMM", "KNN", "ViM", "Residual", "kth_neighbour_distance"]


def _maybe_normalize(z: torch.Tensor, normalize: bool, name: str) -> torch.Tensor:
    """Unit rows at any magnitude (:func:`~rank_lab._validation.unit_rows`) when ``normalize``; else
    the raw features of a Gaussian energy, whose squares must neither overflow nor all underflow."""
    if normalize:
        return unit_rows(z, dim=1)
    check_magnitude(z, name, underflow=True)
    return z


class Mahalanobis(OODScorer):
    """Minimum Mahalanobis distance to the class means (Lee et al., NeurIPS 2018).

    ``s(z) = min_c (z - mu_c)^T Sigma^{-1} (z - mu_c)`` with a covariance shared by the classes
    (``covariance="tied"``, the paper's choice) or one per class (``"class"``). Single layer, no
    input pre-processing and no layer ensemble (as in the ViM / HEAT benchmarks).

    Args:
        normalize: L2-normalise the features first.
        covariance: ``"tied"`` or ``"class"``.
        reg: relative ridge on each covariance (see :class:`ClassGaussianEnergy`).
        key: the feature key (``"features"``; ``"std"`` for std-pooled features).
    """

    name, key = "Mahalanobis", "features"

    def __init__(
        self,
        normalize: bool = False,
        covariance: str = "tied",
        reg: float = 1e-6,
        key: str = "features",
    ) -> None:
        super().__init__()
        check_choice(covariance, "covariance", ("tied", "class"))
        reg = check_float(reg, "reg", low=0)
        self.normalize, self.covariance, self.reg, self.key = normalize, covariance, reg, key

    def fit(self, data: Data) -> Mahalanobis:
        z = _maybe_normalize(self._get(data), self.normalize, f"data[{self.key!r}]")
        y = check_labels(self._get(data, "labels"), z.shape[0], "data['labels']")
        if self.covariance == "tied":
            self.gaussians = [ClassGaussianEnergy(temperature=1.0, reg=self.reg).fit(z, y)]
        else:
            self.gaussians = []
            for c in torch.unique(y):
                zc = z[y == c]
                if zc.shape[0] < 2:
                    raise ValueError(
                        f"class {int(c)} has fewer than 2 samples: cannot fit its covariance"
                    )
                self.gaussians.append(
                    ClassGaussianEnergy(temperature=1.0, reg=self.reg).fit(
                        zc, torch.zeros_like(y[y == c])
                    )
                )
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not hasattr(self, "gaussians"):
            raise RuntimeError(f"{self.name} is not fitted: call fit(train_data) first")
        z = _maybe_normalize(self._get(data), self.normalize, f"data[{self.key!r}]")
        d2 = torch.cat([g.mahalanobis(z) for g in self.gaussians], dim=1)
        return d2.min(1).values


class SSD(Mahalanobis):
    """SSD+ (Sehwag, Chiang & Mittal, ICLR 2021): Mahalanobis on L2-normalised features, class
    labels.

    The SSD paper fits one covariance per cluster (``covariance="class"``, default here). The
    official HEAT code and the thesis' "SSD+" / "GMM" rows use one tied covariance: pass
    ``covariance="tied"`` to reproduce that protocol.
    """

    name = "SSD+"

    def __init__(self, covariance: str = "class", reg: float = 1e-6, key: str = "features") -> None:
        super().__init__(normalize=True, covariance=covariance, reg=reg, key=key)


class GMM(OODScorer):
    """The GMM prior's energy (Section 5.2.2 of the Ramzi thesis): ``-log sum_c exp(-d2_c / 2)``.

    A tied-covariance class-conditional Gaussian mixture (:class:`ClassGaussianEnergy` with
    ``T = 1``; the temperature does not change the ranking). With ``key="std"`` it is **GMM_std**,
    the style prior on std-pooled features.

    Args:
        normalize: L2-normalise the features (official code and SSD+; default ``True``).
        key: ``"features"`` (GMM) or ``"std"`` (GMM_std).
        weights, normalizer, reg: see :class:`ClassGaussianEnergy`.
    """

    key = "features"

    def __init__(
        self,
        normalize: bool = True,
        key: str = "features",
        weights: str = "uniform",
        normalizer: bool = False,
        reg: float = 1e-6,
    ) -> None:
        super().__init__()
        self.normalize, self.key = normalize, key
        self.name = "GMM" if key == "features" else f"GMM_{key}"
        self.energy = ClassGaussianEnergy(
            temperature=1.0, weights=weights, normalizer=normalizer, reg=reg
        )

    def fit(self, data: Data) -> GMM:
        z = _maybe_normalize(self._get(data), self.normalize, f"data[{self.key!r}]")
        self.energy.fit(z, self._get(data, "labels"))
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not self.energy.is_fitted:
            raise RuntimeError(f"{self.name} is not fitted: call fit(train_data) first")
        with torch.no_grad():
            return self.energy.energy(
                _maybe_normalize(self._get(data), self.normalize, f"data[{self.key!r}]")
            )


def kth_neighbour_distance(
    queries: torch.Tensor, bank: torch.Tensor, k: int, chunk_size: int | None = None
) -> torch.Tensor:
    """Euclidean distance from each L2-normalised query to its ``k``-th nearest L2-normalised bank
    row.

    ``||q - b||^2 = 2 - 2 q.b`` for unit vectors, so the ``k`` largest inner products give the
    ``k`` nearest neighbours: the exact search of :func:`rank_lab.metrics.knn_search` (torch
    backend, on the bank's device, in the wider dtype of the two: float64 stays float64), in chunks
    of queries (memory ``chunk_size x N`` floats).

    Args:
        queries: ``(M, d)``; bank: ``(N, d)``, both normalised; k: ``1 <= k <= N``.
        chunk_size: queries per chunk; default ``2**25 // N`` (128 MiB of similarities), at most
            4096.

    Returns:
        ``(M,)`` distances (an evaluation: inputs that require grad are detached).
    """
    queries = check_embeddings(queries, "queries").detach()
    bank = check_embeddings(bank, "bank").detach()
    if queries.shape[1] != bank.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but bank has d={bank.shape[1]}")
    k = check_positive_int(k, "k")
    if k > bank.shape[0]:
        raise ValueError(f"k = {k} exceeds the number of training features ({bank.shape[0]})")
    if chunk_size is None:
        chunk_size = max(1, min(4096, 2**25 // bank.shape[0]))
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    sims, _ = knn_search(
        queries, bank, k, backend="torch", device=bank.device, chunk_size=chunk_size, progress=False
    )
    return torch.sqrt((2 - 2 * sims[:, -1]).clamp_min(0))


class KNN(OODScorer):
    """Deep nearest neighbours (Sun, Ming, Zhu & Li, ICML 2022): distance to the ``k``-th nearest
    normalised training feature, ``s(z) = ||z/|z| - z_(k)||`` (``k = 50`` on CIFAR-10 in the paper,
    1000 on ImageNet).

    Args:
        k: neighbour rank.
        device: where to keep the bank and search (``None``: the features' device).
        backend: ``"torch"`` (exact, chunked) or ``"faiss"`` (``IndexFlatL2``, exact, CPU).
    """

    name, key = "KNN", "features"

    def __init__(self, k: int = 50, device: Any = None, backend: str = "torch") -> None:
        super().__init__()
        self.k = check_positive_int(k, "k")
        check_choice(backend, "backend", ("torch", "faiss"))
        self.device, self.backend = device, backend

    def fit(self, data: Data) -> KNN:
        bank = unit_rows(self._get(data).float(), dim=1)
        if self.k > bank.shape[0]:
            raise ValueError(
                f"k = {self.k} exceeds the number of training features ({bank.shape[0]})"
            )
        if self.backend == "faiss":
            # optional dependency (extra "faiss"), imported where it is used
            import faiss

            self.index = faiss.IndexFlatL2(bank.shape[1])
            self.index.add(bank.cpu().numpy())
        self.bank = bank.to(self.device) if self.device is not None else bank
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not hasattr(self, "bank"):
            raise RuntimeError("KNN is not fitted: call fit(train_data) first")
        q = unit_rows(self._get(data).float(), dim=1)
        if self.backend == "faiss":
            d2, _ = self.index.search(q.cpu().numpy(), self.k)
            return torch.from_numpy(d2[:, -1]).clamp_min(0).sqrt()
        return kth_neighbour_distance(q.to(self.bank.device), self.bank, self.k).cpu()


class ViM(OODScorer):
    """Virtual-logit matching (Wang, Li, Feng & Zhang, CVPR 2022).

    With the origin ``o = -W^+ b``, the principal subspace ``P`` (top-``D`` eigenvectors of the
    uncentred second-moment matrix of ``z - o`` on training data) and its complement ``R``:
    virtual logit ``v = alpha ||(z - o)^T R||`` with
    ``alpha = mean(max_c l_c) / mean(||(z - o)^T R||)`` on the training data, and score
    ``v - logsumexp(l)`` (monotone in the softmax probability of the virtual class; higher = more
    OOD). Logits ``l = W z + b`` of the untranslated features.

    Args:
        head: the classifier's last linear layer.
        principal_dim: ``D``; default 1000 for ``d >= 1500``, 512 for ``d >= 768``, else ``d // 2``
            (the paper's choices for ResNet-50 / ViT).
    """

    name, key = "ViM", "features"

    def __init__(self, head: Any, principal_dim: int | None = None) -> None:
        super().__init__(head)
        self.principal_dim = principal_dim

    def _fit_subspace(self, z: torch.Tensor) -> torch.Tensor:
        w, b = self.head  # type: ignore[misc]
        d = z.shape[1]
        dim = self.principal_dim
        if dim is None:
            dim = 1000 if d >= 1500 else 512 if d >= 768 else d // 2
        dim = check_positive_int(dim, "principal_dim")
        if dim >= d:
            raise ValueError(f"principal_dim must be < the feature dimension {d}, got {dim}")
        self.origin = -(torch.linalg.pinv(w.double()) @ b.double())
        x = z.double() - self.origin
        evals, evecs = torch.linalg.eigh(x.T @ x / x.shape[0])
        order = torch.argsort(evals, descending=True)
        self.residual_basis = evecs[:, order[dim:]].contiguous()  # (d, d - D)
        return torch.linalg.norm(x @ self.residual_basis, dim=1)

    def _residual_norm(self, z: torch.Tensor) -> torch.Tensor:
        return torch.linalg.norm((z.double() - self.origin) @ self.residual_basis, dim=1)

    def fit(self, data: Data) -> ViM:
        z = self._get(data)
        res = self._fit_subspace(z)
        logits = self._logits_from_head(z.double())
        self.alpha = float(logits.max(1).values.mean() / res.mean().clamp_min(1e-12))
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not hasattr(self, "alpha"):
            raise RuntimeError("ViM is not fitted: call fit(train_data) first")
        z = self._get(data)
        energy = -torch.logsumexp(self._logits_from_head(z.double()), dim=1)
        return (self.alpha * self._residual_norm(z) + energy).float()


class Residual(ViM):
    """The "Residual" baseline of the ViM paper: ``||(z - o)^T R||``, the norm outside the principal
    subspace (no logits)."""

    name = "Residual"

    def fit(self, data: Data) -> Residual:
        self._fit_subspace(self._get(data))
        self.alpha = 1.0
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not hasattr(self, "residual_basis"):
            raise RuntimeError("Residual is not fitted: call fit(train_data) first")
        return self._residual_norm(self._get(data)).float()
