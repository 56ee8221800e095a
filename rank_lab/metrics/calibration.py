"""Calibration: expected calibration error, reliability diagrams, temperature scaling.

Section 6.5.8 of the Patel thesis: "we calibrated the outputs by temperature scaling (Guo et al.
2017) - we estimated the temperature on a holdout set (20% of the test set) and computed the
reliability diagram and the expected calibration error (ECE) on the remaining test samples".

* ECE (Guo et al. 2017) with ``M`` equal-width confidence bins ``((m-1)/M, m/M]`` (a confidence
  of exactly 0 falls in the first bin): ``ECE = sum_m |B_m| / n |acc(B_m) - conf(B_m)|``. The
  thesis does not give ``M``; 15 is the default of Guo et al.
* Temperature scaling: ``p = softmax(logits / T)`` with one ``T > 0`` fitted by minimising the NLL
  on held-out data (optimised over ``log T`` with L-BFGS, so ``T`` stays positive).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    check_finite,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)

__all__ = [
    "ReliabilityDiagram",
    "reliability_diagram",
    "expected_calibration_error",
    "negative_log_likelihood",
    "fit_temperature",
    "holdout_split",
    "plot_reliability_diagram",
]


def _probs_targets(probs: object, targets: object) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.as_tensor(probs).detach()
    if not p.is_floating_point():
        raise TypeError(f"probs must be a floating tensor, got dtype {p.dtype}")
    p = p.to(torch.float64)
    if p.ndim != 2 or p.shape[0] == 0:
        raise ValueError(f"probs must have shape (N, C) with N > 0, got {tuple(p.shape)}")
    check_finite(p, "probs")
    if bool((p < 0).any()) or not torch.allclose(p.sum(1), torch.ones_like(p[:, 0]), atol=1e-4):
        raise ValueError("probs must be non-negative rows summing to 1 (pass softmax(logits))")
    t = check_labels(targets, p.shape[0], "targets").to(p.device)
    if t.ndim != 1:
        raise ValueError(f"targets must have shape (N,), got {tuple(t.shape)}")
    if bool((t < 0).any()) or bool((t >= p.shape[1]).any()):
        raise ValueError(f"targets must lie in [0, {p.shape[1]})")
    return p, t


@dataclass
class ReliabilityDiagram:
    """Per-bin data of a reliability diagram.

    Attributes:
        edges: ``(M + 1,)`` bin edges in [0, 1].
        confidence: ``(M,)`` mean confidence per bin (NaN for an empty bin: the mean of no sample is
            undefined; ``counts`` is 0 there and the ECE and the plot skip it).
        accuracy: ``(M,)`` accuracy per bin (NaN for an empty bin, likewise).
        counts: ``(M,)`` samples per bin.
        ece: the expected calibration error.
    """

    edges: torch.Tensor
    confidence: torch.Tensor
    accuracy: torch.Tensor
    counts: torch.Tensor
    ece: float


def reliability_diagram(
    probs: torch.Tensor, targets: torch.Tensor, n_bins: int = 15
) -> ReliabilityDiagram:
    """Bin the top-1 confidences and compare with the accuracy in each bin (Guo et al. 2017).

    Args:
        probs: ``(N, C)`` predicted probabilities.
        targets: ``(N,)`` true classes.
        n_bins: ``M`` equal-width bins.
    """
    p, t = _probs_targets(probs, targets)
    n_bins = check_positive_int(n_bins, "n_bins")
    conf, pred = p.max(1)
    correct = (pred == t).double()
    # every tensor on the inputs' device (a CPU target with CUDA indices fails on CUDA)
    dev = p.device
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=dev)
    idx = (torch.ceil(conf * n_bins).long() - 1).clamp(0, n_bins - 1)  # bin m holds ((m-1)/M, m/M]
    counts = torch.bincount(idx, minlength=n_bins).double()
    s_conf = torch.zeros(n_bins, dtype=torch.float64, device=dev).index_add_(0, idx, conf.double())
    s_acc = torch.zeros(n_bins, dtype=torch.float64, device=dev).index_add_(0, idx, correct)
    nonempty = counts > 0
    mean_conf = torch.where(
        nonempty, s_conf / counts.clamp_min(1), torch.full_like(counts, float("nan"))
    )
    mean_acc = torch.where(
        nonempty, s_acc / counts.clamp_min(1), torch.full_like(counts, float("nan"))
    )
    ece = float(((s_acc - s_conf).abs()).sum() / p.shape[0])
    return ReliabilityDiagram(edges, mean_conf, mean_acc, counts.long(), ece)


def expected_calibration_error(
    probs: torch.Tensor, targets: torch.Tensor, n_bins: int = 15
) -> float:
    """ECE with ``n_bins`` equal-width bins (Guo et al. 2017; Fig. 6.2 of the Patel thesis)."""
    return reliability_diagram(probs, targets, n_bins).ece


def negative_log_likelihood(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> float:
    """Mean NLL of ``softmax(logits / temperature)`` (the objective of temperature scaling, Guo et
    al. 2017).

    Args:
        logits: ``(N, C)`` logits.
        targets: ``(N,)`` classes in ``[0, C)``.
        temperature: ``T > 0``.
    """
    lg = _logits(logits)
    t = _class_targets(targets, lg)
    temperature = check_float(temperature, "temperature", low=0.0, low_open=True)
    return float(F.cross_entropy(lg / temperature, t))


def _class_targets(targets: object, lg: torch.Tensor) -> torch.Tensor:
    """``(N,)`` class indices in ``[0, C)`` for ``(N, C)`` logits, or raise naming ``targets``."""
    t = check_labels(targets, lg.shape[0], "targets").to(lg.device)
    if t.ndim != 1 or bool((t < 0).any()) or bool((t >= lg.shape[1]).any()):
        raise ValueError(
            f"targets must be (N,) classes in [0, {lg.shape[1]}), got shape {tuple(t.shape)} "
            f"and range [{int(t.min())}, {int(t.max())}]"
        )
    return t


def _logits(logits: object) -> torch.Tensor:
    lg = torch.as_tensor(logits)
    if not lg.is_floating_point() or lg.ndim != 2 or lg.shape[0] == 0:
        raise ValueError(
            f"logits must be a floating (N, C) tensor with N > 0, got {tuple(lg.shape)}"
        )
    check_finite(lg, "logits")
    return lg.detach().to(torch.float64)


def fit_temperature(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    init: float = 1.0,
    max_iter: int = 200,
    bounds: tuple[float, float] = (1e-2, 1e2),
) -> float:
    """Fit the temperature ``T`` of ``softmax(logits / T)`` by NLL on held-out data (Guo et al.
    2017).

    The NLL is convex in ``beta = 1 / T`` (a mean of log-sum-exps of functions linear in beta), so
    its minimiser over ``T`` in ``bounds`` is found by bisection on the sign of its derivative.

    **No finite optimum.** When every held-out sample is classified correctly with a margin, the
    NLL keeps decreasing as ``T -> 0`` (and when every one is wrong, as ``T -> inf``): there is no
    minimiser. The search is bounded by ``bounds``; an optimum on a bound returns that bound with
    a ``UserWarning`` saying so (``docs/decisions.md``), never an arbitrary tiny ``T``.

    Args:
        logits: ``(N, C)`` held-out logits (e.g. 20% of the test set, as the thesis does).
        targets: ``(N,)`` their classes.
        init: a starting temperature inside ``bounds`` (the bisection does not depend on it; kept
            for compatibility and checked).
        max_iter: bisection steps (each halves the ``log T`` interval).
        bounds: ``(T_min, T_max)``, ``0 < T_min < T_max``.

    Returns:
        ``T`` in ``bounds`` (float).
    """
    lg = _logits(logits)
    t = _class_targets(targets, lg)
    if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2):
        raise TypeError(f"bounds must be a pair (T_min, T_max), got {bounds!r}")
    t_min = check_float(bounds[0], "bounds", low=0.0, low_open=True)
    t_max = check_float(bounds[1], "bounds", low=t_min, low_open=True)
    init = check_float(init, "init", low=0.0, low_open=True)
    n_iter = check_positive_int(max_iter, "max_iter")
    true_logit = lg.gather(1, t[:, None]).squeeze(1)

    # d NLL / d beta = E_softmax(beta l)[l] - l_y (increasing in beta)
    def slope(beta: float) -> float:
        return float(((torch.softmax(beta * lg, dim=1) * lg).sum(1) - true_logit).mean())

    lo, hi = math.log(1.0 / t_max), math.log(1.0 / t_min)  # log beta
    if slope(math.exp(hi)) < 0:
        warnings.warn(
            f"the NLL still decreases at T = {t_min} (the lower end of bounds): the held-out "
            "logits are (nearly) all classified correctly, so no finite temperature minimises it; "
            f"returning T = {t_min}",
            stacklevel=2,
        )
        return t_min
    if slope(math.exp(lo)) > 0:
        warnings.warn(
            f"the NLL still decreases at T = {t_max} (the upper end of bounds): returning T = "
            f"{t_max}",
            stacklevel=2,
        )
        return t_max
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        if slope(math.exp(mid)) > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-12:
            break
    return float(1.0 / math.exp(0.5 * (lo + hi)))


def holdout_split(
    n: int, fraction: float = 0.2, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random split of ``range(n)`` into a held-out part (``fraction``, for fitting ``T``) and the
    rest.

    Returns:
        ``(holdout_indices, eval_indices)``.
    """
    n = check_positive_int(n, "n")
    fraction = check_float(fraction, "fraction", low=0.0, high=1.0, low_open=True, high_open=True)
    seed = check_nonneg_int(seed, "seed")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    k = max(1, round(fraction * n))
    return perm[:k].sort().values, perm[k:].sort().values


