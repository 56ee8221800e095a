"""Multi-dataset training of a retrieval model for classification (Gominski thesis §5.4, Fig. 5.15).

Batches are drawn from a *pool of datasets*: ``N`` times, (1) a dataset uniformly, (2) a class
uniformly within it, (3) ``k`` images of that class (:class:`MultiDatasetSampler`; author's code:
``N = 32``, ``k = 5``, classes with fewer than 5 images dropped, classes of different datasets
never merged, :func:`global_class_ids`). :func:`fit_multi_dataset` trains with Smooth-AP (no
classifier) on the training engine: 15 epochs, Adam (lr 1e-4, beta1 = 0.5), constant for 10 epochs
then linear decay over 5 (the author's code). Evaluation is in :mod:`rank_lab.fewshot.classify`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from rank_lab._validation import (
    check_finite,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, StepResult, loop_options
from rank_lab.engine.schedule import Schedule
from rank_lab.fewshot.episodes import gather_images
from rank_lab.losses import SmoothAP
from rank_lab.utils import get_device

__all__ = ["global_class_ids", "MultiDatasetSampler", "fit_multi_dataset"]


def global_class_ids(dataset_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One id per ``(dataset, class)`` pair: classes of different datasets are never merged."""
    d = check_labels(dataset_ids, name="dataset_ids")
    y = check_labels(labels, d.shape[0], "labels")
    _, inv = torch.unique(torch.stack([d, y], 1), dim=0, return_inverse=True)
    return inv


class MultiDatasetSampler:
    """Batch sampler of §5.4: ``n_classes`` times dataset -> class -> ``k`` images (Fig. 5.15).

    Every batch holds ``n_classes * k`` indices, class by class (``k`` consecutive indices of one
    class, drawn without replacement). Distinct ``(dataset, class)`` pairs per batch by default.
    Batch ``b`` of epoch ``e`` depends only on ``(seed, e, b)``.

    Args:
        dataset_ids: ``(n,)`` dataset of every image.
        labels: ``(n,)`` class within its dataset.
        n_classes: ``N`` draws per batch (author's code: 32).
        k: images per draw (5).
        batches: batches per epoch (author's code: ``50000 // 32``).
        min_per_class: classes with fewer images are dropped (5 in the author's code; at least
            ``k``).
        distinct: never draw the same class twice in a batch.
        seed: random seed.

    Raises:
        ValueError: a dataset with no usable class, or fewer usable classes than ``n_classes``
            with ``distinct``.
    """

    def __init__(
        self,
        dataset_ids: torch.Tensor,
        labels: torch.Tensor,
        n_classes: int = 32,
        k: int = 5,
        batches: int = 1562,
        *,
        min_per_class: int = 5,
        distinct: bool = True,
        seed: int = 0,
    ) -> None:
        d = check_labels(dataset_ids, name="dataset_ids").cpu().numpy()
        y = check_labels(labels, d.shape[0], "labels").cpu().numpy()
        self.n_classes, self.k = (
            check_positive_int(n_classes, "n_classes"),
            check_positive_int(k, "k"),
        )
        self.batches = check_positive_int(batches, "batches")
        self.min_per_class = max(check_nonneg_int(min_per_class, "min_per_class"), self.k)
        self.distinct, self.seed, self.epoch = bool(distinct), int(seed), 0
        self.datasets = sorted(int(v) for v in np.unique(d))
        self.members: dict[int, list[np.ndarray]] = {}
        for ds in self.datasets:
            groups = [np.flatnonzero((d == ds) & (y == c)) for c in np.unique(y[d == ds])]
            groups = [g for g in groups if len(g) >= self.min_per_class]
            if not groups:
                raise ValueError(
                    f"dataset {ds} has no class with at least {self.min_per_class} images "
                    f"(k={self.k} images per draw, min_per_class={int(min_per_class)})"
                )
            self.members[ds] = groups
        n_usable = sum(len(v) for v in self.members.values())
        if self.distinct and n_usable < self.n_classes:
            raise ValueError(
                f"n_classes={n_classes} distinct classes per batch but only {n_usable} usable "
                "classes"
            )

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches :meth:`__iter__` yields."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.batches

    def batch(self, b: int) -> list[int]:
        """Batch ``b`` of the current epoch: ``n_classes * k`` indices, class by class."""
        rng = np.random.default_rng([self.seed, self.epoch, int(b)])
        seen: set[tuple[int, int]] = set()
        out = []
        while len(out) < self.n_classes:
            ds = self.datasets[int(rng.integers(len(self.datasets)))]
            c = int(rng.integers(len(self.members[ds])))
            if self.distinct and (ds, c) in seen:
                if len(seen) >= sum(len(self.members[x]) for x in self.datasets):
                    raise RuntimeError(
                        "no class left to draw"
                    )  # pragma: no cover - guarded in __init__
                continue
            seen.add((ds, c))
            out.append(rng.choice(self.members[ds][c], self.k, replace=False))
        return np.concatenate(out).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for b in range(self.batches):
            yield self.batch(b)


