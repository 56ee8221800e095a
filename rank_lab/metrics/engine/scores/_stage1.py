"""Stage-1 inputs of the engine: the reduced (or working-precision) copies and each query's bound.

Internal module of :mod:`rank_lab.metrics.engine.scores`: :class:`Stage1` holds what every certified
route needs -- the matmul inputs in the stage-1 format, the per-query bound ``A_q`` and the output
rounding ``(c, eta)`` of :mod:`~rank_lab.metrics.engine.scores.bound` -- and turns stage-1 scores
into certified statements about canonical scores: thresholds (which stage-1 score can still reach a
given one), sure thresholds (which surely does), and intervals ``[lo(s^) - A, hi(s^) + A]`` that
hold the canonical score. Every map is computed in float64 with an outward margin of ``2^-40``
relative for its own rounding, then rounded outward to the comparison dtype. Inputs are trusted
(validated by the public entry points).
"""

from __future__ import annotations

import torch

from rank_lab.metrics.engine.scores.bound import (
    bound_terms,
    reduced_copy,
    reduced_matmul,
    threshold,
)
from rank_lab.metrics.engine.scores.exact import exact_matmul

__all__ = ["Stage1"]

_MARGIN = 2.0**-40


class Stage1:
    """Stage-1 inputs on the compute device and the per-query bound.

    Args:
        q: ``(Q, d)`` queries in the working precision (float32 / float64), on the compute device.
        g: ``(N, d)`` gallery, same dtype and device.
        fmt: stage-1 format (the working precision itself for the exact route).
        symmetric: the queries are the gallery (one reduced copy serves both).

    Attributes:
        qr, gr: the matmul inputs (scaled by powers of two for reduced formats).
        exp: ``(Q,)`` float64, stage-1 scores are ``2^exp`` times the unscaled ones.
        a, c, eta: the bound (``(Q,)`` float64, float, ``(Q,)`` float64), unscaled units.
        out_fmt: the matmul's output format; cmp: the dtype stage-1 scores are compared in.
    """

    def __init__(self, q: torch.Tensor, g: torch.Tensor, fmt: torch.dtype, symmetric: bool) -> None:
        self.work = q.dtype
        self.fmt = fmt
        self.d = q.shape[1]
        q64 = q.to(torch.float64).norm(dim=1)
        g64 = q64 if symmetric else g.to(torch.float64).norm(dim=1)
        if fmt == self.work:
            self.qr, self.gr = q, g
            self.q_scale = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
            g_scale = 0
            qn, qe, gn, ge = q64, torch.zeros_like(q64), g64, torch.zeros_like(g64)
        else:
            self.gr, gs, gn, ge = reduced_copy(g, fmt, per_row_scale=False)
            if symmetric:
                self.qr, self.q_scale, qn, qe = self.gr, gs, gn, ge
            else:
                self.qr, self.q_scale, qn, qe = reduced_copy(q, fmt, per_row_scale=True)
            g_scale = int(gs[0]) if gs.numel() else 0
        self.g_scale = g_scale
        # stage-1 scores are 2^exp times too large
        self.exp = (self.q_scale + g_scale).to(torch.float64)
        flush = torch.ldexp(torch.ones_like(q64), -self.exp)
        if fmt != self.work:
            with exact_matmul():
                self.out_fmt = reduced_matmul(self.qr[:1], self.gr[:1])[1]
        else:
            self.out_fmt = self.work
        self.a, self.c, self.eta = bound_terms(
            q64,
            qn,
            qe,
            float(g64.max()),
            float(gn.max()),
            float(ge.max()),
            self.d,
            self.work,
            fmt,
            self.out_fmt,
            flush,
            tensor_cores=q.device.type == "cuda",
        )
        self.cmp = torch.float64 if self.work == torch.float64 else torch.float32

    def product(
        self, a: torch.Tensor, b: torch.Tensor, flat: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Stage-1 scores ``a @ b.T`` of rows of :attr:`qr` and :attr:`gr` (into the flat buffer
        ``flat`` on the CPU: fresh pages cost about as much as the product), in :attr:`out_fmt`."""
        if flat is not None:
            return torch.mm(
                a, b.T, out=flat[: a.shape[0] * b.shape[0]].view(a.shape[0], b.shape[0])
            )
        return reduced_matmul(a, b)[0]

    def unscaled(self, v_scaled: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Stage-1 scores of ``rows`` in unscaled units (float64, exact)."""
        return torch.ldexp(v_scaled.to(torch.float64), -self.exp[rows])

    def intervals(
        self, v_scaled: torch.Tensor, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lo, hi)`` float64, unscaled: the canonical score of an item with stage-1 score ``v``
        lies in ``[lo, hi]``.

        ``lo = lo(v) - A_q``, ``hi = hi(v) + A_q`` (module docstring of
        :mod:`~rank_lab.metrics.engine.scores.bound`), widened by the margin of this arithmetic.
        """
        u = self.unscaled(v_scaled, rows)
        a, eta = self.a[rows], self.eta[rows]
        w = self.c * u.abs() + eta + a
        m = _MARGIN * (u.abs() + w)
        return u - w - m, u + w + m

    def sure_thresholds(
        self, kth_scaled: torch.Tensor, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """For rows whose k-th stage-1 score is ``kth``: ``(sure, H)``.

        ``H = hi(kth) + A`` (float64, unscaled) is an upper bound of the k-th canonical score, and
        an item with stage-1 score ``>= sure`` (scaled units, rounded up) has ``lo(s^) - A >= H``:
        its canonical score reaches the k-th one whatever the rounding.
        """
        e = self.exp[rows]
        u = torch.ldexp(kth_scaled.to(torch.float64), -e)
        a, eta = self.a[rows], self.eta[rows]
        h = u + self.c * u.abs() + eta + a
        h = h + _MARGIN * (u.abs() + a + eta)
        y = h + a + eta
        x = torch.where(y >= 0, y / (1.0 - self.c), y / (1.0 + self.c))
        x = torch.ldexp(x + _MARGIN * (y.abs() + x.abs()), e)
        up = x.to(self.cmp)
        up = torch.where(
            up.to(torch.float64) < x, torch.nextafter(up, torch.full_like(up, torch.inf)), up
        )
        return up, h

    def thresholds(self, lam_scaled: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Stage-1 thresholds (scaled units, comparison dtype) of ``rows`` from their ``lam``.

        An item whose stage-1 score is below the threshold cannot reach the canonical score of an
        item whose stage-1 score is ``lam``
        (:func:`~rank_lab.metrics.engine.scores.bound.threshold`).
        """
        e = self.exp[rows]
        lam = torch.ldexp(lam_scaled.to(torch.float64), -e)
        t = threshold(lam, self.a[rows], self.c, self.eta[rows], torch.float64)
        scaled = torch.ldexp(t, e)
        down = scaled.to(self.cmp)
        return torch.where(
            down.to(torch.float64) > scaled,
            torch.nextafter(down, torch.full_like(down, -torch.inf)),
            down,
        )
