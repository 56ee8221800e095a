"""Step functions that turn a score difference ``t = s_j - s_k`` into a rank contribution.

The rank of an item k is ``1 + sum_{j != k} H(s_j - s_k)`` (Eq. 2.5 of the Ramzi thesis). Rank
losses replace the Heaviside ``H`` by a smooth step. Three are implemented, each as a small object
with a value (``__call__``) and an analytic derivative (``derivative``), which the memory-efficient
rank kernel of :mod:`rank_lab.ranking.row_kernel` uses in its backward pass:

* :class:`Heaviside` -- ``H(t) = 1[t >= 0]`` (Eq. 2.5; ``H(0) = 1``: a tied competitor counts as
  ranked before). Zero derivative: it carries no gradient.
* :class:`SigmoidStep` -- ``sigma(t / tau)`` (Eq. 2.8 of the thesis; Qin et al. 2010, Smooth-AP of
  Brown et al. 2020), ``tau = 0.01``.
* :class:`SupRankStep` -- the SupRank ``H^-`` (Eq. 3.4 of the thesis = Eq. 4 of the SupRank paper),
  an upper bound of ``H`` with three pieces::

      H^-(t) = sigma(t/tau)                                t < 0
             = sigma(t/tau) + start                        0 <= t <= delta
             = rho (t - delta) + sigma(delta/tau) + start  t > delta

Defaults and their sources (see also ``docs`` of the book chapter "Smooth rank surrogates"):

=============  ========================================  ==========================================
parameter      default                                   source
=============  ========================================  ==========================================
``tau``        0.01                                      thesis Sec. 3.2.2.1 "as in [69]" (Smooth-AP)
``delta``      ``tau * ln((1 - eps) / eps)`` = 0.04595   thesis "Choice of delta"; SupRank App. A-C
``eps``        0.01                                      same ("we use eps = 1e-2")
``rho``        100                                       ROADMAP paper Sec. 4; official code
``start``      0.5                                       Eq. 3.4 ("+0.5"); code name ``start``
``offset``     ``sigma(delta/tau) + start`` (1.4933)     Eq. 3.4 (continuous at delta)
=============  ========================================  ==========================================

Paper-vs-code differences, exposed as options (the paper formula is the default):

* ``offset``: the official SupRank/HAPPIER configs hard-code ``offset=1.44`` with ``delta=0.05``
  (a downward jump of 0.053 at delta); the iNaturalist configs use ``start=0, offset=1.0``, which
  makes ``H^-(t) = sigma(t/tau) < 1 = H(t)`` on ``(0, delta]``: *not* an upper bound there.
* ``delta``: the code uses ``delta=0.05`` instead of 0.04595.
* ``linear_origin``: the ROADMAP (NeurIPS) code writes the linear piece as ``rho * t + offset``
  (``linear_origin="zero"``), an upward jump at delta; the paper subtracts delta (``"delta"``).
* ``zero_branch``: Eq. 3.4 lists ``t = 0`` in both the first and the second branch. The default
  ``"upper"`` puts it in the second (``H^-(0) = 1 >= H(0)``), so the upper bound holds for every t,
  ties included; the code's ``t > 0`` test (``"lower"``) gives ``H^-(0) = 0.5 < H(0) = 1``.
"""  # noqa: E501

from __future__ import annotations

import math
from typing import Literal

import torch

from rank_lab._validation import as_tensor, check_float

__all__ = [
    "StepFunction",
    "Heaviside",
    "SigmoidStep",
    "SupRankStep",
    "heaviside",
    "sigmoid_step",
    "h_minus",
    "delta_from_epsilon",
    "make_step",
]


def delta_from_epsilon(tau: float = 0.01, eps: float = 1e-2) -> float:
    """End of the sigmoid region of ``H^-``: ``delta = tau * ln((1 - eps) / eps)``.

    Solves ``sigma(delta / tau) = 1 - eps``: beyond delta the sigmoid is saturated and its
    derivative in units of ``t / tau`` is ``eps (1 - eps) < eps`` (thesis Sec. 3.2.2.1 "Choice of
    delta", Fig. 3.5; SupRank App. A-C). ``tau = eps = 0.01`` gives 0.045951.

    Args:
        tau: sigmoid temperature, > 0.
        eps: gradient level that defines saturation, in (0, 0.5).

    Returns:
        delta as a float.
    """
    tau = check_float(tau, "tau", low=0.0, low_open=True)
    eps = check_float(eps, "eps", low=0.0, high=0.5, low_open=True, high_open=True)
    return float(tau * math.log((1.0 - eps) / eps))


