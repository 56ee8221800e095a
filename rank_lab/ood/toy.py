"""Small, fast set-ups for studying OOD detectors on a CPU (used by the book and the tests).

* :func:`make_ring_segments`: a 2-D in-distribution set (arcs of a ring, one class per arc) on which
  a tied-covariance Gaussian mixture is too rigid: it puts its highest density in the empty centre.
* :func:`make_ring_ood`: OOD points in that centre ("near", inside the GMM's mass) or far away.
* :func:`make_split_classes`: ``d``-dimensional classes of two Gaussian modes with near-OOD points
  in the gap between them, where a class-Gaussian prior is densest (and the swapped control, one
  Gaussian per class, where the prior is right).
* :func:`energy_grid`: an energy evaluated on a 2-D grid and normalised numerically into a
  log-density (the partition function of a 2-D EBM is a sum over the grid).
* :class:`SmallConvNet` and :func:`train_classifier`: a tiny CNN for 8x8 digits whose last feature
  map gives average-pooled and std-pooled features (:mod:`rank_lab.ood.features`), trained with
  cross-entropy on the training engine (:mod:`rank_lab.engine.loop`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import nn

from rank_lab._validation import (
    check_choice,
    check_finite,
    check_float,
    check_input_batch,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, loop_options
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "make_ring_segments",
    "make_ring_ood",
    "make_split_classes",
    "energy_grid",
    "SmallConvNet",
    "train_classifier",
]


def make_ring_segments(
    n_per_class: int = 200,
    n_classes: int = 2,
    radius: float = 1.0,
    noise: float = 0.08,
    gap: float = 0.5,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Points on ``n_classes`` arcs of a circle (class ``c`` = arc ``c``), with Gaussian radial
    noise.

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
    radius, noise = (
        check_float(radius, "radius", low=0, low_open=True),
        check_float(noise, "noise", low=0),
    )
    gap = check_float(gap, "gap")
    if not 0 <= gap < 2 * math.pi / n_classes:
        raise ValueError(f"gap must be in [0, 2 pi / n_classes), got {gap}")
    g = torch.Generator().manual_seed(seed)
    span = 2 * math.pi / n_classes
    xs, ys = [], []
    for c in range(n_classes):
        t = c * span + gap / 2 + torch.rand(n_per_class, generator=g) * (span - gap)
        r = radius + noise * torch.randn(n_per_class, generator=g)
        pts = torch.stack([r * torch.cos(t), r * torch.sin(t)], 1) + noise * 0.5 * torch.randn(
            n_per_class, 2, generator=g
        )
        xs.append(pts)
        ys.append(torch.full((n_per_class,), c, dtype=torch.long))
    return torch.cat(xs).float(), torch.cat(ys)


def make_ring_ood(
    n: int = 200, kind: str = "near", radius: float = 1.0, seed: int = 0
) -> torch.Tensor:
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
    check_choice(kind, "kind", ("near", "far"))
    radius = check_float(radius, "radius", low=0, low_open=True)
    g = torch.Generator().manual_seed(seed + 7919)
    t = 2 * math.pi * torch.rand(n, generator=g)
    if kind == "near":
        r = 0.45 * radius * torch.sqrt(torch.rand(n, generator=g))
    elif kind == "far":
        r = 3.0 * radius + 0.1 * torch.randn(n, generator=g)
    else:
        raise ValueError(f"kind must be 'near' or 'far', got {kind!r}")
    return torch.stack([r * torch.cos(t), r * torch.sin(t)], 1).float()


def make_split_classes(
    n_per_class: int = 200,
    n_ood: int = 600,
    *,
    n_classes: int = 3,
    dim: int = 8,
    radius: float = 4.0,
    offset: float = 2.0,
    noise: float = 0.5,
    split: bool = True,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Features on which a class-Gaussian prior is misspecified (``split=True``) or right
    (``split=False``).

    Class ``c`` has a centre ``mu_c`` (norm ``radius``) and a unit direction ``u_c``, both drawn at
    random. With ``split=True`` each class is two isotropic Gaussian modes, ``mu_c +- offset u_c``
    (std ``noise``), and the near-OOD points lie in the empty gap between them, ``mu_c + noise w``:
    a Gaussian fitted to the class puts its *highest* density there (the multi-modal failure of a
    Gaussian prior that HEAT's residual energy must correct, Ramzi thesis Sec. 5.2.1). With
    ``split=False`` the roles swap, the control: each class is one Gaussian at ``mu_c``, which the
    prior models exactly, and the near-OOD points sit at ``mu_c +- offset u_c``. Far-OOD points are
    fresh ID draws scaled by 2.5 away from the origin. Train and test ID sets are independent draws
    of the same classes (``n_per_class`` points each, half per mode when split).

    Args:
        n_per_class: ID points per class in each of the train and test sets (even when ``split``).
        n_ood: points in each of the near and far OOD sets.
        n_classes: number of classes ``C``.
        dim: feature dimension ``d >= 2``.
        radius: norm of the class centres.
        offset: distance between a class centre and each of its two modes (or the near-OOD points).
        noise: standard deviation of every Gaussian.
        split: two modes per class (the prior is misspecified) or one (the control).
        seed: random seed (everything is drawn from it).

    Returns:
        ``{"x_train" (C n, d), "y_train" (C n,), "x_test", "y_test", "near" (n_ood, d),
        "far" (n_ood, d)}``, float32 features and long labels.

    Raises:
        ValueError, TypeError: a count not a positive int (``n_per_class`` odd when ``split``),
            ``dim < 2``, ``radius``, ``offset`` or ``noise`` not finite and ``> 0``.
    """
    n_per_class, n_ood = (
        check_positive_int(n_per_class, "n_per_class"),
        check_positive_int(n_ood, "n_ood"),
    )
    n_classes, dim = check_positive_int(n_classes, "n_classes"), check_positive_int(dim, "dim")
    if dim < 2:
        raise ValueError(f"dim must be >= 2, got {dim}")
    if not isinstance(split, bool):
        raise TypeError(f"split must be a bool, got {type(split).__name__}")
    if split and n_per_class % 2:
        raise ValueError(f"n_per_class must be even when split (half per mode), got {n_per_class}")
    radius = check_float(radius, "radius", low=0, low_open=True)
    offset = check_float(offset, "offset", low=0, low_open=True)
    noise = check_float(noise, "noise", low=0, low_open=True)
    g = torch.Generator().manual_seed(check_nonneg_int(seed, "seed"))
    mu = torch.randn(n_classes, dim, generator=g, dtype=torch.float64)
    mu = radius * mu / mu.norm(dim=1, keepdim=True)
    u = torch.randn(n_classes, dim, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=1, keepdim=True)

    def around(centres: torch.Tensor) -> torch.Tensor:
        return centres + noise * torch.randn(centres.shape, generator=g, dtype=torch.float64)

    def split_points(c: torch.Tensor) -> torch.Tensor:
        """``mu_c +- offset u_c``, alternating signs."""
        sign = 1.0 - 2.0 * (torch.arange(c.shape[0]) % 2).to(torch.float64)
        return mu[c] + offset * sign[:, None] * u[c]

    def draw_id() -> tuple[torch.Tensor, torch.Tensor]:
        c = torch.arange(n_classes).repeat_interleave(n_per_class)
        return around(split_points(c) if split else mu[c]).float(), c

    x_train, y_train = draw_id()
    x_test, y_test = draw_id()
    c = torch.randint(n_classes, (n_ood,), generator=g)
    near = around(mu[c] if split else split_points(c)).float()
    far = 2.5 * draw_id()[0][torch.randint(n_classes * n_per_class, (n_ood,), generator=g)]
    return {
        "x_train": x_train,
        "y_train": y_train,
        "x_test": x_test,
        "y_test": y_test,
        "near": near,
        "far": far,
    }


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

    Raises:
        ValueError, TypeError: ``energy_fn`` not callable or returning a non-finite energy or
            another shape than ``(M,)``; ``bounds`` not four finite, increasing pairs; ``n`` not a
            positive int.
    """
    if not callable(energy_fn):
        raise TypeError(f"energy_fn must be callable, got {type(energy_fn).__name__}")
    n = check_positive_int(n, "n")
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 4:
        raise ValueError(f"bounds must be (xmin, xmax, ymin, ymax), got {bounds!r}")
    x0, x1, y0, y1 = (check_float(b, "bounds") for b in bounds)
    if not (x1 > x0 and y1 > y0):
        raise ValueError(f"bounds must satisfy xmin < xmax and ymin < ymax, got {bounds}")
    xs, ys = torch.linspace(x0, x1, n), torch.linspace(y0, y1, n)
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    pts = torch.stack([xx.reshape(-1), yy.reshape(-1)], 1)
    with torch.enable_grad():  # energies may need autograd internally; results are detached
        parts = []
        for i in range(0, pts.shape[0], 8192):
            e_i = energy_fn(pts[i : i + 8192])
            if not isinstance(e_i, torch.Tensor) or e_i.shape != (pts[i : i + 8192].shape[0],):
                raise ValueError(
                    "energy_fn must return shape (M,) for (M, 2) points, got "
                    f"{getattr(e_i, 'shape', type(e_i))}"
                )
            parts.append(e_i.detach().cpu())
        e = torch.cat(parts)
    check_finite(e, "energy_fn's output")
    cell = (x1 - x0) / max(n - 1, 1) * (y1 - y0) / max(n - 1, 1)
    log_p = -e.double() - torch.logsumexp(-e.double(), 0) - math.log(cell)
    return xx, yy, e.reshape(n, n), log_p.reshape(n, n).float()


class SmallConvNet(nn.Module):
    """A tiny CNN for small grey images (e.g. 8x8 digits): two 3x3 conv blocks, global pooling,
    linear head.

    ``self.features`` outputs the last feature map ``(N, width, H, W)`` (hook it with
    :func:`rank_lab.ood.features.extract_features` and ``layer="features"``); ``self.fc`` is the
    linear head on its average pooling. ``forward`` returns logits ``(N, n_classes)``.
    """

    def __init__(self, n_classes: int, in_channels: int = 1, width: int = 32) -> None:
        super().__init__()
        n_classes = check_positive_int(n_classes, "n_classes")
        self.in_channels = in_channels = check_positive_int(in_channels, "in_channels")
        if check_positive_int(width, "width") < 2:
            raise ValueError(
                f"width must be >= 2 (the first block has width // 2 channels), got {width}"
            )
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width // 2, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width // 2, width, 3, padding=1),
            nn.ReLU(),
        )
        self.fc = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, n_classes)`` of finite floating images ``(N, in_channels, H, W)``,
        ``N >= 1`` (float64 is cast to the weights' dtype; bad input raises ``ValueError`` /
        ``TypeError``)."""
        x = check_input_batch(x, "x", ("N", self.in_channels, "H", "W"), dtype=self)
        return self.fc(self.features(x).mean(dim=(2, 3)))


