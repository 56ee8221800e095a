"""Out-of-distribution detection metrics: AUROC, FPR at 95 % TPR, AUPR-In and AUPR-Out.

Conventions (one rule for every function of this module):

* **Sign.** A score is an *energy*: **higher = more OOD**. This is the decision rule of Eq. 2.12
  of the Ramzi thesis, ``G_lambda(x) = ID if E(x) <= lambda else OOD``. Scorers that output a
  confidence (higher = more ID, e.g. the maximum softmax probability) must be negated first; every
  scorer of :mod:`rank_lab.ood.scorers` already returns the energy convention.
* **Inputs.** ``scores_in (n_in,)`` are the scores of the in-distribution (ID) test samples and
  ``scores_out (n_out,)`` those of one OOD set. Both 1-D, non-empty and finite.
* **Ties.** AUROC counts a tied (ID, OOD) pair as 1/2 (the Mann-Whitney convention of sklearn's
  ``roc_auc_score``, used by the official HEAT code); ``ties="strict"`` gives the literal Eq. 5.8,
  which counts only ``E(x_in) < E(x_out)``. FPR95 accepts as ID every sample whose energy is
  ``<=`` the threshold (Eq. 2.12), so an OOD sample tied with the threshold is a false positive.
  AUPR groups tied scores into one threshold (sklearn's ``average_precision_score``).
* **Scale.** Every metric is a fraction in ``[0, 1]``; the thesis' tables print percentages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from rank_lab._validation import as_tensor, check_choice, check_finite

__all__ = [
    "auroc",
    "fpr_at_tpr",
    "aupr_in",
    "aupr_out",
    "ood_metrics",
    "evaluate_ood",
]


def _check_scores(x: object, name: str) -> torch.Tensor:
    """Return ``x`` as a 1-D float64 CPU tensor, or raise naming ``name``."""
    t = as_tensor(x, name)
    if t.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D tensor of per-sample scores, got shape {tuple(t.shape)}"
        )
    if t.numel() == 0:
        raise ValueError(f"{name} is empty")
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {t.dtype}")
    t = t.detach().to("cpu", torch.float64)
    check_finite(t, name)
    return t


def auroc(scores_in: object, scores_out: object, *, ties: str = "half") -> float:
    """Area under the ROC curve for separating OOD (positive) from ID samples.

    Eq. 5.8 of the Ramzi thesis:
    ``AUC = sum_in sum_out 1[E(x_in) < E(x_out)] / (|D_in| |D_out|)``, i.e. the probability that a
    random OOD sample gets a higher energy than a random ID sample.

    Args:
        scores_in: ``(n_in,)`` energies of the ID samples (higher = more OOD).
        scores_out: ``(n_out,)`` energies of the OOD samples.
        ties: ``"half"`` (default) counts a tied pair as 1/2, which equals sklearn's
            ``roc_auc_score`` with OOD as the positive class; ``"strict"`` counts it as 0 (the
            literal Eq. 5.8).

    Returns:
        The AUROC in ``[0, 1]``; 0.5 for scores that carry no information.

    Cost: ``O((n_in + n_out) log n_in)`` (sort + binary search), never the ``n_in * n_out`` pairs.
    """
    if ties not in ("half", "strict"):
        raise ValueError(f"ties must be 'half' or 'strict', got {ties!r}")
    s_in = _check_scores(scores_in, "scores_in")
    s_out = _check_scores(scores_out, "scores_out")
    sorted_in, _ = torch.sort(s_in)
    n_less = torch.searchsorted(sorted_in, s_out, right=False)  # in-scores strictly below each out
    n_leq = torch.searchsorted(sorted_in, s_out, right=True)
    wins = n_less.sum().double()
    if ties == "half":
        wins = wins + 0.5 * (n_leq - n_less).sum().double()
    return float(wins / (s_in.numel() * s_out.numel()))


def fpr_at_tpr(
    scores_in: object,
    scores_out: object,
    tpr: float = 0.95,
    *,
    method: str = "exact",
    return_threshold: bool = False,
) -> float | tuple[float, float]:
    """False positive rate (OOD accepted as ID) when a fraction ``tpr`` of the ID set is accepted.

    Eq. 5.9 of the Ramzi thesis: ``FPR95 = (1/|D_out|) sum_out 1[E(x_out) < lambda]`` with
    ``lambda`` such that 95 % of the ID samples have ``E(x_in) < lambda``.

    Args:
        scores_in: ``(n_in,)`` energies of the ID samples (higher = more OOD).
        scores_out: ``(n_out,)`` energies of the OOD samples.
        tpr: the fraction of ID samples to accept (the "true positive rate", ID = positive here).
        method: ``"exact"`` (default): ``lambda`` is the smallest threshold that accepts at least
            ``tpr`` of the ID set, i.e. the ``ceil(tpr * n_in)``-th smallest ID energy, and a
            sample is accepted when ``E <= lambda`` (Eq. 2.12). This is Eq. 5.9 with ``lambda``
            taken just above that order statistic, and equals the minimum FPR over all thresholds
            whose TPR is ``>= tpr``. ``"percentile"``: the official HEAT code,
            ``mean(E_out < np.percentile(E_in, 100 * tpr))`` (linear interpolation, strict ``<``).
        return_threshold: also return ``lambda``.

    Returns:
        The FPR in ``[0, 1]`` (lower is better), or ``(fpr, lambda)``.
    """
    if isinstance(tpr, bool) or not isinstance(tpr, (int, float)) or not 0.0 < float(tpr) <= 1.0:
        raise ValueError(f"tpr must be a number in (0, 1], got {tpr!r}")
    if method not in ("exact", "percentile"):
        raise ValueError(f"method must be 'exact' or 'percentile', got {method!r}")
    s_in = _check_scores(scores_in, "scores_in")
    s_out = _check_scores(scores_out, "scores_out")
    if method == "exact":
        k = max(1, math.ceil(float(tpr) * s_in.numel() - 1e-9))
        thr = torch.sort(s_in).values[k - 1]
        fpr = float((s_out <= thr).double().mean())
    else:
        thr = torch.quantile(s_in, float(tpr), interpolation="linear")
        fpr = float((s_out < thr).double().mean())
    return (fpr, float(thr)) if return_threshold else fpr


def _average_precision(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """Step-wise AP over distinct thresholds: ``sum_k (R_k - R_{k-1}) P_k`` (sklearn's
    definition)."""
    order = torch.argsort(scores, descending=True, stable=True)
    s = scores[order]
    pos = positive[order].double()
    tp = torch.cumsum(pos, 0)
    fp = torch.cumsum(1.0 - pos, 0)
    # the last index of every group of tied scores is one distinct threshold
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]
    tp, fp = tp[last], fp[last]
    precision = tp / (tp + fp)
    recall = tp / tp[-1]
    d_recall = torch.diff(recall, prepend=recall.new_zeros(1))
    return float((d_recall * precision).sum())


def aupr_out(scores_in: object, scores_out: object) -> float:
    """Area under the precision-recall curve with **OOD as the positive class** (score = energy).

    The AUPR-Out of Hendrycks & Gimpel (2017), computed as sklearn's ``average_precision_score``
    (the official HEAT code's ``get_aupr_out``); tied scores form one threshold.

    Args:
        scores_in: ``(n_in,)`` energies of the ID samples (higher = more OOD).
        scores_out: ``(n_out,)`` energies of the OOD samples.

    Returns:
        AUPR-Out in ``[0, 1]``; a random scorer gets about ``n_out / (n_in + n_out)``.
    """
    s_in = _check_scores(scores_in, "scores_in")
    s_out = _check_scores(scores_out, "scores_out")
    scores = torch.cat([s_in, s_out])
    positive = torch.cat(
        [torch.zeros_like(s_in, dtype=torch.bool), torch.ones_like(s_out, dtype=torch.bool)]
    )
    return _average_precision(scores, positive)


def aupr_in(scores_in: object, scores_out: object) -> float:
    """Area under the precision-recall curve with **ID as the positive class** (score = -energy).

    The AUPR-In of Hendrycks & Gimpel (2017), as the official HEAT code's ``get_aupr_in``.

    Args:
        scores_in: ``(n_in,)`` energies of the ID samples (higher = more OOD).
        scores_out: ``(n_out,)`` energies of the OOD samples.

    Returns:
        AUPR-In in ``[0, 1]``; a random scorer gets about ``n_in / (n_in + n_out)``.
    """
    s_in = _check_scores(scores_in, "scores_in")
    s_out = _check_scores(scores_out, "scores_out")
    scores = -torch.cat([s_in, s_out])
    positive = torch.cat(
        [torch.ones_like(s_in, dtype=torch.bool), torch.zeros_like(s_out, dtype=torch.bool)]
    )
    return _average_precision(scores, positive)


def ood_metrics(
    scores_in: object, scores_out: object, *, tpr: float = 0.95, fpr_method: str = "exact"
) -> dict[str, float]:
    """All four metrics for one OOD set.

    Args:
        scores_in: ``(n_in,)`` ID energies (higher = more OOD).
        scores_out: ``(n_out,)`` OOD energies.
        tpr: the ID acceptance rate of the FPR metric (0.95 gives "FPR95").
        fpr_method: see :func:`fpr_at_tpr`.

    Returns:
        ``{"AUROC", "FPR95", "AUPR-In", "AUPR-Out"}`` (the FPR key follows ``tpr``, e.g. ``FPR90``),
        fractions in ``[0, 1]``.
    """
    if isinstance(tpr, bool) or not isinstance(tpr, (int, float)) or not 0.0 < float(tpr) <= 1.0:
        raise ValueError(f"tpr must be a number in (0, 1], got {tpr!r}")
    check_choice(fpr_method, "fpr_method", ("exact", "percentile"))
    key = f"FPR{round(100 * float(tpr))}"
    return {
        "AUROC": auroc(scores_in, scores_out),
        key: fpr_at_tpr(scores_in, scores_out, tpr, method=fpr_method),  # type: ignore[dict-item]
        "AUPR-In": aupr_in(scores_in, scores_out),
        "AUPR-Out": aupr_out(scores_in, scores_out),
    }


def evaluate_ood(
    scores_in: object,
    scores_out: Mapping[str, object],
    *,
    tpr: float = 0.95,
    fpr_method: str = "exact",
) -> dict[str, dict[str, float]]:
    """Metrics of one scorer on several OOD sets, plus their plain average (the thesis' protocol).

    Args:
        scores_in: ``(n_in,)`` energies of the ID test set.
        scores_out: mapping ``OOD set name -> (n_out,)`` energies; each set is scored separately.
        tpr: see :func:`ood_metrics`.
        fpr_method: see :func:`fpr_at_tpr`.

    Returns:
        ``{set name: ood_metrics(...), ..., "Average": mean of each metric over the sets}``.
    """
    if not isinstance(scores_out, Mapping) or len(scores_out) == 0:
        raise ValueError("scores_out must be a non-empty mapping of OOD set name -> scores")
    if "Average" in scores_out:
        raise ValueError("scores_out may not contain a set named 'Average' (reserved)")
    s_in = _check_scores(scores_in, "scores_in")
    res = {
        str(name): ood_metrics(
            s_in, _check_scores(s, f"scores_out[{name!r}]"), tpr=tpr, fpr_method=fpr_method
        )
        for name, s in scores_out.items()
    }
    keys = next(iter(res.values())).keys()
    res["Average"] = {k: sum(r[k] for r in res.values()) / len(res) for k in keys}
    return res
