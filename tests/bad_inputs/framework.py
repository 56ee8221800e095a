"""Machinery of the bad-input matrix: entries, argument roles, derived variants and their verdicts.

An :class:`Entry` holds one small *valid* call of a public callable, split in stages (a function:
one call; a class: the constructor, then methods such as ``fit`` and ``score``/``forward``), and
the *role* of each argument. The variants are derived from the roles:

=============  =====================================================================================
role           variants
=============  =====================================================================================
``x``          a floating tensor of data: NaN, +inf, -inf, one more dim, one less dim, empty batch
               (first dim 0), integer dtype, float64
``labels``     integer labels: one more dim, empty, float dtype
``k``          a cut-off in a set: 0, -1, 1.5, larger than any set (10 000)
``posint``     a positive int parameter: 0, -1, 1.5
``nonnegint``  -1, 1.5
``pos``        a positive real: 0, -1, NaN, inf
``nonneg``     -1, NaN, inf
``prob``       a number in [0, 1]: -0.5, 1.5, NaN
``real``       any finite real: NaN, inf
``choice``     one string among options: ``"bogus"``
``path``       a dataset folder: one that does not exist
=============  =====================================================================================

plus, per entry, ``rows`` groups (arguments sharing their first dim: one row dropped from the
last), ``nopos`` (a query or class without a positive) and hand-written ``extra`` variants.

Verdict of a variant: a ``ValueError``/``TypeError`` whose message names the argument (word match;
``path`` variants may name the path instead, and may raise ``FileNotFoundError``) passes; any other
exception fails; a normal return
passes only if its id matches a ``legal`` pattern of the entry (``fnmatch`` on ``"arg:kind"``,
``"method.arg:kind"`` for later stages) and holds no NaN (tensors, numbers, containers, module
weights). ``f64`` variants are legal by default: float32 and float64 are both accepted package-wide
(``docs/decisions.md``); they still fail on an error that names no argument or on a NaN.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

ArgsFactory = Callable[[], dict[str, Any]]

ROLE_VARIANTS: dict[str, tuple[str, ...]] = {
    "x": ("nan", "inf", "-inf", "ndim+", "ndim-", "empty", "int", "f64"),
    "labels": ("ndim+", "empty", "float"),
    "k": ("zero", "neg", "frac", "big"),
    "posint": ("zero", "neg", "frac"),
    "nonnegint": ("neg", "frac"),
    "pos": ("zero", "neg", "nan", "inf"),
    "nonneg": ("neg", "nan", "inf"),
    "prob": ("neg", "above1", "nan"),
    "real": ("nan", "inf"),
    "choice": ("bogus",),
    "path": ("missing",),
}

F64_LEGAL = "float32 and float64 are both accepted (docs/decisions.md)"


@dataclass(frozen=True)
class Stage:
    """One call of an entry: ``method`` None for the callable itself (function or constructor)."""

    method: str | None
    args: ArgsFactory
    roles: Mapping[str, str]


@dataclass(frozen=True)
class Entry:
    """One public callable, one valid call, and what its bad variants must do."""

    target: Any
    stages: tuple[Stage, ...]
    rows: tuple[tuple[str, ...], ...] = ()
    nopos: Mapping[str, Callable[[], Any]] = field(default_factory=dict)
    extra: Mapping[str, tuple[str, Callable[[], Any], tuple[str, ...]]] = field(default_factory=dict)
    legal: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.target.__module__}.{self.target.__qualname__}"


@dataclass(frozen=True)
class Variant:
    """A bad input: stage index, argument, replacement value factory and the names it must cite."""

    id: str
    stage: int
    arg: str
    value: Callable[[Any], Any]  # old value -> bad value
    names: tuple[str, ...]
    default_legal: str | None = None


def _args(a: ArgsFactory | Mapping[str, Any] | None) -> ArgsFactory:
    if a is None:
        return dict
    if callable(a):
        return a  # type: ignore[return-value]
    frozen = dict(a)
    return lambda: copy.deepcopy(frozen)


def fn(target: Any, args: ArgsFactory | Mapping[str, Any] | None = None, roles: Mapping[str, str] | None = None,
       **kw: Any) -> Entry:
    """An entry for a function called once with ``args``."""
    return Entry(target, (Stage(None, _args(args), dict(roles or {})),), **kw)


def cls(target: Any, init: ArgsFactory | Mapping[str, Any] | None = None, roles: Mapping[str, str] | None = None,
        calls: Sequence[tuple[str, ArgsFactory | Mapping[str, Any] | None, Mapping[str, str] | None]] = (),
        **kw: Any) -> Entry:
    """An entry for a class: the constructor, then each ``(method, args, roles)`` of ``calls`` in order."""
    stages = [Stage(None, _args(init), dict(roles or {}))]
    stages += [Stage(m, _args(a), dict(r or {})) for m, a, r in calls]
    return Entry(target, tuple(stages), **kw)


# ----------------------------------------------------------------------------------- transforms
def _first_float(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return torch.as_tensor(np.asarray(x))


def _poke(x: Any, value: float) -> Any:
    t = _first_float(x).clone()
    if not t.is_floating_point():
        t = t.float()
    t.view(-1)[0] = value
    return t


def _on_first(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Apply ``f`` to the first tensor of a list/tuple argument, or to the tensor itself."""

    def g(x: Any) -> Any:
        if isinstance(x, (list, tuple)) and x and not isinstance(x[0], (int, float, str)):
            return type(x)([f(x[0]), *x[1:]]) if isinstance(x, list) else (f(x[0]), *x[1:])
        return f(x)

    return g


