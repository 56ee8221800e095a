"""LS-IoU task: a small rotated-box regression problem on procedural images (Patel thesis, 3.3.3).

The thesis post-tunes the regression branch of a rotated text detector (RRPN on ICDAR'15) with a
learned surrogate of ``1 - IoU``; this module is an offline, CPU-sized stand-in with its
ingredients:

* :func:`~rank_lab.learned.box_images.make_box_dataset`: images with one text-like rotated bar
  (stripes, random contrast, blur, noise, a distractor) and its box ``(cx, cy, w, h, theta)``,
  normalised (long side ``w``, ``|theta| < pi/2``), in :mod:`rank_lab.learned.box_images`;
* :class:`BoxRegressor`: a CoordConv CNN predicting the 6-d code
  ``(cx, cy, w, h, cos theta, sin theta)`` of the thesis
  (:func:`rank_lab.metrics.detection.encode_box6`), pre-trained with smooth-L1
  (:func:`fit_box_regressor`, the thesis' proxy loss, on the training engine);
* :class:`RotatedBoxPairBank`: the random generator R: perturbed copies of training boxes stored
  with their IoU, sampled uniformly over IoU bins (the thesis stores ~3M pairs for that reason);
* :class:`BoxIoUTask`: the adapter for
  :class:`~rank_lab.learned.surrogate_trainer.SurrogateTrainer`, with metric ``e = 1 - IoU`` (the
  surrogate is a distance: 0 at a perfect prediction; the thesis' "approximates the IoU" means
  this).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._validation import check_float, check_input_batch, check_positive_int
from rank_lab.engine.options import EngineConfig
from rank_lab.learned._checks import (
    check_boxes,
    check_generator,
    check_images,
    check_module,
    uniform,
)
from rank_lab.learned.proxy_training import fit_proxy
from rank_lab.learned.surrogate_model import SurrogateTask
from rank_lab.metrics.detection import decode_box6, encode_box6
from rank_lab.metrics.rotated_iou import rotated_iou

__all__ = [
    "BoxRegressor",
    "fit_box_regressor",
    "predict_boxes",
    "evaluate_box_regressor",
    "metric_tracking",
    "perturb_boxes",
    "RotatedBoxPairBank",
    "BoxIoUTask",
]


class BoxRegressor(nn.Module):
    """CoordConv CNN: ``(B, 1, S, S) -> (B, 6)`` box codes ``(cx, cy, w, h, cos, sin)``.

    The angle pair is normalised to the unit circle, so ``z`` is always a valid code.

    Args:
        size: input side ``S`` (divisible by 8).
        channels: widths of the three conv stages.
        hidden: width of the fully-connected layer.
    """

    def __init__(
        self, size: int = 32, channels: tuple[int, int, int] = (16, 32, 64), hidden: int = 128
    ) -> None:
        super().__init__()
        if check_positive_int(size, "size") % 8:
            raise ValueError(f"size must be divisible by 8, got {size}")
        hidden = check_positive_int(hidden, "hidden")
        if len(channels) != 3:
            raise ValueError(f"channels must hold three widths, got {len(channels)}")
        c1, c2, c3 = (check_positive_int(c, "channels") for c in channels)
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c2, c3, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(c3 * (size // 8) ** 2, hidden), nn.ReLU(), nn.Linear(hidden, 6)
        )
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Box codes ``(B, 6)`` of images ``x`` ``(B, 1, S, S)``.

        Raises:
            ValueError, TypeError: ``x`` is not a finite floating batch of that shape with
                ``B >= 1`` (float64 is cast to the weights' dtype).
        """
        x = check_input_batch(x, "x", ("B", 1, self.size, self.size), dtype=self)
        b, _, hgt, wid = x.shape
        ys = (
            torch.linspace(0, 1, hgt, device=x.device, dtype=x.dtype)
            .view(1, 1, hgt, 1)
            .expand(b, 1, hgt, wid)
        )
        xs = (
            torch.linspace(0, 1, wid, device=x.device, dtype=x.dtype)
            .view(1, 1, 1, wid)
            .expand(b, 1, hgt, wid)
        )
        out = self.head(self.features(torch.cat([x, xs, ys], 1)))
        # (cos, sin) of a box angle from a network head, not an embedding: its eps=1e-6 floor is
        # part of the recorded head's behaviour (unit_rows would make near-zero outputs unit), so
        # F.normalize stays
        ang = F.normalize(out[:, 4:], dim=1, eps=1e-6)
        return torch.cat([out[:, :4], ang], 1)


