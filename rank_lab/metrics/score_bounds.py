r"""Reduced-precision scores and a rigorous bound between them and the exact (canonical) score.

The certified neighbour search (:mod:`rank_lab.metrics.certified`) ranks by one score definition,
the **canonical score** ``s`` (:func:`rank_lab.metrics.exact_scores.canonical_scores`, a fixed
pairwise tree of depth ``h`` whose error is ``<= gamma_{h+1} ||q|| ||g||``), and finds its
candidates with a fast matmul whose error against that definition is bounded here
(:func:`score_bound`).

**Reduced-precision score** (stage 1). The inputs are rounded to a format with ``p`` significand
bits (bfloat16 ``p = 8``, float16 ``p = 11``, float32 ``p = 24`` for float64 inputs):
``q~ = q - dq``, ``g~ = g - dg``; the residuals ``dq, dg`` are exact in the working precision and
their norms are *measured* (so flushed subnormals and the rounding mode are accounted for). The
matmul forms ``v = sum_i q~_i g~_i`` accumulated in float32 (``u_a = 2^-24``) in any order and
blocking, then rounds ``v`` to its output format (faithful rounding, relative ``c = 2^{1-p_o} /
(1 - 2^{1-p_o})``, ``c = 0`` for a float32 output). Three terms:

1. *inputs*: ``q.g - q~.g~ = q~.dg + dq.g~ + dq.dg``, so by Cauchy-Schwarz
   ``|q.g - q~.g~| <= ||q~|| ||dg|| + ||dq|| ||g~|| + ||dq|| ||dg||``;
2. *accumulation*: products of bfloat16/float16 numbers are exact in float32, so
   ``|v - q~.g~| <= gamma_d(u_a) sum_i |q~_i g~_i| <= gamma_d(u_a) ||q~|| ||g~||`` (the same term
   covers rounded products when the stage-1 format is the working one: the exact route);
3. *output*: ``|s^ - v| <= c |s^| + eta``, ``eta`` the smallest normal number of the output
   format (flushed or subnormal outputs).

With ``A_q = ||q~|| E + e_q G~ + e_q E + gamma_d(u_a) ||q~|| G~ + gamma_{h+1} ||q|| G + eta_a``
(``E = max_j ||dg_j||``, ``G~ = max_j ||g~_j||``, ``G = max_j ||g_j||``, ``e_q = ||dq||``,
``eta_a = d 2^-126`` for flush-to-zero accumulators), every gallery item satisfies::

    lo(s^_j) - A_q <= s(q, g_j) <= hi(s^_j) + A_q,   lo(x) = x - c|x| - eta,  hi(x) = x + c|x| + eta,

and ``lo``, ``hi`` are increasing. For unit-norm vectors ``||q~||, G~ <= 1 + 2^-p`` and ``E, e_q``
are about ``0.6 * 2^-p`` (bfloat16: ``A_q`` about 0.0035 at d = 512).

**Model and guard.** The bound assumes float32 accumulation with one rounding per addition and
no reduced-precision split-K reduction, which
:func:`~rank_lab.metrics.exact_scores.exact_matmul` pins (no TF32, no reduced-precision
reductions). Before a reduced format is used on a device, :func:`check_accumulation` runs a probe
whose error would exceed the bound if the partial sums were rounded to the reduced format.
``canonical_scores`` and ``exact_matmul``, defined in :mod:`rank_lab.metrics.exact_scores`, are
still importable from here.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_positive_int,
)
from rank_lab.metrics.exact_scores import (  # noqa: F401 - canonical_scores was defined here: still importable
    canonical_scores,
    exact_matmul,
    tree_depth,
)

__all__ = ["PRECISIONS", "score_bound", "check_accumulation", "resolve_precision"]

#: Values of the ``precision=`` option of the engine and of :func:`rank_lab.metrics.knn_search`.
PRECISIONS = ("auto", "exact", "fp32", "bf16", "fp16")
_FORMATS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_BITS = {torch.float64: 53, torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}
_SAFETY = 1.0 + 2.0**-30  # inflation of every norm computed in float64 (their own rounding)


def _gamma(n: int, dtype: torch.dtype) -> float:
    nu = n * 2.0 ** -_BITS[dtype]
    if nu >= 0.5:
        raise ValueError(f"d={n} is too large for a rigorous {dtype} accumulation bound")
    return nu / (1.0 - nu)


@functools.lru_cache(maxsize=1)
def _cpu_native_bf16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (AVX512-BF16 or AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:  # pragma: no cover - not Linux
        return False
    return ("avx512_bf16" in flags or "amx_bf16" in flags) and bool(torch.backends.mkldnn.is_available())


def resolve_precision(precision: str, dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The stage-1 format of ``precision`` for ``dtype`` (float32/float64) inputs on ``device``.

    ``"exact"``: the working precision itself (no input rounding). ``"fp32"``, ``"bf16"``,
    ``"fp16"``: that format (``"fp32"`` is ``"exact"`` for float32 inputs). ``"auto"``: float16 on
    CUDA, bfloat16 on a CPU with native bfloat16 dot products (AVX512-BF16 / AMX), else exact;
    a reduced format whose probe fails (:func:`check_accumulation`) makes ``"auto"`` exact.

    Raises:
        ValueError: unknown ``precision``.
        RuntimeError: an explicitly asked format fails the accumulation probe on this device.
    """
    check_choice(precision, "precision", PRECISIONS)
    check_choice(dtype, "dtype", (torch.float32, torch.float64))
    if precision == "exact":
        return dtype
    if precision == "auto":
        fmt = torch.float16 if device.type == "cuda" else (torch.bfloat16 if _cpu_native_bf16() else dtype)
        if fmt != dtype and not check_accumulation(fmt, device):
            return dtype
        return fmt
    fmt = _FORMATS[precision]
    if _BITS[fmt] >= _BITS[dtype]:
        return dtype
    if not check_accumulation(fmt, device):
        raise RuntimeError(f"precision={precision!r}: the {device.type} matmul in {fmt} does not accumulate in "
                           "float32 (probe failed), so its error bound does not hold; use precision='exact'")
    return fmt

