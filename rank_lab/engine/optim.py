"""The optimisers of rank_lab's training loops, built in one place (:func:`build_optimizer`).

Every loop of the package builds its optimiser here: Adam (Kingma & Ba 2015; the optimiser of the
Ramzi, Patel and Gominski theses' experiments), AdamW or SGD with momentum, over parameters or
parameter groups. :func:`param_groups` gives the retrieval trainer's groups: backbone (``lr``),
pooling + head (``head_lr``) and the loss' own parameters such as proxies (``loss_lr``; the
official ROADMAP code trains the head at twice the backbone rate and the proxies at 10).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from rank_lab._validation import check_choice, check_float

__all__ = ["OPTIMIZERS", "build_optimizer", "param_groups"]

#: The optimiser kinds of :func:`build_optimizer`.
OPTIMIZERS = ("adam", "adamw", "sgd")


def build_optimizer(
    params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
    kind: str = "adam",
    *,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.9,
    nesterov: bool = False,
) -> torch.optim.Optimizer:
    """An optimiser over ``params`` (tensors, or parameter groups with their own ``lr``).

    Args:
        params: the trainable tensors, or groups ``{"params": [...], "lr": ..., ...}``.
        kind: ``"adam"``, ``"adamw"`` or ``"sgd"``.
        lr: the default learning rate (> 0).
        weight_decay: L2 penalty (decoupled for AdamW), >= 0.
        betas: Adam's / AdamW's moment decays.
        momentum, nesterov: SGD's momentum.

    Raises:
        ValueError: an unknown ``kind``, a non-positive ``lr``, a negative ``weight_decay``, no
            parameter.
    """
    check_choice(kind, "kind", OPTIMIZERS)
    lr = check_float(lr, "lr", low=0.0, low_open=True)
    weight_decay = check_float(weight_decay, "weight_decay", low=0.0)
    params = list(params)
    if not params:
        raise ValueError("params is empty: no trainable parameter to optimise")
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=weight_decay)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    return torch.optim.SGD(
        params, lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov
    )


def param_groups(
    model: nn.Module,
    loss: Any = None,
    *,
    lr: float,
    head_lr: float | None = None,
    loss_lr: float | None = None,
) -> list[dict[str, Any]]:
    """Named parameter groups with their base rates (``base_lr``), empty groups dropped.

    A model with ``backbone_parameters()`` and ``head_parameters()`` (an
    :class:`~rank_lab.models.EmbeddingModel`) gets a ``"backbone"`` group at ``lr`` and a ``"head"``
    group at ``head_lr`` (default ``lr``); any other model one ``"model"`` group. The trainable
    parameters of a module ``loss`` form a ``"loss"`` group at ``loss_lr`` (default the head's
    rate).

    Raises:
        ValueError: neither the model nor the loss has a trainable parameter.
    """
    head_lr = head_lr if head_lr is not None else lr
    groups: list[dict[str, Any]] = []
    if hasattr(model, "backbone_parameters") and hasattr(model, "head_parameters"):
        groups.append({"name": "backbone", "params": list(model.backbone_parameters()), "lr": lr})
        groups.append({"name": "head", "params": list(model.head_parameters()), "lr": head_lr})
    else:
        groups.append({"name": "model", "params": list(model.parameters()), "lr": lr})
    if isinstance(loss, nn.Module):
        lp = [p for p in loss.parameters() if p.requires_grad]
        groups.append(
            {"name": "loss", "params": lp, "lr": loss_lr if loss_lr is not None else head_lr}
        )
    groups = [g for g in groups if g["params"]]
    for g in groups:
        g["base_lr"] = g["lr"]
    if not groups:
        raise ValueError("the model and the loss have no trainable parameter")
    return groups
