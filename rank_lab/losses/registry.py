"""The loss registry: ``@register_loss`` at each definition, :func:`build_loss`,
:func:`list_losses`.

A loss (a class with the common call of :mod:`rank_lab.losses.base`, or a factory function of a
preset) registers itself where it is defined::

    @register_loss("smooth_ap")
    class SmoothAP(RankLoss): ...

    @register_loss("norm_softmax", needs=("n_classes", "dim"), uses_references=False)
    class NormSoftmaxLoss(...): ...

and a config string selects it: ``build_loss("sup_ap", rho=100)``. The registry also records what
a caller must know without reading signatures (:class:`LossInfo`): the training-set facts the
constructor needs (``n_classes``, ``dim``; the :class:`rank_lab.train.Trainer` fills them in),
whether the loss ranks against a reference set (so a cross-batch memory changes it), whether it
uses every level of hierarchical ``(B, L)`` labels, and whether it is a preset (a named combination
of losses).

Names are case-insensitive, ``-`` and ``_`` are the same. :data:`LOSSES` is a
:class:`rank_lab.registry.Registry`, the one registry type of the package.
Adding a loss is one class with one decorator in its module (imported by
:mod:`rank_lab.losses`); :func:`unregister_loss` removes one (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import nn

from rank_lab.registry import Registry

__all__ = [
    "LossInfo",
    "LOSSES",
    "register_loss",
    "unregister_loss",
    "build_loss",
    "list_losses",
    "loss_info",
]

#: Training-set facts a loss constructor may need (filled in by the trainer when not given).
NEEDS = ("n_classes", "dim")

F = TypeVar("F", bound=Callable[..., nn.Module])


@dataclass(frozen=True)
class LossInfo:
    """What the registry knows about one loss.

    Attributes:
        name: the canonical name (``"smooth_ap"``).
        build: the class or factory (``build(**kwargs)`` returns the loss module).
        needs: the training-set facts the constructor takes, among ``"n_classes"`` (number of
            training classes: proxies / prototypes) and ``"dim"`` (embedding size).
        uses_references: the loss ranks each query against ``ref_embeddings`` when given (a
            cross-batch memory changes it); ``False`` for proxy losses, which see the batch only.
        hierarchical: uses every column of ``(B, L)`` labels (fine level first: graded relevance,
            or one term per level); the other losses read one column (``hierarchy_level``, default
            the fine one) and take ``(B,)`` labels as well.
        preset: a named combination of losses (ROD, ROADMAP, HAPPIER ...), not one loss.
        summary: the first line of the docstring.
    """

    name: str
    build: Callable[..., nn.Module]
    needs: tuple[str, ...] = ()
    uses_references: bool = True
    hierarchical: bool = False
    preset: bool = False
    summary: str = ""


#: Every registered loss: name -> its class or factory (read-only; see :func:`list_losses`).
LOSSES: Registry[Callable[..., nn.Module]] = Registry("loss")


def register_loss(
    name: str,
    *,
    needs: Sequence[str] = (),
    uses_references: bool | None = None,
    hierarchical: bool = False,
    preset: bool = False,
) -> Callable[[F], F]:
    """Class / function decorator: register a loss under ``name`` (in :data:`LOSSES`).

    Args:
        name: canonical name (lower case, ``_``-separated).
        needs: training-set facts the constructor takes (``"n_classes"``, ``"dim"``).
        uses_references: see :class:`LossInfo`; ``None`` reads the class attribute
            ``uses_references`` (default True; a factory function must say False explicitly).
        hierarchical: uses every label column (see :class:`LossInfo`).
        preset: a named combination of losses.

    Returns:
        The decorator (it returns the class or function unchanged).

    Raises:
        ValueError: a name already registered, or an unknown entry of ``needs``.
    """
    canonical = LOSSES.key(name)
    if canonical in LOSSES:
        raise ValueError(f"loss name {canonical!r} already registered")
    needs_t = tuple(needs)
    bad = [n for n in needs_t if n not in NEEDS]
    if bad:
        raise ValueError(f"needs must hold names among {NEEDS}, got {bad}")

    def decorator(obj: F) -> F:
        if not callable(obj):
            raise TypeError(
                f"register_loss decorates a class or a factory function, got {type(obj).__name__}"
            )
        refs = (
            getattr(obj, "uses_references", True)
            if uses_references is None
            else bool(uses_references)
        )
        return LOSSES.register(
            canonical,
            obj,
            needs=needs_t,
            uses_references=bool(refs),
            hierarchical=bool(hierarchical),
            preset=bool(preset),
        )

    return decorator


def unregister_loss(name: str) -> LossInfo:
    """Remove a loss from the registry; returns what was registered.

    Raises:
        ValueError: unknown name.
    """
    info = loss_info(name)
    LOSSES.unregister(info.name)
    return info


def loss_info(name: str) -> LossInfo:
    """The :class:`LossInfo` of a name (case-insensitive, ``-`` = ``_``).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: unknown name (the message lists the known ones).
    """
    e = LOSSES.entry(name)
    return LossInfo(
        e.name,
        e.obj,
        e.info["needs"],
        e.info["uses_references"],
        e.info["hierarchical"],
        e.info["preset"],
        e.summary,
    )


def list_losses(filter: str = "", *, presets: bool | None = None) -> list[str]:
    """Sorted registered names (timm's ``list_models`` pattern;
    :meth:`rank_lab.registry.Registry.list`).

    Args:
        filter: an ``fnmatch`` pattern (``"*ap*"``); ``""`` = all.
        presets: ``True`` only presets, ``False`` only single losses, ``None`` both.
    """
    return LOSSES.list(filter, preset=None if presets is None else bool(presets))


def build_loss(name: str, **kwargs: Any) -> nn.Module:
    """Build a registered loss or preset from its name (case-insensitive; ``-`` and ``_`` are
    equivalent).

    Args:
        name: a name of :func:`list_losses` (``"smooth_ap"``, ``"sup_ap"``,
            ``"smooth_recall"``, ``"norm_softmax"``, ``"roadmap_tpami"``, ``"happier"`` ...).
        **kwargs: constructor arguments; :attr:`LossInfo.needs` says which of ``n_classes`` and
            ``dim`` the loss takes (proxy losses and the presets that contain one need both).

    Returns:
        The loss module.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: unknown name (the message lists the known ones) or bad arguments.
    """
    info = loss_info(name)
    try:
        return info.build(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad arguments for loss {name!r}: {exc}") from exc
