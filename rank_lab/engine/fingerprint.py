"""Fingerprints that tie a checkpoint to what produced it: the training data and the code.

The engine stores ``{"data", "code", "parameters"}`` in every checkpoint and refuses to resume
from a checkpoint whose data or code differ
(:class:`~rank_lab.engine.checkpoint.CheckpointMismatchError`); the parameters (the run's
configuration and schedule) are compared key by key by the resume rule
(:func:`rank_lab.engine.guard.check_resume`).

* :func:`data_fingerprint` hashes what a loop trains on: the bytes of tensors and arrays (with
  their dtype and shape), numbers and strings, containers, a dataset's attributes (its ``paths``,
  ``labels``, transform ...), and files by name, size and modification time (a file counts as
  changed when its size or modification time changes: the files of an image dataset are not read).
  An object with a ``fingerprint()`` method supplies its own.
* :func:`code_fingerprint` is the rank_lab version and a hash of the package's sources, plus the
  code of the notebook being run when :func:`set_code_context` named one (the book's runner does):
  a resumed run continues only with the code that wrote the checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import re
import types
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["data_fingerprint", "code_fingerprint", "set_code_context", "short"]

_MAX_DEPTH = 12
_CONTEXT: dict[str, str] = {}


def short(fingerprint: str | None) -> str:
    """The first 12 hex digits of a fingerprint (``"none"`` for ``None``), as messages show it."""
    return "none" if fingerprint is None else str(fingerprint)[:12]


class _Seen(set):
    """The objects being fed (cycle detection), and the ids of the run's own state (``state``)."""

    def __init__(self, state: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.state = state


def _state_ids(state: Any) -> frozenset[int]:
    ids: set[int] = set()
    for obj in state:
        # shared singletons: never state
        if obj is None or isinstance(obj, (bool, int, float, str)):
            continue
        ids.add(id(obj))
        if isinstance(obj, nn.Module):
            ids.update(id(m) for m in obj.modules())
            ids.update(id(t) for t in obj.parameters())
            ids.update(id(t) for t in obj.buffers())
        elif isinstance(obj, torch.optim.Optimizer):
            ids.update(id(t) for g in obj.param_groups for t in g["params"])
    return frozenset(ids)


def data_fingerprint(data: Any, *, state: Any = ()) -> str:
    """A SHA-256 (hex) of ``data``: equal for equal data, different when a value, a shape, a dtype,
    a file's size or modification time changes.

    Args:
        data: tensors, arrays, numbers, strings, paths, lists, tuples, dicts, datasets (their
            attributes), functions (their code and captured values), or any nesting of them.
        state: the run's own state (the modules it trains, their optimisers): where ``data`` holds
            them (a loss function that closes over the model), only their type is fed, since their
            values change as the run trains and the checkpoint restores them. Submodules,
            parameters and buffers of a module count as its state.

    Returns:
        64 hex digits.
    """
    h = hashlib.sha256()
    _feed(h, data, _Seen(_state_ids(state)), 0)
    return h.hexdigest()


def _tag(h: Any, tag: str, text: str = "") -> None:
    h.update(f"\x00{tag}:{len(text)}:{text}".encode())


def _feed_tensor(h: Any, t: torch.Tensor) -> None:
    _tag(h, "tensor", f"{t.dtype}{tuple(t.shape)}{t.layout}")
    if t.is_meta:
        return
    if t.layout != torch.strided:
        t = t.to_dense()
    flat = t.detach().cpu().contiguous().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    if flat.numel():
        h.update(
            flat.view(torch.uint8).numpy().tobytes()
            if flat.dtype != torch.bool
            else flat.to(torch.uint8).numpy().tobytes()
        )


def _feed_path(h: Any, p: Path) -> None:
    try:
        st = p.stat()
    except OSError:
        _tag(h, "path", f"{p} missing")
        return
    kind = "dir" if p.is_dir() else "file"
    size = 0 if kind == "dir" else st.st_size
    _tag(h, "path", f"{p.resolve()} {kind} {size} {st.st_mtime_ns}")


def _feed(h: Any, obj: Any, seen: _Seen, depth: int) -> None:  # noqa: C901 - one branch per kind
    if depth > _MAX_DEPTH:
        _tag(h, "deep", type(obj).__qualname__)
        return
    if id(obj) in seen.state:  # the run's own state: restored by the checkpoint, not its data
        _tag(h, "state", type(obj).__qualname__)
        return
    if obj is None or isinstance(obj, (bool, int, float, complex)):
        _tag(h, type(obj).__name__, repr(obj))
    elif isinstance(obj, str):
        _tag(h, "str", obj)
        if os.sep in obj and len(obj) < 4096 and os.path.exists(obj):
            _feed_path(h, Path(obj))
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = bytes(obj)
        _tag(h, "bytes", str(len(b)))
        h.update(b)
    elif isinstance(obj, torch.Tensor):
        _feed_tensor(h, obj)
    elif isinstance(obj, np.ndarray):
        if obj.dtype == object:
            _tag(h, "objarray", str(obj.shape))
            for v in obj.reshape(-1):
                _feed(h, v, seen, depth + 1)
        else:
            _tag(h, "array", f"{obj.dtype.str}{obj.shape}")
            h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, np.generic):
        _tag(h, "np", f"{obj.dtype.str}{obj!r}")
    elif isinstance(obj, os.PathLike):
        _feed_path(h, Path(obj))
    elif isinstance(obj, (torch.dtype, torch.device)):
        _tag(h, "torch", str(obj))
    elif isinstance(obj, torch.Generator):
        # its state is the engine's to checkpoint, not the data
        _tag(h, "generator", str(obj.device))
    # an object that holds itself (``seen``: the objects being fed, outermost first)
    elif id(obj) in seen:
        _tag(h, "cycle", type(obj).__qualname__)
    else:
        seen.add(id(obj))
        try:
            _feed_container(h, obj, seen, depth)
        finally:
            seen.discard(id(obj))


