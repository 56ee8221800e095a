"""The loss registry: ``@register_loss`` at each definition, :func:`build_loss`, :func:`list_losses`.

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

Names are case-insensitive, ``-`` and ``_`` are the same.
Adding a loss is one class with one decorator in its module (imported by
:mod:`rank_lab.losses`); :func:`unregister_loss` removes one (tests).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import nn

__all__ = ["LossInfo", "LOSSES", "register_loss", "unregister_loss", "build_loss", "list_losses", "loss_info"]

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


_INFOS: dict[str, LossInfo] = {}


def _key(name: object, what: str = "name") -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__}")
    key = name.strip().lower().replace("-", "_")
    if not key:
        raise ValueError(f"{what} must be a non-empty str, got {name!r}")
    return key


class _LossTable(Mapping[str, Callable[..., nn.Module]]):
    """Read-only view ``name -> class or factory``."""

    def __getitem__(self, name: str) -> Callable[..., nn.Module]:
        return _INFOS[name].build

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(_INFOS))

    def __len__(self) -> int:
        return len(_INFOS)

    def __repr__(self) -> str:
        return f"LOSSES({sorted(_INFOS)})"


#: Every registered name -> its class or factory (read-only; see :func:`list_losses`).
LOSSES: Mapping[str, Callable[..., nn.Module]] = _LossTable()


def register_loss(
    name: str,
    *,
    needs: Sequence[str] = (),
    uses_references: bool | None = None,
    hierarchical: bool = False,
    preset: bool = False,
) -> Callable[[F], F]:
    """Class / function decorator: register a loss under ``name``.

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
    canonical = _key(name)
    if canonical in _INFOS:
        raise ValueError(f"loss name {canonical!r} already registered")
    needs_t = tuple(needs)
    bad = [n for n in needs_t if n not in NEEDS]
    if bad:
        raise ValueError(f"needs must hold names among {NEEDS}, got {bad}")

    def decorator(obj: F) -> F:
        if not callable(obj):
            raise TypeError(f"register_loss decorates a class or a factory function, got {type(obj).__name__}")
        refs = getattr(obj, "uses_references", True) if uses_references is None else bool(uses_references)
        doc = (obj.__doc__ or "").strip().splitlines()
        _INFOS[canonical] = LossInfo(canonical, obj, needs_t, bool(refs), bool(hierarchical), bool(preset),
                                     doc[0] if doc else "")
        return obj

    return decorator


def unregister_loss(name: str) -> LossInfo:
    """Remove a loss from the registry; returns what was registered.

    Raises:
        ValueError: unknown name.
    """
    info = loss_info(name)
    del _INFOS[info.name]
    return info


def loss_info(name: str) -> LossInfo:
    """The :class:`LossInfo` of a name (case-insensitive, ``-`` = ``_``).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: unknown name (the message lists the known ones).
    """
    key = _key(name)
    if key not in _INFOS:
        raise ValueError(f"unknown loss name {name!r}; known: {sorted(_INFOS)}")
    return _INFOS[key]


def list_losses(filter: str = "", *, presets: bool | None = None) -> list[str]:
    """Sorted registered names (timm's ``list_models`` pattern).

    Args:
        filter: an ``fnmatch`` pattern (``"*ap*"``); ``""`` = all.
        presets: ``True`` only presets, ``False`` only single losses, ``None`` both.
    """
    if not isinstance(filter, str):
        raise TypeError(f"filter must be a str pattern, got {type(filter).__name__}")
    names = []
    for info in _INFOS.values():
        if presets is not None and info.preset != bool(presets):
            continue
        names.append(info.name)
    pattern = filter.strip().lower().replace("-", "_")
    return sorted(n for n in names if not pattern or fnmatch.fnmatchcase(n, pattern))


def build_loss(name: str, **kwargs: Any) -> nn.Module:
    """Build a registered loss or preset from its name (case-insensitive; ``-`` and ``_`` are equivalent).

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