def fit_box_regressor(
    model: nn.Module,
    images: torch.Tensor,
    boxes: torch.Tensor,
    steps: int = 500,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    device: torch.device | str | None = None,
    schedule: str = "tail_cosine",
    engine: EngineConfig | None = None,
) -> list[float]:
    """Pre-train with the smooth-L1 proxy on the 6-d codes (the RRPN regression loss), on the
    training engine.

    Args:
        model: a :class:`BoxRegressor`; images: ``(N, 1, S, S)`` images; boxes: ``(N, 5)`` their
            boxes.
        steps: Adam steps (mini-batches drawn with replacement).
        batch_size: images per step.
        lr: initial learning rate.
        seed: seeds the batch order.
        device: device (default: CUDA when present).
        schedule: ``"tail_cosine"`` (constant, then a cosine decay over the last 30%: a converged
            proxy model), ``"cosine"`` or ``"constant"`` (see
            :func:`rank_lab.learned.proxy_training.lr_schedule`).
        engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`; see
            :func:`rank_lab.learned.proxy_training.fit_proxy`).

    Returns:
        The loss of every step.

    Raises:
        ValueError, TypeError: ``images`` / ``boxes`` not finite floating ``(N, C, H, W)`` /
            ``(N, 5)`` batches of one size (float64 images are cast to the model's dtype), or a bad
            optimisation argument (see :func:`rank_lab.learned.proxy_training.fit_proxy`).
    """
    images, boxes = _check_images_boxes(images, boxes, check_module(model))
    images, boxes = images.detach(), boxes.detach()  # training data: never differentiated
    target = encode_box6(boxes).float()

    def batch_loss(idx: torch.Tensor, dev: torch.device) -> torch.Tensor:
        return F.smooth_l1_loss(model(images[idx].to(dev)), target[idx].to(dev), beta=0.1)

    return fit_proxy(
        model,
        images.shape[0],
        batch_loss,
        steps,
        batch_size,
        lr,
        seed,
        device,
        schedule,
        desc="smooth-L1",
        engine=engine,
    )


