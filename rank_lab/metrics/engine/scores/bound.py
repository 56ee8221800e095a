r"""A rigorous bound between a fast (reduced-precision) score and the canonical score.

Every route of the engine ranks by the **canonical score** ``s``
(:mod:`rank_lab.metrics.engine.scores.exact`: a fixed pairwise tree of depth ``h``,
``|s - q.g| <= gamma_{h+1} ||q|| ||g|| + mu_w``) and finds what it needs with a fast matmul whose
error against that definition is bounded here (:func:`score_bound`): count what is surely above,
ignore what is surely below, re-score exactly only what the bound cannot place.

**Stage-1 score.** The inputs are rounded to a format with ``p`` significand bits (bfloat16
``p = 8``, float16 ``p = 11``, float32 ``p = 24`` for float64 inputs) after an exact scaling by a
power of two (each query row, and the gallery as a whole, brought to a norm in ``[2^6, 2^7)``, so
that no entry and no product of two rows overflows or needlessly underflows the format):
``q~ = q - dq``, ``g~ = g - dg`` in unscaled units; the residuals are exact in float64 and their
norms are *measured* (so flushed subnormals and the rounding mode are accounted for). The matmul
forms ``v = sum_i q~_i g~_i`` accumulated in float32 (``u_a = 2^-24``) in any order and blocking,
then rounds ``v`` to its output format (faithful rounding, relative ``c = 2^{1-p_o} / (1 -
2^{1-p_o})``, ``c = 0`` for a float32 output). The *exact route* uses the working-precision inputs
themselves (``dq = dg = 0``) and its accumulation unit roundoff. Four terms:

1. *inputs*: ``q.g - q~.g~ = q~.dg + dq.g~ + dq.dg``, so by Cauchy-Schwarz
   ``|q.g - q~.g~| <= ||q~|| ||dg|| + ||dq|| ||g~|| + ||dq|| ||dg||``;
2. *accumulation*: products of bfloat16/float16 numbers are exact in float32 unless they
   underflow, so
   ``|v - q~.g~| <= gamma_d(u_a) sum_i |q~_i g~_i| + mu_a <= gamma_d(u_a) ||q~|| ||g~|| + mu_a``;
3. *output*: ``|s^ - v| <= c |s^| + eta``, ``eta`` the smallest normal number of the output format;
4. *canonical*: ``|s - q.g| <= gamma_{h+1} ||q|| ||g|| + mu_w``.

**Absolute terms (underflow).** A product or a partial sum that falls below the smallest normal
number ``t_a`` of the accumulation format (``2^-126`` in float32) is, with gradual underflow,
rounded with an absolute error below ``2^-150``, and with flush-to-zero (GPU kernels, CPU FTZ/DAZ
modes) replaced by 0, an error below ``t_a``. There are ``d`` products and ``d`` additions (or
fused multiply-adds) per score, so ``mu_a = 2 d t_a`` covers both modes. When the matmul reads the
working-precision inputs directly (the exact route), an input read as zero (denormals-are-zero)
loses ``|q_i g_i| <= t_w max(|q_i|, |g_i|)``, at most ``t_w sqrt(d) (||q|| + ||g||)`` per score;
the reduced copies flush their subnormals themselves, so their residuals measure it. In the
canonical score, ``mu_w = (1 + gamma_h) d tau_w / 2`` (``tau_w`` the subnormal spacing, ``2^-149``).
Absolute amounts of the scaled matmul are taken back to unscaled units by ``2^{-(e_q + e_g)}``.

With ``A_q = ||q~|| E + e_q G~ + e_q E + gamma_d(u_a) ||q~|| G~ + gamma_{h+1} ||q|| G + mu_w +
2^{-(e_q+e_g)} mu_a [+ t_w sqrt(d) (||q|| + G)]`` (``E = max_j ||dg_j||``, ``G~ = max_j ||g~_j||``,
``G = max_j ||g_j||``, ``e_q = ||dq||``), every gallery item satisfies::

    lo(s^_j) - A_q <= s(q, g_j) <= hi(s^_j) + A_q,   lo(x) = x - c|x| - eta,  hi(x) = x + c|x| + eta,

and ``lo``, ``hi`` are increasing. For unit-norm vectors ``||q~||, G~ <= 1 + 2^-p`` and ``E, e_q``
are about ``0.6 * 2^-p`` (bfloat16: ``A_q`` about 0.0035 at d = 512); the absolute terms only
matter for data whose products underflow.

**Tensor cores (CUDA, explicit ``"bf16"`` / ``"fp16"``).** NVIDIA tensor cores do not accumulate
as IEEE float32 (Fasi, Higham, Mikaitis, Pranesh 2021, "Numerical behavior of NVIDIA tensor
cores", PeerJ CS 7:e330): a block fused multiply-add of ``n_b`` exact products and the accumulator
aligns the ``n_b + 1`` significands to the largest exponent, drops the bits beyond the float32
significand (truncation, no rounding) and normalises with truncation. Each of the ``n_b`` smaller
terms loses less than one unit in the last place of the largest, ``2^-23 max|term|``, and the
normalisation another ``2^-23 |result|``: one block step errs by at most ``(n_b + 1) 2^-23`` times
the sum of the magnitudes it adds, and ``d / n_b`` steps by
``(1 + 1/n_b) d 2^-23 sum_i |q~_i g~_i|`` to first order -- ``2 (1 + 1/n_b)`` times the IEEE term
(2.5x for ``n_b = 4``). The bound uses ``gamma_d(2^-22)``, which covers every ``n_b >= 1``. This
model is published, not measured here: ``precision="auto"`` therefore resolves to the exact route on
CUDA (``docs/decisions.md``), and the identical-metrics promise on CUDA with an explicit reduced
format rests on that model.

**Model and guard.** The bound assumes the accumulation model above, which
:func:`~rank_lab.metrics.engine.scores.exact.exact_matmul` pins (no TF32, no reduced-precision
reductions, no autocast). Before a reduced format is used on a device, :func:`check_accumulation`
runs a probe whose error would exceed the bound if the partial sums were rounded to the reduced
format. :func:`check_products_fit` refuses inputs whose scores could overflow the working
precision (no bound holds for infinite scores).
"""  # noqa: E501

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from rank_lab._validation import as_tensor, check_choice, check_finite, check_positive_int
from rank_lab.metrics.engine.scores.exact import exact_matmul, scale_rows, tree_depth

