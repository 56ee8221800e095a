"""A CPU-only stand-in for a CUDA device: what CUDA would refuse raises here too (issue 27).

No GPU runs our tests, so the CUDA paths are checked by emulation. Inside :func:`fake_cuda`:

* ``torch.cuda.is_available()`` is True (so :func:`rank_lab.utils.get_device` picks ``"cuda"``) and
  the ``torch.cuda`` helpers the package calls (seeding, RNG states, capability, names) answer as
  one device would;
* a tensor "moved to CUDA" (``.to("cuda")``, ``.cuda()``, a factory called with ``device="cuda"``,
  ``Module.to("cuda")``, ``torch.load(map_location="cuda")``) stays on the CPU but is **marked**;
  the result of an op is marked when one of its inputs is (or when it was asked for
  ``device="cuda"``); a marked tensor reports ``device == cuda:0`` and ``is_cuda``; ``.cpu()`` /
  ``.to("cpu")`` give an unmarked copy;
* what CUDA refuses raises :class:`DeviceMismatch`: an op that mixes a marked tensor with an
  unmarked tensor of one or more dimensions (CUDA accepts CPU *scalars*: 0-dim tensors), a CPU
  tensor indexed by (or assigned through) marked indices, ``.numpy()`` of a marked tensor, a random
  op whose generator sits on the other device;
* host synchronisations are counted (:attr:`FakeCuda.syncs`): ``.item()``, ``bool()``, ``int()``,
  ``float()``, ``__index__``, ``.tolist()``, printing, and ``.cpu()`` / ``.to("cpu")`` / ``copy_``
  of a marked tensor into a CPU one.

Autograd's engine runs backward passes without the active torch-function modes, so the harness also
re-enters itself in the ``backward`` of every ``torch.autograd.Function`` defined in ``rank_lab``
(the custom backwards of the rank kernels are checked like the forwards). Autocast on ``"cuda"`` is
a no-op here (the tensors are CPU tensors): autocast is tested apart, on the CPU (``tests/device``).

Usage::

    with fake_cuda() as fc:
        x = torch.randn(4, 3).to("cuda")      # marked
        y = x @ torch.randn(3, 2)             # DeviceMismatch: (4, 3) cuda with (3, 2) cpu
    fc.syncs                                  # Counter of host syncs by kind
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import pkgutil
import sys
import types
from collections import Counter
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["DeviceMismatch", "FakeCuda", "fake_cuda", "is_marked", "mark", "to_fake_cuda"]

_MARK = "_rank_lab_fake_cuda"
_SAVED_TENSORS = torch._C._FunctionBase.saved_tensors
CUDA = torch.device("cuda", 0)


class DeviceMismatch(RuntimeError):
    """What CUDA would have refused (the message says which op and which tensors)."""


def is_marked(x: object) -> bool:
    """Whether ``x`` is a tensor "on CUDA" (marked)."""
    return isinstance(x, torch.Tensor) and x.__dict__.get(_MARK, False)


def mark(x: Any) -> Any:
    """Mark every tensor in ``x`` (a tensor, or lists / tuples / dicts of them) as being on CUDA."""
    for t in _tensors(x):
        t.__dict__[_MARK] = True
    return x


def _tensors(x: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif depth < 3 and isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v, depth + 1)
    elif depth < 3 and isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v, depth + 1)


def _is_cuda(device: object) -> bool | None:
    """True / False for a CUDA / another device, None for no device."""
    if device is None:
        return None
    if isinstance(device, int):
        return True  # an ordinal: a CUDA device
    try:
        return torch.device(device).type == "cuda"  # type: ignore[arg-type]
    except (TypeError, RuntimeError):
        return None


class FakeGenerator(torch.Generator):
    """``torch.Generator(device="cuda")`` inside :func:`fake_cuda`: a CPU generator that knows it is
    "CUDA"."""

    def __new__(cls, device: Any = "cpu") -> FakeGenerator:
        return super().__new__(cls, device="cpu")

    def __init__(self, device: Any = "cpu") -> None:
        self.fake_cuda = bool(_is_cuda(device))

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return CUDA if self.fake_cuda else torch.device("cpu")


def _generator_is_cuda(g: object) -> bool:
    return bool(getattr(g, "fake_cuda", False))


def _shape(t: torch.Tensor) -> str:
    return (
        f"{'cuda' if is_marked(t) else 'cpu'} {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
    )


def _name(func: Any) -> str:
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", "") in ("__get__", "__set__") and owner is not None:
        return f"Tensor.{getattr(owner, '__name__', '?')}.{func.__name__}"
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


#: Ops that legitimately take tensors of both devices (copies across devices).
_CROSS_DEVICE = {
    "to",
    "cuda",
    "cpu",
    "copy_",
    "new_tensor",
    "tensor",
    "as_tensor",
    "_has_compatible_shallow_copy_type",
    "is_same_size",
    "is_set_to",
    "__deepcopy__",
    "__reduce_ex__",
    "_make_subclass",
    "broadcast_tensors",
}
_SYNCS = {
    "item": "item",
    "__bool__": "bool",
    "__int__": "int",
    "__float__": "float",
    "__index__": "index",
    "__complex__": "complex",
    "tolist": "tolist",
    "__repr__": "print",
    "__format__": "print",
    "__str__": "print",
}
_BASIC_INDEX = (int, slice, type(None), type(Ellipsis), bool)


def _index_has_tensor(idx: object) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return any(not isinstance(i, _BASIC_INDEX) for i in items)


class FakeCuda(TorchFunctionMode):
    """The torch-function mode of :func:`fake_cuda` (see the module docstring).

    Attributes:
        syncs: host synchronisations of marked tensors, by kind (``"item"``, ``"bool"``,
            ``"cpu"`` ...).
        where: for each kind, the first few ops that synced (for messages).
    """

    def __init__(self) -> None:
        super().__init__()
        self.syncs: Counter[str] = Counter()
        self.where: dict[str, list[str]] = {}

    def sync(self, kind: str, what: str) -> None:
        """Count one host synchronisation (and remember where the package asked for it)."""
        self.syncs[kind] += 1
        self.where.setdefault(kind, [])
        if len(self.where[kind]) < 16:
            self.where[kind].append(f"{what} at {_caller()}")

    @property
    def n_syncs(self) -> int:
        """Host synchronisations counted so far."""
        return sum(self.syncs.values())

    def reset(self) -> None:
        """Forget the syncs counted so far."""
        self.syncs.clear()
        self.where.clear()

    # ------------------------------------------------------------------ dispatch
    def __torch_function__(
        self, func: Any, types_: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        fname = getattr(func, "__name__", "")
        if fname in ("__get__", "__set__") and isinstance(
            getattr(func, "__self__", None), types.GetSetDescriptorType
        ):
            return self._attribute(func, fname, args)
        name = fname
        if name in ("to", "cuda", "cpu"):
            return self._move(func, name, args, kwargs)
        if name in ("numpy", "__array__") and args and is_marked(args[0]):
            raise DeviceMismatch(
                f"{_name(func)}() of a CUDA tensor ({_shape(args[0])}): call .cpu() first"
            )
        if name == "get_device" and args and is_marked(args[0]):
            return 0
        if name == "pin_memory" and args and isinstance(args[0], torch.Tensor):
            return args[0]  # page-locked memory needs the driver; a no-op here
        if name == "is_pinned":
            return False
        if name == "ctc_loss":  # CUDA's CTC takes the lengths on the CPU (cuDNN even requires it)
            names = ("log_probs", "targets", "input_lengths", "target_lengths")
            kw = dict(zip(names, args, strict=False)) | kwargs
            self._check_mix(func, [kw["log_probs"], kw["targets"]])
            out = func(*args, **kwargs)
            return mark(out) if is_marked(kw["log_probs"]) else out
        if name in _SYNCS and args and is_marked(args[0]):
            self.sync(_SYNCS[name], f"{_name(func)} of {_shape(args[0])}")
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        if name == "__getitem__":
            return self._getitem(func, args, kwargs)
        if name == "__setitem__":
            return self._setitem(func, args, kwargs)
        return self._op(func, name, args, kwargs)

    def _attribute(self, func: Any, fname: str, args: tuple) -> Any:
        attr = func.__self__.__name__
        t = args[0]
        if fname == "__set__":
            if attr == "data" and isinstance(t, torch.Tensor):
                t.__dict__[_MARK] = is_marked(args[1])
            elif (
                attr == "grad"
                and isinstance(args[1], torch.Tensor)
                and is_marked(t) != is_marked(args[1])
            ):
                raise DeviceMismatch(
                    f"assigning a {_shape(args[1])} gradient to a {_shape(t)} tensor"
                )
            return func(*args)
        if is_marked(t):
            if attr == "device":
                return CUDA
            if attr == "is_cuda":
                return True
            if attr == "is_cpu":
                return False
        out = func(*args)
        if (
            is_marked(t)
            and isinstance(out, torch.Tensor)
            and attr in ("grad", "data", "real", "imag", "T", "mT", "H", "mH")
        ):
            mark(out)
        return out

    def _move(self, func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        t = args[0]
        if not isinstance(t, torch.Tensor):
            return func(*args, **kwargs)
        if name == "cuda":
            target, func, args, kwargs = True, torch.Tensor.cpu, (t,), {}
        elif name == "cpu":
            target = False
        else:
            rest = args[1:]
            if rest and isinstance(rest[0], torch.Tensor):  # .to(other): other's device and dtype
                target = is_marked(rest[0])
                args, kwargs = (t, rest[0].dtype, *rest[1:]), kwargs
            else:
                device, _, _, _ = torch._C._nn._parse_to(*rest, **kwargs)
                target = _is_cuda(device)
                if device is not None:
                    kwargs = dict(kwargs)
                    if "device" in kwargs:
                        kwargs["device"] = "cpu"
                    else:
                        args = (t, "cpu", *[a for a in rest if not _is_device_like(a)])
        src_marked = is_marked(t)
        out = func(*args, **kwargs)
        if target is None:
            if out is not t and src_marked:
                mark(out)
            return out
        if target == src_marked:
            return mark(out) if target else out
        if out is t:
            out = t.clone()  # a move copies; the source keeps its device
        if target:
            mark(out)
        else:
            out.__dict__.pop(_MARK, None)
            self.sync("cpu", f"{_name(func)} of {_shape(t)}")
        return out

    def _getitem(self, func: Any, args: tuple, kwargs: dict) -> Any:
        t, idx = args[0], args[1]
        idx_marked = [
            i for i in _tensors(idx if isinstance(idx, tuple) else (idx,)) if is_marked(i)
        ]
        if not is_marked(t) and idx_marked:
            raise DeviceMismatch(
                f"a CPU tensor ({_shape(t)}) indexed by CUDA indices ({_shape(idx_marked[0])})"
            )
        out = func(*args, **kwargs)
        if is_marked(t):
            mark(out)
        return out

    def _setitem(self, func: Any, args: tuple, kwargs: dict) -> Any:
        t, idx, value = args[0], args[1], args[2]
        idx_t = list(_tensors(idx if isinstance(idx, tuple) else (idx,)))
        if not is_marked(t) and any(is_marked(i) for i in idx_t):
            raise DeviceMismatch(f"a CPU tensor ({_shape(t)}) assigned through CUDA indices")
        if isinstance(value, torch.Tensor) and value.dim() > 0 and is_marked(value) != is_marked(t):
            if _index_has_tensor(idx):
                raise DeviceMismatch(
                    f"index_put of {_shape(value)} values into a {_shape(t)} tensor"
                )
            if is_marked(value):
                self.sync("cpu", f"Tensor.__setitem__ of {_shape(value)} into a CPU tensor")
        return func(*args, **kwargs)

    @staticmethod
    def _check_mix(func: Any, tensors: list[torch.Tensor]) -> None:
        marked = [t for t in tensors if is_marked(t)]
        other = [t for t in tensors if not is_marked(t) and t.dim() > 0]
        if marked and other:
            raise DeviceMismatch(
                f"{_name(func)} mixes a CUDA tensor ({_shape(marked[0])}) with a CPU tensor "
                f"({_shape(other[0])}): Expected all tensors to be on the same device"
            )

    def _op(self, func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        device = kwargs.get("device")
        target = _is_cuda(device)
        if target:
            kwargs["device"] = "cpu"
        tensors = [*_tensors(args), *_tensors(list(kwargs.values()))]
        marked = [t for t in tensors if is_marked(t)]
        if marked and name not in _CROSS_DEVICE:
            self._check_mix(func, tensors)
        gen = kwargs.get("generator")
        out_cuda = target if target is not None else bool(marked)
        if isinstance(gen, torch.Generator) and _generator_is_cuda(gen) != out_cuda:
            raise DeviceMismatch(
                f"{_name(func)}: a {'CUDA' if _generator_is_cuda(gen) else 'CPU'} generator for a "
                f"{'CUDA' if out_cuda else 'CPU'} tensor"
            )
        if (
            name == "copy_"
            and args
            and isinstance(args[0], torch.Tensor)
            and not is_marked(args[0])
            and len(args) > 1
            and is_marked(args[1])
        ):
            self.sync("cpu", f"copy_ of {_shape(args[1])} into a CPU tensor")
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if out_cuda and not (name == "copy_" and not is_marked(args[0])):
            mark(out)
        return out


def _caller() -> str:
    """``file:line`` of the innermost ``rank_lab`` frame on the stack (or ``?``)."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if "/rank_lab/" in name and "/tests/" not in name:
            return f"{name.rsplit('/rank_lab/', 1)[1]}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return "?"


