"""What every route of the engine hands to the metrics: worst-case positions, per query.

A route (neighbour lists or certified counting, :mod:`rank_lab.metrics.engine.routes`) ranks every
query's gallery by the canonical score with the worst-case tie rule (``docs/decisions.md``: among
tied items the less relevant come first) and reduces the ranking to positions:

* :class:`BinaryPositions` -- the position of the i-th best relevant item (same fine label):
  ``i + #{irrelevant items ranked before it}``, with the number of relevant items ``R``.
* :class:`LevelPositions` -- for hierarchical labels, the positives (shared level >= 1) sorted by
  (canonical score desc, level asc), their levels, and for each of them the number of negatives
  (level 0) ranked before it; with the level-set sizes ``|Omega^(l)|``.

Every metric of the engine (:mod:`rank_lab.metrics.engine.formulas.registry`) is a function of
one of these, so a query's value depends on its positions only: every route that finds the same
positions returns **bit-identical** per-query values. Sums along a row are sequential
(:func:`row_sums`), so they do not depend on how many columns of padding a block has.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from rank_lab.metrics.engine.formulas._sums import pack_high, rank_over_position

__all__ = ["BinaryPositions", "LevelPositions", "row_sums"]

#: CPU tensors take the compiled row sums of :mod:`~rank_lab.metrics.engine.formulas._sums` (the
#: same operations in the same order: the same bits); False runs the torch forms (the GPU's) on the
#: CPU too (the tests compare both).
USE_KERNELS = True


def compiled(x: torch.Tensor) -> bool:
    """Whether the sums over ``x``'s rows take the compiled kernels (CPU tensors)."""
    return USE_KERNELS and x.device.type == "cpu"


