"""Post-hoc out-of-distribution detection (Chapter 5 and Appendix C of the Ramzi thesis).

* :mod:`~rank_lab.ood.features` -- features of a frozen classifier (average/std pooling, logits).
* :mod:`~rank_lab.data.datasets.feature_folder` -- saved features of a classifier (the chapter's
  real-data input).
* :mod:`~rank_lab.ood.energies` -- prior energies: EL, tied-covariance class GMM (GMM, GMM_std).
* :mod:`~rank_lab.ood.sgld` -- stochastic gradient Langevin dynamics (Eq. 5.4).
* :mod:`~rank_lab.ood.heat` -- the residual EBM and its training (Eqs. 5.1-5.6, Algorithm 2).
* :mod:`~rank_lab.ood.composition` -- energy composition (Eq. 5.7) and the HEAT detector.
* :mod:`~rank_lab.ood.scorers`, :mod:`~rank_lab.ood.feature_scorers` -- the baselines (MSP,
  MaxLogit,
  EL, ODIN, KL Matching, ReAct, DICE, Mahalanobis, SSD+, GMM, KNN, ViM, Residual).
* :mod:`~rank_lab.ood.toy` -- 2-D toy data and a tiny CNN for the book.

Sign convention everywhere: a score is an energy, **higher = more OOD**. Metrics are in
:mod:`rank_lab.metrics.ood`.
"""

from rank_lab.data.datasets.feature_folder import load_feature_folder, save_feature_folder
from rank_lab.ood.composition import HEAT, compose_energies
from rank_lab.ood.energies import ClassGaussianEnergy, LogitEnergy, ZeroEnergy
from rank_lab.ood.feature_scorers import (
    GMM,
    KNN,
    SSD,
    Mahalanobis,
    Residual,
    ViM,
    kth_neighbour_distance,
)
from rank_lab.ood.features import avg_pool, extract_features, std_pool
from rank_lab.ood.heat import HEATConfig, HybridEnergy, ResidualMLP
from rank_lab.ood.scorers import (
    DICE,
    MSP,
    ODIN,
    EnergyScore,
    KLMatching,
    MaxLogit,
    OODScorer,
    ReAct,
    as_head,
)
from rank_lab.ood.sgld import schedule_values, sgld

__all__ = [
    "avg_pool",
    "std_pool",
    "extract_features",
    "save_feature_folder",
    "load_feature_folder",
    "LogitEnergy",
    "ClassGaussianEnergy",
    "ZeroEnergy",
    "sgld",
    "schedule_values",
    "HEATConfig",
    "ResidualMLP",
    "HybridEnergy",
    "compose_energies",
    "HEAT",
    "OODScorer",
    "as_head",
    "MSP",
    "MaxLogit",
    "EnergyScore",
    "ODIN",
    "KLMatching",
    "ReAct",
    "DICE",
    "Mahalanobis",
    "SSD",
    "GMM",
    "KNN",
    "ViM",
    "Residual",
    "kth_neighbour_distance",
]

from rank_lab.ood.resflow import ResFlow  # noqa: E402  (ResFlow baseline, Tab. 5.3)

__all__ += ["ResFlow"]
