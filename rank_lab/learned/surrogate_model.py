"""The parts of a learned surrogate (LS) of a non-differentiable metric (Patel thesis, Ch. 3).

The surrogate network, its loss, the task interface and the configuration; the alternating
training (Algorithm 1) that uses them is in :mod:`rank_lab.learned.surrogate_trainer`.

A decomposable, lower-is-better metric ``e(z, y)`` (edit distance, 1 - IoU ...) is approximated by
the Euclidean distance in a learned embedding (eq. 3.3)::

    e_hat(z, y) = || h_Phi(z) - h_Phi(y) ||_2

``h_Phi`` is trained with the squared error to the true metric plus a gradient penalty that keeps
``||d e_hat / d z||_2`` close to 1 (eq. 3.6; eq. 4.5 with weights ``w1, w2``)::

    loss(z, y) = w1 (e_hat(z, y) - e(z, y))^2 + w2 (||d e_hat(z, y) / d z||_2 - 1)^2

and the task model ``f_Theta`` is post-tuned by minimising ``e_hat`` (eq. 3.2). Surrogate and model
are trained alternately (Algorithm 1, :class:`rank_lab.learned.surrogate_trainer.SurrogateTrainer`);
the surrogate's training pairs come from a random generator R (*global*), from the model's own
predictions (*local*), or both (*local-global*, the thesis' choice). :mod:`rank_lab.learned.feds`
adds the filtering of Ch. 4.

A task plugs into the trainer through the small :class:`SurrogateTask` interface; the book's two
tasks are :class:`rank_lab.learned.edit_task.EditDistanceTask` (LS-ED, with :class:`CharCNN`) and
:class:`rank_lab.learned.boxes.BoxIoUTask` (LS-IoU, with :class:`BoxMLP`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_float,
    check_input_batch,
    check_magnitude,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.learned._checks import check_module, check_pair
from rank_lab.utils import get_device

__all__ = [
    "EmbeddingSurrogate",
    "surrogate_loss",
    "SurrogateTask",
    "LSConfig",
    "SOURCES",
    "ls_model_loss",
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
        self.embedding = check_module(embedding, "embedding")
        self.eps = check_float(eps, "eps", low=0, low_open=True)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Surrogate values ``(B,)`` for predictions ``z`` and ground truths ``y`` of equal shape.

        Raises:
            ValueError, TypeError: ``z`` or ``y`` is not a finite floating ``(B, *shape)`` batch
                (``B >= 1``), or their shapes differ. Float64 inputs are cast to the weights' dtype.
        """
        z, y = check_pair(z, y, self)
        d = self.embedding(z) - self.embedding(y)
        return torch.sqrt((d * d).flatten(1).sum(1) + self.eps)


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

    ``mean_b [ w1 (e_hat_b - e_b)^2 + w2 (||d e_hat_b / d z_b||_2 - 1)^2 ]``, the gradient norm
    taken per sample over the whole flattened prediction ``z_b`` (double back-propagation).

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
        ValueError, TypeError: bad ``z`` / ``y`` (see :meth:`EmbeddingSurrogate.forward`),
            ``e_true`` not a finite ``(B,)`` tensor (integer values, e.g. edit distances, are
            accepted), or a weight out of range (``grad_penalty, grad_target >= 0``,
            ``fit_weight, eps > 0``, all finite).
    """
    if not callable(surrogate):
        raise TypeError(
            f"surrogate must be a module (z, y) -> (B,), got {type(surrogate).__name__}"
        )
    z, y = check_pair(z, y, surrogate if isinstance(surrogate, nn.Module) else None)
    grad_penalty = check_float(grad_penalty, "grad_penalty", low=0)
    fit_weight = check_float(fit_weight, "fit_weight", low=0, low_open=True)
    grad_target = check_float(grad_target, "grad_target", low=0)
    eps = check_float(eps, "eps", low=0, low_open=True)
    e_true = as_tensor(e_true, "e_true")
    if e_true.dtype == torch.bool or e_true.is_complex():
        raise TypeError(f"e_true must hold real metric values, got dtype {e_true.dtype}")
    e_true = e_true.detach().to(z.device, z.dtype)
    if e_true.shape != (z.shape[0],):
        raise ValueError(
            f"e_true must have shape ({z.shape[0]},) like z's batch, got {tuple(e_true.shape)}"
        )
    check_finite(e_true, "e_true")
    check_magnitude(e_true, "e_true")  # the squared fit error of larger values overflows
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

    def sample_global(
        self, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
        raise ValueError(
            f"e_hat has shape {tuple(e_hat.shape)} but e_true has shape {tuple(e_true.shape)}"
        )
    check_finite(e_true, "e_true")
    check_magnitude(e_true, "e_true")  # the squared fit error of larger values overflows
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
        """Check every field: ``epochs >= 1``, steps ``>= 0``, rates and weights finite and in
        range."""
        check_choice(self.source, "source", SOURCES)
        check_positive_int(self.epochs, "epochs")
        for name in ("surrogate_steps", "model_steps"):
            check_nonneg_int(getattr(self, name), name)
        for name in ("surrogate_lr", "model_lr", "fit_weight"):
            check_float(getattr(self, name), name, low=0, low_open=True)
        for name in ("grad_penalty", "grad_target"):
            check_float(getattr(self, name), name, low=0)
        if self.first_surrogate_steps is not None:
            check_nonneg_int(self.first_surrogate_steps, "first_surrogate_steps")
        if self.global_batch_size is not None:
            check_positive_int(self.global_batch_size, "global_batch_size")
        if self.grad_clip is not None:
            check_float(self.grad_clip, "grad_clip", low=0, low_open=True)