def _set_item(v: Any, seen: _Seen) -> str:
    h = hashlib.sha256()
    _feed(h, v, _Seen(seen.state), 0)
    return h.hexdigest()


def _feed_container(h: Any, obj: Any, seen: _Seen, depth: int) -> None:
    if isinstance(obj, Mapping):
        _tag(h, "map", str(len(obj)))
        for k in sorted(obj, key=repr):
            _feed(h, k, seen, depth + 1)
            _feed(h, obj[k], seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        _tag(h, type(obj).__name__, str(len(obj)))
        for v in obj:
            _feed(h, v, seen, depth + 1)
    elif isinstance(obj, (set, frozenset)):
        _tag(h, "set", str(len(obj)))
        for d in sorted(_set_item(v, seen) for v in obj):
            _tag(h, "item", d)
    elif callable(getattr(obj, "fingerprint", None)) and not isinstance(obj, type):
        _tag(h, "own", type(obj).__qualname__)
        _feed(h, obj.fingerprint(), seen, depth + 1)
    elif isinstance(obj, nn.Module):
        _tag(h, "module", type(obj).__qualname__)
        _feed(h, obj.state_dict(), seen, depth + 1)
    elif isinstance(obj, (types.FunctionType, types.MethodType)):
        _feed_function(h, obj, seen, depth)
    elif isinstance(obj, (type, types.ModuleType, types.BuiltinFunctionType)):
        _tag(
            h,
            "named",
            f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', getattr(obj, '__name__', ''))}",  # noqa: E501
        )
    else:
        _tag(h, "object", f"{type(obj).__module__}.{type(obj).__qualname__}")
        attrs = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if isinstance(slot, str) and slot not in attrs and hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot)
        _feed(h, attrs, seen, depth + 1)


def _feed_function(h: Any, fn: Any, seen: _Seen, depth: int) -> None:
    if isinstance(fn, types.MethodType):
        _tag(h, "method", fn.__func__.__qualname__)
        _feed(h, fn.__self__, seen, depth + 1)
        return
    code = fn.__code__
    _tag(h, "function", f"{fn.__module__}.{fn.__qualname__}")
    h.update(code.co_code)
    _feed(
        h,
        [c for c in code.co_consts if isinstance(c, (int, float, str, bytes, tuple))],
        seen,
        depth + 1,
    )
    _feed(h, fn.__defaults__, seen, depth + 1)
    cells = []
    for c in fn.__closure__ or ():
        try:
            cells.append(c.cell_contents)
        except ValueError:  # an empty cell (a name bound later)
            cells.append(None)
    _feed(h, cells, seen, depth + 1)


_ROOT = Path(__file__).resolve().parents[1]  # the rank_lab package folder


@lru_cache(maxsize=1)
def _version() -> str:
    """``rank_lab.__version__``, read from the package's ``__init__.py`` (not imported: same
    floor)."""
    m = re.search(
        r'^__version__ = "([^"]+)"', (_ROOT / "__init__.py").read_text(encoding="utf-8"), re.M
    )
    return m.group(1) if m else "unknown"


@lru_cache(maxsize=1)
def _package_sources() -> str:
    """SHA-256 of the package's ``.py`` sources (relative path and bytes), read once per process."""
    root = _ROOT
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def set_code_context(name: str | None = None, source: str | None = None) -> None:
    """Add the code being run outside the package (a notebook's code cells) to
    :func:`code_fingerprint`.

    Args:
        name: e.g. the notebook's name; ``None`` clears the context.
        source: its code (hashed).
    """
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"source must be the code as a str or None, got {type(source).__name__}")
    _CONTEXT.clear()
    if name is not None:
        _CONTEXT["notebook"] = str(name)
        _CONTEXT["notebook_sha256"] = hashlib.sha256((source or "").encode()).hexdigest()


def code_fingerprint() -> dict[str, str]:
    """The code of this run:
    ``{"rank_lab": version, "sources_sha256": ..., ["notebook", "notebook_sha256"]}``."""
    return {"rank_lab": _version(), "sources_sha256": _package_sources(), **_CONTEXT}
