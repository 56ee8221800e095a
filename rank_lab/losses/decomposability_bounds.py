"""Bounds on the decomposability gap of AP (Ramzi thesis Sec. 3.2.3 and App. A.1; SupRank Sec.
III-C).

For one query whose retrieval set is split into K batches, ``DG = (1/K) sum_b AP_b - AP``
(Eq. 3.6 of the thesis; :func:`rank_lab.losses.decomposability.decomposability_gap`). When every
batch is perfectly ranked, each ``AP_b = 1`` and DG is ``1 - AP`` of the global ordering:

* :func:`dg_upper_bound` -- the worst case (Eq. 3.18 of the thesis; SupRank Eq. 26; ROADMAP Eq. 8),
  attained by the juxtaposed batches of :func:`juxtaposed_batches` (thesis Fig. 3.10 / A.1);
  :func:`worst_case_dg_brute_force` checks it by enumerating every global ordering of small cases.
* :func:`dg_calibrated_bound` and :func:`calibration_counts` -- the refined bound with the
  calibration thresholds alpha, beta of ``L_DG`` (Eq. 3.19; SupRank Eq. 27; ROADMAP Eq. 9).

Both bounds are proven for batches of equal composition (App. A.1.3); other batches are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rank_lab._validation import check_float, check_one_query

__all__ = [
    "dg_upper_bound",
    "dg_calibrated_bound",
    "calibration_counts",
    "juxtaposed_batches",
    "worst_case_dg_brute_force",
]


def _counts(name: str, values: Sequence[int]) -> list[int]:
    vals = [int(v) for v in values]
    if not vals or any(v < 0 for v in vals):
        raise ValueError(
            f"{name} must be a non-empty sequence of non-negative ints, got {values!r}"
        )
    return vals


def _check_equal_batches(p: list[int], n: list[int], what: str, names: str) -> None:
    """The setting of the proofs of Eqs. 3.18-3.19 (Ramzi thesis App. A.1.3): equal batches, equal
    positives."""
    if len(set(p)) > 1 or len(set(n)) > 1:
        raise ValueError(
            f"{what} is proven for batches of equal composition (Ramzi thesis App. A.1.3), got "
            f"{names} giving positives {p} and negatives {n} per batch; with unequal batches it is "
            "not a bound (e.g. P_b = [3, 1], N_b = [1, 3] gives 0.05 while the worst case is "
            "0.382): use worst_case_dg_brute_force"
        )


def dg_upper_bound(pos_per_batch: Sequence[int], neg_per_batch: Sequence[int]) -> float:
    """Worst-case DG for AP when every batch is perfectly ranked (Eq. 3.18 of the Ramzi thesis).

    ``DG <= 1 - (1/sum_b P_b) sum_b sum_{j=1}^{P_b} (j + P_<b) / (j + P_<b + N_<b)`` with ``P_<b``
    (``N_<b``) the positives (negatives) of the batches before b. The right-hand side is 1 minus
    the global AP of the juxtaposed arrangement (:func:`juxtaposed_batches`), batch 1 entirely
    above batch 2, and so on.

    **Equal batches only.** The thesis proves it for batches of equal size with equal numbers of
    positives (App. A.1.3), where it is the exact worst case (checked against
    :func:`worst_case_dg_brute_force` in the tests). For unequal batches the value depends on the
    batch order and is not a bound (``P_b = [3, 1], N_b = [1, 3]`` gives 0.05, the worst case is
    0.382), so they are refused; :func:`worst_case_dg_brute_force` gives their worst case.

    Args:
        pos_per_batch: ``P_b`` for b = 1..K, all equal.
        neg_per_batch: ``N_b`` for b = 1..K, all equal.

    Returns:
        The bound as a float.

    Raises:
        ValueError: unequal batches, mismatched lengths, negative counts or no positive.
    """
    p, n = _counts("pos_per_batch", pos_per_batch), _counts("neg_per_batch", neg_per_batch)
    if len(p) != len(n):
        raise ValueError(f"pos_per_batch has {len(p)} batches but neg_per_batch has {len(n)}")
    if sum(p) == 0:
        raise ValueError("at least one positive is needed")
    _check_equal_batches(p, n, "dg_upper_bound (Eq. 3.18)", "pos_per_batch / neg_per_batch")
    acc, p_before, n_before = 0.0, 0, 0
    for pb, nb in zip(p, n, strict=True):
        acc += sum((j + p_before) / (j + p_before + n_before) for j in range(1, pb + 1))
        p_before, n_before = p_before + pb, n_before + nb
    return 1.0 - acc / sum(p)


def dg_calibrated_bound(
    good_pos: Sequence[int], bad_pos: Sequence[int], good_neg: Sequence[int], bad_neg: Sequence[int]
) -> float:
    """Refined DG bound with calibration (Eq. 3.19 of the Ramzi thesis; SupRank Eq. 27).

    Per batch b: ``G+_b`` positives with ``s >= alpha`` (good), ``E+_b`` with ``s < alpha`` (bad),
    ``G-_b`` negatives with ``s <= beta``, ``E-_b`` with ``s > beta``::

        1 - (1/sum P) sum_b [ sum_{j=1}^{G+_b} (j + G+_<b) / (j + G+_<b + E-_<b)
                            + sum_{j=1}^{E+_b} (j + G+_b + P_<b) / (j + G+_b + P_<b + N_<b) ]

    (the thesis' A.1.4 misses a "+" in ``j + G+_b + P_<b``). It equals :func:`dg_upper_bound`
    when every item violates its threshold and 0 when none does. Like Eq. 3.18 it reasons on the
    juxtaposed arrangement (earlier batches above later ones).

    It is *not* always tighter than Eq. 3.18: with good positives in later batches and violating
    negatives everywhere it can exceed it (e.g. ``G+ = (0, 2, 2), E+ = (2, 0, 0), G- = (0, 0, 0),
    E- = (4, 4, 4)`` gives 0.477 against 0.376 for Eq. 3.18), because the paper's argument is not
    a minimisation over orderings. Both being upper bounds, ``min`` of the two is the usable one.

    As Eq. 3.18, it is stated for batches of equal composition (``G+_b + E+_b`` and
    ``G-_b + E-_b`` the same for every b): other batches raise a ``ValueError`` (with every item
    violating, it *is* Eq. 3.18, which is no bound for unequal batches).
    """
    gp, ep = _counts("good_pos", good_pos), _counts("bad_pos", bad_pos)
    gn, en = _counts("good_neg", good_neg), _counts("bad_neg", bad_neg)
    if not len(gp) == len(ep) == len(gn) == len(en):
        raise ValueError("good_pos, bad_pos, good_neg and bad_neg must have one entry per batch")
    total_p = sum(gp) + sum(ep)
    if total_p == 0:
        raise ValueError("at least one positive is needed")
    _check_equal_batches(
        [a + b for a, b in zip(gp, ep, strict=True)],
        [a + b for a, b in zip(gn, en, strict=True)],
        "dg_calibrated_bound (Eq. 3.19)",
        "good_pos + bad_pos / good_neg + bad_neg",
    )
    acc, gp_before, en_before, p_before, n_before = 0.0, 0, 0, 0, 0
    for g_p, e_p, g_n, e_n in zip(gp, ep, gn, en, strict=True):
        acc += sum((j + gp_before) / (j + gp_before + en_before) for j in range(1, g_p + 1))
        acc += sum(
            (j + g_p + p_before) / (j + g_p + p_before + n_before) for j in range(1, e_p + 1)
        )
        gp_before, en_before = gp_before + g_p, en_before + e_n
        p_before, n_before = p_before + g_p + e_p, n_before + g_n + e_n
    return 1.0 - acc / total_p


def calibration_counts(
    scores: torch.Tensor,
    targets: torch.Tensor,
    batch_ids: torch.Tensor,
    alpha: float = 0.9,
    beta: float = 0.6,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per-batch ``(G+, E+, G-, E-)`` of one query for :func:`dg_calibrated_bound`, batches by
    sorted id.

    Args:
        scores: ``(N,)``; targets: ``(N,)`` relevance; batch_ids: ``(N,)``; alpha, beta: the
            thresholds.
    """
    scores, targets = check_one_query(scores, targets)
    targets = targets > 0
    alpha, beta = check_float(alpha, "alpha"), check_float(beta, "beta")
    batch_ids = torch.as_tensor(batch_ids)
    if batch_ids.shape != scores.shape:
        raise ValueError(
            f"batch_ids has shape {tuple(batch_ids.shape)} but scores has shape "
            f"{tuple(scores.shape)}"
        )
    out: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    for b in torch.unique(batch_ids):
        m = batch_ids == b
        s, y = scores[m], targets[m]
        out[0].append(int(((s >= alpha) & y).sum()))
        out[1].append(int(((s < alpha) & y).sum()))
        out[2].append(int(((s <= beta) & ~y).sum()))
        out[3].append(int(((s > beta) & ~y).sum()))
    return out


def juxtaposed_batches(
    pos_per_batch: Sequence[int],
    neg_per_batch: Sequence[int],
    *,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The worst-case arrangement of Eq. 3.18 (thesis Fig. 3.10 / A.1; SupRank Fig. 11).

    Every batch is perfectly ranked (its positives above its negatives) and batch b lies entirely
    above batch b + 1.

    Returns:
        ``(scores (N,), targets (N,) bool, batch_ids (N,))`` with strictly decreasing scores in
        ``(0, 1]``.
    """
    p, n = _counts("pos_per_batch", pos_per_batch), _counts("neg_per_batch", neg_per_batch)
    if len(p) != len(n):
        raise ValueError(f"pos_per_batch has {len(p)} batches but neg_per_batch has {len(n)}")
    targets = torch.tensor(
        [t for pb, nb in zip(p, n, strict=True) for t in [True] * pb + [False] * nb]
    )
    batch_ids = torch.tensor(
        [b for b, (pb, nb) in enumerate(zip(p, n, strict=True)) for _ in range(pb + nb)]
    )
    total = targets.numel()
    scores = 1.0 - torch.arange(total, dtype=dtype) / total
    return scores, targets, batch_ids


def _ap_of_sequence(seq: Sequence[bool]) -> float:
    hits, acc = 0, 0.0
    for i, y in enumerate(seq, start=1):
        if y:
            hits += 1
            acc += hits / i
    return acc / hits


def worst_case_dg_brute_force(
    pos_per_batch: Sequence[int], neg_per_batch: Sequence[int], *, max_orderings: int = 2_000_000
) -> tuple[float, list[int]]:
    """Largest DG over every global ordering in which each batch is perfectly ranked (small cases).

    Each batch is a chain "positives then negatives" (AP_b = 1, so the batch mean is 1); a global
    ordering is an interleaving of the chains, and DG = 1 - AP(global). Enumerates all
    ``(sum n_b)! / prod n_b!`` interleavings.

    Returns:
        ``(max DG, batch sequence)``: the worst ordering as the batch id of each position.
    """
    p, n = _counts("pos_per_batch", pos_per_batch), _counts("neg_per_batch", neg_per_batch)
    if len(p) != len(n):
        raise ValueError(f"pos_per_batch has {len(p)} batches but neg_per_batch has {len(n)}")
    sizes = [pb + nb for pb, nb in zip(p, n, strict=True)]
    n_orders = math.factorial(sum(sizes)) // math.prod(math.factorial(s) for s in sizes)
    if n_orders > max_orderings:
        raise ValueError(
            f"{n_orders} orderings exceed max_orderings={max_orderings}; use a smaller case"
        )
    best, best_seq = -1.0, []
    for seq in _interleavings(sizes):
        taken = [0] * len(sizes)
        labels = []
        for b in seq:
            labels.append(taken[b] < p[b])
            taken[b] += 1
        dg = 1.0 - _ap_of_sequence(labels)
        if dg > best + 1e-15:
            best, best_seq = dg, list(seq)
    return best, best_seq


def _interleavings(sizes: list[int]):  # type: ignore[no-untyped-def]
    """All distinct sequences with ``sizes[b]`` copies of b (multiset permutations)."""
    total = sum(sizes)
    remaining = list(sizes)
    seq: list[int] = []

    def rec():  # type: ignore[no-untyped-def]
        if len(seq) == total:
            yield tuple(seq)
            return
        for b in range(len(remaining)):
            if remaining[b]:
                remaining[b] -= 1
                seq.append(b)
                yield from rec()
                seq.pop()
                remaining[b] += 1

    yield from rec()
