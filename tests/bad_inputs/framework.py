"""Machinery of the bad-input matrix: entries, argument roles, derived variants and their verdicts.

An :class:`Entry` holds one small *valid* call of a public callable, split in stages (a function:
one call; a class: the constructor, then methods such as ``fit`` and ``score``/``forward``), and
the *role* of each argument. The variants are derived from the roles:

=============  =====================================================================================
role           variants
=============  =====================================================================================
``x``          a floating tensor of data: NaN, +inf, -inf, one more dim, one less dim, empty batch
               (first dim 0), integer dtype, float64, and the *numerical kinds* below: overflow,
               requires-grad, meta, complex, subnormal
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

The numerical kinds of an ``x`` argument (issue 26, item 3), and what is legal for each:

=============  =====================================================================================
kind           value, and the verdict
=============  =====================================================================================
``overflow``   the tensor times ``1e20``: finite values whose products overflow float32. Legal by
               default: a named error, or a result with no NaN and no infinity that the valid call
               does not have (an overflowed score or loss is a silent wrong value).
``grad``       the tensor (as float) with ``requires_grad=True``: model outputs evaluated outside
               ``torch.no_grad()``. Legal by default, and checked harder: the result must equal the
               valid call's (an evaluation computes as if the input were detached), and a result that
               requires grad (a loss) must differentiate: ``backward()`` of the sum of its floating
               tensors runs and leaves a NaN-free gradient on the input. A named error is a defect
               here (a requires-grad input is a valid input, never a reason to refuse), unless the
               valid value was not floating (uint8 images: the float copy is rightly refused).
``meta``       the tensor on the ``meta`` device (shapes without values). Never legal by default:
               every public entry refuses it with an error naming the argument (a ``legal`` pattern
               may document a pass-through, e.g. a collective over one process).
``complex``    the tensor as complex with a non-zero imaginary part. Never legal by default: refused
               with an error naming the argument (accepting it would drop the imaginary part).
``subnormal``  the tensor times ``tiny / 64`` of its dtype (``~1.8e-40`` in float32: subnormal
               values). Legal by default, like ``overflow``: a named error or a NaN- and inf-free
               result.
=============  =====================================================================================

The numerical kinds are derived for *every* ``x`` argument of every stage: 2,077 more variants
(7,006 to 9,083), about 10% more CPU time for ``test_matrix.py`` (measured back to back on the same
machine, ``docs/decisions.md``), so no representative-argument shortcut is needed. What the kinds
do not see: a result that is NaN- and inf-free but scaled wrongly (an ``F.normalize`` whose norm
overflowed returns zeros); the matrix does not know which results are scale-invariant, so such
cases are regression tests (``test_regressions_numerical.py``), not verdicts.

Every variant call runs under a time limit (:data:`TIME_LIMIT_S`, environment variable
``RANK_LAB_MATRIX_TIME_LIMIT``): a call that exceeds it is the defect ``hang``. The limit is a
``SIGALRM`` timer in the main thread (pytest and pytest-xdist workers on Linux run tests there),
which raises :class:`Hang` (a ``BaseException``, so no ``except Exception`` in the package swallows
it) into the running Python code; elsewhere the call runs in a daemon thread that is abandoned when
it overruns.
"""  # noqa: E501

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import math
import os
import re
import signal
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

ArgsFactory = Callable[[], dict[str, Any]]