class StepFunction:
    """A step ``f(t)`` applied element-wise to score differences ``t = s_j - s_k``.

    Subclasses implement ``__call__`` (value, autograd-friendly) and ``derivative`` (analytic
    ``df/dt``, used by the chunked rank kernels). ``differentiable`` is False for the Heaviside.
    """

    differentiable: bool = True
    name: str = "step"

    def __call__(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def derivative(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def value_(self, t: torch.Tensor) -> torch.Tensor:
        """Value without autograd, allowed to overwrite ``t`` (used by the chunked rank kernel)."""
        return self(t)

    def derivative_(self, t: torch.Tensor) -> torch.Tensor:
        """Derivative without autograd, allowed to overwrite ``t``."""
        return self.derivative(t)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


class Heaviside(StepFunction):
    """``H(t) = 1[t >= 0]`` (Eq. 2.5 of the Ramzi thesis; ``H(0) = 1``). No gradient.

    Args:
        zero_value: value at ``t = 0``. 1.0 (thesis: ties count as ranked before, the worst case);
            0.0 counts ties as ranked after.
    """

    differentiable = False
    name = "heaviside"

    def __init__(self, zero_value: float = 1.0) -> None:
        if zero_value not in (0.0, 1.0):
            raise ValueError(f"zero_value must be 0.0 or 1.0, got {zero_value}")
        self.zero_value = float(zero_value)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return self.value_(_check_t(t).detach())

    def value_(self, t: torch.Tensor) -> torch.Tensor:
        """The value of checked differences (the rank kernel's call: no NaN check, no host sync)."""
        out = (t >= 0) if self.zero_value == 1.0 else (t > 0)
        return out.to(t.dtype if t.is_floating_point() else torch.float32)

    def derivative(self, t: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(t)


class SigmoidStep(StepFunction):
    """``sigma(t / tau)`` (Eq. 2.8 of the Ramzi thesis; Smooth-AP, Brown et al. 2020).

    Derivative ``sigma (1 - sigma) / tau`` (maximum ``1 / (4 tau)`` = 25 at 0 for tau = 0.01).
    Neither an upper nor a lower bound of ``H``.

    Args:
        tau: temperature, > 0. Default 0.01 (Smooth-AP; thesis "we keep tau as in [69]").
    """

    name = "sigmoid"

    def __init__(self, tau: float = 0.01) -> None:
        self.tau = check_float(tau, "tau", low=0.0, low_open=True)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(t / self.tau)

    def derivative(self, t: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(t / self.tau)
        return s * (1 - s) / self.tau

    def value_(self, t: torch.Tensor) -> torch.Tensor:
        return t.div_(self.tau).sigmoid_()

    def derivative_(self, t: torch.Tensor) -> torch.Tensor:
        s = t.div_(self.tau).sigmoid_()
        return s.sub_(s * s).div_(self.tau)  # s (1 - s) / tau


class SupRankStep(StepFunction):
    """SupRank ``H^-`` (Eq. 3.4 of the Ramzi thesis; Eq. 4 of SupRank; Eq. 4 of ROADMAP).

    ``H^-(t) >= H(t)`` for every t with the defaults, so ``rank_s^- >= rank^-`` and every loss
    built on it is an upper bound of the exact loss (thesis Sec. 3.2.2.1, property 1). The
    derivative is ``sigma'(t/tau)/tau`` for ``t <= delta`` (a margin: it keeps pushing until a
    negative is about delta below the positive) and exactly ``rho`` beyond delta (no vanishing
    gradient for badly ranked negatives, property 2).

    Args:
        tau: sigmoid temperature (0.01, thesis).
        rho: slope of the linear piece (100, ROADMAP paper / official code; thesis Fig. 3.14b:
            stable in [10, 100]). ``rho=0`` makes the tail flat.
        delta: end of the sigmoid region; ``None`` -> ``delta_from_epsilon(tau, eps)`` (thesis).
            The official code uses 0.05.
        eps: saturation level used when ``delta`` is None (0.01, thesis).
        start: jump added on ``[0, delta]`` (0.5, Eq. 3.4; code name ``start``; iNat configs 0.0).
        offset: value of the linear piece at delta; ``None`` -> ``sigma(delta/tau) + start``
            (continuous, Eq. 3.4). Official configs: 1.44 (1.0 for iNat).
        linear_origin: ``"delta"`` -> ``rho (t - delta) + offset`` (paper, SupRank/HAPPIER code);
            ``"zero"`` -> ``rho t + offset`` (ROADMAP NeurIPS code).
        zero_branch: where ``t = 0`` goes: ``"upper"`` (default, ``H^-(0) = 1``) or ``"lower"``
            (official code ``t > 0``: ``H^-(0) = 0.5``).
    """

    name = "suprank"

    def __init__(
        self,
        tau: float = 0.01,
        rho: float = 100.0,
        delta: float | None = None,
        eps: float = 1e-2,
        start: float = 0.5,
        offset: float | None = None,
        linear_origin: Literal["delta", "zero"] = "delta",
        zero_branch: Literal["upper", "lower"] = "upper",
    ) -> None:
        tau = check_float(tau, "tau", low=0.0, low_open=True)
        rho = check_float(rho, "rho", low=0.0)
        start = check_float(start, "start")
        if offset is not None:
            offset = check_float(offset, "offset")
        if delta is None:
            delta = delta_from_epsilon(tau, eps)
        delta = check_float(delta, "delta", low=0.0)
        if linear_origin not in ("delta", "zero"):
            raise ValueError(f"linear_origin must be 'delta' or 'zero', got {linear_origin!r}")
        if zero_branch not in ("upper", "lower"):
            raise ValueError(f"zero_branch must be 'upper' or 'lower', got {zero_branch!r}")
        self.tau = float(tau)
        self.rho = float(rho)
        self.delta = float(delta)
        self.eps = float(eps)
        self.start = float(start)
        self.offset = (
            float(offset) if offset is not None else _sigmoid(self.delta / self.tau) + self.start
        )
        self.linear_origin = linear_origin
        self.zero_branch = zero_branch

    def _upper_mask(self, t: torch.Tensor) -> torch.Tensor:
        return t >= 0 if self.zero_branch == "upper" else t > 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        sig = torch.sigmoid(t / self.tau)
        shift = self.delta if self.linear_origin == "delta" else 0.0
        lin = self.rho * (t - shift) + self.offset
        mid = sig + self.start
        return torch.where(t > self.delta, lin, torch.where(self._upper_mask(t), mid, sig))

    def derivative(self, t: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(t / self.tau)
        return torch.where(t > self.delta, torch.full_like(t, self.rho), s * (1 - s) / self.tau)

    def value_(self, t: torch.Tensor) -> torch.Tensor:
        linear = t > self.delta
        shift = self.delta if self.linear_origin == "delta" else 0.0
        lin = t * self.rho
        lin.add_(self.offset - self.rho * shift)
        upper = self._upper_mask(t)
        val = t.div_(self.tau).sigmoid_()
        val.add_(upper, alpha=self.start)
        return torch.where(linear, lin, val, out=val)

    def derivative_(self, t: torch.Tensor) -> torch.Tensor:
        linear = t > self.delta
        s = t.div_(self.tau).sigmoid_()
        s.sub_(s * s).div_(self.tau)
        return s.masked_fill_(linear, self.rho)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _check_t(t: object) -> torch.Tensor:
    """Score differences of any shape: NaN raises (``+-inf`` saturates the step, a legal value)."""
    t = as_tensor(t, "t")
    if t.is_floating_point() and bool(torch.isnan(t).any()):
        raise ValueError(f"t contains {int(torch.isnan(t).sum())} NaN value(s)")
    return t


def heaviside(t: torch.Tensor, zero_value: float = 1.0) -> torch.Tensor:
    """Functional :class:`Heaviside`: ``1[t >= 0]`` (``H(0) = zero_value``), no gradient.

    Raises:
        ValueError: ``t`` holds NaN (``+-inf`` differences are legal: the step saturates).
    """
    return Heaviside(zero_value)(_check_t(t))


def sigmoid_step(t: torch.Tensor, tau: float = 0.01) -> torch.Tensor:
    """Functional :class:`SigmoidStep`: ``sigma(t / tau)`` (Eq. 2.8 of the Ramzi thesis); NaN in
    ``t`` raises."""
    return SigmoidStep(tau)(_check_t(t))


def h_minus(
    t: torch.Tensor,
    tau: float = 0.01,
    rho: float = 100.0,
    delta: float | None = None,
    eps: float = 1e-2,
    start: float = 0.5,
    offset: float | None = None,
    linear_origin: Literal["delta", "zero"] = "delta",
    zero_branch: Literal["upper", "lower"] = "upper",
) -> torch.Tensor:
    """Functional SupRank ``H^-`` (Eq. 3.4 of the Ramzi thesis); see :class:`SupRankStep`.

    Args:
        t: score differences ``s_j - s_k`` of any shape.

    Returns:
        Tensor of the shape of ``t``, differentiable in ``t``.
    """
    return SupRankStep(tau, rho, delta, eps, start, offset, linear_origin, zero_branch)(_check_t(t))


def make_step(step: str | StepFunction, **kwargs: float | str | None) -> StepFunction:
    """Build a step from a name (``"heaviside"``, ``"sigmoid"``, ``"suprank"``) or pass one
    through."""
    if isinstance(step, StepFunction):
        if kwargs:
            raise ValueError("keyword arguments are only accepted with a step name")
        return step
    table = {
        "heaviside": Heaviside,
        "sigmoid": SigmoidStep,
        "suprank": SupRankStep,
        "h_minus": SupRankStep,
    }
    if not isinstance(step, str) or step.lower() not in table:
        raise ValueError(f"step must be one of {sorted(table)} or a StepFunction, got {step!r}")
    return table[step.lower()](**kwargs)
