"""Very large batches by multistage back-propagation (Section 5.3.2 of the Patel thesis, after
Revaud et al. 2019).

A listwise loss such as RS@k needs the whole batch at once (ranks are defined over the batch), but
the backbone's activations for 4,000 images do not fit in memory. The loss, however, only touches
the ``(B, d)`` embeddings, so the gradient can be split:

1. **Embed** the batch chunk by chunk under ``torch.no_grad()``: only the embeddings are kept.
2. **Loss**: compute the loss on the detached embeddings (which require grad) and back-propagate it
   to them: ``G = dL/dE`` of shape ``(B, d)``. Parameters of the loss itself (prototypes, a
   memory) receive their gradients here.
3. **Re-embed** each chunk *with* a graph and back-propagate the stored rows ``G[chunk]``
   (``E_chunk.backward(G_chunk)``); parameter gradients accumulate over the chunks.

By the chain rule the result equals the gradient of a single pass, provided that the second forward
reproduces the first exactly (tested in ``tests/train/test_multistage.py`` to 1e-10 in float64).
Peak memory is the activations of one chunk plus ``O(B d)`` (plus whatever the loss needs).

Determinism (what this module does and what it requires):

* **Random layers** (dropout, drop-path, stochastic depth): the CPU and CUDA RNG states are saved
  before each chunk of pass 1 and restored before the same chunk of pass 2
  (``restore_rng=True``), so both passes draw the same masks. Afterwards the RNG is left where a
  single forward + loss would have left it.
* **BatchNorm**: in training mode it normalises with per-chunk statistics. Pass 2 sees the same
  chunks, so passes 1 and 2 agree, but the result differs from a single full-batch pass (whose
  statistics cover the whole batch). The thesis freezes BN (eval mode, affine parameters not
  trained): :func:`lock_batchnorm`. Running statistics are restored after pass 2, so a
  training-mode BN updates them once per step, not twice.
* **The inputs** must be the same tensor in both passes (augment once, before calling).
* Non-deterministic GPU kernels can make the passes differ in the last bits; ``check_consistency``
  compares the recomputed embeddings with the stored ones and raises if they disagree.

With DistributedDataParallel: pass the DDP wrapper as ``model`` and a ``loss_fn`` that all-gathers
the embeddings (:func:`rank_lab.train.distributed.collectives.all_gather_with_grad`). Pass 3 then
runs every chunk but the last under ``model.no_sync()``, so DDP all-reduces the gradients once per
step, after they are fully accumulated (every rank must have the same number of chunks).

The official RS@k code cuts the graph with ``copy.copy`` into a pre-allocated tensor, which is
implicit; here pass 1 runs under an explicit ``torch.no_grad()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rank_lab._progress import tqdm
from rank_lab._validation import check_finite_input, check_float, check_module, check_positive_int
from rank_lab.data.samplers import MPerClassSampler
from rank_lab.engine.loop import Engine, one_batch
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, loop_options
from rank_lab.train.data import SamplerStream
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "MultistageOutput",
    "embed_in_chunks",
    "multistage_backward",
    "multistage_step",
    "fit_multistage",
]


def _chunks(n: int, chunk_size: int) -> Iterator[slice]:
    for a in range(0, n, chunk_size):
        yield slice(a, min(a + chunk_size, n))


def _check_inputs(
    inputs: torch.Tensor, labels: object = None, trusted: bool = False
) -> torch.Tensor | None:
    """A non-empty batch on dim 0, finite when floating (integer inputs such as token ids go to the
    model as they are: whether it takes them is the model's business); ``labels`` (returned as a
    tensor) must have one row per input."""
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(
            f"inputs must be a tensor with the batch on dim 0, got {type(inputs).__name__}"
        )
    if inputs.ndim == 0 or inputs.shape[0] == 0:
        raise ValueError(
            f"inputs must hold a non-empty batch on dim 0, got shape {tuple(inputs.shape)}"
        )
    if inputs.is_floating_point():
        check_finite_input(inputs, "inputs", trusted=trusted)
    if labels is None:
        return None
    labels = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(labels)
    if labels.ndim == 0 or labels.shape[0] != inputs.shape[0]:
        raise ValueError(
            f"labels has {labels.shape[0] if labels.ndim else 0} rows but inputs has "
            f"{inputs.shape[0]}"
        )
    return labels


def _forward(model: nn.Module, inputs: torch.Tensor, sl: slice, dev: torch.device) -> torch.Tensor:
    """``model(inputs[sl])``; a ``ValueError`` / ``TypeError`` of the model (a shape or dtype it
    refuses) is re-raised naming the chunk of ``inputs`` it came from."""
    try:
        return model(inputs[sl].to(dev, non_blocking=True))
    except (ValueError, TypeError) as exc:
        if type(exc) in (ValueError, TypeError):  # not subclasses, whose constructors differ
            raise type(exc)(f"model(inputs[{sl.start}:{sl.stop}]) raised: {exc}") from exc
        raise


def embed_in_chunks(
    model: nn.Module,
    inputs: torch.Tensor,
    chunk_size: int = 200,
    *,
    device: DeviceLike = None,
    progress: bool = False,
) -> torch.Tensor:
    """Embed a large batch chunk by chunk without a graph (pass 1; also handy for evaluation).

    Args:
        model: maps ``(c, ...)`` inputs to ``(c, d)`` embeddings.
        inputs: ``(B, ...)`` batch, on any device (chunks are moved to ``device``).
        chunk_size: items per forward.
        device: compute device (default: the model's device).
        progress: show a tqdm bar.

    Returns:
        ``(B, d)`` embeddings on ``device``.

    Raises:
        TypeError, ValueError: ``inputs`` not a non-empty finite batch, ``chunk_size`` not a
            positive int; an error of the model on a chunk, re-raised naming the chunk of
            ``inputs``.
    """
    check_module(model, "model")
    _check_inputs(inputs)
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    dev = _model_device(model) if device is None else get_device(device)
    out = []
    it = list(_chunks(inputs.shape[0], chunk_size))
    if progress:
        it = tqdm(it, desc="embed", leave=False)
    with torch.no_grad():
        for sl in it:
            out.append(_forward(model, inputs, sl, dev))
    return torch.cat(out)


def _model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def _rng_state(dev: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], dev: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], dev)


@dataclass
class MultistageOutput:
    """Result of :func:`multistage_backward`.

    Attributes:
        loss: the detached scalar loss.
        embeddings: ``(B, d)`` detached embeddings of pass 1.
        embedding_grad: ``(B, d)`` gradient ``dL/dE`` that was back-propagated in pass 3.
    """

    loss: torch.Tensor
    embeddings: torch.Tensor
    embedding_grad: torch.Tensor


def multistage_backward(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    chunk_size: int = 200,
    device: DeviceLike = None,
    restore_rng: bool = True,
    check_consistency: bool = False,
    atol: float = 1e-5,
    progress: bool = False,
    trusted: bool = False,
) -> MultistageOutput:
    """Back-propagate ``loss_fn(model(inputs), labels)`` through ``model`` one chunk at a time.

    Multistage back-propagation (Section 5.3.2 of the Patel thesis): parameter gradients are
    *accumulated* into ``.grad`` (call ``optimizer.zero_grad()`` first) and equal those of
    ``loss_fn(model(inputs), labels).backward()`` whenever the model's forward does not couple the
    items of a batch (frozen BN, see the module docstring).

    Args:
        model: maps ``(c, ...)`` inputs to ``(c, d)`` embeddings (e.g. backbone + recall head).
        inputs: ``(B, ...)`` batch on any device (each chunk is moved to ``device``).
        labels: ``(B,)`` (or ``(B, L)``) labels, passed to ``loss_fn`` as they are (moved to
            ``device``).
        loss_fn: ``loss_fn(embeddings (B, d), labels) -> scalar``; its own parameters get their
            gradients too.
        chunk_size: items per forward (the official code uses 200 for ResNet-50 / ViT-B/32).
        device: compute device (default: the model's device).
        restore_rng: replay each chunk's RNG state in pass 3 (dropout etc.).
        check_consistency: compare the re-computed embeddings with pass 1 and raise on mismatch.
        atol: tolerance of that comparison.
        progress: show tqdm bars.
        trusted: skip the finite check of ``inputs`` (a caller whose numerical guard checks the
            loss, such as a step of the training engine: see
            :func:`~rank_lab._validation.trusted_inputs`).

    Returns:
        :class:`MultistageOutput` (loss, embeddings, their gradient).

    Raises:
        TypeError, ValueError: ``inputs`` not a non-empty finite batch, ``labels`` with another
            number of rows, ``chunk_size`` not a positive int, ``atol`` not a finite number >= 0,
            a loss that is not a finite scalar; an error of the model on a chunk, re-raised naming
            the chunk of ``inputs``.
        RuntimeError: with ``check_consistency``, when pass 3 does not reproduce pass 1.
    """
    check_module(model, "model")
    labels = _check_inputs(inputs, labels, trusted)
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    atol = check_float(atol, "atol", low=0.0)
    dev = _model_device(model) if device is None else get_device(device)
    slices = list(_chunks(inputs.shape[0], chunk_size))

    # pass 1: embeddings only, remembering each chunk's RNG state
    states, parts = [], []
    with torch.no_grad():
        for sl in _maybe_tqdm(slices, progress, "multistage: embed"):
            states.append(_rng_state(dev))
            parts.append(_forward(model, inputs, sl, dev))
    emb = torch.cat(parts).detach().requires_grad_(True)
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}

    # pass 2: the loss and its gradient w.r.t. the embeddings (and the loss' own parameters)
    loss = loss_fn(emb, labels.to(dev))
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("loss_fn must return a scalar tensor")
    if not bool(torch.isfinite(loss.detach())):
        raise ValueError(f"loss_fn returned a non-finite loss ({float(loss)})")
    loss.backward()
    grad = emb.grad if emb.grad is not None else torch.zeros_like(emb)
    after_loss = _rng_state(dev)

    # pass 3: recompute each chunk with a graph and push the stored gradient rows through it
    no_sync = getattr(model, "no_sync", None)  # DDP: all-reduce once, after the last chunk
    for i, (sl, state) in enumerate(
        zip(_maybe_tqdm(slices, progress, "multistage: backward"), states, strict=True)
    ):
        if restore_rng:
            _set_rng_state(state, dev)
        with no_sync() if no_sync is not None and i < len(slices) - 1 else contextlib.nullcontext():
            out = model(inputs[sl].to(dev, non_blocking=True))
            if check_consistency and not torch.allclose(
                out.detach(), emb.detach()[sl], atol=atol, rtol=0
            ):
                err = float((out.detach() - emb.detach()[sl]).abs().max())
                raise RuntimeError(
                    f"multistage: the second forward of chunk {sl.start}:{sl.stop} differs from "
                    f"the first by {err:.3g}; freeze BatchNorm, keep restore_rng=True, and use "
                    "deterministic kernels"
                )
            out.backward(grad[sl])
    if restore_rng:
        _set_rng_state(after_loss, dev)
    with torch.no_grad():  # training-mode BN: count one update per step, not two
        for name, b in model.named_buffers():
            if name in buffers:
                b.copy_(buffers[name])
    return MultistageOutput(
        loss=loss.detach(), embeddings=emb.detach(), embedding_grad=grad.detach()
    )


def _maybe_tqdm(items: list, show: bool, desc: str) -> list:
    if not show:
        return items
    return tqdm(items, desc=desc, leave=False)


def multistage_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    chunk_size: int = 200,
    device: DeviceLike = None,
    restore_rng: bool = True,
    progress: bool = False,
) -> float:
    """One optimisation step with multistage back-propagation, on the training engine.

    The step of :func:`fit_multistage` for a caller that drives its own loop: one
    :meth:`~rank_lab.engine.loop.Engine.train_step` (zero_grad, the chunked backward, the NaN guard
    on the loss and the gradients, the optimiser step) with the engine's default options.

    Args:
        model, inputs, labels, loss_fn, chunk_size, device, restore_rng, progress: as in
            :func:`multistage_backward`.
        optimizer: holds the model's (and the loss') parameters.

    Returns:
        The loss value (float).

    Raises:
        NonFiniteTrainingError: a NaN/inf loss or gradient (no update applied).
    """
    check_module(model, "model")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    labels = _check_inputs(inputs, labels)  # checked once here; the engine's guard checks the loss
    run = Engine(
        model,
        optimizer,
        EngineConfig(desc="multistage"),
        device=_model_device(model) if device is None else device,
        autocast=False,
    )
    step = _engine_step(
        run,
        model,
        loss_fn,
        chunk_size=chunk_size,
        device=device,
        restore_rng=restore_rng,
        progress=progress,
        trusted=True,
    )
    return run.train_step(step, Batch((inputs, labels))).loss


def _engine_step(
    run: Engine,
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    **kwargs: Any,
) -> Callable[[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The engine's step function of multistage back-propagation,
    ``step((inputs, labels)) -> loss``.

    The loss is checked by the engine's guard before its scaled gradient is pushed back through
    the chunks (:func:`multistage_backward` with ``kwargs``), which then tell the engine that the
    step back-propagated itself.
    """

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        seen: list[torch.Tensor] = []

        def guarded(emb: torch.Tensor, y_: torch.Tensor) -> torch.Tensor:
            seen.append(loss_fn(emb, y_))
            run.check_loss(seen[-1])
            return run.scaler.scale(seen[-1])

        with run.autocast():
            multistage_backward(model, x, y, guarded, **kwargs)
        run.mark_backward_done()
        return seen[-1].detach()

    return step


def fit_multistage(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    batch_size: int,
    m_per_class: int = 4,
    steps: int = 100,
    chunk_size: int = 200,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    device: DeviceLike = None,
    seed: int = 0,
    engine: EngineConfig | None = None,
) -> list[float]:
    """Train with very large m-per-class batches by multistage back-propagation (Algorithm 3 with
    the large-batch implementation of Section 5.3.2 of the Patel thesis), on the training engine.

    Each step draws a batch of ``batch_size`` items (``batch_size // m_per_class`` classes x
    ``m_per_class`` images, :class:`rank_lab.data.MPerClassSampler`) and back-propagates it with
    :func:`multistage_backward`, so the memory is that of one ``chunk_size`` chunk whatever the
    batch.

    Args:
        model: embedding network; loss_fn: ``loss(embeddings, labels)`` (e.g. RS@k).
        inputs: ``(N, ...)`` training inputs; labels: ``(N,)``.
        batch_size, m_per_class: batch shape (``batch_size`` a multiple of ``m_per_class``).
        steps: optimisation steps.
        chunk_size: items per forward.
        optimizer: default Adam over the model's and the loss' parameters with ``lr``.
        device: compute device (default: the model's).
        seed: sampler seed.
        engine: the run's options (:class:`rank_lab.engine.options.EngineConfig`: checkpoint file,
            ``checkpoint_every`` in steps, resume, progress, mixed precision, gradient clipping).

    Returns:
        The loss of every step (including those of a resumed run).

    Raises:
        TypeError, ValueError: ``inputs`` not a non-empty finite batch with one row per label,
            ``steps`` not a positive int, ``lr`` not a finite positive number, and the errors of
            :class:`~rank_lab.data.MPerClassSampler` and :func:`multistage_backward`.
        NonFiniteTrainingError: a NaN/inf loss or gradient (no update applied).
    """
    options = loop_options(
        engine, epochs=steps, desc=f"multistage B={batch_size}", unit="step", length="steps"
    )
    steps = options.epochs
    batch_size, m_per_class = (
        check_positive_int(batch_size, "batch_size"),
        check_positive_int(m_per_class, "m_per_class"),
    )
    check_module(model, "model")
    labels = _check_inputs(inputs, labels)
    inputs = inputs.detach()  # training data: a requires-grad tensor would chain every step's graph
    lr = check_float(lr, "lr", low=0.0, low_open=True)
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    if optimizer is None:
        params = list(model.parameters())
        if isinstance(loss_fn, nn.Module):
            params += list(loss_fn.parameters())
        optimizer = build_optimizer([p for p in params if p.requires_grad], "adam", lr=lr)
    sampler = MPerClassSampler(
        labels, m=m_per_class, batch_size=batch_size, length=steps * batch_size, seed=seed
    )
    stream = SamplerStream(sampler)
    modules = {"model": model, **({"loss": loss_fn} if isinstance(loss_fn, nn.Module) else {})}
    run = Engine(
        modules,
        optimizer,
        options,
        device=_model_device(model) if device is None else device,
        autocast=False,
        run_key={
            "batch_size": batch_size,
            "m_per_class": m_per_class,
            "chunk_size": chunk_size,
            "seed": seed,
            "sampler_length": steps * batch_size,
            "n_items": int(labels.shape[0]),
            "lr": lr,
        },
        trained_on=(inputs, labels),
    )
    # inputs were checked once above; the engine's guard checks each step's loss
    step = _engine_step(run, model, loss_fn, chunk_size=chunk_size, device=device, trusted=True)

    model.train()
    run.run(
        lambda idx: step((inputs[idx], labels[idx])),
        lambda s: one_batch(Batch(torch.as_tensor(stream(s)), indices=stream.last)),
        steps_per_epoch=1,
        on_epoch_end=lambda s, res: run.history.append(res[0].loss),
    )
    return run.history