def _is_device_like(a: object) -> bool:
    return isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool))


def _rank_lab_functions() -> list[type]:
    """Every ``torch.autograd.Function`` subclass defined in ``rank_lab`` (after importing it
    all)."""
    import rank_lab

    for info in pkgutil.walk_packages(rank_lab.__path__, "rank_lab."):
        if ".book" in info.name or info.name.endswith("__main__"):
            continue
        with contextlib.suppress(ImportError):
            importlib.import_module(info.name)
    out, todo = [], list(torch.autograd.Function.__subclasses__())
    while todo:
        c = todo.pop()
        todo += c.__subclasses__()
        if c.__module__.startswith("rank_lab"):
            out.append(c)
    return out


def _wrap_function(mode: FakeCuda, fn_cls: type) -> list[tuple[str, Any]]:
    """Make ``fn_cls`` record whether its forward ran on CUDA and check its backward under ``mode``.

    Returns the original ``(name, staticmethod)`` pairs, to restore.
    """
    fwd_orig, bwd_orig = fn_cls.__dict__["forward"], fn_cls.__dict__["backward"]
    fwd = fwd_orig.__func__ if isinstance(fwd_orig, staticmethod) else fwd_orig
    bwd = bwd_orig.__func__ if isinstance(bwd_orig, staticmethod) else bwd_orig

    @functools.wraps(fwd)
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        out = fwd(ctx, *args, **kwargs)
        ctx._fake_cuda = any(
            is_marked(o) for o in _tensors(out if isinstance(out, tuple) else (out,))
        )
        ctx._fake_saved = [is_marked(t) for t in (getattr(ctx, "to_save", None) or ())]
        return out

    @functools.wraps(bwd)
    def backward(ctx: Any, *grads: Any) -> Any:
        if getattr(ctx, "_fake_cuda", False):
            mark(list(grads))  # autograd hands a CUDA forward's output gradients on CUDA
        with mode:
            out = bwd(ctx, *grads)
        if getattr(ctx, "_fake_cuda", False):
            wrong = [
                g
                for g in _tensors(out if isinstance(out, tuple) else (out,))
                if not is_marked(g) and g.dim() > 0
            ]
            if wrong:
                raise DeviceMismatch(
                    f"{fn_cls.__qualname__}.backward returned a CPU gradient ({_shape(wrong[0])}) "
                    "for CUDA inputs"
                )
        return out

    def saved_tensors(ctx: Any) -> tuple:
        # autograd unpacks a saved *output* as a new tensor object: give it its forward's mark
        out = _SAVED_TENSORS.__get__(ctx)
        for t, was_marked in zip(out, getattr(ctx, "_fake_saved", ()), strict=False):
            if was_marked and isinstance(t, torch.Tensor):
                mark(t)
        return out

    fn_cls.forward = staticmethod(forward)
    fn_cls.backward = staticmethod(backward)
    fn_cls._backward_cls.saved_tensors = property(saved_tensors)
    return [("forward", fwd_orig), ("backward", bwd_orig)]


