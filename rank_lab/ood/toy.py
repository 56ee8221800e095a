"""Small, fast set-ups for studying OOD detectors on a CPU (used by the book and the tests).

* :func:`make_ring_segments`: a 2-D in-distribution set (arcs of a ring, one class per arc) on which
  a tied-covariance Gaussian mixture is too rigid: it puts its highest density in the empty centre.
* :func:`make_ring_ood`: OOD points in that centre ("near", inside the GMM's mass) or far away.
* :func:`energy_grid`: an energy evaluated on a 2-D grid and normalised numerically into a
  log-density (the partition function of a 2-D EBM is a sum over the grid).
* :class:`SmallConvNet` and :func:`train_classifier`: a tiny CNN for 8x8 digits whose last feature
  map gives average-pooled and std-pooled features (:mod:`rank_lab.ood.features`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from tqdm.auto import tqdm

from rank_lab._validation import check_labels, check_positive_int
from rank_lab.utils import DeviceLike, get_device

__all__ = ["make_ring_segments", "make_ring_ood", "energy_grid", "SmallConvNet", "train_classifier"]


def make_ring_segments(
    n_per_class: int = 200, n_classes: int = 2, radius: float = 1.0, noise: float = 0.08,
    gap: float = 0.5, seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Points on ``n_classes`` arcs of a circle (class ``c`` = arc ``c``), with Gaussian radial noise.

    Arc ``c`` covers the angles ``[2 pi c / C + gap/2, 2 pi (c + 1) / C - gap/2]``.

    Args:
        n_per_class: points per arc.
        n_classes: number of arcs (classes).
        radius: circle radius.
        noise: std of the radial and tangential jitter.
        gap: angular gap (radians) between consecutive arcs.
        seed: random seed.

    Returns:
        ``x (C * n_per_class, 2)`` float32 and ``y (C * n_per_class,)`` long.
    """
    n_per_class = check_positive_int(n_per_class, "n_per_class")
    n_classes = check_positive_int(n_classes, "n_classes")
    if not 0 <= gap < 2 * math.pi / n_classes:
        raise ValueError(f"gap must be in [0, 2 pi / n_classes), got {gap}")
    g = torch.Generator().manual_seed(seed)
    span = 2 * math.pi / n_classes
    xs, ys = [], []
    for c in range(n_classes):
        t = c * span + gap / 2 + torch.rand(n_per_class, generator=g) * (span - gap)
        r = radius + noise * torch.randn(n_per_class, generator=g)
        pts = torch.stack([r * torch.cos(t), r * torch.sin(t)], 1) + noise * 0.5 * torch.randn(n_per_class, 2, generator=g)
        xs.append(pts)
        ys.append(torch.full((n_per_class,), c, dtype=torch.long))
    return torch.cat(xs).float(), torch.cat(ys)


def make_ring_ood(n: int = 200, kind: str = "near", radius: float = 1.0, seed: int = 0) -> torch.Tensor:
    """OOD points for :func:`make_ring_segments`.

    Args:
        n: number of points.
        kind: ``"near"``: uniform in the disc of radius ``0.45 radius`` (the empty centre, where a
            Gaussian fit of the ring is densest); ``"far"``: on a circle of radius ``3 radius``.
        radius: the ring's radius.
        seed: random seed.

    Returns:
        ``(n, 2)`` float32.
    """
    n = check_positive_int(n, "n")
    g = torch.Generator().manual_seed(seed + 7919)
    t = 2 * math.pi * torch.rand(n, generator=g)
    if kind == "near":
        r = 0.45 * radius * torch.sqrt(torch.rand(n, generator=g))
    elif kind == "far":
        r = 3.0 * radius + 0.1 * torch.randn(n, generator=g)
    else:
        raise ValueError(f"kind must be 'near' or 'far', got {kind!r}")
    return torch.stack([r * torch.cos(t), r * torch.sin(t)], 1).float()


@torch.no_grad()
def energy_grid(
    energy_fn: Callable[[torch.Tensor], torch.Tensor],
    bounds: tuple[float, float, float, float] = (-2.0, 2.0, -2.0, 2.0),
    n: int = 120,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Evaluate a 2-D energy on an ``n x n`` grid and normalise it on the grid.

    ``log p(x) = -E(x) - log sum_grid exp(-E) - log(cell area)``: the exact normalisation of
    ``exp(-E)`` restricted to the box (a Riemann sum), which makes energies of different models
    comparable as densities.

    Args:
        energy_fn: ``(M, 2) -> (M,)``.
        bounds: ``(xmin, xmax, ymin, ymax)``.
        n: grid points per axis.

    Returns:
        ``xx (n, n)``, ``yy (n, n)``, ``energy (n, n)`` and ``log_density (n, n)``.
    """
    n = check_positive_int(n, "n")
    x0, x1, y0, y1 = (float(b) for b in bounds)
    if not (x1 > x0 and y1 > y0):
        raise ValueError(f"bounds must satisfy xmin < xmax and ymin < ymax, got {bounds}")
    xs, ys = torch.linspace(x0, x1, n), torch.linspace(y0, y1, n)
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    pts = torch.stack([xx.reshape(-1), yy.reshape(-1)], 1)
    with torch.enable_grad():  # energies may need autograd internally; results are detached
        e = torch.cat([energy_fn(pts[i:i + 8192]).detach().cpu() for i in range(0, pts.shape[0], 8192)])
    cell = (x1 - x0) / max(n - 1, 1) * (y1 - y0) / max(n - 1, 1)
    log_p = -e.double() - torch.logsumexp(-e.double(), 0) - math.log(cell)
    return xx, yy, e.reshape(n, n), log_p.reshape(n, n).float()


class SmallConvNet(nn.Module):
    """A tiny CNN for small grey images (e.g. 8x8 digits): two 3x3 conv blocks, global pooling, linear head.

    ``self.features`` outputs the last feature map ``(N, width, H, W)`` (hook it with
    :func:`rank_lab.ood.features.extract_features` and ``layer="features"``); ``self.fc`` is the
    linear head on its average pooling. ``forward`` returns logits ``(N, n_classes)``.
    """

    def __init__(self, n_classes: int, in_channels: int = 1, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width // 2, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width // 2, width, 3, padding=1), nn.ReLU(),
        )
        self.fc = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


def train_classifier(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int = 30, batch_size: int = 64,
    lr: float = 3e-3, weight_decay: float = 1e-4, seed: int = 0, device: DeviceLike = None, progress: bool = False,
) -> nn.Module:
    """Train a classifier with cross-entropy and Adam; returns it frozen (eval mode, no grad).

    Args:
        model: maps ``x`` to logits.
        x: ``(N, ...)`` inputs; y: ``(N,)`` labels in ``0..C-1``.
        epochs, batch_size, lr, weight_decay: optimisation.
        seed: seeds the initialisation (re-seeded here) and the batch order.
        device: training device.
        progress: show a tqdm bar.
    """
    y = check_labels(y, x.shape[0], "y")
    dev = get_device(device)
    torch.manual_seed(seed)
    for m in model.modules():
        if hasattr(m, "reset_parameters") and m is not model:
            m.reset_parameters()
    model.to(dev).train()
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    x, y = x.to(dev), y.to(dev)
    for _ in tqdm(range(epochs), desc="classifier", disable=not progress, leave=False):
        perm = torch.randperm(x.shape[0], generator=g).to(dev)
        for i in range(0, x.shape[0], batch_size):
            idx = perm[i:i + batch_size]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    model.eval().requires_grad_(False)
    return model