def _check_images_boxes(
    images: object, boxes: object, model: nn.Module | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The data check of the box task's entry points: images ``(N, C, H, W)`` and boxes
    ``(N, 5)``."""
    images = check_images(images, model=model)
    boxes = check_boxes(boxes)
    if images.shape[0] != boxes.shape[0]:
        raise ValueError(f"images has {images.shape[0]} rows but boxes has {boxes.shape[0]}")
    return images, boxes


@torch.no_grad()
def predict_boxes(model: nn.Module, images: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """Decoded boxes ``(N, 5)`` (float64, on the CPU) predicted for ``(N, 1, S, S)`` images (eval
    mode).

    Args:
        model: a :class:`BoxRegressor` (or any ``(B, 1, S, S) -> (B, 6)`` model).
        images: finite floating images (float64 is cast to the model's dtype).
        batch_size: images per forward pass.
    """
    images = check_images(images, model=check_module(model))
    batch_size = check_positive_int(batch_size, "batch_size")
    model.eval()
    dev = next(model.parameters()).device
    z = torch.cat(
        [
            model(images[i : i + batch_size].to(dev)).cpu()
            for i in range(0, images.shape[0], batch_size)
        ]
    )
    return decode_box6(z.double())


def evaluate_box_regressor(
    model: nn.Module, images: torch.Tensor, boxes: torch.Tensor
) -> dict[str, float]:
    """Mean IoU and the ICDAR'15 protocol (one box per image) at IoU 0.5 and 0.7.

    Returns:
        ``{"mean_iou", "f1@0.5", "precision@0.5", "recall@0.5", "f1@0.7"}``. With one ground
        truth and one detection per image and no don't-care region, the protocol of
        :func:`rank_lab.metrics.detection.icdar15_evaluate` matches an image's pair iff its IoU is
        above the threshold (strict ``>``), so precision = recall = F1 = the fraction of such
        images; it is computed so, in one vectorised pass (the per-image protocol loop gives the
        same values, tested).
    """
    images, boxes = _check_images_boxes(images, boxes, check_module(model))
    pred = predict_boxes(model, images)
    iou = rotated_iou(pred, boxes.double().cpu())  # predict_boxes returns CPU boxes
    out = {"mean_iou": float(iou.mean())}
    for thr in (0.5, 0.7):
        out[f"f1@{thr}"] = float((iou > thr).double().mean())
    out["precision@0.5"] = out["recall@0.5"] = out["f1@0.5"]
    return out


@torch.no_grad()
def metric_tracking(
    model: nn.Module, surrogate: nn.Module, images: torch.Tensor, boxes: torch.Tensor
) -> dict[str, float]:
    """How well the learned surrogate and the smooth-L1 proxy track the metric ``1 - IoU``.

    On the model's predictions ``z`` for ``images`` (eval mode) and the codes ``y`` of the true
    ``boxes``, the Pearson correlation with ``e = 1 - IoU`` of the surrogate ``e_hat(z, y)``
    (eq. 3.3) and of the per-box smooth-L1 proxy (the pre-training loss of
    :func:`fit_box_regressor`, ``beta = 0.1``, averaged over the six code entries). A surrogate
    that has learned the metric tracks it better than the proxy the model was trained on.

    Args:
        model: the regressor, ``(N, 1, S, S) -> (N, 6)``.
        surrogate: ``(z, y) -> (N,)``, e.g. an
            :class:`~rank_lab.learned.surrogate_model.EmbeddingSurrogate`.
        images: ``(N, 1, S, S)`` images, ``N >= 2``.
        boxes: ``(N, 5)`` their true boxes.

    Returns:
        ``{"surrogate": r, "proxy": r, "l1": mean |e_hat - e|, "n": N}``.

    Raises:
        ValueError: fewer than 2 images, or a series (the surrogate's estimate, the proxy or the
            metric) that is the same for every image: its correlation is undefined.
    """
    images, boxes = _check_images_boxes(images, boxes, check_module(model))
    if images.shape[0] < 2:
        raise ValueError(f"a correlation needs at least 2 images, got {images.shape[0]}")
    check_module(surrogate, "surrogate")
    model.eval()
    surrogate.eval()
    dev = next(model.parameters()).device
    z = torch.cat(
        [model(images[i : i + 512].to(dev)) for i in range(0, images.shape[0], 512)]
    ).float()
    y = encode_box6(boxes.to(dev)).to(z.dtype)
    e = (1 - rotated_iou(decode_box6(z.double()), boxes.to(dev).double())).to(z.dtype)
    e_hat = surrogate(z, y).to(z.dtype)
    proxy = F.smooth_l1_loss(z, y, beta=0.1, reduction="none").mean(1)

    def pearson(a: torch.Tensor, name: str) -> float:
        for series, what in ((a, name), (e, "metric 1 - IoU")):
            if bool(series.std() == 0):  # a correlation with a constant is undefined, not 0
                raise ValueError(
                    f"the {what} is the same for every one of the {images.shape[0]} images, so its "
                    "correlation is undefined: pass images and boxes on which the predictions and "
                    "their IoU vary"
                )
        return float(torch.corrcoef(torch.stack([a.double(), e.double()]))[0, 1])

    return {
        "surrogate": pearson(e_hat, "surrogate's estimate"),
        "proxy": pearson(proxy, "smooth-L1 proxy"),
        "l1": float((e_hat - e).abs().mean()),
        "n": int(images.shape[0]),
    }


def perturb_boxes(
    boxes: torch.Tensor,
    gen: torch.Generator,
    center: float = 0.15,
    log_scale: float = 0.5,
    angle: float = math.pi / 4,
) -> torch.Tensor:
    """Distorted copies of ``boxes (N, 5)``: centre, size (log-scale) and angle moved uniformly
    within ``+-center`` (relative to the box size), ``+-log_scale`` and ``+-angle``; the
    strength of each copy is itself uniform in ``[0, 1]`` so that all IoU levels occur.

    Args:
        boxes: ``(N, 5)`` finite floating boxes with ``w, h > 0``.
        gen: random generator.
        center, log_scale, angle: the maximal distortions (finite, ``>= 0``).

    Returns:
        ``(N, 5)`` float32 boxes.
    """
    boxes = check_boxes(boxes)
    check_generator(gen)
    center, log_scale = (
        check_float(center, "center", low=0),
        check_float(log_scale, "log_scale", low=0),
    )
    angle = check_float(angle, "angle", low=0)
    n = boxes.shape[0]
    s = uniform(gen, n, 1, device=boxes.device)
    d = (2 * uniform(gen, n, 5, device=boxes.device) - 1) * s
    out = boxes.clone().float()
    scale = boxes[:, 2:3].float()
    out[:, :2] = out[:, :2] + d[:, :2] * center * scale * 2
    out[:, 2:4] = out[:, 2:4] * torch.exp(d[:, 2:4] * log_scale)
    out[:, 4] = out[:, 4] + d[:, 4] * angle
    return out


class RotatedBoxPairBank:
    """The random generator R of LS-IoU: stored perturbed pairs sampled uniformly over IoU bins.

    Args:
        gt_boxes: ``(N, 5)`` training ground-truth boxes (normalised).
        size: number of stored pairs (the thesis stores ~3M).
        n_bins: equal-width IoU bins for the uniform draw.
        seed: seeds the perturbations.
        **perturb_kwargs: forwarded to :func:`perturb_boxes`.
    """

    def __init__(
        self,
        gt_boxes: torch.Tensor,
        size: int = 20000,
        n_bins: int = 10,
        seed: int = 0,
        **perturb_kwargs: float,
    ) -> None:
        gt_boxes = check_boxes(gt_boxes, "gt_boxes")
        size, n_bins = check_positive_int(size, "size"), check_positive_int(n_bins, "n_bins")
        gen = torch.Generator().manual_seed(seed)
        idx = torch.randint(gt_boxes.shape[0], (size,), generator=gen)
        y = gt_boxes[idx].float()
        z = perturb_boxes(y, gen, **perturb_kwargs)
        iou = rotated_iou(z.double(), y.double()).float()
        self.z, self.y, self.e = encode_box6(z), encode_box6(y), 1 - iou
        bins = torch.clamp((iou * n_bins).long(), max=n_bins - 1)
        groups = [torch.nonzero(bins == b).flatten() for b in range(n_bins)]
        groups = [g for g in groups if len(g)]
        self.flat = torch.cat(groups)
        self.counts = torch.tensor([len(g) for g in groups])
        self.offsets = torch.cumsum(self.counts, 0) - self.counts

    def sample(
        self, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` pairs ``(z_r (n, 6), y_r (n, 6), e_r = 1 - IoU (n,))``, uniform over the IoU
        bins."""
        b = torch.randint(
            len(self.counts), (check_positive_int(n, "n"),), generator=check_generator(gen)
        )
        r = (
            torch.floor(torch.rand(n, generator=gen) * self.counts[b])
            .long()
            .clamp(max=self.counts[b] - 1)
        )
        idx = self.flat[self.offsets[b] + r]
        return self.z[idx], self.y[idx], self.e[idx]


class BoxIoUTask(SurrogateTask):
    """LS-IoU adapter of a box regressor for
    :class:`~rank_lab.learned.surrogate_trainer.SurrogateTrainer`.

    Prediction ``z``: the regressor's 6-d code; ground truth: the code of the true box; metric:
    ``1 - IoU`` of the decoded boxes (exact polygon clipping).

    Args:
        images: ``(N, 1, S, S)`` training images.
        boxes: ``(N, 5)`` their boxes.
        batch_size: images per step.
        bank: the random generator R (for the global / local-global sources).
        device: where batches are placed.

    Raises:
        ValueError, TypeError: ``images`` / ``boxes`` not finite floating ``(N, C, H, W)`` /
            ``(N, 5)`` batches of one size, a bad ``batch_size`` or ``bank``.
    """

    def __init__(
        self,
        images: torch.Tensor,
        boxes: torch.Tensor,
        batch_size: int = 64,
        bank: RotatedBoxPairBank | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(batch_size, device)
        images, boxes = _check_images_boxes(images, boxes, None)
        if bank is not None and not isinstance(bank, RotatedBoxPairBank):
            raise TypeError(f"bank must be a RotatedBoxPairBank or None, got {type(bank).__name__}")
        self.images, self.boxes = images, boxes.float()
        self.bank = bank

    def sample_batch(self, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """Random images ``x`` and their ``boxes``."""
        idx = torch.randint(self.images.shape[0], (self.batch_size,), generator=gen)
        return {"x": self.images[idx].to(self.device), "boxes": self.boxes[idx].to(self.device)}

    def predict(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Box codes ``(B, 6)``."""
        return model(batch["x"])

    def encode_target(self, z: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Codes of the ground-truth boxes ``(B, 6)``."""
        return encode_box6(batch["boxes"]).to(z.dtype)

    def metric(self, z: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``1 - IoU`` of the decoded prediction with the ground truth, ``(B,)``."""
        return (1 - rotated_iou(decode_box6(z.detach().double()), batch["boxes"].double())).to(
            z.dtype
        )

    def sample_global(
        self, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` stored pairs from the bank."""
        if self.bank is None:
            raise ValueError(
                "this BoxIoUTask has no bank: the global / local_global sources need one"
            )
        z, y, e = self.bank.sample(n, gen)
        return z.to(self.device), y.to(self.device), e.to(self.device)
