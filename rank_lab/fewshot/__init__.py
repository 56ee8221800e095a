"""Few-shot retrieval (rCNAPS) and classification by retrieval (Gominski thesis §4.3 and chapter 5).

* :mod:`~rank_lab.fewshot.episodes` -- the few-shot retrieval formulation (§4.3.1), training
  episodes (target class, ``k`` supports, ``m`` images of ``N`` classes) and the evaluation setups
  A/B/C/D (§4.3.3) with the cross-source measures.
* :mod:`~rank_lab.fewshot.film` -- FiLM layers and FiLM ResNet-18 / tiny residual extractors.
* :mod:`~rank_lab.fewshot.rcnaps` -- set encoder, adaptation network, rCNAPS and the
  class-specific Smooth-AP (eq. 4.13); :mod:`~rank_lab.fewshot.rcnaps_train` -- episodic training
  and adapted inference.
* :mod:`~rank_lab.fewshot.mahalanobis` -- Simple CNAPS' regularised Mahalanobis classifier
  (eqs. 5.1-5.2) and nearest-mean baselines.
* :mod:`~rank_lab.fewshot.classify` -- multi-dataset sampling and training
  (:mod:`~rank_lab.fewshot.multi_dataset`), classification by
  retrieval (Mahalanobis, nearest mean, kNN, diffusion; alpha-QE), the k-shot all-ways protocol.
* :mod:`~rank_lab.fewshot.synthetic` -- anisotropic Gaussian classes and a synthetic pool of
  datasets sharing latent concepts (stand-ins for the land-use datasets).
"""

from rank_lab.fewshot.classify import (
    METHODS,
    RuleOptions,
    allways_evaluate,
    allways_split,
    classify_by_retrieval,
    episodic_evaluate,
    nearest_class,
)
from rank_lab.fewshot.episodes import (
    SETUPS,
    Episode,
    EpisodeSampler,
    evaluate_fewshot_retrieval,
    fewshot_retrieval_scores,
    gather_images,
    sample_supports,
    setup_supports,
)
from rank_lab.fewshot.film import (
    FILM_KEYS,
    FiLM,
    FiLMResNet,
    TinyResNetBody,
    film,
    film_resnet18,
    film_tiny_resnet,
    identity_film_params,
    select_film_params,
)
from rank_lab.fewshot.mahalanobis import (
    MahalanobisClassifier,
    covariance,
    lambda_k,
    mahalanobis_logits,
    nearest_mean_logits,
    simplecnaps_estimate_cov,
)
from rank_lab.fewshot.multi_dataset import MultiDatasetSampler, fit_multi_dataset, global_class_ids
from rank_lab.fewshot.rcnaps import (
    RCNAPS,
    ClassSpecificSmoothAP,
    FiLMAdaptationNetwork,
    FiLMLayerNetwork,
    SetEncoder,
    adaptation_parameter_count,
    build_rcnaps,
    class_specific_smooth_ap,
)
from rank_lab.fewshot.rcnaps_train import fit_rcnaps, rcnaps_describe, rcnaps_describe_tasks

__all__ = [
    "FILM_KEYS",
    "METHODS",
    "RCNAPS",
    "SETUPS",
    "ClassSpecificSmoothAP",
    "Episode",
    "EpisodeSampler",
    "FiLM",
    "FiLMAdaptationNetwork",
    "FiLMLayerNetwork",
    "FiLMResNet",
    "MahalanobisClassifier",
    "MultiDatasetSampler",
    "RuleOptions",
    "SetEncoder",
    "TinyResNetBody",
    "adaptation_parameter_count",
    "allways_evaluate",
    "allways_split",
    "build_rcnaps",
    "class_specific_smooth_ap",
    "classify_by_retrieval",
    "covariance",
    "episodic_evaluate",
    "evaluate_fewshot_retrieval",
    "fewshot_retrieval_scores",
    "film",
    "film_resnet18",
    "film_tiny_resnet",
    "fit_multi_dataset",
    "fit_rcnaps",
    "gather_images",
    "global_class_ids",
    "identity_film_params",
    "lambda_k",
    "mahalanobis_logits",
    "nearest_class",
    "nearest_mean_logits",
    "rcnaps_describe",
    "rcnaps_describe_tasks",
    "sample_supports",
    "select_film_params",
    "setup_supports",
    "simplecnaps_estimate_cov",
]
