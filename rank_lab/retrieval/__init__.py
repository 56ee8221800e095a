"""Image search: global descriptors, whitening, query expansion, diffusion, MD / cMD, protocols.

Chapters 3 and 4.1-4.2 of the Gominski thesis (seed 004) and the standard methods it relies on:

* :mod:`~rank_lab.retrieval.extract` -- descriptor extraction over an image folder (timm backbone,
  pooling from :mod:`rank_lab.models.pooling`, multi-scale / flip / grayscale / crop, resumable).
* :mod:`~rank_lab.retrieval.whitening` -- L2N, PCA / PCA-whitening with shrinkage, learned "Lw"
  whitening from matching pairs.
* :mod:`~rank_lab.retrieval.expansion` -- AQE, alpha-QE, k-reciprocal re-ranking, GQE.
* :mod:`~rank_lab.retrieval.graph` -- kNN affinity graphs and sparse helpers (``DENSE_LIMIT``).
* :mod:`~rank_lab.retrieval.diffusion` -- Iscen et al. diffusion by conjugate gradient (offline,
  truncated, query-time).
* :mod:`~rank_lab.retrieval.multi_descriptor` -- MD and cMD (eqs. 4.2-4.9).
* :mod:`~rank_lab.retrieval.protocols` -- revisited Oxford/Paris, Student-t confidence intervals.
* :mod:`~rank_lab.retrieval.cross_source` -- the cross-source protocol (mAP per domain, P1, mAPD).
* :mod:`~rank_lab.retrieval.synthetic` -- synthetic descriptor sets (bridged, multi-view, biased).
"""

from rank_lab.retrieval.cross_source import (
    CrossDomainReport,
    cross_domain_evaluate,
    grouped_map,
    multilabel_targets,
)
from rank_lab.retrieval.diffusion import diffusion_search, offline_diffusion
from rank_lab.retrieval.diffusion_graph import DiffusionGraph, build_graph, conjugate_gradient
from rank_lab.retrieval.expansion import alpha_qe, average_qe, gqe, k_reciprocal_rerank
from rank_lab.retrieval.extract import DescriptorNet, build_descriptor_net, extract_descriptors
from rank_lab.retrieval.graph import DENSE_LIMIT
from rank_lab.retrieval.multi_descriptor import (
    cmd,
    concat_descriptors,
    md,
    md_from_features,
    mean_similarity,
    similarity_matrix,
)
from rank_lab.retrieval.protocols import revisited_evaluate
from rank_lab.retrieval.whitening import (
    Whitening,
    apply_whitening,
    l2n,
    learn_lw_whitening,
    learn_pca_whitening,
)

__all__ = [
    "DENSE_LIMIT",
    "CrossDomainReport",
    "DescriptorNet",
    "DiffusionGraph",
    "Whitening",
    "alpha_qe",
    "apply_whitening",
    "average_qe",
    "build_descriptor_net",
    "build_graph",
    "cmd",
    "concat_descriptors",
    "conjugate_gradient",
    "cross_domain_evaluate",
    "diffusion_search",
    "extract_descriptors",
    "gqe",
    "grouped_map",
    "k_reciprocal_rerank",
    "l2n",
    "learn_lw_whitening",
    "learn_pca_whitening",
    "md",
    "md_from_features",
    "mean_similarity",
    "multilabel_targets",
    "offline_diffusion",
    "revisited_evaluate",
    "similarity_matrix",
]
