"""Prior energies of HEAT: density estimators written as energy-based models,
``q(z) ∝ exp(-E_q(z))``.

Section 5.2.2 of the Ramzi thesis (Lafon, Ramzi, Rambour & Thome, ICML 2023) corrects three priors:

* **EL, the class prior** (Liu et al., 2020): ``E_EL(z) = -log sum_c exp(f(z)[c])`` with ``f`` the
  frozen linear head of the classifier (:class:`LogitEnergy`).
* **GMM, the feature prior** (SSD, Sehwag et al., 2021; Lee et al., 2018):
  ``E_GMM(z) = -log sum_c exp(-1/2 (z - mu_c)^T Sigma^{-1} (z - mu_c))`` with class means ``mu_c``
  and one covariance ``Sigma`` shared by the classes (tied), divided by the temperature
  ``T_G = 1e3`` (:class:`ClassGaussianEnergy`).
* **GMM_std, the style prior**: the same GMM fitted on the std-pooled feature vector (the
  per-channel standard deviation of the last feature map, :func:`rank_lab.ood.features.std_pool`).

Every prior is an ``nn.Module`` whose ``energy(z)`` maps ``(N, d)`` features to ``(N,)`` energies,
differentiable in ``z`` (SGLD needs ``grad_z E``). Priors that can be sampled (the proposal
``z'_0 ~ q_k`` of Algorithm 2) have ``sample(n, generator)``. Low energy = in-distribution.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_finite,
    check_float,
    check_labels,
    check_magnitude,
    check_positive_int,
)

__all__ = ["LogitEnergy", "ClassGaussianEnergy", "ZeroEnergy"]


def check_features(z: torch.Tensor, dim: int | None, name: str = "z") -> torch.Tensor:
    """Shape/finiteness check of a feature batch that keeps autograd (no copy, no dtype change).

    The one input check of every energy (priors, residual, hybrid): ``(N, d)``, ``N >= 1``, ``d`` as
    built, floating and finite (NaN / inf raise a ``ValueError`` naming ``name``), with squares that
    neither overflow nor all underflow (the energies are squared distances:
    :func:`~rank_lab._validation.check_magnitude`).
    """
    if not isinstance(z, torch.Tensor):
        z = check_embeddings(z, name)
    if z.ndim != 2 or z.shape[0] == 0:
        raise ValueError(f"{name} must have shape (N, d) with N >= 1, got {tuple(z.shape)}")
    if dim is not None and z.shape[1] != dim:
        raise ValueError(f"{name} has {z.shape[1]} dimensions but the energy was built for {dim}")
    if not z.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got dtype {z.dtype}")
    check_finite(z.detach(), name)
    check_magnitude(z.detach(), name, underflow=True)
    return z


class LogitEnergy(nn.Module):
    """Energy of the logits (EL, Liu et al. 2020): ``E(z) = -T logsumexp(f(z) / T)``.

    ``f(z) = z W^T + b`` is the frozen last linear layer of the classifier. With ``T = 1`` this is
    the class prior of HEAT-EL (Section 5.2.2 of the Ramzi thesis) and the "EL" baseline of its
    tables.

    Args:
        weight: ``(C, d)`` weight of the classifier's head.
        bias: ``(C,)`` bias, or ``None``.
        temperature: ``T > 0``.

    Shapes: ``energy(z (N, d)) -> (N,)``; ``logits(z) -> (N, C)``.
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, temperature: float = 1.0
    ) -> None:
        super().__init__()
        weight = check_embeddings(torch.as_tensor(weight).detach(), "weight")
        if bias is not None:
            bias = torch.as_tensor(bias).detach().to(weight.dtype)
            if bias.shape != (weight.shape[0],):
                raise ValueError(
                    f"bias must have shape ({weight.shape[0]},), got {tuple(bias.shape)}"
                )
            check_finite(bias, "bias")
        temperature = check_float(temperature, "temperature", low=0, low_open=True)
        self.register_buffer("weight", weight.clone())
        self.register_buffer(
            "bias",
            bias.clone() if bias is not None else torch.zeros(weight.shape[0], dtype=weight.dtype),
        )
        self.temperature = float(temperature)

    @classmethod
    def from_linear(cls, head: nn.Linear, temperature: float = 1.0) -> LogitEnergy:
        """Build from a trained ``nn.Linear`` head (weights copied, frozen)."""
        if not isinstance(head, nn.Linear):
            raise TypeError(f"head must be an nn.Linear, got {type(head).__name__}")
        return cls(
            head.weight.detach(), None if head.bias is None else head.bias.detach(), temperature
        )

    @property
    def dim(self) -> int:
        """Input dimension ``d``."""
        return int(self.weight.shape[1])

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        """``(N, d) -> (N, C)`` logits of the frozen head."""
        z = check_features(z, self.dim)
        return z @ self.weight.to(z.dtype).T + self.bias.to(z.dtype)

    def energy(self, z: torch.Tensor) -> torch.Tensor:
        """``(N, d) -> (N,)``: ``-T logsumexp(f(z) / T)``."""
        return -self.temperature * torch.logsumexp(self.logits(z) / self.temperature, dim=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.energy(z)


class ClassGaussianEnergy(nn.Module):
    """Class-conditional Gaussians with a tied covariance (the GMM prior of HEAT, SSD+,
    Mahalanobis).

    Thesis form (Section 5.2.2, priors 2 and 3), divided by the temperature ``T_G``:

    ``E(z) = -(1/T_G) log sum_c pi_c exp(-1/2 (z - mu_c)^T Sigma^{-1} (z - mu_c))``

    with ``mu_c`` the class means and ``Sigma`` the (biased) covariance of the class-centred
    training features. ``weights="uniform"`` (default, the thesis' formula) drops ``pi_c``;
    ``weights="counts"`` uses the class frequencies, and ``normalizer=True`` adds the Gaussian
    log-normaliser ``(d log 2 pi + log det Sigma) / 2``: together they give ``-log p(z)/T_G`` of the
    official code's ``MixtureSameFamily`` (the normaliser is a constant under a tied covariance).

    Args:
        temperature: ``T_G`` (thesis 1e3; 1 gives the plain negative log-density).
        weights: ``"uniform"`` or ``"counts"``.
        normalizer: add the Gaussian normaliser (a constant shift).
        reg: ridge added to ``Sigma``'s diagonal, relative to its mean variance
            (``Sigma + reg * tr(Sigma)/d * I``); the code adds an absolute 1e-12.

    Shapes: ``fit(z (N, d), labels (N,))``; ``energy(z (M, d)) -> (M,)``;
    ``mahalanobis(z) -> (M, C)`` squared distances; ``sample(n) -> (n, d)``.
    """

    def __init__(
        self,
        temperature: float = 1e3,
        weights: str = "uniform",
        normalizer: bool = False,
        reg: float = 1e-6,
    ) -> None:
        super().__init__()
        temperature = check_float(temperature, "temperature", low=0, low_open=True)
        check_choice(weights, "weights", ("uniform", "counts"))
        reg = check_float(reg, "reg", low=0)
        self.temperature = float(temperature)
        self.weights = weights
        self.normalizer = bool(normalizer)
        self.reg = float(reg)
        for name in ("means", "chol", "whitener", "log_pi", "counts"):
            self.register_buffer(name, None)
        self.log_norm = 0.0

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`from_params`) has run."""
        return self.means is not None

    @property
    def dim(self) -> int:
        """Feature dimension ``d``."""
        self._require_fitted()
        return int(self.means.shape[1])

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise RuntimeError("ClassGaussianEnergy is not fitted: call fit(z, labels) first")

    def _set(self, means: torch.Tensor, cov: torch.Tensor, counts: torch.Tensor) -> None:
        d = means.shape[1]
        cov = cov.double()
        cov = 0.5 * (cov + cov.T)
        ridge = self.reg * float(torch.diagonal(cov).mean().clamp_min(1e-12))
        cov = cov + ridge * torch.eye(d, dtype=cov.dtype, device=cov.device)
        chol, info = torch.linalg.cholesky_ex(cov)
        if int(info) != 0:
            raise ValueError("the tied covariance is not positive definite; increase reg")
        eye = torch.eye(d, dtype=cov.dtype, device=cov.device)
        whitener = torch.linalg.solve_triangular(chol, eye, upper=False)  # L^{-1}
        dtype = means.dtype
        self.means = means.clone()
        self.chol = chol.to(dtype)
        self.whitener = whitener.to(dtype)
        self.counts = counts.to(dtype)
        if self.weights == "counts":
            self.log_pi = torch.log(self.counts / self.counts.sum())
        else:
            self.log_pi = torch.zeros_like(self.counts)
        self.log_norm = 0.5 * (d * math.log(2 * math.pi)) + float(
            torch.log(torch.diagonal(chol)).sum()
        )

    @torch.no_grad()
    def fit(self, z: torch.Tensor, labels: torch.Tensor) -> ClassGaussianEnergy:
        """Fit the class means and the tied covariance on ``z (N, d)`` with integer ``labels (N,)``.

        Classes are the distinct label values (re-indexed ``0..C-1`` in sorted order).
        """
        z = check_embeddings(z, "z")
        y = check_labels(labels, z.shape[0], "labels")
        if y.ndim != 1:
            raise ValueError(f"labels must have shape (N,), got {tuple(y.shape)}")
        classes, y = torch.unique(y.to(z.device), sorted=True, return_inverse=True)
        c = classes.numel()
        counts = torch.bincount(y, minlength=c).to(z.dtype)
        sums = torch.zeros(c, z.shape[1], dtype=torch.float64, device=z.device).index_add_(
            0, y, z.double()
        )
        means = sums / counts.double()[:, None]
        centred = z.double() - means[y]
        cov = centred.T @ centred / z.shape[0]
        self.classes = classes
        self._set(means.to(z.dtype), cov, counts)
        return self

    @classmethod
    def from_params(
        cls,
        means: torch.Tensor,
        cov: torch.Tensor,
        temperature: float = 1.0,
        weights: torch.Tensor | None = None,
        **kwargs: object,
    ) -> ClassGaussianEnergy:
        """Build from known parameters: ``means (C, d)``, ``cov (d, d)``, optional mixture
        ``weights (C,)``."""
        means = check_embeddings(means, "means")
        cov = torch.as_tensor(cov, dtype=means.dtype)
        if cov.shape != (means.shape[1], means.shape[1]):
            raise ValueError(
                f"cov must have shape ({means.shape[1]}, {means.shape[1]}), got {tuple(cov.shape)}"
            )
        obj = cls(
            temperature=temperature,
            weights="counts" if weights is not None else "uniform",
            reg=0.0,
            **kwargs,
        )  # type: ignore[arg-type]
        w = (
            torch.ones(means.shape[0], dtype=means.dtype)
            if weights is None
            else torch.as_tensor(weights, dtype=means.dtype)
        )
        if w.shape != (means.shape[0],) or bool((w <= 0).any()):
            raise ValueError("weights must be positive with shape (C,)")
        obj.classes = torch.arange(means.shape[0])
        obj._set(means, cov, w)
        return obj

    def mahalanobis(self, z: torch.Tensor) -> torch.Tensor:
        """Squared Mahalanobis distances ``(z - mu_c)^T Sigma^{-1} (z - mu_c)``:
        ``(M, d) -> (M, C)``.

        Computed as ``||L^{-1} z - L^{-1} mu_c||^2`` with one matrix product (``Sigma = L L^T``).
        """
        self._require_fitted()
        z = check_features(z, self.dim)
        w = self.whitener.to(z.dtype)
        zw = z @ w.T
        mw = self.means.to(z.dtype) @ w.T
        d2 = (zw * zw).sum(1, keepdim=True) - 2 * zw @ mw.T + (mw * mw).sum(1)[None]
        return d2.clamp_min(0)

    def energy(self, z: torch.Tensor) -> torch.Tensor:
        """``(M, d) -> (M,)`` tempered energy ``-log sum_c pi_c exp(-d2_c / 2) / T_G``."""
        log_q = torch.logsumexp(-0.5 * self.mahalanobis(z) + self.log_pi.to(z.dtype), dim=1)
        if self.normalizer:
            log_q = log_q - self.log_norm
        return -log_q / self.temperature

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.energy(z)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``n`` samples ``(n, d)`` from the (untempered) mixture: the SGLD proposal
        ``z'_0 ~ q``.

        The class is drawn with the mixture weights (uniform by default), then
        ``z = mu_c + L eps``. The temperature only rescales the energy, not the proposal (as in the
        official code, which samples the fitted Gaussian mixture).
        """
        self._require_fitted()
        n = check_positive_int(n, "n")
        dev = self.means.device if generator is None else generator.device
        probs = torch.softmax(self.log_pi.double(), 0).to(dev)
        cls_idx = torch.multinomial(probs, n, replacement=True, generator=generator)
        eps = torch.randn(n, self.dim, generator=generator, device=dev, dtype=self.means.dtype)
        cls_idx, eps = cls_idx.to(self.means.device), eps.to(self.means.device)
        return self.means[cls_idx] + eps @ self.chol.T


