"""Losses for retrieval: rank surrogates (SmoothAP, SupAP, R@k), decomposability, ROD presets, baselines.

Every loss shares one call (:mod:`rank_lab.losses.base`): ``loss(embeddings, labels)`` or
``loss(embeddings, labels, ref_embeddings, ref_labels)``; rank losses also take
``forward_scores(scores (Q, N), targets (Q, N))``. :func:`build_loss` selects one by name so a
config string can pick it::

    loss = build_loss("sup_ap", rho=100)
    loss = build_loss("roadmap_tpami", n_classes=100, dim=512)

Modules: :mod:`~rank_lab.losses.ap` (SmoothAP, SupAP), :mod:`~rank_lab.losses.recall`
(Smooth-R@k, Sup-R@k), :mod:`~rank_lab.losses.decomposability` (L_DG, L*_DG, the DG estimator and
bounds), :mod:`~rank_lab.losses.presets` (ROD, ROADMAP, ROD-R@k), baselines in
:mod:`~rank_lab.losses.histogram` (FastAP, SoftBin-AP), :mod:`~rank_lab.losses.blackbox`
(BlackBox-AP), :mod:`~rank_lab.losses.pairs` (contrastive/XBM, triplet) and
:mod:`~rank_lab.losses.proxies` (NormSoftmax, ProxyNCA++).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from rank_lab.losses.ap import SmoothAP, SupAP, smooth_ap_loss, sup_ap_loss
from rank_lab.losses.base import (
    ListwiseLoss,
    MetricLoss,
    PreparedBatch,
    RankLoss,
    binary_relevance,
    prepare_batch,
)
from rank_lab.losses.blackbox import BlackBoxAP
from rank_lab.losses.decomposability import (
    PairDGLoss,
    ProxyDGLoss,
    calibration_counts,
    decomposability_gap,
    dg_calibrated_bound,
    dg_upper_bound,
    expected_decomposability_gap,
    juxtaposed_batches,
    random_batches,
    worst_case_dg_brute_force,
)
from rank_lab.losses.histogram import FastAP, SoftBinAP
from rank_lab.losses.pairs import ContrastiveLoss, TripletMarginLoss, pair_margin_loss
from rank_lab.losses.presets import PRESETS, ROD, roadmap_neurips, roadmap_tpami, rod_recall
from rank_lab.losses.proxies import PROXY_LR, NormSoftmaxLoss, ProxyNCAPlusPlusLoss
from rank_lab.losses.recall import SmoothRecallAtK, SupRecallAtK

__all__ = [
    "LOSSES",
    "PROXY_LR",
    "BlackBoxAP",
    "ContrastiveLoss",
    "FastAP",
    "ListwiseLoss",
    "MetricLoss",
    "NormSoftmaxLoss",
    "PairDGLoss",
    "PreparedBatch",
    "ProxyDGLoss",
    "ProxyNCAPlusPlusLoss",
    "ROD",
    "RankLoss",
    "SmoothAP",
    "SmoothRecallAtK",
    "SoftBinAP",
    "SupAP",
    "SupRecallAtK",
    "TripletMarginLoss",
    "binary_relevance",
    "build_loss",
    "calibration_counts",
    "decomposability_gap",
    "dg_calibrated_bound",
    "dg_upper_bound",
    "expected_decomposability_gap",
    "juxtaposed_batches",
    "pair_margin_loss",
    "prepare_batch",
    "random_batches",
    "roadmap_neurips",
    "roadmap_tpami",
    "rod_recall",
    "smooth_ap_loss",
    "sup_ap_loss",
    "worst_case_dg_brute_force",
]

#: Name -> class or factory for :func:`build_loss`. Aliases share an entry.
LOSSES: dict[str, Callable[..., nn.Module]] = {
    "smooth_ap": SmoothAP,
    "sup_ap": SupAP,
    "smooth_recall": SmoothRecallAtK,
    "sup_recall": SupRecallAtK,
    "pair_dg": PairDGLoss,
    "calibration": PairDGLoss,
    "proxy_dg": ProxyDGLoss,
    "norm_softmax": NormSoftmaxLoss,
    "proxy_nca_pp": ProxyNCAPlusPlusLoss,
    "fast_ap": FastAP,
    "softbin_ap": SoftBinAP,
    "blackbox_ap": BlackBoxAP,
    "contrastive": ContrastiveLoss,
    "xbm_contrastive": ContrastiveLoss,
    "triplet": TripletMarginLoss,
    **PRESETS,
}


def build_loss(name: str, **kwargs: object) -> nn.Module:
    """Build a loss or preset from its name (case-insensitive; ``-`` and ``_`` are equivalent).

    Args:
        name: one of :data:`LOSSES` (``"smooth_ap"``, ``"sup_ap"``, ``"smooth_recall"``,
            ``"sup_recall"``, ``"pair_dg"``, ``"proxy_dg"``, ``"norm_softmax"``, ``"proxy_nca_pp"``,
            ``"fast_ap"``, ``"softbin_ap"``, ``"blackbox_ap"``, ``"contrastive"``, ``"triplet"``,
            ``"roadmap_neurips"``, ``"roadmap_tpami"``, ``"rod_recall"``, ...).
        **kwargs: constructor arguments (proxy losses and the TPAMI presets need ``n_classes`` and
            ``dim``).

    Returns:
        The loss module.

    Raises:
        ValueError: unknown name (the message lists the known ones) or missing arguments.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.strip().lower().replace("-", "_")
    if key not in LOSSES:
        raise ValueError(f"unknown loss name {name!r}; known: {sorted(LOSSES)}")
    try:
        return LOSSES[key](**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad arguments for loss {name!r}: {exc}") from exc

# --- hierarchical losses (Ramzi thesis ch. 4), registered for build_loss (appended) ---
from rank_lab.losses.hierarchical import (  # noqa: E402
    HIERARCHICAL_PRESETS,
    SmoothHAP,
    SupHAP,
    SupNDCG,
    happier,
    happier_f,
    rod_ndcg,
)
from rank_lab.losses.hierarchical_baselines import CSLLoss, SigmaLoss, sigma_loss  # noqa: E402

LOSSES.update({"sup_hap": SupHAP, "smooth_hap": SmoothHAP, "sup_ndcg": SupNDCG, "csl": CSLLoss, "sigma": sigma_loss, **HIERARCHICAL_PRESETS})
__all__ += ["CSLLoss", "SigmaLoss", "SmoothHAP", "SupHAP", "SupNDCG", "happier", "happier_f", "rod_ndcg", "sigma_loss"]

# --- Patel thesis ch. 5-6 losses (RS@k, SupCon, ESupCon), registered for build_loss ---
from rank_lab.losses.contrastive import ESupConLoss, SupConLoss  # noqa: E402
from rank_lab.losses.recall_at_k import RecallAtKSurrogate  # noqa: E402

LOSSES.update({"rs_at_k": RecallAtKSurrogate, "recall_at_k_surrogate": RecallAtKSurrogate, "supcon": SupConLoss, "esupcon": ESupConLoss})
__all__ += ["ESupConLoss", "RecallAtKSurrogate", "SupConLoss"]