__all__ = [
    "PRECISIONS",
    "score_bound",
    "check_accumulation",
    "resolve_precision",
    "check_products_fit",
]

#: Values of the ``precision=`` option of the engine and of :func:`rank_lab.metrics.knn_search`.
PRECISIONS = ("auto", "exact", "fp32", "bf16", "fp16")
_FORMATS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_BITS = {torch.float64: 53, torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}
_SAFETY = 1.0 + 2.0**-30  # inflation of every norm computed in float64 (their own rounding)
_ROW_NORM_EXP = 7  # reduced copies: row norms scaled into [2^(E-1), 2^E)
#: ``precision="auto"`` takes a reduced format only when the product ``Q N d`` is at least this.
AUTO_MIN_WORK = 2**33


def _gamma(n: int, u: float) -> float:
    nu = n * u
    if nu >= 0.5:
        raise ValueError(
            f"d={n} is too large for a rigorous accumulation bound with unit roundoff {u:.3g}"
        )
    return nu / (1.0 - nu)


def _unit(dtype: torch.dtype) -> float:
    return 2.0 ** -_BITS[dtype]


def _tiny(dtype: torch.dtype) -> float:
    """Smallest normal number of ``dtype``."""
    return float(torch.finfo(dtype).tiny)


def _subnormal_spacing(dtype: torch.dtype) -> float:
    """Spacing of the subnormal numbers of ``dtype`` (``2^-149`` in float32, ``2^-1074`` in
    float64)."""
    return _tiny(dtype) * 2.0 ** (1 - _BITS[dtype])