def fit_multi_dataset(
    model: torch.nn.Module,
    images: object,
    dataset_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    n_classes: int = 32,
    k: int = 5,
    epochs: int = 15,
    batches_per_epoch: int = 1562,
    lr: float = 1e-4,
    betas: tuple[float, float] = (0.5, 0.999),
    niter: int = 10,
    niter_decay: int = 5,
    tau: float = 0.01,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    seed: int = 0,
    device: object = None,
    engine: EngineConfig | None = None,
) -> list[float]:
    """Multi-dataset Smooth-AP training of §5.4 on the training engine (resumable per epoch).

    The learning rate follows the author's code: constant for ``niter`` epochs, then a linear decay
    by ``1 / (niter_decay + 1)`` per epoch (``schedule="linear"`` of :func:`rank_lab.engine.lr_at`).

    Args:
        model: maps images ``(B, C, H, W)`` to descriptors ``(B, d)`` (e.g.
            :func:`rank_lab.models.build_model` with GeM and a 512-d projection).
        images: ``(n, C, H, W)`` tensor or a dataset of ``(image, label)``.
        dataset_ids, labels: ``(n,)`` dataset and within-dataset class of each image.
        n_classes, k, batches_per_epoch: see :class:`MultiDatasetSampler`.
        epochs, lr, betas, niter, niter_decay: schedule (author's code: 15 = 10 + 5, 1e-4, 0.5).
        tau: Smooth-AP temperature.
        transform: batch augmentation.
        seed, device: as usual.
        engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`: a
            ``checkpoint`` file written every ``checkpoint_every`` epochs and resumed from, a run
            may be resumed with more epochs; ``progress``, ``amp``, ``grad_clip``).

    Returns:
        Mean loss of every epoch.

    Raises:
        TypeError, ValueError: ``epochs`` not a positive int, ``lr`` not a finite positive number,
            ``niter`` / ``niter_decay`` not ints >= 0, tensor ``images`` not a finite floating batch
            of one image per label, and the errors of :class:`MultiDatasetSampler`.
        NonFiniteTrainingError: a NaN/inf loss or gradient (no update applied).
    """
    options = loop_options(engine, epochs=epochs, desc="multi-dataset")
    epochs = options.epochs
    lr = check_float(lr, "lr", low=0.0, low_open=True)
    niter, niter_decay = (
        check_nonneg_int(niter, "niter"),
        check_nonneg_int(niter_decay, "niter_decay"),
    )
    dev = get_device(device)
    model.to(dev)
    y = global_class_ids(dataset_ids, labels)
    # checked once here: the engine defers the model's own checks
    if isinstance(images, torch.Tensor):
        if images.ndim == 0 or images.shape[0] != y.shape[0]:
            raise ValueError(
                f"images must hold one image per label ({y.shape[0]}), got shape "
                f"{tuple(images.shape)}"
            )
        if images.is_floating_point():
            check_finite(images, "images")
    sampler = MultiDatasetSampler(dataset_ids, labels, n_classes, k, batches_per_epoch, seed=seed)
    opt = build_optimizer([p for p in model.parameters() if p.requires_grad], lr=lr, betas=betas)
    loss_fn = SmoothAP(tau=tau)
    steps = len(sampler)
    run = Engine(
        model,
        opt,
        options,
        device=dev,
        schedule=Schedule(
            "linear", epochs * steps, hold_steps=niter, decay_steps=niter_decay, step_unit=steps
        ),
        run_key={
            "n_classes": n_classes,
            "k": k,
            "batches_per_epoch": steps,
            "lr": lr,
            "betas": list(betas),
            "tau": tau,
            "seed": seed,
            "n_items": int(y.shape[0]),
        },
        trained_on=(images, dataset_ids, labels, transform),
    )

    def start(epoch: int) -> None:
        sampler.set_epoch(epoch)
        model.train()

    def step(idx: list[int]) -> torch.Tensor:
        x = gather_images(images, idx).to(dev)
        if transform is not None:
            x = transform(x)
        return loss_fn(model(x), y[idx].to(dev))

    def end(epoch: int, results: list[StepResult]) -> None:
        total = 0.0
        for r in results:
            total += r.loss
        run.history.append(total / steps)

    run.run(
        step,
        lambda epoch: (Batch(idx, indices=idx) for idx in sampler),
        steps_per_epoch=steps,
        on_epoch_start=start,
        on_epoch_end=end,
    )
    model.eval()
    return run.history