class _Stream:
    """The current stream of the fake device: never capturing a graph."""

    def is_capturing(self) -> bool:
        return False

    def synchronize(self) -> None:
        pass


class _Props:
    def __init__(self, major: int, minor: int) -> None:
        self.major, self.minor, self.name = major, minor, "Fake CUDA device (rank_lab tests)"
        self.total_memory, self.multi_processor_count = 16 * 2**30, 40


@contextlib.contextmanager
def fake_cuda(capability: tuple[int, int] = (8, 0)) -> Iterator[FakeCuda]:
    """Emulate one CUDA device on the CPU (see the module docstring); yields the :class:`FakeCuda`
    mode.

    Args:
        capability: what ``torch.cuda.get_device_capability()`` answers (a T4 is ``(7, 5)``).
    """
    mode = FakeCuda()
    cpu_state = torch.get_rng_state
    real_load = torch.load

    def load(*args: Any, **kwargs: Any) -> Any:
        loc = kwargs.get("map_location")
        if _is_cuda(loc):
            kwargs["map_location"] = "cpu"
            return _mark_tree(real_load(*args, **kwargs))
        return real_load(*args, **kwargs)

    patches = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "is_initialized": lambda: True,
        "get_device_name": lambda device=None: "Fake CUDA device (rank_lab tests)",
        "get_device_capability": lambda device=None: capability,
        "get_device_properties": lambda device=None: _Props(*capability),
        "is_bf16_supported": lambda including_emulation=True: (
            capability >= (8, 0) or including_emulation
        ),
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "seed_all": lambda: None,
        "synchronize": lambda device=None: None,
        "set_device": lambda device: None,
        "empty_cache": lambda: None,
        "get_rng_state": lambda device="cuda": cpu_state(),
        "get_rng_state_all": lambda: [cpu_state()],
        "set_rng_state": lambda state, device="cuda": None,
        "set_rng_state_all": lambda states: None,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "mem_get_info": lambda device=None: (8 * 2**30, 16 * 2**30),
        "current_stream": lambda device=None: _Stream(),
        "is_current_stream_capturing": lambda: False,
    }
    functions = _rank_lab_functions()
    with contextlib.ExitStack() as stack:
        for name, value in patches.items():
            stack.enter_context(mock.patch.object(torch.cuda, name, value))
        stack.enter_context(
            mock.patch.object(torch.accelerator, "current_stream", lambda device=None: _Stream())
        )
        stack.enter_context(mock.patch.object(torch, "Generator", FakeGenerator))
        param_deepcopy = torch.nn.Parameter.__deepcopy__
        stack.enter_context(
            mock.patch.object(
                torch.nn.Parameter,
                "__deepcopy__",
                lambda self, memo: (
                    mark(param_deepcopy(self, memo))
                    if is_marked(self)
                    else param_deepcopy(self, memo)
                ),
            )
        )
        # cuDNN's packed RNN weights need the driver; the CPU RNN kernels take the same weights
        stack.enter_context(
            mock.patch.object(torch.nn.RNNBase, "flatten_parameters", lambda self: None)
        )
        stack.enter_context(mock.patch.object(torch, "load", load))
        for fn_cls in functions:
            if (
                "backward" in fn_cls.__dict__
                and "forward" in fn_cls.__dict__
                and "setup_context" not in fn_cls.__dict__
            ):
                for attr, original in _wrap_function(mode, fn_cls):
                    stack.callback(setattr, fn_cls, attr, original)
                stack.callback(delattr, fn_cls._backward_cls, "saved_tensors")
        with mode:
            yield mode