_X = {
    "nan": lambda x: _poke(x, math.nan),
    "inf": lambda x: _poke(x, math.inf),
    "-inf": lambda x: _poke(x, -math.inf),
    "ndim+": lambda x: _first_float(x)[None],
    "ndim-": lambda x: _first_float(x)[0],
    "empty": lambda x: _first_float(x)[:0],
    "int": lambda x: _first_float(x).round().long(),
    "f64": lambda x: _first_float(x).double(),
}
_LABELS = {
    "ndim+": lambda y: torch.as_tensor(y)[..., None, None] if torch.as_tensor(y).ndim == 1 else torch.as_tensor(y)[..., None],
    "empty": lambda y: torch.as_tensor(y)[:0],
    "float": lambda y: torch.as_tensor(y).double() + 0.5,
}
_SCALAR = {
    "zero": lambda v: 0, "neg": lambda v: -1, "frac": lambda v: 1.5, "big": lambda v: 10_000,
    "nan": lambda v: math.nan, "inf": lambda v: math.inf, "above1": lambda v: 1.5, "bogus": lambda v: "bogus",
}


def _scalar(role: str, kind: str) -> Callable[[Any], Any]:
    if role in ("pos", "nonneg", "prob", "real") and kind == "neg":
        return lambda v: -0.5 if role == "prob" else -1.0
    if role in ("pos",) and kind == "zero":
        return lambda v: 0.0
    return _SCALAR[kind]


def _missing_path(v: Any) -> Any:
    return "/nonexistent/rank_lab_bad_inputs/folder"


def variants(entry: Entry) -> list[Variant]:
    """Every bad variant derived from ``entry``'s roles, rows groups, nopos and extra variants."""
    out: list[Variant] = []

    def key(stage: int, arg: str) -> str:
        method = entry.stages[stage].method
        return arg if stage == 0 or method is None else f"{method}.{arg}"

    for i, st in enumerate(entry.stages):
        for arg, role in st.roles.items():
            if role not in ROLE_VARIANTS:
                raise ValueError(f"{entry.name}: unknown role {role!r} for {arg!r}")
            for kind in ROLE_VARIANTS[role]:
                if role == "x":
                    value = _on_first(_X[kind])
                elif role == "labels":
                    value = _LABELS[kind]
                elif role == "path":
                    value = _missing_path
                else:
                    value = _scalar(role, kind)
                names = (arg, _missing_path(None)) if role == "path" else (arg,)
                out.append(Variant(f"{key(i, arg)}:{kind}", i, arg, value, names,
                                   F64_LEGAL if kind == "f64" else None))
    for group in entry.rows:
        stage, arg = _find(entry, group[-1])
        out.append(Variant(f"rows:{'/'.join(group)}", stage, arg, _drop_row, tuple(a.split(".")[-1] for a in group)))
    for arg, factory in entry.nopos.items():
        stage, a = _find(entry, arg)
        out.append(Variant(f"{key(stage, a)}:nopos", stage, a, lambda v, f=factory: f(), (a,)))
    for name, (arg, factory, names) in entry.extra.items():
        stage, a = _find(entry, arg)
        out.append(Variant(f"{key(stage, a)}:{name}", stage, a, lambda v, f=factory: f(), names))
    return out


