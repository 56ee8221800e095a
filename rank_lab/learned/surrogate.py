"""Learned surrogates (LS) of non-differentiable metrics via a deep embedding (Patel thesis, Ch. 3).

A decomposable, lower-is-better metric ``e(z, y)`` (edit distance, 1 - IoU ...) is approximated by
the Euclidean distance in a learned embedding (eq. 3.3)::

    e_hat(z, y) = || h_Phi(z) - h_Phi(y) ||_2

``h_Phi`` is trained with the squared error to the true metric plus a gradient penalty that keeps
``||d e_hat / d z||_2`` close to 1 (eq. 3.6; eq. 4.5 with weights ``w1, w2``)::

    loss(z, y) = w1 (e_hat(z, y) - e(z, y))^2 + w2 (||d e_hat(z, y) / d z||_2 - 1)^2

and the task model ``f_Theta`` is post-tuned by minimising ``e_hat`` (eq. 3.2). Surrogate and model
are trained alternately (Algorithm 1, :class:`SurrogateTrainer`); the surrogate's training pairs
come from a random generator R (*global*), from the model's own predictions (*local*), or both
(*local-global*, the thesis' choice). :mod:`rank_lab.learned.feds` adds the filtering of Ch. 4.

A task plugs into the trainer through the small :class:`SurrogateTask` interface; the book's two
tasks are :class:`rank_lab.learned.edit_task.EditDistanceTask` (LS-ED, with :class:`CharCNN`) and
:class:`rank_lab.learned.boxes.BoxIoUTask` (LS-IoU, with :class:`BoxMLP`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_float,
    check_input_batch,
    check_nonnegative_int,
    check_positive_int,
)
from rank_lab.learned.embeddings import BoxMLP, CharCNN
from rank_lab.utils import get_device

__all__ = [
    "EmbeddingSurrogate",
    "CharCNN",
    "BoxMLP",
    "surrogate_loss",
    "SurrogateTask",
    "LSConfig",
    "SOURCES",
    "ls_model_loss",
    "SurrogateTrainer",
    "evaluate_surrogate",
]

SOURCES = ("global", "local", "local_global")


class EmbeddingSurrogate(nn.Module):
    """``e_hat(z, y) = ||h(z) - h(y)||_2`` (eq. 3.3 / 4.2 of the Patel thesis).

    The *same* network embeds the prediction and the ground truth, so both must share a shape and
    an encoding (a softmax and a one-hot, two 6-d box codes ...).

    Args:
        embedding: the network ``h_Phi`` mapping ``(B, *shape) -> (B, D)``.
        eps: added under the square root so that the distance is differentiable at ``z = y``.
    """

    def __init__(self, embedding: nn.Module, eps: float = 1e-12) -> None:
        super().__init__()
        if not isinstance(embedding, nn.Module):
            raise TypeError(f"embedding must be an nn.Module, got {type(embedding).__name__}")
        self.embedding = embedding
        self.eps = check_float(eps, "eps", low=0, low_open=True)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Surrogate values ``(B,)`` for predictions ``z`` and ground truths ``y`` of equal shape.

        Raises:
            ValueError, TypeError: ``z`` or ``y`` is not a finite floating ``(B, *shape)`` batch
                (``B >= 1``), or their shapes differ. Float64 inputs are cast to the weights' dtype.
        """
        z, y = _check_pair(z, y, self)
        d = self.embedding(z) - self.embedding(y)
        return torch.sqrt((d * d).flatten(1).sum(1) + self.eps)