def _mark_tree(x: Any, depth: int = 0) -> Any:
    if isinstance(x, torch.Tensor):
        return mark(x)
    if depth < 8 and isinstance(x, (list, tuple)):
        for v in x:
            _mark_tree(v, depth + 1)
    elif depth < 8 and isinstance(x, dict):
        for v in x.values():
            _mark_tree(v, depth + 1)
    return x


def to_fake_cuda(x: Any, depth: int = 0) -> Any:
    """``x`` with every tensor (in lists, tuples, dicts, modules) moved to the fake CUDA device.

    Call inside :func:`fake_cuda`. Modules are moved in place (``module.to("cuda")``); tensors are
    copied (``.to("cuda")``); other values are returned as they are.
    """
    if isinstance(x, torch.nn.Module):
        return x.to("cuda")
    if isinstance(x, torch.nn.Parameter):
        return torch.nn.Parameter(x.detach().to("cuda"), requires_grad=x.requires_grad)
    if isinstance(x, torch.Tensor):
        if x.is_leaf and x.requires_grad:  # a leaf created on the device, as a CUDA user would
            return x.detach().to("cuda").requires_grad_(True)
        return x.to("cuda")
    if depth < 4 and isinstance(x, list):
        return [to_fake_cuda(v, depth + 1) for v in x]
    if depth < 4 and isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(to_fake_cuda(v, depth + 1) for v in x)
    if depth < 4 and isinstance(x, dict):
        return {k: to_fake_cuda(v, depth + 1) for k, v in x.items()}
    return x