class ZeroEnergy(nn.Module):
    """The empty prior ``E_q = 0``: a HEAT model with it is a plain, fully data-driven EBM (Tab.
    5.2).

    ``fit`` records the per-dimension mean and standard deviation of the data so that
    :meth:`sample` offers a diagonal-Gaussian proposal for SGLD (the official code's plain EBM
    starts from ``N(0, I)``; pass ``proposal="normal"`` to the HEAT config for that).
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", None)
        self.register_buffer("std", None)

    @torch.no_grad()
    def fit(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> ZeroEnergy:
        """Record ``mean`` and ``std`` (``(d,)``) of ``z (N, d)``; ``labels`` is ignored."""
        z = check_embeddings(z, "z")
        self.mean = z.mean(0)
        self.std = z.std(0, unbiased=False).clamp_min(1e-6)
        return self

    def energy(self, z: torch.Tensor) -> torch.Tensor:
        """``(N, d) -> (N,)`` zeros (keeps the graph so ``grad_z`` is defined)."""
        z = check_features(z, None)
        return z.sum(1) * 0.0

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.energy(z)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(n, d)`` draws from ``N(mean, diag(std^2))`` (after :meth:`fit`)."""
        if self.mean is None:
            raise RuntimeError(
                "ZeroEnergy.sample needs fit(z) first (it samples a diagonal Gaussian of the data)"
            )
        n = check_positive_int(n, "n")
        dev = self.mean.device if generator is None else generator.device
        eps = torch.randn(
            n, self.mean.numel(), generator=generator, device=dev, dtype=self.mean.dtype
        )
        return self.mean + eps.to(self.mean.device) * self.std
