"""Global pooling of a convolutional feature map ``(B, D, H, W) -> (B, D)``.

Section 3.4.1 of the Gominski thesis (global descriptors); formulas from the cited papers:
MAC (Tolias et al.), SPoC (Babenko & Lempitsky), GeM (Radenovic et al.), R-MAC (Tolias et al.,
regions as in the cirtorch code). MAC, SPoC and GeM do not L2-normalise: the descriptor pipeline /
model head does it. R-MAC normalises each regional vector by construction (it sums L2-normalised
regional MACs) but its output is left un-normalised too, like the others.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rank_lab._validation import check_float, check_input
from rank_lab.registry import Registry

__all__ = [
    "MAC",
    "SPoC",
    "GeM",
    "RMAC",
    "rmac_regions",
    "build_pooling",
    "list_poolings",
    "POOLINGS",
]

#: Every pooling by name (``"mac"`` / ``"max"``, ``"spoc"`` / ``"avg"``, ``"gem"``, ``"rmac"``);
#: a new pooling registers where it is defined (``@POOLINGS.register("name")``).
POOLINGS: Registry[type[nn.Module]] = Registry("pooling")


def _check_map(x: torch.Tensor, module: nn.Module | None = None) -> None:
    """A floating, finite feature map ``(B, D, H, W)`` (an empty batch pools to an empty batch); the
    finite check is ``module``'s (skipped while it trusts its inputs,
    :func:`~rank_lab._validation.trusted_inputs`)."""
    check_input(x, "x", 4, shape="(B, D, H, W) (a feature map)", owner=module)


@POOLINGS.register("max")
@POOLINGS.register("mac")
class MAC(nn.Module):
    """Maximum activation of convolutions: ``f_k = max_{x in X_k} x`` (Gominski thesis §3.4.1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)``. Returns ``(B, D)``."""
        _check_map(x, self)
        return x.amax(dim=(-2, -1))


@POOLINGS.register("avg")
@POOLINGS.register("spoc")
class SPoC(nn.Module):
    """Sum-pooling of convolutions, as the mean: ``f_k = mean_{x in X_k} x`` (Gominski thesis
    §3.4.1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)``. Returns ``(B, D)``."""
        _check_map(x, self)
        return x.mean(dim=(-2, -1))


@POOLINGS.register("gem")
class GeM(nn.Module):
    """Generalized-mean pooling ``f_k = (mean_{x in X_k} x^p)^(1/p)`` (Gominski thesis §3.4.1,
    [74]).

    ``p = 1`` is SPoC, ``p -> inf`` tends to MAC. As in the official code, one shared ``p``
    (learnable by default, initialised to 3) and activations clamped at ``eps`` before the power.

    Args:
        p: initial exponent (finite, > 0).
        learnable: make ``p`` a parameter.
        eps: clamp value for the activations (finite, > 0: the power of a clamped 0 is 0, its
            gradient ``p 0^(p-1)`` is NaN for ``p < 1``).

    Raises:
        ValueError: ``p`` or ``eps`` not a finite positive number.
    """

    def __init__(self, p: float = 3.0, learnable: bool = True, eps: float = 1e-6) -> None:
        super().__init__()
        p = check_float(p, "p", low=0.0, low_open=True)
        eps = check_float(eps, "eps", low=0.0, low_open=True)
        t = torch.tensor(p)
        if learnable:
            self.p = nn.Parameter(t)
        else:
            self.register_buffer("p", t)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)``. Returns ``(B, D)``."""
        _check_map(x, self)
        p = self.p.to(x.dtype)
        return x.clamp(min=self.eps).pow(p).mean(dim=(-2, -1)).pow(1.0 / p)

    def extra_repr(self) -> str:
        return f"p={float(self.p):.3f}, eps={self.eps}"


