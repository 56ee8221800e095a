"""Post-hoc OOD scorers on a frozen classifier: the baselines of Chapter 5 of the Ramzi thesis.

**One calling convention.** Every scorer has ``fit(data) -> self`` (on ID training data) and
``score(data) -> (N,)``, where ``data`` maps names to tensors, as returned by
:func:`rank_lab.ood.features.extract_features`:

* ``"features"`` ``(N, d)``: penultimate (average-pooled) features ``z``;
* ``"std"`` ``(N, d)``: std-pooled features; ``"logits"`` ``(N, C)``; ``"labels"`` ``(N,)``;
* ``"inputs"``: the images, only for ODIN's input perturbation.

A bare tensor is accepted for the scorer's main input (``scorer.key``). **Sign: every score is an
energy, higher = more OOD** (Eq. 2.12), so confidences are negated (MSP returns ``-max softmax``).

This module holds the scorers that read the classifier's outputs or head: MSP, MaxLogit, Energy
(EL), ODIN, KL Matching, ReAct and DICE. Feature-density scorers (Mahalanobis, SSD, GMM, KNN, ViM,
Residual) are in :mod:`rank_lab.ood.feature_scorers`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from rank_lab._validation import (
    check_embeddings,
    check_finite,
    check_float,
    check_magnitude,
    check_overflow,
)

__all__ = [
    "OODScorer",
    "MSP",
    "MaxLogit",
    "EnergyScore",
    "ODIN",
    "KLMatching",
    "ReAct",
    "DICE",
    "as_head",
]

Data = Mapping[str, Any] | torch.Tensor


def as_head(
    head: nn.Linear | tuple[torch.Tensor, torch.Tensor | None],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W (C, d), b (C,))`` (detached copies) from an ``nn.Linear`` or a ``(weight, bias)``
    pair."""
    if isinstance(head, nn.Linear):
        w = head.weight.detach().clone()
        b = (
            head.bias.detach().clone()
            if head.bias is not None
            else torch.zeros(w.shape[0], dtype=w.dtype)
        )
    elif isinstance(head, (tuple, list)) and len(head) == 2:
        w = check_embeddings(torch.as_tensor(head[0]).detach(), "head weight").clone()
        b = (
            torch.zeros(w.shape[0], dtype=w.dtype)
            if head[1] is None
            else torch.as_tensor(head[1]).detach().to(w.dtype).clone()
        )
    else:
        raise TypeError(
            f"head must be an nn.Linear or a (weight, bias) pair, got {type(head).__name__}"
        )
    if b.shape != (w.shape[0],):
        raise ValueError(f"head bias must have shape ({w.shape[0]},), got {tuple(b.shape)}")
    check_finite(w, "head weight")
    check_finite(b, "head bias")
    return w, b.to(w.device)