def _find(entry: Entry, arg: str) -> tuple[int, str]:
    """``"arg"`` (first stage that has it) or ``"method.arg"`` -> (stage index, argument)."""
    method, _, name = arg.rpartition(".")
    for i, st in enumerate(entry.stages):
        if (not method or st.method == method) and name in st.args():
            return i, name
    raise KeyError(f"{entry.name}: no argument {arg!r}")


def _drop_row(x: Any) -> Any:
    if isinstance(x, (list, tuple)) and not isinstance(x, torch.Tensor):
        return type(x)(x[:-1]) if isinstance(x, list) else tuple(x[:-1])
    return x[:-1]


# ----------------------------------------------------------------------------------- running
def run(entry: Entry, variant: Variant | None = None) -> Any:
    """Run the entry's stages (with ``variant`` applied); return the last stage's result."""
    torch.manual_seed(0)
    obj: Any = None
    result: Any = None
    for i, st in enumerate(entry.stages):
        kwargs = st.args()
        if variant is not None and variant.stage == i:
            kwargs[variant.arg] = variant.value(kwargs.get(variant.arg))
        if i == 0:
            result = obj = entry.target(**kwargs)
        elif st.method == "__call__":
            result = obj(**kwargs)
        else:
            result = getattr(obj, st.method)(**kwargs)
    if len(entry.stages) > 1 and isinstance(obj, nn.Module):
        return (result, obj)  # the module's weights are checked too (a fit on bad data)
    return result


def find_nan(x: Any, depth: int = 0) -> str | None:
    """Where a NaN sits in a (nested) result, or None."""
    if depth > 6:
        return None
    if isinstance(x, torch.Tensor):
        if (x.is_floating_point() or x.is_complex()) and bool(torch.isnan(x.detach()).any()):
            return f"tensor of shape {tuple(x.shape)}"
        return None
    if isinstance(x, np.ndarray):
        return "ndarray" if x.dtype.kind in "fc" and bool(np.isnan(x).any()) else None
    if isinstance(x, float):
        return "float" if math.isnan(x) else None
    if isinstance(x, nn.Module):
        for name, t in [*x.named_parameters(), *x.named_buffers()]:
            if t is not None and t.is_floating_point() and bool(torch.isnan(t.detach()).any()):
                return f"weight {name}"
        return None
    if isinstance(x, Mapping):
        items: Any = x.values()
    elif isinstance(x, (list, tuple)):
        items = x
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        items = [getattr(x, f.name) for f in dataclasses.fields(x)]
    else:
        return None
    for v in list(items)[:64]:
        where = find_nan(v, depth + 1)
        if where:
            return where
    return None


def _names_it(names: Sequence[str], message: str) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names)


def legal_reason(entry: Entry, variant: Variant) -> str | None:
    for pattern, reason in entry.legal.items():
        if fnmatch.fnmatchcase(variant.id, pattern):
            return reason
    return variant.default_legal


def verdict(entry: Entry, variant: Variant) -> str | None:
    """``None`` if the variant behaves (named error or documented legal result), else the defect."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = run(entry, variant)
    except FileNotFoundError as exc:  # a missing path: the standard error, when it names the path
        if variant.id.endswith(":missing") and _names_it(variant.names, str(exc)):
            return None
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        if _names_it(variant.names, msg):
            return None
        return f"{type(exc).__name__} that does not name {variant.names[0]!r}: {msg[:200]}"
    except Exception as exc:  # noqa: BLE001 - every other error is a defect of the matrix
        return f"obscure {type(exc).__name__}: {str(exc)[:200]}"
    where = find_nan(result)
    if where:
        return f"silent NaN ({where})"
    if legal_reason(entry, variant) is None:
        return "accepted silently (no documented legal result)"
    return None


def ledger_key(entry: Entry, variant: Variant) -> str:
    return f"{entry.name} {variant.id}"