def as_np(x: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a contiguous numpy array (no copy when it is contiguous)."""
    return np.ascontiguousarray(x.detach().numpy())


def row_sums(x: torch.Tensor) -> torch.Tensor:
    """Sums of the rows of ``x (c, P)`` accumulated left to right (``((x0 + x1) + x2) + ...``).

    A ``cumsum`` along the row (a sequential scan on the CPU): trailing zeros do not change a
    row's value, unlike a vectorised ``sum`` whose association depends on the row length.

    Returns:
        ``(c,)`` in the dtype of ``x``.
    """
    if x.shape[1] == 0:
        return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    return x.cumsum(1)[:, -1]


@dataclass(frozen=True)
class BinaryPositions:
    """Worst-case positions of the relevant items of a block of queries (binary relevance).

    Attributes:
        pos: ``(c, P)`` long, 1-based position of the i-th best relevant item (entries past a row's
            known relevant items are ignored through ``valid``).
        valid: ``(c, P)`` bool, which entries of ``pos`` are real.
        n_pos: ``(c,)`` long, the number of relevant items of each query (R); the neighbour-list
            route knows only the positions up to its list length, the others lie beyond every
            cut-off.
    """

    pos: torch.Tensor
    valid: torch.Tensor
    n_pos: torch.Tensor

    @cached_property
    def posf(self) -> torch.Tensor:
        """``pos`` in float64."""
        return self.pos.to(torch.float64)

    @cached_property
    def ranks(self) -> torch.Tensor:
        """``(1, P)`` float64 ``1..P``: the rank of each entry among the relevant items."""
        return torch.arange(1, self.pos.shape[1] + 1, device=self.pos.device, dtype=torch.float64)[
            None, :
        ]

    @cached_property
    def precision(self) -> torch.Tensor:
        """``(c, P)`` float64: the precision at each relevant item, ``i / pos_i`` (0 past
        ``valid``)."""
        return torch.where(self.valid, self.ranks / self.posf, torch.zeros_like(self.posf))

    @cached_property
    def r(self) -> torch.Tensor:
        """``(c,)`` float64 ``max(R, 1)``."""
        return self.n_pos.to(torch.float64).clamp(min=1)

    def hits(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(in_k (c, P) bool, hits (c,) float64)``: relevant items within the first ``k``."""
        in_k = self.valid & (self.pos <= k)
        return in_k, in_k.sum(1).to(torch.float64)  # integer-valued: exact in any order


@dataclass(frozen=True)
class LevelPositions:
    """The positives of a block of queries sorted by (canonical score desc, level asc), with
    positions.

    Attributes:
        lv: ``(c, P)`` long levels of the sorted positives (0 for padding).
        valid: ``(c, P)`` bool, the real positives.
        ge: ``(c, P)`` long number of negatives ranked before each positive, so that the i-th
            positive's worst-case position is ``i + ge``.
        keys: ``(c, P)`` float64 keys the positives were sorted by (their canonical scores where the
            bound could not order them); equal keys mean tied scores.
        counts: ``(c, L + 1)`` long level-set sizes ``|Omega^(l)|`` (self excluded).
        n_levels: L.
        alpha: alpha of the H-AP relevance (Eq. 4.7 of the Ramzi thesis).
    """

    lv: torch.Tensor
    valid: torch.Tensor
    ge: torch.Tensor
    keys: torch.Tensor
    counts: torch.Tensor
    n_levels: int
    alpha: float

    def binary(self) -> BinaryPositions:
        """The binary positions of the finest level (relevant = level L), from the same ranking.

        A level-L positive's position counts every item ranked before it: the negatives and the
        positives of lower levels (which the tie rule puts first among tied scores, as the binary
        rule puts irrelevant items first).
        """
        c, p = self.lv.shape
        fine = self.valid & (self.lv == self.n_levels)
        pos_all = torch.arange(1, p + 1, device=self.lv.device)[None, :] + self.ge
        n_fine = fine.sum(1)
        width = max(int(n_fine.max()) if c else 1, 1)
        rank = torch.cumsum(fine.long(), 1) - 1
        pos = torch.full(
            (c, width), torch.iinfo(torch.long).max // 4, dtype=torch.long, device=self.lv.device
        )
        valid = torch.zeros(c, width, dtype=torch.bool, device=self.lv.device)
        rr, cc = torch.nonzero(fine, as_tuple=True)
        pos[rr, rank[rr, cc]] = pos_all[rr, cc]
        valid[rr, rank[rr, cc]] = True
        return BinaryPositions(pos, valid, self.counts[:, self.n_levels])

    @cached_property
    def pos(self) -> torch.Tensor:
        """``(c, P)`` long worst-case positions ``i + ge``."""
        return torch.arange(1, self.lv.shape[1] + 1, device=self.lv.device)[None, :] + self.ge

    @cached_property
    def rank(self) -> torch.Tensor:
        """``(c, P)`` long ``1..P``."""
        c, p = self.lv.shape
        return torch.arange(1, p + 1, device=self.lv.device).expand(c, p)

    @cached_property
    def n_pos(self) -> torch.Tensor:
        """``(c,)`` long number of positives."""
        return self.counts[:, 1:].sum(1)

    @cached_property
    def grid(self) -> torch.Tensor:
        """float64 ``0..max(pos) + 1``."""
        n_max = int(self.pos.max()) + 2 if self.pos.numel() else 2
        return torch.arange(n_max, dtype=torch.float64, device=self.lv.device)

    @cached_property
    def inv_table(self) -> torch.Tensor:
        """``1/m`` for ``m`` in :attr:`grid` (0 for m = 0): one division per position value."""
        g = self.grid
        return torch.cat([torch.zeros(1, dtype=torch.float64, device=g.device), 1.0 / g[1:]])

    @cached_property
    def inv(self) -> torch.Tensor:
        """``(c, P)`` float64 ``1 / pos`` (0 past ``valid``)."""
        return torch.where(
            self.valid,
            self.inv_table[self.pos],
            torch.zeros(1, dtype=torch.float64, device=self.lv.device),
        )

    @cached_property
    def high(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The positives of level >= 2 of every row packed to the left:
        ``(level, rank, pos, valid)`` ``(c, P2)``.

        The level-1 positives are the bulk (a whole coarse class): every sum over them is a sum
        over *all* positives of a function of ``(rank, position)`` minus the same sum over the few
        positives of level >= 2.
        """
        if compiled(self.lv):
            out = pack_high(as_np(self.lv), as_np(self.ge))
            out_lv, out_rank, out_pos = (torch.from_numpy(x) for x in out)
            return out_lv, out_rank, out_pos, out_lv >= 2
        lv, rank, pos = self.lv, self.rank, self.pos
        hi = lv >= 2
        n_hi = hi.sum(1)
        p2 = max(int(n_hi.max()) if n_hi.numel() else 0, 1)
        rr, cc = torch.nonzero(hi, as_tuple=True)
        slot = torch.cumsum(hi.long(), 1)[rr, cc] - 1
        dev = lv.device
        out_lv = torch.zeros(lv.shape[0], p2, dtype=torch.long, device=dev)
        out_rank = torch.ones(lv.shape[0], p2, dtype=torch.long, device=dev)
        out_pos = torch.ones(lv.shape[0], p2, dtype=torch.long, device=dev)
        out_lv[rr, slot], out_rank[rr, slot], out_pos[rr, slot] = (
            lv[rr, cc],
            rank[rr, cc],
            pos[rr, cc],
        )
        return out_lv, out_rank, out_pos, out_lv >= 2

    @cached_property
    def hinv(self) -> torch.Tensor:
        """``(c, P2)`` float64 ``1 / pos`` of the packed higher levels."""
        hlv, _, hpos, hval = self.high
        return torch.where(
            hval, self.inv_table[hpos], torch.zeros(1, dtype=torch.float64, device=hlv.device)
        )

    @cached_property
    def s_all(self) -> torch.Tensor:
        """``(c,)`` ``sum_i i / pos_i`` over all positives (sequential)."""
        if compiled(self.lv):
            out = np.empty(self.lv.shape[0])
            rank_over_position(
                as_np(self.lv), as_np(self.ge), as_np(self.valid), as_np(self.inv_table), out
            )
            return torch.from_numpy(out)
        return row_sums(self.rank * self.inv)

    @cached_property
    def s_high(self) -> torch.Tensor:
        """``(c,)`` the same sum over the positives of level >= 2."""
        _, hrank, _, _ = self.high
        return row_sums(hrank * self.hinv)