def train_classifier(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int = 30,
    batch_size: int = 64,
    lr: float = 3e-3,
    weight_decay: float = 1e-4,
    seed: int = 0,
    device: DeviceLike = None,
    engine: EngineConfig | None = None,
) -> nn.Module:
    """Train a classifier with cross-entropy and Adam on the training engine; returns it frozen
    (eval mode, no grad).

    Args:
        model: maps ``x`` to logits.
        x: ``(N, ...)`` inputs; y: ``(N,)`` labels in ``0..C-1``.
        epochs, batch_size, lr, weight_decay: optimisation.
        seed: seeds the initialisation (re-seeded here) and the batch order.
        device: training device.
        engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`: a checkpoint
            file written every ``checkpoint_every`` epochs and resumed from; progress; mixed
            precision on CUDA; gradient clipping).

    Raises:
        ValueError, TypeError: ``x`` not a finite floating ``(N, ...)`` tensor with ``N >= 1``,
            ``y`` not ``(N,)`` integer labels, a bad optimisation argument.
        NonFiniteTrainingError: a NaN / inf loss or gradient (a ``FloatingPointError``, raised
            before the step is applied).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(x, torch.Tensor) or x.ndim < 2:
        raise ValueError(
            f"x must be an (N, ...) tensor of inputs, got {getattr(x, 'shape', type(x).__name__)}"
        )
    x = check_input_batch(x, "x", ("N",) + ("*",) * (x.ndim - 1))
    y = check_labels(y, None, "y")
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]}")
    if y.ndim != 1 or bool((y < 0).any()):
        raise ValueError(f"y must be (N,) class indices >= 0, got shape {tuple(y.shape)}")
    options = loop_options(engine, epochs=epochs, desc="classifier")
    batch_size = check_positive_int(batch_size, "batch_size")
    lr = check_float(lr, "lr", low=0, low_open=True)
    weight_decay = check_float(weight_decay, "weight_decay", low=0)
    dev = get_device(device)
    torch.manual_seed(seed)
    for m in model.modules():
        if hasattr(m, "reset_parameters") and m is not model:
            m.reset_parameters()
    model.to(dev).train()
    g = torch.Generator().manual_seed(seed)
    opt = build_optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    x, y = x.to(dev), y.to(dev)
    run = Engine(
        model,
        opt,
        options,
        device=dev,
        generators={"batches": g},
        run_key={
            "batch_size": batch_size,
            "lr": lr,
            "weight_decay": weight_decay,
            "seed": seed,
            "n_items": int(x.shape[0]),
        },
        trained_on=(x, y),
    )

    def batches(epoch: int) -> Iterator[Batch]:
        perm = torch.randperm(x.shape[0], generator=g).to(dev)
        for i in range(0, x.shape[0], batch_size):
            idx = perm[i : i + batch_size]
            yield Batch(idx, indices=idx)

    run.run(lambda idx: nn.functional.cross_entropy(model(x[idx]), y[idx]), batches)
    model.eval().requires_grad_(False)
    return model