def rmac_regions(
    height: int, width: int, levels: int = 3, overlap: float = 0.4
) -> list[tuple[int, int, int]]:
    """The square R-MAC regions of a ``height x width`` map (Tolias et al.; cirtorch's ``rmac``).

    The region side at level ``l`` (1-based) is ``w_l = floor(2 w / (l + 1))`` with
    ``w = min(H, W)``; level ``l`` has ``l`` regions along the short side and ``l + extra``
    along the long side, where ``extra`` (0 for square maps) is the number of steps in
    ``{2..7}`` minimising ``|(w^2 - w b) / w^2 - overlap|`` with
    ``b = (max(H, W) - w) / (steps - 1)`` (the convention of Radenović et al.'s cirtorch code).
    Region starts are spread evenly over the map.

    Args:
        height: map height ``H`` (>= 1).
        width: map width ``W`` (>= 1).
        levels: number of scales ``L``.
        overlap: desired overlap of neighbouring regions.

    Returns:
        ``[(top, left, side), ...]``, level by level. A square map gives ``1 + 4 + 9 = 14``
        regions at ``L = 3``; levels whose side would be 0 are skipped.
    """
    for name, v in (("height", height), ("width", width), ("levels", levels)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"overlap must be in [0, 1), got {overlap}")
    w = min(height, width)
    extra_w = extra_h = 0
    if height != width:
        steps = torch.arange(2, 8, dtype=torch.float64)
        b = (max(height, width) - w) / (steps - 1)
        # first minimum, as torch.min
        idx = int(torch.argmin(torch.abs((w**2 - w * b) / w**2 - overlap)))
        if height < width:
            extra_w = idx + 1
        else:
            extra_h = idx + 1
    regions: list[tuple[int, int, int]] = []
    for lvl in range(1, levels + 1):
        wl = math.floor(2 * w / (lvl + 1))
        if wl == 0:
            continue
        wl2 = math.floor(wl / 2 - 1)
        starts = []
        for extent, extra in ((height, extra_h), (width, extra_w)):
            n = lvl + extra
            step = 0.0 if n == 1 else (extent - wl) / (n - 1)
            starts.append([math.floor(wl2 + i * step) - wl2 for i in range(n)])
        regions.extend((top, left, wl) for top in starts[0] for left in starts[1])
    return regions


@POOLINGS.register("rmac")
class RMAC(nn.Module):
    """Regional MAC (Tolias et al. [96] of the Gominski thesis, §3.4.1; cirtorch convention).

    ``f = sum_r MAC(X_r) / ||MAC(X_r)||`` over the regions of :func:`rmac_regions`; with
    ``include_global=True`` (cirtorch and the thesis' public code) the L2-normalised global MAC is
    added first, so a square map at ``L = 3`` sums ``1 + 14 = 15`` terms. The original method
    PCA-whitens every region before summing; here (as in cirtorch) regions are only normalised.

    Args:
        levels: number of region scales ``L``.
        overlap: desired overlap of neighbouring regions (0.4).
        include_global: add the normalised global MAC to the sum.
        eps: added to the norms (finite, > 0: an all-zero region would divide 0 by 0).

    Raises:
        ValueError: ``levels`` not a positive int, ``overlap`` outside ``[0, 1)``, ``eps`` not a
            finite positive number.
    """

    def __init__(
        self, levels: int = 3, overlap: float = 0.4, include_global: bool = True, eps: float = 1e-6
    ) -> None:
        super().__init__()
        eps = check_float(eps, "eps", low=0.0, low_open=True)
        if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
            raise ValueError(f"levels must be a positive int, got {levels!r}")
        if not 0.0 <= overlap < 1.0:
            raise ValueError(f"overlap must be in [0, 1), got {overlap}")
        self.levels, self.overlap, self.include_global, self.eps = (
            levels,
            overlap,
            include_global,
            eps,
        )

    def regions(self, height: int, width: int) -> list[tuple[int, int, int]]:
        """The regions used for a ``height x width`` map (see :func:`rmac_regions`)."""
        return rmac_regions(height, width, self.levels, self.overlap)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)``. Returns ``(B, D)``."""
        _check_map(x, self)

        def normed(v: torch.Tensor) -> torch.Tensor:
            return v / (v.norm(dim=1, keepdim=True) + self.eps)

        out = (
            normed(x.amax(dim=(-2, -1))) if self.include_global else torch.zeros_like(x[:, :, 0, 0])
        )
        for top, left, side in self.regions(x.shape[-2], x.shape[-1]):
            out = out + normed(x[:, :, top : top + side, left : left + side].amax(dim=(-2, -1)))
        return out

    def extra_repr(self) -> str:
        return f"levels={self.levels}, overlap={self.overlap}, include_global={self.include_global}"


def build_pooling(name: str, **kwargs: object) -> nn.Module:
    """Build a pooling layer by name: ``"avg"``/``"spoc"``, ``"max"``/``"mac"``, ``"gem"``,
    ``"rmac"`` (and any other entry registered in :data:`POOLINGS`).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: for an unknown name (the message lists the known ones).
    """
    return POOLINGS.build(name, **kwargs)


def list_poolings(filter: str = "") -> list[str]:
    """Sorted pooling names matching the ``fnmatch`` pattern ``filter`` (``""``: all)."""
    return POOLINGS.list(filter)
