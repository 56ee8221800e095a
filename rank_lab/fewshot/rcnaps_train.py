"""Episodic training of rCNAPS and adapted inference (Gominski thesis §4.3.2-4.3.3, Figs. 4.8-4.9).

* :func:`fit_rcnaps` -- one target class per episode (:class:`rank_lab.fewshot.EpisodeSampler`):
  the support adapts the extractor, the batch of ``N * m`` images is described and the
  class-specific Smooth-AP (eq. 4.13, :func:`rank_lab.fewshot.class_specific_smooth_ap`) of the
  ``m`` target-class queries is minimised (thesis ``k = 5``, ``m = 10``, ``N = 6``). Adam,
  learning rate 1e-4, ``tau = 0.01`` (not given by the thesis; the author's chapter-5 code).
  ``mode="plain"`` trains the unadapted network with the usual Smooth-AP (eq. 4.12) on the same
  batches. Runs on the training engine (:mod:`rank_lab.engine.loop`); resumable from a checkpoint
  (episode ``i`` depends only on ``(seed, i)``).
* :func:`rcnaps_describe` -- the ``describe(support)`` function of the few-shot retrieval protocol
  (:func:`rank_lab.fewshot.evaluate_fewshot_retrieval`): the base described with the model
  adapted to one support.
* :func:`rcnaps_describe_tasks` -- the base described under ``T`` adaptations in mixed batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from rank_lab._validation import check_float, check_input, check_labels, check_positive_int
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, loop_options
from rank_lab.fewshot.episodes import Episode, EpisodeSampler, gather_images
from rank_lab.fewshot.film import select_film_params
from rank_lab.fewshot.rcnaps import RCNAPS, class_specific_smooth_ap
from rank_lab.losses import SmoothAP
from rank_lab.utils import get_device

__all__ = ["fit_rcnaps", "rcnaps_describe", "rcnaps_describe_tasks"]


def _check_images(images: object, name: str, n: int | None = None, name_n: str = "") -> None:
    """A tensor of images must be a finite floating ``(n, C, H, W)`` batch; a dataset needs a length
    (its items are checked by the model's forward). With ``n``, the lengths must agree."""
    if isinstance(images, torch.Tensor):
        check_input(images, name, 4, shape="(n, C, H, W)", allow_empty=False)
        size = images.shape[0]
    else:
        try:
            size = len(images)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"{name} must be a tensor (n, C, H, W) or a dataset of (image, label), got "
                f"{type(images).__name__}"
            ) from None
    if n is not None and size != n:
        raise ValueError(f"{name} has {size} items but {name_n} has {n}")


def fit_rcnaps(
    model: RCNAPS,
    images: object,
    labels: torch.Tensor,
    *,
    episodes: int = 1000,
    k: int = 5,
    m: int = 10,
    n_classes: int = 6,
    mode: str = "adapted",
    lr: float = 1e-4,
    tau: float = 0.01,
    film_l2: float = 0.0,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    groups: torch.Tensor | None = None,
    seed: int = 0,
    device: object = None,
    engine: EngineConfig | None = None,
) -> list[float]:
    """Episodic training of rCNAPS (Fig. 4.8) on the training engine, resumable from a checkpoint.

    Args:
        model: an :class:`RCNAPS`.
        images: ``(n, C, H, W)`` training images or a dataset of ``(image, label)``.
        labels: ``(n,)`` classes.
        episodes: training iterations.
        k, m, n_classes: support size, images per class, classes per batch (thesis 5, 10, 6).
        mode: ``"adapted"`` (eq. 4.13, target-class queries, extractor adapted to the support)
            or ``"plain"`` (eq. 4.12 on the unadapted network: every query; trains the backbone).
        lr: Adam learning rate.
        tau: Smooth-AP temperature.
        film_l2: weight of the CNAPS-code L2 term on the FiLM regularisers (0 = the thesis' loss).
        transform: batch augmentation applied to support and batch images.
        groups: ``(n,)`` group of every item (see :class:`~rank_lab.fewshot.EpisodeSampler`):
            each episode takes its classes from one group.
        seed: seed of the episodes.
        device: training device (CUDA when present by default).
        engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`): the
            ``checkpoint`` file, saved every ``checkpoint_every`` episodes and at the end, and
            resumed from when it exists (``resume``; a run may be resumed with more episodes),
            ``progress``, ``amp``, ``grad_clip``.

    Returns:
        The loss of every episode (including those of a resumed run).

    Raises:
        TypeError, ValueError: ``mode`` unknown; ``lr`` or ``tau`` not a finite positive number;
            ``film_l2`` not a finite number >= 0; ``images`` and ``labels`` of different lengths;
            tensor ``images`` not a finite floating ``(n, C, H, W)`` batch; the errors of
            :class:`~rank_lab.fewshot.EpisodeSampler`.
        NonFiniteTrainingError: a NaN/inf loss or gradient (no update applied).
    """
    if mode not in ("adapted", "plain"):
        raise ValueError(f"mode must be 'adapted' or 'plain', got {mode!r}")
    lr, tau = (
        check_float(lr, "lr", low=0.0, low_open=True),
        check_float(tau, "tau", low=0.0, low_open=True),
    )
    film_l2 = check_float(film_l2, "film_l2", low=0.0)
    options = loop_options(
        engine, epochs=episodes, desc=f"rCNAPS ({mode})", unit="step", length="episodes"
    )
    labels = check_labels(labels, name="labels")
    _check_images(images, "images", labels.shape[0], "labels")
    dev = get_device(device)
    model.to(dev)
    prev = model.train_backbone
    if mode == "plain":
        model.set_train_backbone(True)
        params = [p for n, p in model.named_parameters() if n.startswith(("extractor.", "pool."))]
    else:
        params = [p for p in model.parameters() if p.requires_grad]
    sampler = EpisodeSampler(labels, k, m, n_classes, episodes, seed, groups=groups)
    run = Engine(
        model,
        build_optimizer(params, lr=lr),
        options,
        device=dev,
        run_key={
            "mode": mode,
            "k": k,
            "m": m,
            "n_classes": n_classes,
            "lr": lr,
            "tau": tau,
            "film_l2": film_l2,
            "seed": seed,
            "groups": len(sampler.groups) if sampler.grouped else None,
            "n_items": int(labels.shape[0]),
        },
        trained_on=(images, labels, transform),
    )
    plain_loss = SmoothAP(tau=tau)

    def step(ep: Episode) -> torch.Tensor:
        x = gather_images(images, ep.batch).to(dev)
        if transform is not None:
            x = transform(x)
        y = ep.batch_labels.to(dev)
        if mode == "plain":
            return plain_loss(model(x), y)
        s = gather_images(images, ep.support).to(dev)
        if transform is not None:
            s = transform(s)
        loss = class_specific_smooth_ap(model(x, s), y, ep.target, tau=tau)
        if film_l2 > 0:
            loss = loss + film_l2 * model.adaptation.regularization_term()
        return loss

    def episode(i: int) -> Iterator[Batch]:
        ep = sampler.episode(i)
        yield Batch(ep, indices=ep.batch)

    model.train()
    run.run(
        step,
        episode,
        steps_per_epoch=1,
        on_epoch_end=lambda i, res: run.history.append(res[0].loss),
    )
    if mode == "plain":
        model.set_train_backbone(prev)
    model.eval()
    return run.history


