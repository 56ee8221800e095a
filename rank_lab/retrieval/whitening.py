"""Post-processing of global descriptors: L2 normalisation, PCA / PCA-whitening, learned whitening.

Gominski thesis §3.4.1: "the dimension can be reduced with a whitening layer,
PCA, or product quantization"; the formulas are those of the cited papers ([EXT]):

* **PCA-whitening** (Jégou & Chum 2012) learned on a held-out set with mean ``mu`` and covariance
  ``C = U diag(lambda) U^T``: ``d_hat = diag(lambda_{1:D'})^{-power} U_{1:D'}^T (d - mu)`` then L2N.
  ``power = 1/2`` is full whitening, ``power = 0`` plain PCA, values in between are the
  *power shrinkage* of Jégou & Chum. ``shrinkage = beta`` additionally shrinks the covariance to a
  scaled identity, ``C <- (1 - beta) C + beta tr(C)/d I``, which bounds the gain given to tiny
  eigenvalues (the usual fix when the learning set is small).
* **Learned whitening from matching pairs** "Lw" (Radenović et al., TPAMI 2019): with the
  intra-class covariance of matching pairs ``C_S = mean (x_i - x_j)(x_i - x_j)^T`` and an
  "inter-class" covariance ``C_D``, ``P = eig(C_S^{-1/2} C_D C_S^{-1/2})^T C_S^{-1/2}`` and
  ``d_hat = P (d - mu)`` with ``mu`` the mean of the query side of the pairs. The paper defines
  ``C_D`` over non-matching pairs; the official code (cirtorch ``whitenlearn``) uses the scatter
  of all the learning descriptors around ``mu`` instead and whitens ``C_S`` with a Cholesky factor
  instead of the symmetric square root. Default here: the code's ``C_D`` when no non-matching pairs
  are given, the paper's otherwise; ``factor="sym"`` (paper) or ``"cholesky"`` (code) give the same
  projection up to the sign of each output axis (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from rank_lab._validation import as_tensor, check_embeddings, check_finite, check_float, unit_rows

__all__ = ["l2n", "Whitening", "learn_pca_whitening", "learn_lw_whitening", "apply_whitening"]


def l2n(x: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    """L2-normalise ``x`` along ``dim`` (rows of a ``(N, d)`` matrix by default); zero rows stay 0.

    Rows of any finite magnitude come out unit (``1e20`` or subnormal rows too): each row is first
    divided by a power of two near its largest entry, which is exact
    (:func:`rank_lab._validation.unit_rows`), so the result equals ``x / ||x||`` bit for bit
    wherever the norm neither overflows nor underflows.

    Args:
        x: a floating tensor of any shape.
        dim: the dimension normalised.
        eps: floor of the norm of the scaled row (whose largest entry is in ``[0.5, 1)``), a finite
            number > 0: only rows of zeros (or ``eps`` above 0.5) reach it.

    Raises:
        ValueError: if ``x`` holds NaN or inf (it would be returned as NaN) or is empty, or ``eps``
            is not a finite number > 0.
    """
    eps = check_float(eps, "eps", low=0.0, low_open=True)
    x = as_tensor(x, "x")
    if x.numel() == 0:
        raise ValueError(f"x is empty (shape {tuple(x.shape)})")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor, got dtype {x.dtype}")
    check_finite(x, "x")
    return unit_rows(x, dim, eps)


@dataclass
class Whitening:
    """A learned affine projection ``d -> L2N(P (d - mean))``.

    Attributes:
        mean: ``(d,)`` centring vector.
        projection: ``(d_out, d)`` matrix ``P`` (rows sorted by decreasing importance).
        eigenvalues: ``(d,)`` the spectrum the projection was built from (PCA: covariance
            eigenvalues; Lw: the eigenvalues of the whitened inter-class covariance), descending.
        kind: ``"pca"`` or ``"lw"``.
    """

    mean: torch.Tensor
    projection: torch.Tensor
    eigenvalues: torch.Tensor
    kind: str

    @property
    def out_dim(self) -> int:
        """Output dimension ``d_out``."""
        return int(self.projection.shape[0])

    def __call__(
        self, x: torch.Tensor, dim: int | None = None, normalize: bool = True
    ) -> torch.Tensor:
        """Apply the projection; see :func:`apply_whitening`."""
        return apply_whitening(x, self, dim=dim, normalize=normalize)

    def to_linear(self, dim: int | None = None) -> torch.nn.Linear:
        """The projection as an ``nn.Linear`` (``W = P``, ``b = -P mean``) to put in a model
        head."""
        p = self.projection if dim is None else self.projection[:dim]
        lin = torch.nn.Linear(p.shape[1], p.shape[0])
        with torch.no_grad():
            lin.weight.copy_(p.float())
            lin.bias.copy_(-(p @ self.mean).float())
        return lin

    def state_dict(self) -> dict[str, torch.Tensor | str]:
        """A dict for ``torch.save``."""
        return {
            "mean": self.mean,
            "projection": self.projection,
            "eigenvalues": self.eigenvalues,
            "kind": self.kind,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor | str]) -> Whitening:
        """Inverse of :meth:`state_dict`."""
        return cls(state["mean"], state["projection"], state["eigenvalues"], str(state["kind"]))  # type: ignore[arg-type]


def _check_dim(dim: int | None, d: int) -> int:
    if dim is None:
        return d
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= d:
        raise ValueError(f"dim must be an int in [1, {d}], got {dim!r}")
    return dim


def learn_pca_whitening(
    x: torch.Tensor,
    dim: int | None = None,
    *,
    power: float = 0.5,
    shrinkage: float = 0.0,
    eps: float = 1e-9,
) -> Whitening:
    """Learn PCA / PCA-whitening on a learning set (Jégou & Chum 2012).

    Args:
        x: ``(N, d)`` learning descriptors (usually L2-normalised, held out from the test set).
        dim: output dimension ``D' <= d`` (default ``d``).
        power: eigenvalue exponent, ``P = diag(lambda)^{-power} U^T``: 0.5 whitening, 0 PCA.
        shrinkage: ``beta in [0, 1]``, covariance shrinkage towards ``tr(C)/d I``.
        eps: added to the eigenvalues before the power.

    Returns:
        A :class:`Whitening` (computed in float64).
    """
    x = check_embeddings(x, "x").to(torch.float64)
    n, d = x.shape
    if n < 2:
        raise ValueError(f"x needs at least 2 rows to estimate a covariance, got {n}")
    dim = _check_dim(dim, d)
    if not 0.0 <= float(power) <= 1.0:
        raise ValueError(f"power must be in [0, 1], got {power}")
    if not 0.0 <= float(shrinkage) <= 1.0:
        raise ValueError(f"shrinkage must be in [0, 1], got {shrinkage}")
    mean = x.mean(0)
    xc = x - mean
    cov = xc.T @ xc / (n - 1)
    if shrinkage > 0:
        cov = (1 - shrinkage) * cov + shrinkage * torch.trace(cov) / d * torch.eye(
            d, dtype=cov.dtype, device=cov.device
        )
    evals, evecs = torch.linalg.eigh(cov)
    order = torch.argsort(evals, descending=True)
    evals, evecs = evals[order].clamp_min(0), evecs[:, order]
    proj = (evals[:dim] + eps).pow(-power)[:, None] * evecs[:, :dim].T
    return Whitening(mean, proj, evals, "pca")


def _inv_sqrt(m: torch.Tensor, eps: float) -> torch.Tensor:
    evals, evecs = torch.linalg.eigh(m)
    return evecs @ torch.diag((evals.clamp_min(0) + eps).rsqrt()) @ evecs.T


def learn_lw_whitening(
    x: torch.Tensor,
    pairs: torch.Tensor | Sequence[tuple[int, int]],
    dim: int | None = None,
    *,
    negative_pairs: torch.Tensor | Sequence[tuple[int, int]] | None = None,
    factor: Literal["sym", "cholesky"] = "sym",
    ridge: float = 0.0,
    eps: float = 1e-9,
) -> Whitening:
    """Learn the supervised "Lw" whitening from matching pairs (Radenović et al. 2018).

    Args:
        x: ``(N, d)`` learning descriptors.
        pairs: ``(M, 2)`` indices ``(i, j)`` of matching (same object) descriptors; column 0 is the
            query side whose mean centres the data, as in the official code.
        dim: output dimension (default ``d``).
        negative_pairs: ``(M', 2)`` non-matching pairs for the paper's ``C_D``; ``None`` uses the
            scatter of all of ``x`` around the mean (official code).
        factor: ``"sym"`` ``C_S^{-1/2}`` (paper) or ``"cholesky"`` ``L^{-1}`` with ``C_S = L L^T``
            (code).
        ridge: added to the diagonal of ``C_S``, a finite number >= 0 (needed when ``M < d``:
            ``C_S`` is then singular).
        eps: floor for the eigenvalues of ``C_S``.

    Returns:
        A :class:`Whitening` with ``kind="lw"``.
    """
    x = check_embeddings(x, "x").to(torch.float64)
    n, d = x.shape
    dim = _check_dim(dim, d)
    ridge = check_float(ridge, "ridge", low=0.0)

    def _pairs(p: object, name: str) -> torch.Tensor:
        p = as_tensor(p, name).long()
        if p.ndim != 2 or p.shape[1] != 2 or p.shape[0] == 0:
            raise ValueError(f"{name} must have shape (M, 2) with M >= 1, got {tuple(p.shape)}")
        if bool((p < 0).any()) or bool((p >= n).any()):
            raise ValueError(f"{name} holds indices outside [0, {n})")
        return p.to(x.device)

    pairs = _pairs(pairs, "pairs")
    if factor not in ("sym", "cholesky"):
        raise ValueError(f"factor must be 'sym' or 'cholesky', got {factor!r}")
    mean = x[pairs[:, 0]].mean(0)
    diff = x[pairs[:, 0]] - x[pairs[:, 1]]
    c_s = diff.T @ diff / diff.shape[0] + ridge * torch.eye(d, dtype=x.dtype, device=x.device)
    if factor == "sym":
        w = _inv_sqrt(c_s, eps)
    else:
        try:
            chol = torch.linalg.cholesky(c_s)
        except RuntimeError as exc:
            raise ValueError(
                "C_S is not positive definite (too few pairs for d?): pass ridge > 0"
            ) from exc
        w = torch.linalg.inv(chol)
    if negative_pairs is None:
        xc = (x - mean) @ w.T
        c_d = xc.T @ xc  # scatter of all the learning data (cirtorch), whitened
    else:
        neg = _pairs(negative_pairs, "negative_pairs")
        nd = (x[neg[:, 0]] - x[neg[:, 1]]) @ w.T
        c_d = nd.T @ nd / nd.shape[0]
    evals, evecs = torch.linalg.eigh(c_d)
    order = torch.argsort(evals, descending=True)
    proj = evecs[:, order].T @ w
    return Whitening(mean, proj[:dim], evals[order], "lw")


def apply_whitening(
    x: torch.Tensor, whitening: Whitening, dim: int | None = None, normalize: bool = True
) -> torch.Tensor:
    """Project descriptors: ``L2N(P_{1:dim} (x - mean))``.

    Args:
        x: ``(N, d)`` descriptors.
        whitening: from :func:`learn_pca_whitening` / :func:`learn_lw_whitening`.
        dim: keep the first ``dim`` output axes (default all the projection has).
        normalize: L2-renormalise the output (the thesis' pipeline always does).

    Returns:
        ``(N, dim)`` in the dtype of ``x``.
    """
    x = check_embeddings(x, "x")
    if x.shape[1] != whitening.projection.shape[1]:
        raise ValueError(
            f"x has d={x.shape[1]} but the whitening was learned for "
            f"d={whitening.projection.shape[1]}"
        )
    dim = _check_dim(dim, whitening.out_dim)
    p = whitening.projection[:dim].to(x.device, torch.float64)
    y = (x.to(torch.float64) - whitening.mean.to(x.device)) @ p.T
    if normalize:
        y = l2n(y)
    return y.to(x.dtype)
