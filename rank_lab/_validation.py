"""Input checks shared by every public function.

Bad input gets a clear ``ValueError`` / ``TypeError`` that names the argument: mismatched shapes,
NaN/inf values, empty batches, complex values and ``meta`` tensors (:func:`check_real`, run by
:func:`as_tensor`, :func:`check_finite` and :func:`check_input`, so once at every public entry).
These helpers are the one place where such messages are written.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterable, Iterator

import numpy as np
import torch

__all__ = [
    "as_tensor",
    "check_real",
    "shape_only",
    "check_magnitude",
    "check_overflow",
    "check_inner_products",
    "unit_rows",
    "check_embeddings",
    "check_labels",
    "check_finite",
    "check_same_length",
    "check_scores_targets",
    "check_positive_int",
    "check_float",
    "check_choice",
    "check_nonneg_int",
    "check_index",
    "check_input_batch",
    "check_int_tensor",
    "check_sparse",
    "trusted_inputs",
    "trusts_inputs",
    "check_finite_input",
    "check_input",
    "check_module",
    "check_class_indices",
    "check_one_query",
]


_SHAPE_ONLY = threading.local()


@contextlib.contextmanager
def shape_only() -> Iterator[None]:
    """Accept ``meta`` tensors inside the block (shape-only runs such as FLOP counting).

    Outside it, :func:`check_real` refuses a ``meta`` tensor: it has a shape but no values, so no
    public function can compute its result (issue 26). Value checks (finite, ranges) are skipped
    for the ``meta`` tensors the block lets through.
    """
    previous = getattr(_SHAPE_ONLY, "on", False)
    _SHAPE_ONLY.on = True
    try:
        yield
    finally:
        _SHAPE_ONLY.on = previous


def check_real(x: torch.Tensor, name: str) -> torch.Tensor:
    """Refuse a complex tensor or a ``meta`` tensor (outside :func:`shape_only`), naming ``name``.

    No public function computes with complex values (casting would drop the imaginary part
    silently), and a ``meta`` tensor has no values to compute with. Returns ``x``.

    Raises:
        TypeError: a complex dtype. ValueError: a tensor on the ``meta`` device.
    """
    if x.is_complex():
        raise TypeError(
            f"{name} must hold real numbers, got complex dtype {x.dtype} (the imaginary part would "
            "be dropped)"
        )
    if x.device.type == "meta" and not getattr(_SHAPE_ONLY, "on", False):
        raise ValueError(
            f"{name} is a meta tensor (a shape without values): move it to a real device first"
        )
    return x


def as_tensor(x: object, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Convert ``x`` (tensor, ndarray, list) to a tensor, naming ``name`` in the error.

    Complex values and ``meta`` tensors are refused (:func:`check_real`).
    """
    if isinstance(x, torch.Tensor):
        check_real(x, name)
        return x if dtype is None else x.to(dtype)
    try:
        t = torch.as_tensor(x, dtype=dtype)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be a tensor or array-like, got {type(x).__name__}") from exc
    return check_real(t, name)