@torch.no_grad()
def rcnaps_describe(
    model: RCNAPS, images: object, *, batch_size: int = 256, device: object = None
) -> Callable[[torch.Tensor | None], torch.Tensor]:
    """A ``describe(support)`` function for :func:`rank_lab.fewshot.evaluate_fewshot_retrieval`.

    ``describe(support)`` adapts ``model`` to ``support (k, C, H, W)`` once and returns the
    ``(n, D)`` descriptors of all ``images`` (``support=None``: unadapted, setup C).

    Raises:
        TypeError, ValueError: ``batch_size`` not a positive int; tensor ``images`` not a finite
            floating ``(n, C, H, W)`` batch.
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    _check_images(images, "images")
    dev = get_device(device)
    model.to(dev).eval()
    n = images.shape[0] if isinstance(images, torch.Tensor) else len(images)  # type: ignore[arg-type]

    @torch.no_grad()
    def describe(support: torch.Tensor | None) -> torch.Tensor:
        params = None if support is None else model.film_params(support.to(dev))
        out = []
        for a in range(0, n, batch_size):
            x = gather_images(images, torch.arange(a, min(a + batch_size, n))).to(dev)
            out.append(model(x, params=params).float().cpu())
        return torch.cat(out)

    return describe


@torch.no_grad()
def rcnaps_describe_tasks(
    model: RCNAPS,
    images: torch.Tensor,
    supports: torch.Tensor,
    *,
    batch_size: int = 256,
    device: object = None,
) -> torch.Tensor:
    """Describe a base under ``T`` adaptations at once: ``(T, n, D)`` descriptors.

    One forward pass mixes the ``T`` tasks (per-image FiLM rows, :func:`select_film_params`)
    instead of one pass per class: the same arithmetic, but larger batches keep a GPU busy when
    ``n`` is small. Equal to calling ``model(images, supports[t])`` for each ``t``.

    Args:
        model: an :class:`RCNAPS`.
        images: ``(n, C, H, W)`` base images.
        supports: ``(T, k, C, H, W)`` one support set per task.
        batch_size: images per forward pass (all tasks together).
        device: compute device.

    Raises:
        TypeError, ValueError: ``images`` not a finite floating ``(n, C, H, W)`` batch with
            ``n >= 1``, ``supports`` not a finite floating ``(T, k, C, H, W)`` with ``T, k >= 1``
            and the images' ``(C, H, W)``, ``batch_size`` not a positive int.
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    images = check_input(images, "images", 4, shape="(n, C, H, W)", like=model, allow_empty=False)
    supports = check_input(
        supports, "supports", 5, shape="(T, k, C, H, W)", like=model, allow_empty=False
    )
    if supports.shape[1] == 0 or supports.shape[2:] != images.shape[1:]:
        raise ValueError(
            f"supports must have shape (T, k >= 1, {', '.join(map(str, images.shape[1:]))}) like "
            f"the images, got {tuple(supports.shape)}"
        )
    dev = get_device(device)
    model.to(dev).eval()
    t, n = supports.shape[0], images.shape[0]
    params = model.film_params(supports.to(dev))  # tensors (T, C)
    task = torch.arange(t, device=dev).repeat_interleave(n)  # (T n,) task of each row
    item = torch.arange(n, device=dev).repeat(t)  # (T n,) image of each row
    out = torch.empty(t * n, model.out_dim)
    for a in range(0, t * n, batch_size):
        rows = slice(a, min(a + batch_size, t * n))
        x = images[item[rows].cpu()].to(dev)
        out[rows] = model(x, params=select_film_params(params, task[rows])).float().cpu()
    return out.view(t, n, -1)