#: the numerical kinds of an ``x`` argument (issue 26): see the module docstring for their verdicts
NUMERICAL_KINDS = ("overflow", "grad", "meta", "complex", "subnormal")
#: kinds whose normal return must also be free of infinities the valid call does not have
FINITE_KINDS = ("overflow", "subnormal")
ROLE_VARIANTS: dict[str, tuple[str, ...]] = {
    "x": ("nan", "inf", "-inf", "ndim+", "ndim-", "empty", "int", "f64", *NUMERICAL_KINDS),
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
DEFAULT_LEGAL = {
    "f64": F64_LEGAL,
    "overflow": "finite data of any magnitude: a named error or a NaN- and inf-free result",
    "subnormal": "finite data of any magnitude: a named error or a NaN- and inf-free result",
    "grad": (
        "a requires-grad input is a valid input: the result of the detached call, differentiable"
    ),
}
#: seconds one variant call may take before it is the defect "hang"
TIME_LIMIT_S = float(os.environ.get("RANK_LAB_MATRIX_TIME_LIMIT", "60"))


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
    extra: Mapping[str, tuple[str, Callable[[], Any], tuple[str, ...]]] = field(
        default_factory=dict
    )
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


def fn(
    target: Any,
    args: ArgsFactory | Mapping[str, Any] | None = None,
    roles: Mapping[str, str] | None = None,
    **kw: Any,
) -> Entry:
    """An entry for a function called once with ``args``."""
    return Entry(target, (Stage(None, _args(args), dict(roles or {})),), **kw)


def cls(
    target: Any,
    init: ArgsFactory | Mapping[str, Any] | None = None,
    roles: Mapping[str, str] | None = None,
    calls: Sequence[
        tuple[str, ArgsFactory | Mapping[str, Any] | None, Mapping[str, str] | None]
    ] = (),
    **kw: Any,
) -> Entry:
    """An entry for a class: the constructor, then each ``(method, args, roles)`` of ``calls`` in
    order."""
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


def _floating(x: Any) -> torch.Tensor:
    """The tensor of ``x``, cast to float32 unless it is floating already (float64 stays)."""
    t = _first_float(x)
    return t if t.is_floating_point() else t.float()


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
    "overflow": lambda x: _floating(x) * 1e20,
    "grad": lambda x: _floating(x).detach().clone().requires_grad_(True),
    "meta": lambda x: _first_float(x).to("meta"),
    "complex": lambda x: torch.complex(_floating(x), torch.full_like(_floating(x), 0.5)),
    "subnormal": lambda x: _floating(x) * (torch.finfo(_floating(x).dtype).tiny / 64),
}
_LABELS = {
    "ndim+": lambda y: (
        torch.as_tensor(y)[..., None, None]
        if torch.as_tensor(y).ndim == 1
        else torch.as_tensor(y)[..., None]
    ),
    "empty": lambda y: torch.as_tensor(y)[:0],
    "float": lambda y: torch.as_tensor(y).double() + 0.5,
}
_SCALAR = {
    "zero": lambda v: 0,
    "neg": lambda v: -1,
    "frac": lambda v: 1.5,
    "big": lambda v: 10_000,
    "nan": lambda v: math.nan,
    "inf": lambda v: math.inf,
    "above1": lambda v: 1.5,
    "bogus": lambda v: "bogus",
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
                out.append(
                    Variant(
                        f"{key(i, arg)}:{kind}",
                        i,
                        arg,
                        value,
                        names,
                        DEFAULT_LEGAL.get(kind) if role == "x" else None,
                    )
                )
    for group in entry.rows:
        stage, arg = _find(entry, group[-1])
        out.append(
            Variant(
                f"rows:{'/'.join(group)}",
                stage,
                arg,
                _drop_row,
                tuple(a.split(".")[-1] for a in group),
            )
        )
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
def run(entry: Entry, variant: Variant | None = None, applied: list[Any] | None = None) -> Any:
    """Run the entry's stages (with ``variant`` applied); return the last stage's result.

    ``applied``, when given, receives the bad value the variant put in and the valid value it
    replaced (the requires-grad leaf of a ``grad`` variant is read from it).
    """
    torch.manual_seed(0)
    obj: Any = None
    result: Any = None
    for i, st in enumerate(entry.stages):
        kwargs = st.args()
        if variant is not None and variant.stage == i:
            old = kwargs.get(variant.arg)
            kwargs[variant.arg] = variant.value(old)
            if applied is not None:
                applied += [kwargs[variant.arg], old]
        if i == 0:
            result = obj = entry.target(**kwargs)
        elif st.method == "__call__":
            result = obj(**kwargs)
        else:
            result = getattr(obj, st.method)(**kwargs)
    if len(entry.stages) > 1 and isinstance(obj, nn.Module):
        return (result, obj)  # the module's weights are checked too (a fit on bad data)
    return result


class Hang(BaseException):
    """A variant call that ran past :data:`TIME_LIMIT_S` (a ``BaseException``: nothing swallows
    it)."""


def call_with_time_limit(f: Callable[[], Any], seconds: float = TIME_LIMIT_S) -> Any:
    """``f()``, raising :class:`Hang` once it has run ``seconds``.

    In the main thread a ``SIGALRM`` timer interrupts the call (pytest and its xdist workers run
    tests there on Linux); in any other thread, or where ``SIGALRM`` does not exist, ``f`` runs in a
    daemon thread that is abandoned (left running) when it overruns.
    """
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):

        def on_alarm(signum: int, frame: Any) -> None:
            raise Hang(f"the call ran past the {seconds:g} s time limit")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return f()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = f()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name="bad-input-variant")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise Hang(
            f"the call ran past the {seconds:g} s time limit (left running in a daemon thread)"
        )
    if "error" in box:
        raise box["error"]
    return box["result"]


