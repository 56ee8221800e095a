"""Losses for retrieval: rank surrogates (SmoothAP, SupAP, R@k), decomposability, presets,
baselines.

Every loss shares one call (:mod:`rank_lab.losses.base`, checked and scored by
:mod:`rank_lab.losses.prepared_batch`): ``loss(embeddings, labels)`` or
``loss(embeddings, labels, ref_embeddings, ref_labels)``; rank losses also take
``forward_scores(scores (Q, N), targets (Q, N))``. Each loss registers itself where it is defined
(``@register_loss``, :mod:`rank_lab.losses.registry`) so that a config string can pick it::

    loss = build_loss("sup_ap", rho=100)
    loss = build_loss("roadmap_tpami", n_classes=100, dim=512)
    list_losses("*ap*")

Modules: :mod:`~rank_lab.losses.ap` (SmoothAP, SupAP), :mod:`~rank_lab.losses.recall`
(Smooth-R@k / RS@k, Sup-R@k), :mod:`~rank_lab.losses.decomposability` (L_DG, L*_DG, the DG
estimator), :mod:`~rank_lab.losses.decomposability_bounds` (the DG bounds),
:mod:`~rank_lab.losses.hierarchical` (Sup-H-AP, Smooth-H-AP, Sup-NDCG),
:mod:`~rank_lab.losses.presets` (ROD, ROADMAP, ROD-R@k, HAPPIER, ROD-NDCG), baselines in
:mod:`~rank_lab.losses.histogram` (FastAP, SoftBin-AP), :mod:`~rank_lab.losses.blackbox`
(BlackBox-AP), :mod:`~rank_lab.losses.pairs` (contrastive/XBM, triplet),
:mod:`~rank_lab.losses.proxies` (NormSoftmax, ProxyNCA++),
:mod:`~rank_lab.losses.hierarchical_baselines` (Σ-losses, CSL),
:mod:`~rank_lab.losses.supcon` (SimCLR, SupCon), :mod:`~rank_lab.losses.esupcon` (ESupCon) and
:mod:`~rank_lab.losses.contrastive` (the other chapter-6 losses of the Patel thesis: cross-entropy,
SPCE, tightness).
This package module only gathers the public names of those modules.
"""

from __future__ import annotations

from rank_lab.losses.ap import SmoothAP, SupAP, smooth_ap_loss, sup_ap_loss
from rank_lab.losses.base import ListwiseLoss, MetricLoss, RankLoss
from rank_lab.losses.blackbox import BlackBoxAP
from rank_lab.losses.decomposability import (
    PairDGLoss,
    ProxyDGLoss,
    decomposability_gap,
    embedding_decomposability_gap,
    expected_decomposability_gap,
    random_batches,
)
from rank_lab.losses.decomposability_bounds import (
    calibration_counts,
    dg_calibrated_bound,
    dg_upper_bound,
    juxtaposed_batches,
    worst_case_dg_brute_force,
)
from rank_lab.losses.esupcon import ESupConLoss
from rank_lab.losses.hierarchical import SmoothHAP, SupHAP, SupNDCG
from rank_lab.losses.hierarchical_baselines import CSLLoss, SigmaLoss, sigma_loss
from rank_lab.losses.histogram import FastAP, SoftBinAP
from rank_lab.losses.pairs import ContrastiveLoss, TripletMarginLoss, pair_margin_loss
from rank_lab.losses.prepared_batch import PreparedBatch, binary_relevance, prepare_batch
from rank_lab.losses.presets import (
    ROD,
    happier,
    happier_f,
    roadmap_neurips,
    roadmap_tpami,
    rod_ndcg,
    rod_recall,
)
from rank_lab.losses.proxies import PROXY_LR, NormSoftmaxLoss, ProxyNCAPlusPlusLoss
from rank_lab.losses.recall import DEFAULT_KS, DEFAULT_KS_SIMIX, SmoothRecallAtK, SupRecallAtK
from rank_lab.losses.recall_at_k import (
    recall_at_k_surrogate,
    smooth_positive_ranks,
)
from rank_lab.losses.registry import (
    LOSSES,
    LossInfo,
    build_loss,
    list_losses,
    loss_info,
    register_loss,
    unregister_loss,
)
from rank_lab.losses.supcon import SupConLoss

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_KS_SIMIX",
    "binary_relevance",
    "BlackBoxAP",
    "build_loss",
    "calibration_counts",
    "ContrastiveLoss",
    "CSLLoss",
    "decomposability_gap",
    "dg_calibrated_bound",
    "dg_upper_bound",
    "ESupConLoss",
    "embedding_decomposability_gap",
    "expected_decomposability_gap",
    "FastAP",
    "happier",
    "happier_f",
    "juxtaposed_batches",
    "list_losses",
    "ListwiseLoss",
    "loss_info",
    "LOSSES",
    "LossInfo",
    "MetricLoss",
    "NormSoftmaxLoss",
    "pair_margin_loss",
    "PairDGLoss",
    "prepare_batch",
    "PreparedBatch",
    "PROXY_LR",
    "ProxyDGLoss",
    "ProxyNCAPlusPlusLoss",
    "random_batches",
    "recall_at_k_surrogate",
    "RankLoss",
    "register_loss",
    "roadmap_neurips",
    "roadmap_tpami",
    "ROD",
    "rod_ndcg",
    "rod_recall",
    "sigma_loss",
    "SigmaLoss",
    "smooth_ap_loss",
    "smooth_positive_ranks",
    "SmoothAP",
    "SmoothHAP",
    "SmoothRecallAtK",
    "SoftBinAP",
    "sup_ap_loss",
    "SupAP",
    "SupConLoss",
    "SupHAP",
    "SupNDCG",
    "SupRecallAtK",
    "TripletMarginLoss",
    "unregister_loss",
    "worst_case_dg_brute_force",
]
