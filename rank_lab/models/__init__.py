"""Models: global pooling layers, heads (embedding head, prototype classifier) and backbones (timm,
tiny CNN)."""

from rank_lab.models.backbones import (
    MLPBackbone,
    TimmBackbone,
    TinyCNN,
    build_backbone,
    freeze_batchnorm,
)
from rank_lab.models.heads import (
    EmbeddingHead,
    EmbeddingModel,
    ModelConfig,
    PrototypeClassifier,
    build_model,
    class_means,
    prototype_logits,
)
from rank_lab.models.pooling import MAC, RMAC, GeM, SPoC, build_pooling, rmac_regions
from rank_lab.models.weights import load_backbone_weights

__all__ = [
    "GeM",
    "MAC",
    "SPoC",
    "RMAC",
    "rmac_regions",
    "build_pooling",
    "MLPBackbone",
    "TimmBackbone",
    "TinyCNN",
    "build_backbone",
    "freeze_batchnorm",
    "load_backbone_weights",
    "EmbeddingHead",
    "EmbeddingModel",
    "ModelConfig",
    "build_model",
    "PrototypeClassifier",
    "prototype_logits",
    "class_means",
]