@functools.lru_cache(maxsize=1)
def _cpu_native_bf16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (AVX512-BF16 or AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:  # pragma: no cover - not Linux
        return False
    return ("avx512_bf16" in flags or "amx_bf16" in flags) and bool(
        torch.backends.mkldnn.is_available()
    )


def check_products_fit(
    q_max_norm: float, g_max_norm: float, work: torch.dtype, names: tuple[str, str]
) -> None:
    """Refuse inputs whose inner products (or partial sums) could overflow the working precision.

    Every product and partial sum of ``q.g`` is at most ``||q|| ||g||`` (times ``1 + gamma``); with
    ``max ||q|| max ||g||`` below half the largest ``work`` number nothing overflows (neither the
    canonical score nor a stage-1 matmul: reduced copies are scaled).

    Args:
        q_max_norm, g_max_norm: the largest row norms (float64 values).
        work: float32 or float64.
        names: the argument names of the two sets, for the message.

    Raises:
        ValueError: naming both arguments, the norms and what to do.
    """
    limit = float(torch.finfo(work).max) / 2
    if not q_max_norm * g_max_norm < limit:
        raise ValueError(
            f"{names[0]} and {names[1]}: their inner products can overflow {work} (largest row "
            f"norms {q_max_norm:.3g} and {g_max_norm:.3g}, product above {limit:.3g}); scale the "
            "embeddings down, pass normalize=True (cosine similarity) or use float64"
        )


def resolve_precision(
    precision: str, dtype: torch.dtype, device: torch.device, *, work: int | None = None
) -> torch.dtype:
    """The stage-1 format of ``precision`` for ``dtype`` (float32/float64) inputs on ``device``.

    ``"exact"``: the working precision itself (no input rounding). ``"fp32"``, ``"bf16"``,
    ``"fp16"``: that format (``"fp32"`` is ``"exact"`` for float32 inputs). ``"auto"``: bfloat16 on
    a
    CPU with native bfloat16 dot products (AVX512-BF16 / AMX), else exact -- exact on CUDA too,
    until a recorded GPU check shows bit-identity there (the tensor-core bound of the module
    docstring is published, not measured); a reduced format whose probe fails
    (:func:`check_accumulation`) makes ``"auto"`` exact, and so does a small product (``work =
    Q N d`` below :data:`AUTO_MIN_WORK`), where the reduced copies would cost more than they save.

    Raises:
        ValueError: unknown ``precision``.
        RuntimeError: an explicitly asked format fails the accumulation probe on this device.
    """
    check_choice(precision, "precision", PRECISIONS)
    check_choice(dtype, "dtype", (torch.float32, torch.float64))
    device = torch.device(device)
    if precision == "exact":
        return dtype
    if precision == "auto":
        if work is not None and work < AUTO_MIN_WORK:
            return dtype
        fmt = torch.bfloat16 if device.type == "cpu" and _cpu_native_bf16() else dtype
        if fmt != dtype and not check_accumulation(fmt, device):
            return dtype
        return fmt
    fmt = _FORMATS[precision]
    if _BITS[fmt] >= _BITS[dtype]:
        return dtype
    if not check_accumulation(fmt, device):
        raise RuntimeError(
            f"precision={precision!r}: the {device.type} matmul in {fmt} does not accumulate in "
            "float32 (probe failed), so its error bound does not hold; use precision='exact'"
        )
    return fmt


def reduced_copy(
    x: torch.Tensor, fmt: torch.dtype, *, per_row_scale: bool, block_rows: int = 8192
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` rounded to ``fmt`` for stage 1, with the norms the bound needs (kernel: ``x`` finite).

    Returns:
        ``(x_red, log2_scale (N,) long, red_norm (N,) float64, residual_norm (N,) float64)``: the
        matmul input ``x_red = fmt(x * 2^scale)`` (scaled by powers of two, per row or globally, so
        that row norms lie in ``[2^6, 2^7)``: no entry and no product of two such rows overflows the
        format; the scaling is done in float64, exact, whatever the range of ``x``; subnormals of
        ``fmt`` are flushed to zero, as the CPU's dot-product instructions do), and in unscaled
        units ``||x~||`` and ``||x - x~||`` (measured in float64, inflated for their own rounding).
    """
    n = x.shape[0]
    dev = x.device
    nrm = torch.empty(n, dtype=torch.float64, device=dev)
    for a in range(0, n, block_rows):  # no overflow in float64 for float32 rows
        nrm[a : a + block_rows] = x[a : a + block_rows].to(torch.float64).norm(dim=1)
    if not per_row_scale:
        nrm = nrm.max().expand(n)
    e = torch.frexp(nrm).exponent.to(torch.long)  # nrm in [2^(e-1), 2^e)
    scale = torch.where(nrm > 0, _ROW_NORM_EXP - e, torch.zeros_like(e))
    red = torch.empty(x.shape, dtype=fmt, device=dev)
    red_norm = torch.empty(n, dtype=torch.float64, device=dev)
    res_norm = torch.empty(n, dtype=torch.float64, device=dev)
    tiny = _tiny(fmt)
    # the scaled rows: in float32 when every factor is a normal power of two (entries pushed below
    # the subnormal range lose at most 2^-150 each, inside the bound's absolute term), else exactly
    # in float64
    direct = x.dtype == torch.float32 and bool((scale.abs() <= 100).all())
    for a in range(0, n, block_rows):
        xb = x[a : a + block_rows]
        xs = scale_rows(xb if direct else xb.to(torch.float64), scale[a : a + block_rows])
        r = xs.to(fmt)
        r = torch.where(r.abs() < tiny, torch.zeros_like(r), r)  # flush the format's subnormals
        red[a : a + block_rows] = r
        back = r.to(xs.dtype)
        red_norm[a : a + block_rows] = back.to(torch.float64).norm(dim=1)
        # the difference is exact
        res_norm[a : a + block_rows] = (xs - back).to(torch.float64).norm(dim=1)
    unscale = torch.ldexp(torch.ones(n, dtype=torch.float64, device=dev), -scale.to(torch.float64))
    return red, scale, red_norm * unscale * _SAFETY, res_norm * unscale * _SAFETY


def bound_terms(
    q_norm: torch.Tensor,
    q_red_norm: torch.Tensor,
    q_res_norm: torch.Tensor,
    g_max_norm: float,
    g_max_red_norm: float,
    g_max_res_norm: float,
    d: int,
    work: torch.dtype,
    fmt: torch.dtype,
    out_fmt: torch.dtype,
    flush_scale: torch.Tensor | None = None,
    *,
    tensor_cores: bool = False,
) -> tuple[torch.Tensor, float, torch.Tensor]:
    """:func:`score_bound` without the input checks (kernel; float64 ``(Q,)`` norms)."""
    acc = work if fmt == work else torch.float32  # reduced formats accumulate in float32
    u_acc = _unit(acc) * (4.0 if tensor_cores and fmt != work else 1.0)
    gam_acc = _gamma(d, u_acc)
    gam_can = _gamma(tree_depth(d) + 1, _unit(work))
    flush = torch.ones_like(q_norm) if flush_scale is None else flush_scale
    a = q_red_norm * g_max_res_norm + q_res_norm * g_max_red_norm + q_res_norm * g_max_res_norm
    a = a + gam_acc * q_red_norm * g_max_red_norm + gam_can * q_norm * g_max_norm
    mu_can = (1.0 + _gamma(max(tree_depth(d), 1), _unit(work))) * d * _subnormal_spacing(work) / 2
    a = a + mu_can + 2 * d * _tiny(acc) * flush
    if fmt == work:  # the matmul reads the working-precision inputs: denormals-are-zero
        a = a + _tiny(work) * math.sqrt(d) * (q_norm + g_max_norm)
    if _BITS[out_fmt] < _BITS[acc]:
        p = _BITS[out_fmt]
        c = 2.0 ** (1 - p) / (1.0 - 2.0 ** (1 - p))
        eta = _tiny(out_fmt) * flush
    else:
        c, eta = 0.0, torch.zeros_like(q_norm)
    return a * _SAFETY, c, eta


def score_bound(
    q_norm: torch.Tensor,
    q_red_norm: torch.Tensor,
    q_res_norm: torch.Tensor,
    g_max_norm: float,
    g_max_red_norm: float,
    g_max_res_norm: float,
    d: int,
    work: torch.dtype,
    fmt: torch.dtype,
    out_fmt: torch.dtype,
    flush_scale: torch.Tensor | None = None,
    *,
    tensor_cores: bool = False,
) -> tuple[torch.Tensor, float, torch.Tensor]:
    """The per-query bound ``A_q`` and the output-rounding terms ``(c, eta)`` (module docstring).

    Args:
        q_norm, q_red_norm, q_res_norm: ``(Q,)`` non-negative ``||q||``, ``||q~||``, ``||q - q~||``.
        g_max_norm, g_max_red_norm, g_max_res_norm: ``G``, ``G~``, ``E`` over the gallery (>= 0).
        d: dimension.
        work: working precision (float32 / float64): that of the canonical score.
        fmt: stage-1 input format (``work`` itself for the exact route).
        out_fmt: format of the matmul output.
        flush_scale: ``(Q,)`` float64 factor that takes the scaled matmul's absolute amounts to
            unscaled units (``2^-(scale_q + scale_g)``; None: 1).
        tensor_cores: the reduced-format accumulation of NVIDIA tensor cores (``gamma_d(2^-22)``).

    Returns:
        ``(A (Q,) float64, c, eta (Q,) float64)`` with ``lo(s^) - A <= s <= hi(s^) + A``.

    Raises:
        ValueError / TypeError: naming the argument.
    """
    norms = []
    for name, t in (("q_norm", q_norm), ("q_red_norm", q_red_norm), ("q_res_norm", q_res_norm)):
        t = as_tensor(t, name).detach().to(torch.float64)
        if t.ndim != 1:
            raise ValueError(f"{name} must have shape (Q,), got {tuple(t.shape)}")
        check_finite(t, name)
        if bool((t < 0).any()):
            raise ValueError(f"{name} must be >= 0")
        norms.append(t)
    if not norms[0].shape == norms[1].shape == norms[2].shape:
        raise ValueError("q_norm, q_red_norm and q_res_norm must have the same length")
    for name, v in (
        ("g_max_norm", g_max_norm),
        ("g_max_red_norm", g_max_red_norm),
        ("g_max_res_norm", g_max_res_norm),
    ):
        if not (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        ):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    d = check_positive_int(d, "d")
    check_choice(work, "work", (torch.float32, torch.float64))
    check_choice(fmt, "fmt", tuple(_BITS))
    check_choice(out_fmt, "out_fmt", tuple(_BITS))
    if flush_scale is not None:
        flush_scale = as_tensor(flush_scale, "flush_scale").detach().to(torch.float64)
        if flush_scale.shape != norms[0].shape:
            raise ValueError(
                f"flush_scale must have shape {tuple(norms[0].shape)}, got "
                f"{tuple(flush_scale.shape)}"
            )
    return bound_terms(
        *norms,
        float(g_max_norm),
        float(g_max_red_norm),
        float(g_max_res_norm),
        d,
        work,
        fmt,
        out_fmt,
        flush_scale,
        tensor_cores=bool(tensor_cores),
    )


def threshold(
    lam: torch.Tensor, a: torch.Tensor, c: float, eta: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Smallest stage-1 score an item needs to possibly reach the exact score of a stage-1 score
    ``lam``.

    ``lam (Q,)`` is a lower bound of the stage-1 score of a reference item (the k-th neighbour, the
    lowest relevant item); its exact score is then ``>= lo(lam) - A``, and an item can reach it only
    if ``hi(s^) + A >= lo(lam) - A``, i.e. ``s^ >= hi^-1(lo(lam) - 2A)``. Computed in float64 and
    rounded *down* to ``dtype``.
    """
    lam = lam.to(torch.float64)
    y = lam - c * lam.abs() - eta - 2.0 * a - eta
    t = torch.where(y >= 0, y / (1.0 + c), y / (1.0 - c))
    # margin for this float64 arithmetic
    t = t - 2.0**-40 * (lam.abs() + 2.0 * a + 2.0 * eta + t.abs())
    t = torch.where(torch.isfinite(lam), t, torch.full_like(t, -torch.inf))
    down = t.to(dtype)
    return torch.where(
        down.to(torch.float64) > t, torch.nextafter(down, torch.full_like(down, -torch.inf)), down
    )


def reduced_matmul(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """``a @ b.T`` of stage 1 and the format of its output (float32 when the device can give it)."""
    if a.device.type == "cuda" and a.dtype in (
        torch.float16,
        torch.bfloat16,
    ):  # pragma: no cover - GPU only
        try:
            return torch.mm(a, b.T, out_dtype=torch.float32), torch.float32
        except (TypeError, RuntimeError):
            pass
    return a @ b.T, a.dtype


@functools.lru_cache(maxsize=16)
def _probe(fmt: torch.dtype, device_type: str, device_index: int | None) -> bool:
    dev = (
        torch.device(device_type, device_index)
        if device_index is not None
        else torch.device(device_type)
    )
    gen = torch.Generator().manual_seed(0)
    d = 512
    q = torch.randn(64, d, generator=gen, dtype=torch.float64)
    g = torch.randn(2048, d, generator=gen, dtype=torch.float64)
    q[0] = 2.0**-9  # partial sums rounded to a short format would drop these terms
    q[0, 0] = 1.0
    g[:64] = 1.0
    # fixed probe rows of entries ~1 in float64: F.normalize cannot under- or overflow here
    # (unit_rows not needed)
    q, g = F.normalize(q, dim=1).float().to(dev), F.normalize(g, dim=1).float().to(dev)
    with exact_matmul():
        qr, qs, qn, qe = reduced_copy(q, fmt, per_row_scale=True)
        gr, gs, gn, ge = reduced_copy(g, fmt, per_row_scale=False)
        s, out_fmt = reduced_matmul(qr, gr)
    s = torch.ldexp(s.to(torch.float64), -(qs[:, None] + gs[None, :]).to(torch.float64))
    exact = q.double() @ g.double().T
    flush = torch.ldexp(torch.ones_like(qn), -(qs + gs[0]).to(torch.float64))
    a, c, eta = bound_terms(
        q.double().norm(dim=1),
        qn,
        qe,
        float(g.double().norm(dim=1).max()),
        float(gn.max()),
        float(ge.max()),
        d,
        torch.float32,
        fmt,
        out_fmt,
        flush,
        tensor_cores=dev.type == "cuda",
    )
    err = (s - exact).abs()
    return bool((err <= a[:, None] + c * s.abs() + eta[:, None]).all())


def check_accumulation(fmt: torch.dtype, device: torch.device) -> bool:
    """Whether the ``fmt`` matmul on ``device`` stays within :func:`score_bound` on a probe
    (cached).

    The probe holds a row ``(1, 2^-9, ..., 2^-9)`` against a row of ones: accumulated in float32
    its score is ``1 + 511 * 2^-9``; partial sums rounded to bfloat16 would stay at 1, far outside
    the bound. Random unit vectors complete it.
    """
    check_choice(fmt, "fmt", tuple(_BITS))
    if fmt in (torch.float32, torch.float64):
        return True
    device = torch.device(device)
    return _probe(fmt, device.type, device.index)