def reduced_copy(x: torch.Tensor, fmt: torch.dtype, *, per_row_scale: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` rounded to ``fmt`` for stage 1, with the norms the bound needs.

    Returns:
        ``(x_red, log2_scale (N,) long, red_norm (N,) float64, residual_norm (N,) float64)``: the
        matmul input ``x_red = fmt(x * 2^scale)`` (float16 is scaled by powers of two, per row or
        globally, so that row norms lie in ``[2^6, 2^7)``: no entry and no score of two such rows
        overflows float16; bfloat16 subnormals are flushed to zero as the CPU's dot-product
        instructions do), and in unscaled units ``||x~||`` and ``||x - x~||`` (inflated for their
        own rounding).
    """
    n = x.shape[0]
    dev = x.device
    scale = torch.zeros(n, dtype=torch.long, device=dev)
    xs = x
    if fmt == torch.float16:  # row norms scaled into [2^6, 2^7): entries and products of two rows < 2^14
        nrm = x.to(torch.float64).norm(dim=1)
        nrm = nrm if per_row_scale else nrm.max().expand(n)
        e = torch.frexp(nrm).exponent.to(torch.long)  # nrm in [2^(e-1), 2^e)
        scale = torch.where(nrm > 0, 7 - e, torch.zeros_like(e))
        xs = torch.ldexp(x, scale.to(x.dtype)[:, None])
    red = xs.to(fmt)
    if fmt == torch.bfloat16:
        red = torch.where(red.abs() < 2.0**-126, torch.zeros_like(red), red)
    if not bool(torch.isfinite(red).all()):
        raise ValueError(f"the embeddings overflow {fmt}; use precision='exact'")
    back = red.to(x.dtype)
    unscale = torch.ldexp(torch.ones(n, dtype=torch.float64, device=dev), -scale.to(torch.float64))
    red_norm = back.to(torch.float64).norm(dim=1) * unscale * _SAFETY
    res_norm = (xs - back).to(torch.float64).norm(dim=1) * unscale * _SAFETY  # xs - back is exact
    return red, scale, red_norm, res_norm


def score_bound(q_norm: torch.Tensor, q_red_norm: torch.Tensor, q_res_norm: torch.Tensor, g_max_norm: float,
                g_max_red_norm: float, g_max_res_norm: float, d: int, work: torch.dtype, fmt: torch.dtype,
                out_fmt: torch.dtype, flush_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, float, torch.Tensor]:
    """The per-query bound ``A_q`` and the output-rounding terms ``(c, eta)`` (module docstring).

    Args:
        q_norm, q_red_norm, q_res_norm: ``(Q,)`` non-negative ``||q||``, ``||q~||``, ``||q - q~||``.
        g_max_norm, g_max_red_norm, g_max_res_norm: ``G``, ``G~``, ``E`` over the gallery (>= 0).
        d: dimension.
        work: working precision (float32 / float64): that of the canonical score.
        fmt: stage-1 input format (``work`` itself for the exact route).
        out_fmt: format of the matmul output.
        flush_scale: ``(Q,)`` float64 factor that takes flushed absolute amounts to unscaled units
            (``2^-(scale_q + scale_g)`` for scaled float16; None: 1).

    Returns:
        ``(A (Q,) float64, c, eta (Q,) float64)`` with ``lo(s^) - A <= s <= hi(s^) + A``.

    Raises:
        ValueError / TypeError: naming the argument.
    """
    norms = []
    for name, t in (("q_norm", q_norm), ("q_red_norm", q_red_norm), ("q_res_norm", q_res_norm)):
        t = as_tensor(t, name).to(torch.float64)
        if t.ndim != 1:
            raise ValueError(f"{name} must have shape (Q,), got {tuple(t.shape)}")
        check_finite(t, name)
        if bool((t < 0).any()):
            raise ValueError(f"{name} must be >= 0")
        norms.append(t)
    q_norm, q_red_norm, q_res_norm = norms
    if not q_norm.shape == q_red_norm.shape == q_res_norm.shape:
        raise ValueError("q_norm, q_red_norm and q_res_norm must have the same length")
    for name, v in (("g_max_norm", g_max_norm), ("g_max_red_norm", g_max_red_norm), ("g_max_res_norm", g_max_res_norm)):
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    d = check_positive_int(d, "d")
    check_choice(work, "work", (torch.float32, torch.float64))
    check_choice(fmt, "fmt", tuple(_BITS))
    check_choice(out_fmt, "out_fmt", tuple(_BITS))
    acc = work if fmt == work else torch.float32  # reduced formats accumulate in float32
    gam_acc = _gamma(d, acc)
    gam_can = _gamma(tree_depth(d) + 1, work)
    flush = torch.ones_like(q_norm) if flush_scale is None else flush_scale
    a = q_red_norm * g_max_res_norm + q_res_norm * g_max_red_norm + q_res_norm * g_max_res_norm
    a = a + gam_acc * q_red_norm * g_max_red_norm + gam_can * q_norm * g_max_norm
    if fmt in (torch.bfloat16, torch.float16):
        a = a + d * 2.0**-126 * flush  # flush-to-zero of float32 partial sums
    if _BITS[out_fmt] < _BITS[acc]:
        p = _BITS[out_fmt]
        c = 2.0 ** (1 - p) / (1.0 - 2.0 ** (1 - p))
        eta = float(torch.finfo(out_fmt).tiny) * flush
    else:
        c, eta = 0.0, torch.zeros_like(q_norm)
    return a * _SAFETY, c, eta


def threshold(lam: torch.Tensor, a: torch.Tensor, c: float, eta: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Smallest stage-1 score an item needs to possibly reach the exact K-th score.

    ``lam (Q,)`` is a lower bound of the K-th largest stage-1 score; the exact K-th score is then
    ``>= lo(lam) - A``, and an item can reach it only if ``hi(s^) + A >= lo(lam) - A``, i.e.
    ``s^ >= hi^-1(lo(lam) - 2A)``. Computed in float64 and rounded *down* to ``dtype``.
    """
    lam = lam.to(torch.float64)
    y = lam - c * lam.abs() - eta - 2.0 * a - eta
    t = torch.where(y >= 0, y / (1.0 + c), y / (1.0 - c))
    t = t - 2.0**-40 * (lam.abs() + 2.0 * a + 2.0 * eta + t.abs())  # margin for this float64 arithmetic
    t = torch.where(torch.isfinite(lam), t, torch.full_like(t, -torch.inf))
    down = t.to(dtype)
    return torch.where(down.to(torch.float64) > t, torch.nextafter(down, torch.full_like(down, -torch.inf)), down)


def reduced_matmul(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """``a @ b.T`` of stage 1 and the format of its output (float32 when the device can give it)."""
    if a.device.type == "cuda" and a.dtype in (torch.float16, torch.bfloat16):  # pragma: no cover - GPU only
        try:
            return torch.mm(a, b.T, out_dtype=torch.float32), torch.float32
        except (TypeError, RuntimeError):
            pass
    return a @ b.T, a.dtype


@functools.lru_cache(maxsize=16)
def _probe(fmt: torch.dtype, device_type: str, device_index: int | None) -> bool:
    dev = torch.device(device_type, device_index) if device_index is not None else torch.device(device_type)
    gen = torch.Generator().manual_seed(0)
    d = 512
    q = torch.randn(64, d, generator=gen, dtype=torch.float64)
    g = torch.randn(2048, d, generator=gen, dtype=torch.float64)
    q[0] = 2.0**-9  # partial sums rounded to a short format would drop these terms
    q[0, 0] = 1.0
    g[:64] = 1.0
    q, g = F.normalize(q, dim=1).float().to(dev), F.normalize(g, dim=1).float().to(dev)
    with exact_matmul():
        qr, qs, qn, qe = reduced_copy(q, fmt, per_row_scale=True)
        gr, gs, gn, ge = reduced_copy(g, fmt, per_row_scale=False)
        s, out_fmt = reduced_matmul(qr, gr)
    s = torch.ldexp(s.to(torch.float64), -(qs[:, None] + gs[None, :]).to(torch.float64))
    exact = (q.double() @ g.double().T)
    flush = torch.ldexp(torch.ones_like(qn), -(qs + gs[0]).to(torch.float64))
    a, c, eta = score_bound(q.double().norm(dim=1), qn, qe, float(g.double().norm(dim=1).max()), float(gn.max()),
                            float(ge.max()), d, torch.float32, fmt, out_fmt, flush)
    err = (s - exact).abs()
    return bool((err <= a[:, None] + c * s.abs() + eta[:, None]).all())


def check_accumulation(fmt: torch.dtype, device: torch.device) -> bool:
    """Whether the ``fmt`` matmul on ``device`` stays within :func:`score_bound` on a probe (cached).

    The probe holds a row ``(1, 2^-9, ..., 2^-9)`` against a row of ones: accumulated in float32
    its score is ``1 + 511 * 2^-9``; partial sums rounded to bfloat16 would stay at 1, far outside
    the bound. Random unit vectors complete it.
    """
    check_choice(fmt, "fmt", tuple(_BITS))
    if fmt in (torch.float32, torch.float64):
        return True
    device = torch.device(device)
    return _probe(fmt, device.type, device.index)
