"""Global pooling of a convolutional feature map ``(B, D, H, W) -> (B, D)``.

Section 3.4.1 of the Gominski thesis (global descriptors); formulas from the cited papers:
MAC (Tolias et al.), SPoC (Babenko & Lempitsky), GeM (Radenovic et al.). None of these layers
L2-normalise: the descriptor pipeline / model head does it.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["MAC", "SPoC", "GeM", "build_pooling", "POOLINGS"]


def _check_map(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"x must be a feature map of shape (B, D, H, W), got {tuple(x.shape)}")


class MAC(nn.Module):
    """Maximum activation of convolutions: ``f_k = max_{x in X_k} x`` (Gominski thesis §3.4.1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)``. Returns ``(B, D)``."""
        _check_map(x)
        return x.amax(dim=(-2, -1))


class SPoC(nn.Module):
    """Sum-pooling of convolutions, as the mean: ``f_k = mean_{x in X_k} x`` (Gominski thesis §3.4.1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)``. Returns ``(B, D)``."""
        _check_map(x)
        return x.mean(dim=(-2, -1))


class GeM(nn.Module):
    """Generalized-mean pooling ``f_k = (mean_{x in X_k} x^p)^(1/p)`` (Gominski thesis §3.4.1, [74]).

    ``p = 1`` is SPoC, ``p -> inf`` tends to MAC. As in the official code, one shared ``p``
    (learnable by default, initialised to 3) and activations clamped at ``eps`` before the power.

    Args:
        p: initial exponent (> 0).
        learnable: make ``p`` a parameter.
        eps: clamp value for the activations.
    """

    def __init__(self, p: float = 3.0, learnable: bool = True, eps: float = 1e-6) -> None:
        super().__init__()
        if not p > 0:
            raise ValueError(f"p must be > 0, got {p}")
        t = torch.tensor(float(p))
        if learnable:
            self.p = nn.Parameter(t)
        else:
            self.register_buffer("p", t)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)``. Returns ``(B, D)``."""
        _check_map(x)
        p = self.p.to(x.dtype)
        return x.clamp(min=self.eps).pow(p).mean(dim=(-2, -1)).pow(1.0 / p)

    def extra_repr(self) -> str:
        return f"p={float(self.p):.3f}, eps={self.eps}"


POOLINGS: dict[str, type[nn.Module]] = {"mac": MAC, "max": MAC, "spoc": SPoC, "avg": SPoC, "gem": GeM}


def build_pooling(name: str, **kwargs: object) -> nn.Module:
    """Build a pooling layer by name: ``"avg"``/``"spoc"``, ``"max"``/``"mac"``, ``"gem"`` (and any
    other entry registered in :data:`POOLINGS`).

    Raises:
        ValueError: for an unknown name (the message lists the known ones).
    """
    key = name.lower()
    if key not in POOLINGS:
        raise ValueError(f"unknown pooling {name!r}; known: {sorted(POOLINGS)}")
    return POOLINGS[key](**kwargs)
