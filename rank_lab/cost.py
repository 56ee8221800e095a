"""An honest full mode: estimate what a run costs and refuse hours of silent CPU work.

Every notebook runs in smoke mode in under a minute on a CPU; ``smoke=False`` is the full-scale run,
made for a GPU. :func:`guard_full_run`, called in one line after the parameters cell, lets a full
run start on a CPU only when its estimate fits ``budget_s`` (30 minutes by default); otherwise it
stops at once with the estimate and the three ways on (a GPU, ``smoke=True``, or
``allow_cpu_full=True``)::

    cost = guard_full_run(smoke, device, training_cost(backbone, 224, epochs=100, dataset="sop"),
                          allow_cpu_full=allow_cpu_full)

Estimates count floating-point operations: the backbone's forward pass is measured with
:class:`torch.utils.flop_counter.FlopCounterMode` on the ``meta`` device (no memory, no compute), a
training pass costs 3 forward passes (forward + backward), and the totals are divided by assumed
sustained throughputs (:data:`CPU_FLOPS`, :data:`GPU_FLOPS`). They are rough, order-of-magnitude
figures: enough to tell minutes from days, not a benchmark. A notebook whose full mode is not a
backbone training (toy sweeps) declares its estimate with :func:`declared_cost`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from rank_lab._validation import check_float, check_nonneg_int, check_positive_int, shape_only
from rank_lab.models import build_backbone
from rank_lab.models.heads import check_backbone_name
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "CPU_FLOPS",
    "GPU_FLOPS",
    "CPU_BUDGET_S",
    "PUBLISHED_SIZES",
    "CostEstimate",
    "FullRunOnCPUError",
    "forward_flops",
    "training_cost",
    "memory_estimate",
    "declared_cost",
    "format_duration",
    "guard_full_run",
]

#: Assumed sustained FLOP/s of CNN training on a multi-core CPU (about 6 ResNet-50 images/s).
CPU_FLOPS = 1e11
#: Assumed sustained FLOP/s on one GPU with mixed precision (a Colab T4: about 280 ResNet-50
#: images/s).
GPU_FLOPS = 7e12
#: A full run on a CPU starts without ``allow_cpu_full`` when its estimate is at most this
#: (seconds).
CPU_BUDGET_S = 1800.0

#: (train, test) images of the retrieval splits the book uses (the loaders' docstrings).
PUBLISHED_SIZES: dict[str, tuple[int, int]] = {
    "sop": (59_551, 60_502),
    "cub": (5_864, 5_924),
    "cars196": (8_054, 8_131),
    "inaturalist": (325_846, 136_093),
    "inat_base": (325_846, 136_093),
    "inat_full": (325_846, 136_093),
    "cifar10": (50_000, 10_000),
    "cifar100": (50_000, 10_000),
}


class FullRunOnCPUError(RuntimeError):
    """A full-scale run (``smoke=False``) would take too long on the CPU."""


@dataclass(frozen=True)
class CostEstimate:
    """A run's estimated duration on a CPU and on a GPU (seconds), and what it counts.

    Raises:
        TypeError, ValueError: a duration that is not a finite number >= 0, a description that is
            not a str.
    """

    cpu_seconds: float
    gpu_seconds: float
    description: str

    def __post_init__(self) -> None:
        check_float(self.cpu_seconds, "cpu_seconds", low=0.0)
        check_float(self.gpu_seconds, "gpu_seconds", low=0.0)
        if not isinstance(self.description, str):
            raise TypeError(f"description must be a str, got {type(self.description).__name__}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (for ``results.json``)."""
        return asdict(self)


def forward_flops(
    backbone: str | nn.Module, image_size: int | tuple[int, int], in_channels: int = 3
) -> float:
    """FLOPs of one forward pass of one image (a multiply-add counts 2), measured on ``meta``
    tensors.

    Args:
        backbone: a name for :func:`rank_lab.models.build_backbone` (built on the ``meta`` device
            with random weights: nothing is allocated or downloaded) or a module.
        image_size: side (or ``(height, width)``) of the input image.
        in_channels: input channels.

    Raises:
        TypeError, ValueError: an unknown backbone name, ``image_size`` or ``in_channels`` not
            positive ints.
    """
    sizes = (
        (image_size, image_size) if not isinstance(image_size, (tuple, list)) else tuple(image_size)
    )
    if len(sizes) != 2:
        raise ValueError(f"image_size must be an int or (height, width), got {image_size!r}")
    h, w = (check_positive_int(v, "image_size") for v in sizes)
    in_channels = check_positive_int(in_channels, "in_channels")
    if isinstance(backbone, str):
        check_backbone_name(backbone, "backbone")

        kwargs: dict[str, Any] = (
            {"input_dim": in_channels * h * w} if backbone.lower() == "mlp" else {}
        )
        with torch.device("meta"):
            module = build_backbone(backbone, in_channels=in_channels, **kwargs)
    elif isinstance(backbone, nn.Module):
        module = copy.deepcopy(backbone).to("meta")  # the caller's weights stay where they are
    else:
        raise TypeError(f"backbone must be a name or an nn.Module, got {type(backbone).__name__}")
    # batch norm in training mode refuses one image at a 1 x 1 map (ResNet-50 at 32 px)
    module.eval()
    x = torch.empty(1, in_channels, h, w, device="meta")
    with FlopCounterMode(display=False) as counter, torch.no_grad(), shape_only():
        module(x)
    return float(counter.get_total_flops())


