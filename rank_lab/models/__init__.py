"""Models: global pooling layers, heads and backbones (timm, tiny CNN)."""

from rank_lab.models.pooling import GeM, MAC, SPoC, build_pooling

__all__ = ["GeM", "MAC", "SPoC", "build_pooling"]