def check_finite(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if a floating tensor holds NaN or inf (complex and ``meta``:
    :func:`check_real`)."""
    check_real(x, name)
    if x.device.type == "meta":
        return  # a shape-only run (shape_only): no values to check
    if x.is_floating_point() and x.numel() and not bool(torch.isfinite(x).all()):
        n_bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {n_bad} NaN or inf value(s)")


def check_magnitude(
    x: torch.Tensor, name: str, *, underflow: bool = False, trusted: bool = False
) -> None:
    """Refuse finite float32/float64 values whose squares overflow the dtype.

    ``|x| > sqrt(finfo.max)`` (``1.8e19`` in float32, ``1.3e154`` in float64): batch statistics,
    norms and squared distances of such values are infinite, and a network fed them returns
    zeros or NaN or stores an infinite running variance without a word. With ``underflow``, a
    tensor whose largest magnitude is positive but below ``sqrt(finfo.tiny)`` (``1.1e-19`` in
    float32) is refused too: all its squares are subnormal or zero (a covariance of such data is
    zero, its precision infinite). Half precisions are not checked (their range is the caller's
    choice); ``meta`` tensors (:func:`shape_only`) neither, and nothing is checked when the caller
    says the values are ``trusted`` (it checked its data: :func:`check_input` inside a training
    step, like the finite check).

    Raises:
        ValueError: naming ``name``, the largest magnitude and the limit.
    """
    if (
        trusted
        or x.dtype not in (torch.float32, torch.float64)
        or not x.numel()
        or x.device.type == "meta"
    ):
        return
    big = float(x.detach().abs().amax())
    limit = math.sqrt(torch.finfo(x.dtype).max)
    if big > limit:
        raise ValueError(
            f"{name} holds values up to {big:.3g} in magnitude: their squares overflow {x.dtype} "
            f"(|{name}| must stay below {limit:.3g}); rescale {name}"
        )
    low = math.sqrt(torch.finfo(x.dtype).tiny)
    if underflow and 0 < big < low:
        raise ValueError(
            f"{name} holds values of magnitude {big:.3g} at most: their squares underflow "
            f"{x.dtype} (the largest |{name}| must reach {low:.3g}); rescale {name}"
        )


def _max_row_norm(x: torch.Tensor) -> float:
    """The largest row norm of a 2-D tensor, computed without overflow or underflow (float64, rows
    scaled by a power of two)."""
    x = x.detach().double()
    _, e = torch.frexp(x.abs().amax(1, keepdim=True))
    return float(
        (torch.ldexp(x, -e).norm(dim=1) * torch.ldexp(torch.ones(()), e.squeeze(1).double())).max()
    )


def check_inner_products(
    a: torch.Tensor, name_a: str, b: torch.Tensor | None = None, name_b: str | None = None
) -> None:
    """Refuse finite rows whose inner products (or squared norms) can overflow their dtype.

    By Cauchy-Schwarz ``|<a_i, b_j>| <= ||a_i|| ||b_j||``: when the largest row norms multiply to
    more than half of ``finfo(dtype).max``, a score or a squared distance may be infinite (a tie at
    ``inf`` that no ranking can break, or ``inf - inf = NaN``); below, none can be. ``b`` defaults
    to ``a`` (a self-search). float32/float64 2-D tensors only; nothing is checked on ``meta``
    tensors.

    Raises:
        ValueError: naming ``name_a`` (and ``name_b``), the largest row norm(s) and the limit.
    """
    if (
        a.dtype not in (torch.float32, torch.float64)
        or a.ndim != 2
        or not a.numel()
        or a.device.type == "meta"
    ):
        return
    na = _max_row_norm(a)
    nb = na if b is None or not b.numel() else _max_row_norm(b)
    limit = torch.finfo(a.dtype).max / 2
    if na * nb > limit:
        names = name_a if b is None or name_b is None else f"{name_a}/{name_b}"
        raise ValueError(
            f"{names}: rows of norm up to {max(na, nb):.3g} have inner products that overflow "
            f"{a.dtype} (the product of the largest norms must stay below {limit:.3g}); rescale "
            f"{names} (e.g. L2-normalise the rows)"
        )


def unit_rows(x: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    """``F.normalize(x, dim=dim, eps=eps)`` of ``x`` first scaled by a power of two per slice.

    ``F.normalize`` squares the entries: rows of magnitude ``1e20`` (float32) have an infinite norm
    and come out as zeros, subnormal rows (``1e-40``) fall under ``eps`` and come out tiny instead
    of unit. Dividing each slice by ``2^e`` near its largest entry is exact in floating point, so
    the result is bit-identical to ``F.normalize`` wherever that one neither overflows nor
    underflows, and unit everywhere else (an all-zero slice stays zero). Differentiable (the scale
    is a constant).
    """
    _, e = torch.frexp(x.detach().abs().amax(dim, keepdim=True))
    return torch.nn.functional.normalize(torch.ldexp(x, -e), dim=dim, eps=eps)


def check_overflow(result: torch.Tensor, name: str, what: str) -> torch.Tensor:
    """Raise ``ValueError`` naming ``name`` if ``result``, computed from finite ``name``, is not
    finite.

    The output guard of a public function whose result can overflow its dtype although its inputs
    are finite (squared distances, energies, exponentials of large values): one clear error
    instead of a silent ``inf`` or ``NaN``. Returns ``result``.

    Args:
        result: the computed tensor.
        name: the argument(s) to rescale, as the caller wrote them (e.g. ``"queries/support"``).
        what: the quantity in words, e.g. ``"the squared distances"``.
    """
    if (
        result.is_floating_point()
        and result.numel()
        and result.device.type != "meta"
        and not bool(torch.isfinite(result.detach()).all())
    ):
        raise ValueError(
            f"{name}: {what} overflow {result.dtype} (non-finite values from finite input); "
            f"rescale {name} (or compute in float64)"
        )
    return result


def check_embeddings(x: object, name: str = "embeddings", *, finite: bool = True) -> torch.Tensor:
    """Check a ``(N, d)`` floating, finite, non-empty embedding matrix and return it as a tensor.

    ``finite=False`` leaves the finite check (the one host sync) to the caller, which checks a
    tensor computed from ``x`` instead (the losses check their scores once).
    """
    x = as_tensor(x, name)
    if x.ndim != 2:
        raise ValueError(f"{name} must have shape (N, d), got {tuple(x.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (N = 0)")
    if x.shape[1] == 0:
        raise ValueError(f"{name} has zero dimensions (d = 0)")
    if not x.is_floating_point():
        x = x.float()
    if finite:
        check_finite(x, name)
    return x


def check_labels(y: object, n: int | None = None, name: str = "labels") -> torch.Tensor:
    """Check integer labels of shape ``(N,)`` or ``(N, L)`` (hierarchical, fine level first)."""
    y = as_tensor(y, name)
    if y.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape (N,) or (N, L), got {tuple(y.shape)}")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {y.dtype}")
    if y.shape[0] == 0:
        raise ValueError(f"{name} is empty (N = 0)")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} rows but the embeddings have {n}")
    return y.long()


def check_same_length(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same first dimension."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{name_a} has {a.shape[0]} rows but {name_b} has {b.shape[0]}")


def check_scores_targets(
    scores: object, targets: object, name_s: str = "scores", name_t: str = "targets"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a ``(Q, N)`` score matrix and a same-shape relevance matrix (bool or numeric)."""
    scores = as_tensor(scores, name_s)
    targets = as_tensor(targets, name_t)
    if scores.ndim == 1:
        scores = scores[None]
    if targets.ndim == 1:
        targets = targets[None]
    if scores.ndim != 2:
        raise ValueError(f"{name_s} must have shape (Q, N), got {tuple(scores.shape)}")
    if scores.shape != targets.shape:
        raise ValueError(
            f"{name_s} has shape {tuple(scores.shape)} but {name_t} has shape "
            f"{tuple(targets.shape)}"
        )
    if scores.numel() == 0:
        raise ValueError(f"{name_s} is empty (shape {tuple(scores.shape)})")
    if not scores.is_floating_point():
        scores = scores.float()
    check_finite(scores, name_s)
    if targets.is_floating_point():
        check_finite(targets, name_t)
        if bool((targets < 0).any()):
            raise ValueError(f"{name_t} must be non-negative")
    if targets.device != scores.device:
        targets = targets.to(scores.device)
    return scores, targets


def check_positive_int(k: object, name: str) -> int:
    """Check that ``k`` is a positive integer (not a bool) and return it."""
    if isinstance(k, bool) or not isinstance(k, int):
        try:
            if isinstance(k, np.integer):
                k = int(k)
            else:
                raise TypeError
        except TypeError:
            raise TypeError(f"{name} must be a positive int, got {type(k).__name__}") from None
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    return int(k)


def check_float(
    v: object,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Check that ``v`` is a finite real number in ``[low, high]`` (open ends with ``*_open``).

    Returns:
        ``float(v)``.

    Raises:
        TypeError: ``v`` is not a real number (a bool, a string, a tensor with more than one value).
        ValueError: ``v`` is NaN, infinite or out of range; the message names ``name``.
    """
    if isinstance(v, bool) or isinstance(v, (str, bytes)):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}") from None
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {f}")
    if low is not None and (f < low or (low_open and f == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {f}")
    if high is not None and (f > high or (high_open and f == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {f}")
    return f


def check_choice(value: object, name: str, choices: tuple[object, ...]) -> object:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``choices``; return it."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_nonneg_int(v: object, name: str) -> int:
    """Check that ``v`` is an integer ``>= 0`` (not a bool; numpy integers accepted) and return
    it."""
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            if not isinstance(v, np.integer):
                raise TypeError
            v = int(v)
        except TypeError:
            raise TypeError(f"{name} must be an int >= 0, got {type(v).__name__}") from None
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return int(v)


def check_index(idx: object, n_rows: int, size: int, name: str, rows_name: str) -> torch.Tensor:
    """Check a ``(n_rows,)`` integer index into ``[0, size)`` (one entry per row of ``rows_name``).

    Returns:
        The index as a long tensor.

    Raises:
        TypeError: not integers. ValueError: wrong shape or out of range; the message names
            ``name``.
    """
    t = as_tensor(idx, name)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer indices, got dtype {t.dtype}")
    if t.ndim != 1 or t.shape[0] != n_rows:
        raise ValueError(
            f"{name} must have shape ({n_rows},): one index per row of {rows_name}, got "
            f"{tuple(t.shape)}"
        )
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= size):
        raise ValueError(
            f"{name} must lie in [0, {size}), got range [{int(t.min())}, {int(t.max())}]"
        )
    return t.long()


def check_input_batch(
    x: object,
    name: str,
    shape: tuple[int | str, ...],
    *,
    dtype: torch.dtype | torch.nn.Module | None = None,
) -> torch.Tensor:
    """Check a non-empty batch of a fixed shape fed to a model and return it (cast like ``dtype``).

    :func:`check_input` with ``allow_empty=False``, plus the sizes of ``shape``: an int is a fixed
    size, a string names a free one (``("B", 6)`` for ``(B, 6)``); no dimension may be 0.

    Raises:
        TypeError: ``x`` is not a tensor, or not floating.
        ValueError: wrong number of dimensions or size, an empty dimension, NaN or inf; the message
            names ``name`` and the expected shape.
    """
    want = "(" + ", ".join(str(s) for s in shape) + ")"
    like = torch.empty(0, dtype=dtype) if isinstance(dtype, torch.dtype) else dtype
    x = check_input(x, name, len(shape), shape=want, like=like, allow_empty=False)
    if any(isinstance(s, int) and x.shape[i] != s for i, s in enumerate(shape)):
        raise ValueError(f"{name} must have shape {want}, got {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(x.shape)}; expected {want} with no size 0)"
        )
    return x


def check_int_tensor(x: object, name: str, ndim: int | None = None) -> torch.Tensor:
    """Check an integer (not bool) tensor of indices / positions, of ``ndim`` dims when given.

    Returns:
        The tensor as ``torch.long``.

    Raises:
        TypeError: floating, complex or bool values. ValueError: another number of dims.
    """
    t = as_tensor(x, name)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {t.dtype}")
    if ndim is not None and t.ndim != ndim:
        shape = {1: "(M,)", 2: "(n, k)"}.get(ndim, f"{ndim} dims")
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    return t.long()


def check_sparse(m: object, name: str, *, allow_neg_inf: bool = False) -> object:
    """Check a 2-D scipy sparse matrix (or dense array) with finite stored values.

    Args:
        m: the matrix.
        name: the argument's name, for the messages.
        allow_neg_inf: accept stored ``-inf`` (entries masked out); NaN and ``+inf`` never.

    Returns:
        ``m`` as a ``scipy.sparse.csr_matrix`` (no copy when it is one).

    Raises:
        TypeError: not convertible to a 2-D sparse matrix. ValueError: NaN / inf stored values.
    """
    # heavy import, paid only on this path
    import scipy.sparse as sp

    try:
        out = sp.csr_matrix(m)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be a 2-D scipy sparse matrix or array, got {type(m).__name__}"
        ) from exc
    bad = np.isnan(out.data) | (out.data == np.inf) | ((out.data == -np.inf) & (not allow_neg_inf))
    if bad.any():
        raise ValueError(f"{name} holds {int(bad.sum())} NaN or inf value(s)")
    return out


_TRUSTS = "_rank_lab_trusts_inputs"


@contextlib.contextmanager
def trusted_inputs(modules: Iterable[torch.nn.Module]) -> Iterator[None]:
    """Inside the block, ``modules`` and their sub-modules trust the *values* of their inputs.

    Their ``forward`` skips the finite check of its input (:func:`check_input` with ``like=self``);
    shapes and dtypes are still checked. For a caller with its own numerical guard, named at its
    call site: the training engine runs every step so for the modules it trains (its guard stops on
    a non-finite loss, naming the step, the batch and the last good checkpoint: a NaN read lazily
    from a dataset or produced inside a model reaches it, on every rank of a distributed run alike,
    rather than stopping one layer with a ``ValueError``), and :func:`rank_lab.train.embed_dataset`
    checks the embeddings it returns instead. Outside such a block a module checks its input.

    The trust is a property of the module objects passed, not of the thread: a module called
    outside the block, or another module called inside it, checks its inputs as usual. Nested
    blocks restore what they found.
    """
    subs = list({id(m): m for mod in modules for m in mod.modules()}.values())
    before = [m.__dict__.get(_TRUSTS, False) for m in subs]
    for m in subs:
        m.__dict__[_TRUSTS] = True
    try:
        yield
    finally:
        for m, b in zip(subs, before, strict=True):
            m.__dict__[_TRUSTS] = b


def trusts_inputs(module: object) -> bool:
    """Whether ``module`` runs inside :func:`trusted_inputs` (it then skips the finite check of its
    inputs)."""
    return isinstance(module, torch.nn.Module) and module.__dict__.get(_TRUSTS, False)


def check_finite_input(x: torch.Tensor, name: str, *, trusted: bool = False) -> None:
    """:func:`check_finite` of a module's or a collective's input, skipped when the caller says the
    values are ``trusted`` (see :func:`trusted_inputs`) and on ``meta`` tensors inside
    :func:`shape_only` (FLOP counting); complex and ``meta`` tensors are refused even when trusted
    (:func:`check_real`)."""
    check_real(x, name)
    if trusted or x.device.type == "meta":
        return
    check_finite(x, name)


def _float_dtype(like: object) -> torch.dtype | None:
    """The floating dtype of a module's first floating parameter (or buffer), or of a tensor."""
    if isinstance(like, torch.Tensor):
        return like.dtype if like.is_floating_point() else None
    if isinstance(like, torch.nn.Module):
        for t in (*like.parameters(), *like.buffers()):
            if t.is_floating_point():
                return t.dtype
    return None


def check_input(
    x: object,
    name: str,
    ndim: int | tuple[int, ...],
    *,
    shape: str | None = None,
    like: torch.nn.Module | torch.Tensor | None = None,
    allow_empty: bool = True,
    owner: torch.nn.Module | None = None,
) -> torch.Tensor:
    """Check the input of a module's ``forward`` (or of a function fed to one) and return it.

    A tensor with one of the ``ndim`` numbers of dimensions, of a floating dtype (integer images
    are refused rather than cast: ``uint8`` pixels in ``0..255`` are not the ``[0, 1]`` floats a
    network expects), finite (:func:`check_finite_input`) and, with ``allow_empty=False``, a
    non-empty batch. float32 and float64 are both accepted: with ``like`` (a module or a tensor)
    the input is cast to its floating dtype, as the package does for every function. With ``like``
    a module (a ``forward`` passes ``like=self``), the finite check is skipped while that module
    trusts its inputs (:func:`trusted_inputs`: inside a training step). Values whose squares
    overflow the cast dtype are refused (:func:`check_magnitude`, skipped with the finite check).

    Args:
        x: the input.
        name: the argument's name, as the caller wrote it (every message names it).
        ndim: accepted numbers of dimensions.
        shape: the expected shape in words for the message, e.g. ``"(B, C, H, W)"``.
        like: module or tensor whose floating dtype the input is cast to (a module: the one whose
            ``forward`` checks, see :func:`trusted_inputs`).
        allow_empty: accept a batch of size 0 (dim 0).
        owner: the module whose ``forward`` checks, when it is not ``like`` (its trust decides the
            finite check, see :func:`trusted_inputs`).

    Raises:
        TypeError: not a tensor, or not floating (complex too).
        ValueError: a ``meta`` tensor (outside :func:`shape_only`), wrong number of dimensions,
            empty batch (``allow_empty=False``), NaN or inf, values whose squares overflow.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
    check_real(x, name)
    ndims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.ndim not in ndims:
        want = shape or " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name} must have shape {want}, got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating tensor, got dtype {x.dtype} (convert it, e.g. x.float() / "
            "255 for pixels)"
        )
    if not allow_empty and x.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}: an empty batch)")
    trusted = trusts_inputs(owner if owner is not None else like)
    check_finite_input(x, name, trusted=trusted)
    dtype = _float_dtype(like)
    if dtype is not None and x.dtype != dtype:
        x = x.to(dtype)
    check_magnitude(x, name, trusted=trusted)  # skipped where the finite check is
    return x


def check_module(m: object, name: str) -> torch.nn.Module:
    """Raise ``TypeError`` naming ``name`` unless ``m`` is an ``nn.Module``; return it."""
    if not isinstance(m, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(m).__name__}")
    return m


def check_class_indices(labels: torch.Tensor, n_classes: int, name: str = "labels") -> torch.Tensor:
    """Raise ``ValueError`` naming ``name`` unless every label is a class index in
    ``[0, n_classes)``.

    For labels that index rows of a ``(n_classes, d)`` prototype / class-weight matrix (checked
    integer labels, e.g. from :func:`check_labels`). Returns ``labels``.
    """
    if bool(((labels < 0) | (labels >= n_classes)).any()):  # one host sync
        raise ValueError(
            f"{name} must lie in [0, {n_classes}) (n_classes / prototypes), got range "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    return labels


def check_one_query(scores: object, targets: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the ``(N,)`` scores and same-shape relevance of one query (finite, non-empty), the
    input of the one-query DG tools (Eq. 3.6 of the Ramzi thesis).

    Returns:
        ``(scores (N,), targets (N,))`` as :func:`rank_lab._validation.check_scores_targets` checks
        them.

    Raises:
        ValueError / TypeError: naming ``scores`` or ``targets`` (a ``(Q, N)`` matrix included).
    """
    s = as_tensor(scores, "scores")
    if s.ndim != 1:
        raise ValueError(f"scores must have shape (N,) (one query), got {tuple(s.shape)}")
    s, t = check_scores_targets(s, targets)
    return s[0], t[0]