def _check_pair(z: object, y: object, dtype: torch.dtype | nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The input check of every surrogate entry point: ``z`` and ``y`` finite floating ``(B, *shape)``.

    Args:
        z: predictions ``(B, *shape)`` (at least 2-D, ``B >= 1``).
        y: ground truths of the same shape.
        dtype: cast both to this dtype, or to the dtype of this module's weights (``None``: keep).

    Returns:
        ``(z, y)``, cast (autograd kept).
    """
    for name, t in (("z", z), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ValueError(f"{name} must have shape (B, *shape) with at least 2 dims, got {tuple(t.shape)}")
    if z.shape != y.shape:  # type: ignore[union-attr]
        raise ValueError(f"z has shape {tuple(z.shape)} but y has shape {tuple(y.shape)}")  # type: ignore[union-attr]
    free = ("B",) + ("*",) * (z.ndim - 1)  # type: ignore[union-attr]
    return check_input_batch(z, "z", free, dtype=dtype), check_input_batch(y, "y", free, dtype=dtype)


def surrogate_loss(
    surrogate: EmbeddingSurrogate,
    z: torch.Tensor,
    y: torch.Tensor,
    e_true: torch.Tensor,
    *,
    grad_penalty: float = 0.1,
    fit_weight: float = 1.0,
    grad_target: float = 1.0,
    eps: float = 1e-12,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The surrogate's training loss, eq. 3.6 (eq. 4.5 with ``w1 = fit_weight, w2 = grad_penalty``).

    ``mean_b [ w1 (e_hat_b - e_b)^2 + w2 (||d e_hat_b / d z_b||_2 - 1)^2 ]``, the gradient norm taken
    per sample over the whole flattened prediction ``z_b`` (double back-propagation).

    Args:
        surrogate: the embedding surrogate.
        z: predictions ``(B, *shape)`` (detached here: only ``Phi`` is trained by this loss).
        y: ground truths in the same encoding.
        e_true: ``(B,)`` true metric values.
        grad_penalty: ``lambda`` of eq. 3.6 / ``w2`` of eq. 4.5 (0.1 in Ch. 4; Ch. 3 gives none).
        fit_weight: ``w1`` of eq. 4.5.
        grad_target: the gradient norm the penalty pulls towards: 1 in eq. 3.5 / 4.4 (default).
            The right scale depends on the units of ``z``: a metric that changes by ``k`` per
            unit of ``z`` cannot be fitted with gradients of norm 1 (e.g. ``1 - IoU`` of boxes in
            normalised image coordinates, where ``k`` is about 4). A book addition.
        eps: keeps the gradient norm differentiable at 0.

    Returns:
        The scalar loss and statistics ``{"fit", "gp", "l1", "grad_norm"}`` (floats).

    Raises:
        ValueError, TypeError: bad ``z`` / ``y`` (see :meth:`EmbeddingSurrogate.forward`), ``e_true`` not a finite
            ``(B,)`` tensor (integer values, e.g. edit distances, are accepted), or a weight out of
            range (``grad_penalty, grad_target >= 0``, ``fit_weight, eps > 0``, all finite).
    """
    if not callable(surrogate):
        raise TypeError(f"surrogate must be a module (z, y) -> (B,), got {type(surrogate).__name__}")
    z, y = _check_pair(z, y, surrogate if isinstance(surrogate, nn.Module) else None)
    grad_penalty = check_float(grad_penalty, "grad_penalty", low=0)
    fit_weight = check_float(fit_weight, "fit_weight", low=0, low_open=True)
    grad_target = check_float(grad_target, "grad_target", low=0)
    eps = check_float(eps, "eps", low=0, low_open=True)
    e_true = as_tensor(e_true, "e_true")
    if e_true.dtype == torch.bool or e_true.is_complex():
        raise TypeError(f"e_true must hold real metric values, got dtype {e_true.dtype}")
    e_true = e_true.detach().to(z.device, z.dtype)
    if e_true.shape != (z.shape[0],):
        raise ValueError(f"e_true must have shape ({z.shape[0]},) like z's batch, got {tuple(e_true.shape)}")
    check_finite(e_true, "e_true")
    z = z.detach().requires_grad_(True)
    e_hat = surrogate(z, y.detach())
    (g,) = torch.autograd.grad(e_hat.sum(), z, create_graph=grad_penalty > 0, retain_graph=True)
    gnorm = torch.sqrt((g * g).flatten(1).sum(1) + eps)
    fit = (e_hat - e_true) ** 2
    gp = (gnorm - grad_target) ** 2
    loss = fit_weight * fit.mean() + (grad_penalty * gp.mean() if grad_penalty > 0 else 0.0)
    stats = {
        "fit": float(fit.mean().detach()),
        "gp": float(gp.mean().detach()),
        "l1": float((e_hat - e_true).abs().mean().detach()),
        "grad_norm": float(gnorm.mean().detach()),
    }
    return loss, stats


class SurrogateTask:
    """What Algorithms 1 and 2 need from a task (data, model output, metric, generator).

    The base class of :class:`~rank_lab.learned.edit_task.EditDistanceTask` and
    :class:`~rank_lab.learned.boxes.BoxIoUTask`: its constructor checks what every task shares
    (``batch_size``, ``device``), and a subclass implements the five methods. The trainers only use
    the attributes and methods below, so any object that has them works too.

    Args:
        batch_size: training samples per step (a positive int).
        device: where batches are placed (default: CUDA when present).
    """

    def __init__(self, batch_size: int = 64, device: torch.device | str | None = None) -> None:
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.device = get_device(device)

    def sample_batch(self, gen: torch.Generator) -> Any:
        """A training batch ``(x, y) ~ P_D``."""
        raise NotImplementedError

    def predict(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """``z = f_Theta(x)`` in the surrogate's input encoding, differentiable, ``(B, *shape)``."""
        raise NotImplementedError

    def encode_target(self, z: torch.Tensor, batch: Any) -> torch.Tensor:
        """The ground truth in the same encoding as ``z`` (no gradient)."""
        raise NotImplementedError

    def metric(self, z: torch.Tensor, batch: Any) -> torch.Tensor:
        """The true metric ``e(z, y)`` of the decoded predictions, ``(B,)`` float, no gradient."""
        raise NotImplementedError

    def sample_global(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` pairs ``(z_r, y_r, e_r)`` from the random generator R."""
        raise NotImplementedError


def ls_model_loss(e_hat: torch.Tensor, e_true: torch.Tensor) -> torch.Tensor:
    """The LS model loss: the batch mean of ``e_hat`` (eq. 3.3 minimised, Algorithm 1 line 13).

    Args:
        e_hat: ``(B,)`` finite surrogate values (``B >= 1``).
        e_true: ``(B,)`` finite true metric values (unused by the loss; checked, integers accepted).

    Returns:
        The scalar ``mean(e_hat)``.
    """
    e_hat = check_input_batch(e_hat, "e_hat", ("B",))
    e_true = as_tensor(e_true, "e_true")
    if e_true.shape != e_hat.shape:
        raise ValueError(f"e_hat has shape {tuple(e_hat.shape)} but e_true has shape {tuple(e_true.shape)}")
    check_finite(e_true, "e_true")
    return e_hat.mean()


@dataclass
class LSConfig:
    """Hyper-parameters of Algorithm 1 (none is given numerically in the thesis except 20K steps).

    Attributes:
        epochs: ``E``, alternations of surrogate and model phases.
        surrogate_steps: ``I_a``, surrogate updates per epoch.
        model_steps: ``I_b``, model updates per epoch.
        surrogate_lr: ``eta_a`` (Adam).
        model_lr: ``eta_b`` (Adam).
        source: ``"global"``, ``"local"`` or ``"local_global"`` (Sec. 3.2.2).
        grad_penalty: ``lambda`` of eq. 3.6 / ``w2`` of eq. 4.5.
        fit_weight: ``w1`` of eq. 4.5.
        grad_target: target gradient norm of the penalty (1 in eq. 3.5; see
            :func:`surrogate_loss`).
        first_surrogate_steps: ``I_a`` of the first epoch only (default ``I_a``); a book addition
            that lets a freshly initialised surrogate catch up before the first model phase.
        global_batch_size: pairs drawn from R per surrogate step (default: the task's batch size).
        model_train_mode: keep the model in ``train()`` mode in the model phase; by default it
            stays in ``eval()`` mode (frozen BatchNorm statistics) in both phases, so that the
            surrogate is fitted and used on the same output distribution.
        grad_clip: clip the model's gradient norm (``None``: no clipping).
        monitor_local: with ``source="global"``, still measure (without training on them) the
            approximation error on the model's own predictions, ``l1_local`` (Fig. 3.3).
    """

    epochs: int = 10
    surrogate_steps: int = 100
    model_steps: int = 100
    surrogate_lr: float = 1e-3
    model_lr: float = 1e-4
    source: str = "local_global"
    grad_penalty: float = 0.1
    fit_weight: float = 1.0
    grad_target: float = 1.0
    first_surrogate_steps: int | None = None
    global_batch_size: int | None = None
    model_train_mode: bool = False
    grad_clip: float | None = None
    monitor_local: bool = True

    def __post_init__(self) -> None:
        """Check every field: ``epochs >= 1``, steps ``>= 0``, rates and weights finite and in range."""
        check_choice(self.source, "source", SOURCES)
        check_positive_int(self.epochs, "epochs")
        for name in ("surrogate_steps", "model_steps"):
            check_nonnegative_int(getattr(self, name), name)
        for name in ("surrogate_lr", "model_lr", "fit_weight"):
            check_float(getattr(self, name), name, low=0, low_open=True)
        for name in ("grad_penalty", "grad_target"):
            check_float(getattr(self, name), name, low=0)
        if self.first_surrogate_steps is not None:
            check_nonnegative_int(self.first_surrogate_steps, "first_surrogate_steps")
        if self.global_batch_size is not None:
            check_positive_int(self.global_batch_size, "global_batch_size")
        if self.grad_clip is not None:
            check_float(self.grad_clip, "grad_clip", low=0, low_open=True)


class SurrogateTrainer:
    """Alternating training of a surrogate and a model: Algorithm 1 of the Patel thesis.

    Each epoch first updates ``Phi`` for ``I_a`` steps with eq. 3.6 on pairs from the configured
    source (the model is frozen and its predictions detached), then updates ``Theta`` for ``I_b``
    steps on ``model_loss(e_hat, e)`` with ``Phi`` frozen (gradients flow *through* ``h_Phi``).
    With :func:`ls_model_loss` this is LS; :class:`rank_lab.learned.feds.FEDSTrainer` plugs in
    the filtered loss of eq. 4.7 (Algorithm 2).

    Args:
        model: the pre-trained task model ``f_Theta``.
        surrogate: an :class:`EmbeddingSurrogate` (randomly initialised, Sec. 3.2.3).
        task: the task adapter (:class:`SurrogateTask`).
        config: :class:`LSConfig`.
        model_loss: ``(e_hat, e_true) -> loss`` or ``-> (loss, stats)``; default LS.
        seed: seeds all sampling (batches, generator).
        device: device (default: CUDA when present).
        eval_fn: called as ``eval_fn(model)`` after each epoch (and once before training); its
            dict is stored in ``history["eval"]``.
        checkpoint: file to save after every epoch; an existing file is resumed from.
        progress: show a tqdm bar over epochs.

    Attributes:
        history: lists ``surrogate`` (per surrogate step: ``l1_local``, ``l1_global``, ``gp``,
            ``grad_norm``), ``model`` (per model step: ``loss``, ``e_hat``, ``e`` + the model
            loss' statistics) and ``eval`` (per epoch).
    """

    def __init__(
        self,
        model: nn.Module,
        surrogate: EmbeddingSurrogate,
        task: SurrogateTask,
        config: LSConfig | None = None,
        *,
        model_loss: Callable[[torch.Tensor, torch.Tensor], Any] = ls_model_loss,
        seed: int = 0,
        device: torch.device | str | None = None,
        eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
        checkpoint: str | Path | None = None,
        progress: bool = False,
    ) -> None:
        for name, m in (("model", model), ("surrogate", surrogate)):
            if not isinstance(m, nn.Module):
                raise TypeError(f"{name} must be an nn.Module, got {type(m).__name__}")
        if config is not None and not isinstance(config, LSConfig):
            raise TypeError(f"config must be an LSConfig, got {type(config).__name__}")
        if not callable(model_loss):
            raise TypeError(f"model_loss must be callable, got {type(model_loss).__name__}")
        self.config = config or LSConfig()
        self.device = get_device(device)
        self.model = model.to(self.device)
        self.surrogate = surrogate.to(self.device)
        self.task = task
        self.model_loss = model_loss
        self.eval_fn = eval_fn
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.progress = progress
        self.gen = torch.Generator().manual_seed(seed)
        self.opt_s = torch.optim.Adam(self.surrogate.parameters(), lr=self.config.surrogate_lr)
        self.opt_m = torch.optim.Adam(self.model.parameters(), lr=self.config.model_lr)
        self.epoch = 0
        self.history: dict[str, list[dict[str, float]]] = {"surrogate": [], "model": [], "eval": []}

    # -- one step of each phase ------------------------------------------------------------
    def surrogate_step(self) -> dict[str, float]:
        """One update of ``Phi`` (Algorithm 1 lines 4-7; Algorithm 2 lines 4-7)."""
        cfg, task = self.config, self.task
        self.model.eval()
        self.surrogate.train()
        loss = torch.zeros((), device=self.device)
        stats: dict[str, float] = {}
        if cfg.source in ("local", "local_global"):
            batch = task.sample_batch(self.gen)
            with torch.no_grad():
                z = task.predict(self.model, batch)
                y = task.encode_target(z, batch)
                e = task.metric(z, batch)
            l_loc, s = surrogate_loss(self.surrogate, z, y, e, grad_penalty=cfg.grad_penalty,
                                      fit_weight=cfg.fit_weight, grad_target=cfg.grad_target)
            loss = loss + l_loc
            stats.update(l1_local=s["l1"], gp=s["gp"], grad_norm=s["grad_norm"])
        if cfg.source in ("global", "local_global"):
            zr, yr, er = task.sample_global(cfg.global_batch_size or task.batch_size, self.gen)
            l_glob, s = surrogate_loss(self.surrogate, zr.to(self.device), yr.to(self.device), er.to(self.device),
                                       grad_penalty=cfg.grad_penalty, fit_weight=cfg.fit_weight,
                                       grad_target=cfg.grad_target)
            loss = loss + l_glob
            stats["l1_global"] = s["l1"]
            stats.setdefault("gp", s["gp"])
            stats.setdefault("grad_norm", s["grad_norm"])
        if cfg.source == "global" and cfg.monitor_local:
            batch = task.sample_batch(self.gen)
            with torch.no_grad():
                z = task.predict(self.model, batch)
                e_hat = self.surrogate(z, task.encode_target(z, batch))
                stats["l1_local"] = float((e_hat - task.metric(z, batch)).abs().mean())
        _guard(loss, "surrogate", self.epoch, self.checkpoint)
        self.opt_s.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_s.step()
        stats["loss"] = float(loss.detach())
        return stats

    def model_step(self) -> dict[str, float]:
        """One update of ``Theta`` through the frozen surrogate (Algorithm 1 lines 11-14)."""
        task = self.task
        self.model.train(self.config.model_train_mode)
        self.surrogate.eval()
        for p in self.surrogate.parameters():
            p.requires_grad_(False)
        try:
            batch = task.sample_batch(self.gen)
            z = task.predict(self.model, batch)
            with torch.no_grad():
                y = task.encode_target(z.detach(), batch)
                e = task.metric(z.detach(), batch)
            e_hat = self.surrogate(z, y)
            out = self.model_loss(e_hat, e)
            loss, extra = (out if isinstance(out, tuple) else (out, {}))
            _guard(loss, "model", self.epoch, self.checkpoint)
            self.opt_m.zero_grad(set_to_none=True)
            loss.backward()
            if self.config.grad_clip is not None:
                nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
            self.opt_m.step()
        finally:
            for p in self.surrogate.parameters():
                p.requires_grad_(True)
        stats = {"loss": float(loss.detach()), "e_hat": float(e_hat.detach().mean()), "e": float(e.float().mean())}
        stats.update({k: float(v) for k, v in extra.items()})
        return stats

    # -- the loop ----------------------------------------------------------------------------
    def fit(self) -> dict[str, list[dict[str, float]]]:
        """Run the remaining epochs (resuming from ``checkpoint`` if it exists); returns history."""
        from tqdm.auto import tqdm

        if self.checkpoint is not None and self.checkpoint.exists():
            self.load_state_dict(torch.load(self.checkpoint, map_location=self.device, weights_only=False))
        if self.eval_fn is not None and not self.history["eval"]:
            self.history["eval"].append({"epoch": 0, **self.eval_fn(self.model)})
        cfg = self.config
        for _ in tqdm(range(self.epoch, cfg.epochs), disable=not self.progress, desc="LS epochs"):
            n_s = cfg.first_surrogate_steps if (self.epoch == 0 and cfg.first_surrogate_steps is not None) else cfg.surrogate_steps
            for _ in range(n_s):
                self.history["surrogate"].append({"epoch": self.epoch + 1, **self.surrogate_step()})
            for _ in range(cfg.model_steps):
                self.history["model"].append({"epoch": self.epoch + 1, **self.model_step()})
            self.epoch += 1
            if self.eval_fn is not None:
                self.history["eval"].append({"epoch": self.epoch, **self.eval_fn(self.model)})
            if self.checkpoint is not None:
                self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
                torch.save(self.state_dict(), self.checkpoint)
        return self.history

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimisers, epoch, history, RNG state."""
        return {
            "model": self.model.state_dict(),
            "surrogate": self.surrogate.state_dict(),
            "opt_s": self.opt_s.state_dict(),
            "opt_m": self.opt_m.state_dict(),
            "epoch": self.epoch,
            "history": self.history,
            "gen": self.gen.get_state(),
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`."""
        self.model.load_state_dict(state["model"])
        self.surrogate.load_state_dict(state["surrogate"])
        self.opt_s.load_state_dict(state["opt_s"])
        self.opt_m.load_state_dict(state["opt_m"])
        self.epoch = int(state["epoch"])
        self.history = state["history"]
        self.gen.set_state(state["gen"])


def _guard(loss: torch.Tensor, phase: str, epoch: int, checkpoint: Path | None) -> None:
    """Stop before a NaN / inf loss updates the weights (the checkpoint keeps the last good epoch)."""
    if not bool(torch.isfinite(loss.detach()).all()):
        where = f"; {str(checkpoint)!r} holds the last good epoch" if checkpoint is not None else ""
        raise FloatingPointError(f"non-finite {phase} loss ({float(loss.detach())}) in epoch {epoch + 1}: "
                                 f"no update applied{where}; lower the learning rates or check the task's data")


@torch.no_grad()
def evaluate_surrogate(
    model: nn.Module | None,
    surrogate: EmbeddingSurrogate,
    task: SurrogateTask,
    source: str = "local",
    n_batches: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """Approximation quality of a surrogate on fresh pairs (the scatter of Fig. 3.2 / 4.4).

    Args:
        model: the task model (needed for ``source="local"``).
        surrogate: the surrogate.
        task: the task adapter.
        source: ``"local"`` (model predictions) or ``"global"`` (generator pairs).
        n_batches: batches to draw.
        seed: seeds the draw.

    Returns:
        A dict with ``"e"`` (``(n,)`` true values), ``"e_hat"`` (``(n,)`` surrogate values),
        ``"l1"`` (mean ``|e_hat - e|``) and ``"pearson"`` (their correlation; NaN, with a
        ``UserWarning``, when ``e`` or ``e_hat`` is constant: the correlation is undefined).
    """
    check_choice(source, "source", ("local", "global"))
    n_batches = check_positive_int(n_batches, "n_batches")
    if not isinstance(surrogate, nn.Module):
        raise TypeError(f"surrogate must be an nn.Module, got {type(surrogate).__name__}")
    if source == "local" and not isinstance(model, nn.Module):
        raise ValueError(f"model (an nn.Module) is required for source='local', got {type(model).__name__}")
    gen = torch.Generator().manual_seed(seed)
    surrogate.eval()
    if model is not None:
        model.eval()
    es, ehs = [], []
    dev = next(surrogate.parameters()).device
    for _ in range(n_batches):
        if source == "local":
            batch = task.sample_batch(gen)
            z = task.predict(model, batch)  # type: ignore[arg-type]
            y, e = task.encode_target(z, batch), task.metric(z, batch)
        else:
            z, y, e = (t.to(dev) for t in task.sample_global(task.batch_size, gen))
        es.append(e.float().cpu())
        ehs.append(surrogate(z, y).float().cpu())
    e, e_hat = torch.cat(es), torch.cat(ehs)
    if len(e) > 1 and e.std() > 0 and e_hat.std() > 0:
        pearson = float(torch.corrcoef(torch.stack([e, e_hat]))[0, 1])
    else:
        warnings.warn("evaluate_surrogate: e or e_hat is constant, the Pearson correlation is undefined (NaN)",
                      UserWarning, stacklevel=2)
        pearson = math.nan
    return {"e": e, "e_hat": e_hat, "l1": float((e - e_hat).abs().mean()), "pearson": pearson}