def training_cost(
    backbone: str | nn.Module,
    image_size: int,
    *,
    epochs: int,
    train_images: int | None = None,
    test_images: int | None = None,
    dataset: str | None = None,
    evaluations: int = 1,
    runs: int = 1,
    in_channels: int = 3,
) -> CostEstimate:
    """Estimate ``runs`` trainings of ``epochs`` epochs plus ``evaluations`` passes over the test
    set.

    Args:
        backbone, image_size, in_channels: see :func:`forward_flops`.
        epochs: epochs per run.
        train_images, test_images: set sizes; default the published sizes of ``dataset``.
        dataset: a name of :data:`PUBLISHED_SIZES` (``"sop"``, ``"cub"`` ...).
        evaluations: test-set passes per run.
        runs: trainings (seeds x losses ...).

    Raises:
        TypeError, ValueError: a count that is not an int >= 0, or sizes neither given nor known
            for ``dataset``.
    """
    for name, v in (("epochs", epochs), ("evaluations", evaluations), ("runs", runs)):
        check_nonneg_int(v, name)
    for name, v in (("train_images", train_images), ("test_images", test_images)):
        if v is not None:
            check_nonneg_int(v, name)
    if train_images is None or test_images is None:
        key = (dataset or "").lower()
        if key not in PUBLISHED_SIZES:
            raise ValueError(
                f"pass train_images and test_images, or a dataset among {sorted(PUBLISHED_SIZES)} "
                f"(got {dataset!r})"
            )
        n_train, n_test = PUBLISHED_SIZES[key]
        train_images = n_train if train_images is None else train_images
        test_images = n_test if test_images is None else test_images
    flops = forward_flops(backbone, image_size, in_channels)
    total = runs * (3.0 * epochs * train_images + evaluations * test_images) * flops
    name = backbone if isinstance(backbone, str) else type(backbone).__name__
    what = (
        f"{name} at {image_size} px ({flops / 1e9:.2f} GFLOP per image), {runs} run(s) x {epochs} "
        f"epoch(s) of {train_images:,} training images + {evaluations} pass(es) over "
        f"{test_images:,} test images"
    )
    return CostEstimate(total / CPU_FLOPS, total / GPU_FLOPS, what)


def memory_estimate(
    backbone: str | nn.Module,
    image_size: int | tuple[int, int],
    batch_size: int,
    *,
    training: bool = True,
    in_channels: int = 3,
) -> float:
    """Peak device memory (bytes) of one float32 step of ``backbone`` on a batch: a rough estimate.

    Measured on ``meta`` tensors (nothing is allocated): the parameter count ``P`` and the output
    sizes of the leaf modules for one image (``A`` values). Training keeps the weights, their
    gradients and two Adam moments (``16 P`` bytes) and every leaf output of the batch for the
    backward pass (``4 A B`` bytes); inference keeps the weights and, at most, two consecutive
    outputs of a batch (``4 P + 8 a B``, ``a`` the largest leaf output). Framework overhead (CUDA
    context, allocator caching, workspace) comes on top; in-place activations and mixed precision
    come below: an order of magnitude, not a measurement.

    Args:
        backbone, image_size, in_channels: see :func:`forward_flops`.
        batch_size: images per step (``>= 1``).
        training: a training step (forward and backward, Adam) or inference only.

    Raises:
        TypeError, ValueError: as :func:`forward_flops`; ``batch_size`` not a positive int.
    """
    batch = check_positive_int(batch_size, "batch_size")
    sizes = (
        (image_size, image_size) if not isinstance(image_size, (tuple, list)) else tuple(image_size)
    )
    if len(sizes) != 2:
        raise ValueError(f"image_size must be an int or (height, width), got {image_size!r}")
    h, w = (check_positive_int(v, "image_size") for v in sizes)
    in_channels = check_positive_int(in_channels, "in_channels")
    if not isinstance(training, bool):
        raise TypeError(f"training must be a bool, got {training!r}")
    if isinstance(backbone, str):
        check_backbone_name(backbone, "backbone")
        kwargs: dict[str, Any] = (
            {"input_dim": in_channels * h * w} if backbone.lower() == "mlp" else {}
        )
        with torch.device("meta"):
            module = build_backbone(backbone, in_channels=in_channels, **kwargs)
    elif isinstance(backbone, nn.Module):
        module = copy.deepcopy(backbone).to("meta")
    else:
        raise TypeError(f"backbone must be a name or an nn.Module, got {type(backbone).__name__}")
    outputs: list[int] = []

    def keep(_mod: nn.Module, _inp: Any, out: Any) -> None:
        if isinstance(out, torch.Tensor):
            outputs.append(out.numel())

    hooks = [m.register_forward_hook(keep) for m in module.modules() if not list(m.children())]
    module.eval()  # the output sizes are the same; batch norm in training mode refuses a 1 x 1 map
    try:
        with torch.no_grad(), shape_only():  # a meta input: shapes only, no values to check
            module(torch.empty(1, in_channels, h, w, device="meta"))
    except (RuntimeError, ValueError) as exc:
        raise ValueError(
            f"image_size {(h, w)} (in_channels {in_channels}) does not go through the backbone: "
            f"{exc}"
        ) from exc
    finally:
        for hook in hooks:
            hook.remove()
    params = sum(p.numel() for p in module.parameters())
    if training:
        return float(16 * params + 4 * batch * (sum(outputs) + in_channels * h * w))
    return float(4 * params + 8 * batch * max([*outputs, in_channels * h * w]))