def plot_reliability_diagram(
    diagram: ReliabilityDiagram, ax: Any = None, *, title: str | None = None, color: str = "C0"
) -> Any:
    """Draw a reliability diagram (accuracy bars per confidence bin, the diagonal, the gap).

    Args:
        diagram: from :func:`reliability_diagram`.
        ax: a matplotlib axes (default: a new figure).
        title: axes title (default: the ECE).

    Returns:
        The axes.
    """
    # optional heavy dependency (plots extra): imported only to draw
    import matplotlib.pyplot as plt

    if not isinstance(diagram, ReliabilityDiagram):
        raise TypeError(
            "diagram must be a ReliabilityDiagram (from reliability_diagram), got "
            f"{type(diagram).__name__}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(3.5, 3.5))
    edges = diagram.edges.numpy()
    width = edges[1:] - edges[:-1]
    acc = torch.nan_to_num(diagram.accuracy, nan=0.0).numpy()
    conf = torch.nan_to_num(diagram.confidence, nan=0.0).numpy()
    nonempty = diagram.counts.numpy() > 0
    ax.bar(
        edges[:-1][nonempty],
        acc[nonempty],
        width=width[nonempty],
        align="edge",
        color=color,
        edgecolor="k",
        label="accuracy",
    )
    ax.bar(
        edges[:-1][nonempty],
        (conf - acc)[nonempty],
        bottom=acc[nonempty],
        width=width[nonempty],
        align="edge",
        facecolor="none",
        edgecolor="red",
        hatch="//",
        label="gap to confidence",
    )
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title(title if title is not None else f"ECE = {100 * diagram.ece:.2f}%")
    ax.legend(loc="upper left", fontsize=8)
    return ax