class OODScorer:
    """Base class: ``fit(data)`` on ID training data, ``score(data) -> (N,)`` energies (higher =
    OOD).

    Subclasses set ``name`` and ``key`` (the main input) and implement :meth:`_score`.
    """

    name: str = "scorer"
    key: str = "logits"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap each subclass' ``fit`` so that the feature widths it saw are recorded (see
        :meth:`_get`)."""
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is None or getattr(fit, "_records_widths", False):
            return

        @functools.wraps(fit)
        def recording_fit(self: OODScorer, *args: Any, **kw: Any) -> Any:
            depth = getattr(self, "_fit_depth", 0)
            if depth == 0:
                self._fit_widths: dict[str, int] = {}
            self._fit_depth = depth + 1
            try:
                return fit(self, *args, **kw)
            finally:
                self._fit_depth = depth

        recording_fit._records_widths = True  # type: ignore[attr-defined]
        cls.fit = recording_fit  # type: ignore[method-assign]

    def __init__(
        self, head: nn.Linear | tuple[torch.Tensor, torch.Tensor | None] | None = None
    ) -> None:
        self.head = as_head(head) if head is not None else None

    def _get(self, data: Data, key: str | None = None) -> torch.Tensor:
        key = key or self.key
        if isinstance(data, torch.Tensor):
            if key != self.key:
                raise ValueError(
                    f"{self.name} needs data[{key!r}]: pass a mapping, not a bare tensor"
                )
            x = data
        elif isinstance(data, Mapping):
            if key not in data:
                if key == "logits" and self.head is not None and "features" in data:
                    return self._logits_from_head(self._get(data, "features"))
                raise ValueError(f"{self.name} needs data[{key!r}]; got keys {sorted(data)}")
            x = data[key]
        else:
            raise TypeError(
                f"data must be a mapping of tensors or a tensor, got {type(data).__name__}"
            )
        if key == "labels":
            return torch.as_tensor(x)
        if key == "inputs":
            return torch.as_tensor(x)
        x = check_embeddings(torch.as_tensor(x).detach(), f"data[{key!r}]")
        # norms, distances and energies of larger values overflow
        check_magnitude(x, f"data[{key!r}]")
        widths = getattr(self, "_fit_widths", None)
        if widths is not None:
            if getattr(self, "_fit_depth", 0) > 0:
                widths.setdefault(key, x.shape[1])
            elif key in widths and widths[key] != x.shape[1]:
                raise ValueError(
                    f"data[{key!r}] has d={x.shape[1]} but {self.name} was fitted on "
                    f"d={widths[key]}"
                )
        return x

    def _logits_from_head(self, z: torch.Tensor) -> torch.Tensor:
        w, b = self.head  # type: ignore[misc]
        return z @ w.to(z).T + b.to(z)

    def fit(self, data: Data) -> OODScorer:
        """Fit on ID training data (a no-op for scorers without statistics). Returns ``self``."""
        return self

    def score(self, data: Data) -> torch.Tensor:
        """``(N,)`` OOD energies, higher = more OOD.

        Raises:
            ValueError: missing or bad data; energies that overflow their dtype (naming ``data``).
        """
        return check_overflow(self._score(data), "data", "the OOD scores")

    def _score(self, data: Data) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, data: Data) -> torch.Tensor:
        return self.score(data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class MSP(OODScorer):
    """Maximum softmax probability (Hendrycks & Gimpel, ICLR 2017): ``-max_c softmax(l)_c``."""

    name, key = "MSP", "logits"

    def _score(self, data: Data) -> torch.Tensor:
        return -torch.softmax(self._get(data), dim=1).max(1).values


class MaxLogit(OODScorer):
    """Maximum logit (Hendrycks et al., ICML 2022, "Scaling OOD detection"): ``-max_c l_c``."""

    name, key = "MaxLogit", "logits"

    def _score(self, data: Data) -> torch.Tensor:
        return -self._get(data).max(1).values


class EnergyScore(OODScorer):
    """Energy of the logits, EL (Liu et al., NeurIPS 2020): ``-T logsumexp(l / T)``, ``T = 1``.

    The class prior of HEAT (Section 5.2.2 of the Ramzi thesis).
    """

    name, key = "EL", "logits"

    def __init__(self, temperature: float = 1.0, head: Any = None) -> None:
        super().__init__(head)
        self.temperature = check_float(temperature, "temperature", low=0, low_open=True)

    def _score(self, data: Data) -> torch.Tensor:
        t = self.temperature
        return -t * torch.logsumexp(self._get(data) / t, dim=1)


class ODIN(OODScorer):
    """ODIN (Liang et al., ICLR 2018): temperature scaling and input perturbation.

    ``x~ = x - eps sign(-grad_x log S_yhat(x; T))``, score ``-max_c softmax(f(x~) / T)_c`` with
    ``T = 1000``. ``eps`` is tuned per dataset in the paper; ``0.0014`` is the official HEAT code's
    value. With ``epsilon = 0`` only the logits are needed; otherwise pass ``model`` (inputs ->
    logits) and ``data["inputs"]``. The paper also divides the gradient by the input normalisation's
    std per channel; here the perturbation is applied in the model's input space as given.
    """

    name, key = "ODIN", "logits"

    def __init__(
        self, temperature: float = 1000.0, epsilon: float = 0.0014, model: nn.Module | None = None
    ) -> None:
        super().__init__()
        temperature = check_float(temperature, "temperature", low=0, low_open=True)
        epsilon = check_float(epsilon, "epsilon", low=0)
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module or None, got {type(model).__name__}")
        self.temperature, self.epsilon, self.model = temperature, epsilon, model

    def _score(self, data: Data) -> torch.Tensor:
        t = self.temperature
        if self.epsilon == 0:
            return -torch.softmax(self._get(data) / t, dim=1).max(1).values
        if self.model is None or not isinstance(data, Mapping) or "inputs" not in data:
            raise ValueError(
                "ODIN with epsilon > 0 needs model=... and data['inputs']; use epsilon=0 for "
                "logits only"
            )
        x = self._get(data, "inputs")
        dev = next(self.model.parameters()).device
        x = x.to(dev).detach().clone().requires_grad_(True)
        with torch.enable_grad():
            out = self.model(x)
            # -log S_yhat
            loss = nn.functional.cross_entropy(out / t, out.argmax(1), reduction="sum")
            (grad,) = torch.autograd.grad(loss, [x])
        x_t = (x - self.epsilon * torch.sign(grad)).detach()
        with torch.no_grad():
            return -torch.softmax(self.model(x_t) / t, dim=1).max(1).values.cpu()


class KLMatching(OODScorer):
    """KL matching (Hendrycks et al., ICML 2022): ``min_k KL(p(x) || d_k)``.

    ``d_k`` is the mean softmax of the training samples predicted as class ``k`` (the paper uses a
    validation set; any ID set can be passed to :meth:`fit`).
    """

    name, key = "KL Matching", "logits"

    def fit(self, data: Data) -> KLMatching:
        p = torch.softmax(self._get(data).double(), 1)
        pred = p.argmax(1)
        c = p.shape[1]
        counts = torch.bincount(pred, minlength=c).double()
        sums = torch.zeros(c, c, dtype=torch.float64, device=p.device).index_add_(0, pred, p)
        templ = sums / counts.clamp_min(1)[:, None]
        templ[counts == 0] = 1.0 / c  # a class never predicted: uniform template
        self.templates = templ.clamp_min(1e-12)
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not hasattr(self, "templates"):
            raise RuntimeError("KLMatching is not fitted: call fit(train_data) first")
        logp = torch.log_softmax(self._get(data).double(), 1)
        p = logp.exp()
        kl = (p * logp).sum(1, keepdim=True) - p @ self.templates.log().T  # (N, K)
        return kl.min(1).values.float()


class ReAct(OODScorer):
    """ReAct (Sun, Guo & Li, NeurIPS 2021): clip the features at the ``percentile``-th percentile of
    the
    ID training activations, then the energy score of the head: ``-logsumexp(W min(z, c) + b)``.
    """

    name, key = "ReAct", "features"

    def __init__(self, head: Any, percentile: float = 90.0) -> None:
        super().__init__(head)
        self.percentile = check_float(percentile, "percentile", low=0, high=100, low_open=True)

    def fit(self, data: Data) -> ReAct:
        z = self._get(data).double().reshape(-1)
        z = z[:: max(1, z.numel() // 10_000_000)]  # torch.quantile accepts at most 16M values
        self.threshold = float(torch.quantile(z, self.percentile / 100))
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not hasattr(self, "threshold"):
            raise RuntimeError("ReAct is not fitted: call fit(train_data) first")
        z = self._get(data).clamp(max=self.threshold)
        return -torch.logsumexp(self._logits_from_head(z), dim=1)


class DICE(OODScorer):
    """DICE (Sun & Li, ECCV 2022): directed sparsification of the head, then the energy score.

    Contributions ``V = W ⊙ mean(z_train)`` ``(C, d)``; the weights whose contribution is below the
    ``p``-quantile of ``V`` are zeroed (``p = 0.9`` keeps the top 10 %); score
    ``-logsumexp(z (W ⊙ M)^T + b)``.
    """

    name, key = "DICE", "features"

    def __init__(self, head: Any, sparsity: float = 0.9) -> None:
        super().__init__(head)
        self.sparsity = check_float(sparsity, "sparsity", low=0, high=1, high_open=True)

    def fit(self, data: Data) -> DICE:
        z = self._get(data)
        w, b = self.head  # type: ignore[misc]
        contrib = w.double() * z.double().mean(0)[None]
        thresh = torch.quantile(contrib.reshape(-1), self.sparsity)
        self.mask = (contrib > thresh).to(w.dtype)
        return self

    def _score(self, data: Data) -> torch.Tensor:
        if not hasattr(self, "mask"):
            raise RuntimeError("DICE is not fitted: call fit(train_data) first")
        z = self._get(data)
        w, b = self.head  # type: ignore[misc]
        return -torch.logsumexp(z @ (w * self.mask).to(z).T + b.to(z), dim=1)