def declared_cost(
    cpu_seconds: float, description: str, gpu_seconds: float | None = None
) -> CostEstimate:
    """A cost the notebook states itself (e.g. measured toy sweeps); GPU time defaults to the CPU
    time.

    Raises:
        TypeError, ValueError: a duration that is not a finite number >= 0.
    """
    cpu = check_float(cpu_seconds, "cpu_seconds", low=0.0)
    gpu = cpu if gpu_seconds is None else check_float(gpu_seconds, "gpu_seconds", low=0.0)
    return CostEstimate(cpu, gpu, description)


def format_duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.5 h`` or ``2.1 days`` (``+inf``: ``"forever"``).

    Raises:
        TypeError, ValueError: ``seconds`` not a number, NaN or negative.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"seconds must be >= 0 (or inf), got {seconds}")
    if math.isinf(seconds):
        return "forever"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def guard_full_run(
    smoke: bool,
    device: DeviceLike,
    cost: CostEstimate,
    *,
    allow_cpu_full: bool = False,
    budget_s: float = CPU_BUDGET_S,
) -> dict[str, Any]:
    """Let a full run start on a CPU only when its estimate fits ``budget_s``; say what it costs.

    Args:
        smoke: the notebook's ``smoke`` parameter (``True``: nothing to check).
        device: the notebook's device (``None``: CUDA when present).
        cost: the run's :class:`CostEstimate`.
        allow_cpu_full: run on the CPU even past the budget.
        budget_s: the longest CPU run that starts without ``allow_cpu_full`` (a finite number >= 0).

    Returns:
        A record for ``results.json``: mode, device, the estimates and whether the CPU run was
        allowed.

    Raises:
        FullRunOnCPUError: full mode on a CPU past the budget without ``allow_cpu_full``; the
            message gives the estimate and the ways on.
        TypeError, ValueError: ``cost`` not a :class:`CostEstimate`, ``budget_s`` not a finite
            number >= 0, an unknown ``device``.
    """
    budget_s = check_float(budget_s, "budget_s", low=0.0)
    if not isinstance(cost, CostEstimate):
        raise TypeError(
            "cost must be a CostEstimate (training_cost / declared_cost), got "
            f"{type(cost).__name__}"
        )
    dev = get_device(device)
    record: dict[str, Any] = {
        "mode": "smoke" if smoke else "full",
        "device": str(dev),
        **cost.as_dict(),
    }
    if smoke:
        return record
    if dev.type != "cpu":
        print(
            f"full run on {dev}: roughly {format_duration(cost.gpu_seconds)} on a GPU "
            f"({cost.description})"
        )
        return record
    est = format_duration(cost.cpu_seconds)
    if cost.cpu_seconds > budget_s and not allow_cpu_full:
        raise FullRunOnCPUError(
            f"smoke=False on the CPU: this full-scale run would take roughly {est} here "
            f"(about {format_duration(cost.gpu_seconds)} on a GPU): {cost.description}. "
            "To proceed, run it on a GPU (on Colab: Runtime > Change runtime type > GPU), set "
            "smoke=True for the quick version, or set allow_cpu_full=True to run it on the CPU "
            "anyway."
        )
    print(f"full run on the CPU: roughly {est} ({cost.description})")
    record["allowed_on_cpu"] = True
    return record