def _children(x: Any) -> list[Any] | None:
    """The items of a container, mapping, dataclass or module weights (None for a leaf)."""
    if isinstance(x, nn.Module):
        return [t for _, t in (*x.named_parameters(), *x.named_buffers()) if t is not None]
    if isinstance(x, Mapping):
        return list(x.values())[:64]
    if isinstance(x, (list, tuple)):
        return list(x)[:64]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [getattr(x, f.name) for f in dataclasses.fields(x)][:64]
    return None


def numbers(x: Any, depth: int = 0) -> list[Any]:
    """The tensors, arrays and floats of a (nested) result, in order (module weights included)."""
    if isinstance(x, (torch.Tensor, np.ndarray, float)) and not isinstance(x, bool):
        return [x]
    kids = _children(x) if depth <= 6 else None
    return [n for k in kids or () for n in numbers(k, depth + 1)]


def _on_meta(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "meta"


def find_nan(x: Any, depth: int = 0) -> str | None:
    """Where a NaN sits in a (nested) result, or None."""
    for n in numbers(x, depth):
        if isinstance(n, torch.Tensor):
            if (
                not _on_meta(n)
                and (n.is_floating_point() or n.is_complex())
                and bool(torch.isnan(n.detach()).any())
            ):
                return f"tensor of shape {tuple(n.shape)}"
        elif isinstance(n, np.ndarray):
            if n.dtype.kind in "fc" and bool(np.isnan(n).any()):
                return "ndarray"
        elif math.isnan(n):
            return "float"
    return None


def _has_inf(n: Any) -> bool:
    if isinstance(n, torch.Tensor):
        return (
            not _on_meta(n)
            and (n.is_floating_point() or n.is_complex())
            and bool(torch.isinf(n.detach()).any())
        )
    if isinstance(n, np.ndarray):
        return n.dtype.kind in "fc" and bool(np.isinf(n).any())
    return math.isinf(n)


def find_inf(x: Any) -> str | None:
    """Where an infinity sits in a (nested) result, or None."""
    for n in numbers(x):
        if _has_inf(n):
            return (
                f"tensor of shape {tuple(n.shape)}"
                if isinstance(n, torch.Tensor)
                else type(n).__name__
            )
    return None


def snapshot(result: Any) -> list[Any]:
    """Detached copies of a result's numbers (what a ``grad`` variant's result must equal)."""
    out: list[Any] = []
    for n in numbers(result):
        if isinstance(n, torch.Tensor):
            out.append(n.detach().clone())
        elif isinstance(n, np.ndarray):
            out.append(n.copy())
        else:
            out.append(n)
    return out


class _Unstable:
    """A number of the valid result that differs between two valid calls (a time, a random draw)."""

    def __repr__(self) -> str:
        return "UNSTABLE"


UNSTABLE = _Unstable()


def stable_snapshot(first: list[Any], second: list[Any]) -> list[Any]:
    """``first`` with :data:`UNSTABLE` where two snapshots of the valid call differ (a ``grad``
    variant is compared on the numbers that the valid call reproduces)."""
    if len(first) != len(second):
        return [UNSTABLE] * len(first)
    return [a if _same(a, b) else UNSTABLE for a, b in zip(first, second, strict=True)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if _on_meta(a) or _on_meta(b):
            return a.shape == b.shape
        a, b = a.detach(), b.detach()
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and bool(
                torch.equal(a, b)
                or (
                    (a.is_floating_point() or a.is_complex())
                    and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
                )
            )
        )
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return False


def differs(result: Any, reference: list[Any]) -> str | None:
    """Where ``result``'s numbers differ from the snapshot ``reference``, or None."""
    got = numbers(result)
    if len(got) != len(reference):
        return f"{len(got)} numbers instead of {len(reference)}"
    for i, (a, b) in enumerate(zip(got, reference, strict=True)):
        if b is not UNSTABLE and not _same(a, b):
            shape = (
                f" of shape {tuple(a.shape)}" if isinstance(a, (torch.Tensor, np.ndarray)) else ""
            )
            return f"number {i}{shape}"
    return None


def _leaf(applied: list[Any]) -> torch.Tensor | None:
    v = _first(applied[0]) if applied else None
    return v if isinstance(v, torch.Tensor) and v.requires_grad else None


def _first(v: Any) -> Any:
    return v[0] if isinstance(v, (list, tuple)) and v else v


def _was_floating(applied: list[Any]) -> bool:
    """Whether the valid value a variant replaced was floating (a ``grad`` variant of integer data
    changes its dtype too: refusing that is right)."""
    old = _first(applied[1]) if len(applied) > 1 else None
    return (
        isinstance(old, torch.Tensor)
        and old.is_floating_point()
        or (isinstance(old, np.ndarray) and old.dtype.kind == "f")
    )


def _backward(result: Any, leaf: torch.Tensor | None) -> str | None:
    """Differentiate a result that requires grad: ``backward()`` of the sum of its graph outputs."""
    outs = [
        n
        for n in numbers(result)
        if isinstance(n, torch.Tensor)
        and n.requires_grad
        and n.grad_fn is not None
        and n.is_floating_point()
    ]
    if not outs:
        return None
    try:
        sum(o.sum() for o in outs).backward()
    except Exception as exc:  # noqa: BLE001 - a loss that cannot be differentiated is the defect
        return f"backward fails: {type(exc).__name__}: {str(exc)[:160]}"
    if leaf is not None and leaf.grad is not None and not bool(torch.isfinite(leaf.grad).all()):
        return "the gradient on the input holds NaN or inf"
    return None


def _names_it(names: Sequence[str], message: str) -> bool:
    return any(
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names
    )


def legal_reason(entry: Entry, variant: Variant) -> str | None:
    for pattern, reason in entry.legal.items():
        if fnmatch.fnmatchcase(variant.id, pattern):
            return reason
    return variant.default_legal


def _kind(variant: Variant) -> str:
    return variant.id.rpartition(":")[2]


def verdict(
    entry: Entry,
    variant: Variant,
    reference: list[Any] | None = None,
    time_limit: float | None = None,
) -> str | None:
    """``None`` if the variant behaves (named error or documented legal result), else the defect.

    ``reference``: :func:`snapshot` of the valid call's result (computed here when a ``grad``,
    ``overflow`` or ``subnormal`` variant needs it and none is given; a ``grad`` result that
    differs from it is compared again on the numbers a second valid call reproduces).
    ``time_limit``: seconds before the call is the defect ``hang`` (default :data:`TIME_LIMIT_S`).
    """
    kind = _kind(variant)
    applied: list[Any] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = call_with_time_limit(
                lambda: run(entry, variant, applied),
                TIME_LIMIT_S if time_limit is None else time_limit,
            )
    except Hang as exc:
        return f"hang: {exc}"
    except FileNotFoundError as exc:  # a missing path: the standard error, when it names the path
        if variant.id.endswith(":missing") and _names_it(variant.names, str(exc)):
            return None
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        if (
            kind == "grad"
            and variant.default_legal
            and legal_reason(entry, variant) == variant.default_legal
            and _was_floating(applied)
        ):
            return f"requires-grad input refused ({type(exc).__name__}): {msg[:200]}"
        if _names_it(variant.names, msg):
            return None
        return f"{type(exc).__name__} that does not name {variant.names[0]!r}: {msg[:200]}"
    except Exception as exc:  # noqa: BLE001 - every other error is a defect of the matrix
        return f"obscure {type(exc).__name__}: {str(exc)[:200]}"
    where = find_nan(result)
    if where:
        return f"silent NaN ({where})"
    reason = legal_reason(entry, variant)
    if reason is None:
        return "accepted silently (no documented legal result)"
    if reason != variant.default_legal or kind not in (*FINITE_KINDS, "grad"):
        return None  # a documented legal result of the entry: checked for NaN only
    if reference is None:
        reference = snapshot(run(entry))
    if kind in FINITE_KINDS:
        where = find_inf(result)
        if where and not any(n is not UNSTABLE and _has_inf(n) for n in reference):
            return f"silent inf ({where}) from finite input"
        return None
    where = differs(result, reference)
    if where:  # compare again on the numbers a second valid call reproduces (times, random draws)
        where = differs(result, stable_snapshot(reference, snapshot(run(entry))))
    if where:
        return f"requires-grad input changes the result ({where} differs from the detached call)"
    return _backward(result, _leaf(applied))


def ledger_key(entry: Entry, variant: Variant) -> str:
    return f"{entry.name} {variant.id}"
