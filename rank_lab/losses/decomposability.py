"""The decomposability gap (DG) and the losses that reduce it (Ramzi thesis Sec. 3.2.3; SupRank III-C).

Rank metrics do not decompose over mini-batches: the mean of per-batch metrics differs from the
metric on the whole retrieval set. For one query whose retrieval set is split into K batches
(Eq. 3.6 of the thesis; SupRank Eq. 6; ROADMAP Eq. 6)::

    DG = (1/K) sum_b M_b - M

Losses:

* :class:`PairDGLoss` -- ``L_DG`` (Eq. 3.7 of the thesis = ROADMAP's ``L_calibr.``, Eq. 7): positives
  above an absolute threshold alpha, negatives below beta, the contrastive loss of Hadsell et al.
  reused to *calibrate* scores across batches. alpha = 0.9, beta = 0.6 (ROADMAP paper Sec. 4;
  official code). Paper reduction: per query, mean over positives + mean over negatives, then mean
  over queries (default); the official code uses pytorch-metric-learning's ``ContrastiveLoss``
  whose reducer averages over non-zero pair losses (``pair_reduction="avg_nonzero"``).
* :class:`ProxyDGLoss` -- ``L*_DG`` (Eq. 3.8 of the thesis; SupRank Eq. 8) = NormSoftmax
  (:class:`rank_lab.losses.proxies.NormSoftmaxLoss`), temperature eta = 0.05 (official code; the
  papers do not print it).

DG tools (exact metrics from :mod:`rank_lab.metrics`):

* :func:`decomposability_gap` -- DG of a fixed partition; :func:`random_batches` and
  :func:`expected_decomposability_gap` for random (optionally class-balanced) partitions;
  :func:`embedding_decomposability_gap` for the mean DG of a labelled embedding set.
* :func:`dg_upper_bound` -- the worst case when every batch is perfectly ranked (Eq. 3.18 of the
  thesis; SupRank Eq. 26; ROADMAP Eq. 8), attained by the juxtaposed batches of
  :func:`juxtaposed_batches` (thesis Fig. 3.10 / A.1); :func:`worst_case_dg_brute_force` checks it
  by enumerating every global ordering of small cases.
* :func:`dg_calibrated_bound` and :func:`calibration_counts` -- the refined bound with the
  calibration thresholds (Eq. 3.19; SupRank Eq. 27; ROADMAP Eq. 9).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_float,
    check_labels,
    check_positive_int,
    check_scores_targets,
)
from rank_lab.losses.base import MetricLoss
from rank_lab.losses.pairs import PairReduction, pair_margin_loss
from rank_lab.losses.prepared_batch import PreparedBatch
from rank_lab.losses.proxies import NormSoftmaxLoss
from rank_lab.losses.registry import register_loss
from rank_lab.metrics import average_precision

__all__ = [
    "PairDGLoss",
    "ProxyDGLoss",
    "decomposability_gap",
    "random_batches",
    "expected_decomposability_gap",
    "embedding_decomposability_gap",
    "dg_upper_bound",
    "dg_calibrated_bound",
    "calibration_counts",
    "juxtaposed_batches",
    "worst_case_dg_brute_force",
]

Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@register_loss("pair_dg", aliases=("calibration",))
class PairDGLoss(MetricLoss):
    """Pair-based decomposability loss ``L_DG`` (Eq. 3.7 of the Ramzi thesis; ROADMAP Eq. 7).

    ``(1/|P|) sum_{j in P} [alpha - s_j]_+ + (1/|N|) sum_{j in N} [s_j - beta]_+`` per query.

    Args:
        alpha: positive threshold (0.9, ROADMAP paper / code).
        beta: negative threshold, ``beta < alpha`` (0.6).
        pair_reduction: ``"per_query_mean"`` (paper, default) or ``"avg_nonzero"`` (official code)
            or ``"per_query_sum"``; see :func:`rank_lab.losses.pairs.pair_margin_loss`.
        **kwargs: ``normalize``, ``reduction``, ``query_role``, ``hierarchy_level``.
    """

    def __init__(self, alpha: float = 0.9, beta: float = 0.6, pair_reduction: PairReduction = "per_query_mean", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        alpha, beta = check_float(alpha, "alpha"), check_float(beta, "beta")
        if not beta < alpha:
            raise ValueError(f"beta must be < alpha, got alpha={alpha}, beta={beta}")
        self.alpha, self.beta = alpha, beta
        self.pair_reduction = check_choice(pair_reduction, "pair_reduction", ("per_query_mean", "per_query_sum", "avg_nonzero"))

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:
        return pair_margin_loss(batch.scores, batch.relevance, batch.valid, self.alpha, self.beta, self.pair_reduction, self.reduction)  # type: ignore[arg-type]

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}, pair_reduction={self.pair_reduction!r}"


@register_loss("proxy_dg", needs=("n_classes", "dim"))
class ProxyDGLoss(NormSoftmaxLoss):
    """Proxy-based decomposability loss ``L*_DG`` (Eq. 3.8 of the Ramzi thesis) = NormSoftmax.

    ``-log [exp(v_y^T p_y / eta) / sum_z exp(v_y^T p_z / eta)]``, one learnable proxy per training
    fine class. Args as :class:`~rank_lab.losses.proxies.NormSoftmaxLoss` (``temperature`` = eta =
    0.05, official code). The official code gives the proxies their own Adam optimizer, lr 10.
    """


def _metric_default() -> Metric:
    return average_precision


def decomposability_gap(
    scores: torch.Tensor,
    targets: torch.Tensor,
    batch_ids: torch.Tensor,
    *,
    metric: Metric | None = None,
    empty_batch: str = "skip",
) -> torch.Tensor:
    """DG of a fixed partition of the retrieval set (Eq. 3.6 of the Ramzi thesis).

    Args:
        scores: ``(N,)`` scores of one query, or ``(Q, N)`` for Q queries sharing the partition.
        targets: same shape, relevance (> 0 = positive).
        batch_ids: ``(N,)`` long, the batch of every item (any integer ids).
        metric: per-query metric ``(scores (Q, n), targets (Q, n)) -> (Q,)``; default
            :func:`rank_lab.metrics.average_precision`.
        empty_batch: a batch without a positive for a query is ``"skip"``-ped for that query
            (the mean is over the other batches) or makes the call ``"raise"``.

    Returns:
        DG as a 0-d tensor for 1-D input, else ``(Q,)``: mean batch metric minus global metric.
    """
    one = torch.as_tensor(scores).ndim == 1
    scores, targets = check_scores_targets(scores, targets)
    check_choice(empty_batch, "empty_batch", ("skip", "raise"))
    batch_ids = torch.as_tensor(batch_ids, device=scores.device).long()
    if batch_ids.shape != (scores.shape[1],):
        raise ValueError(f"batch_ids must have shape ({scores.shape[1]},), got {tuple(batch_ids.shape)}")
    metric = metric or _metric_default()
    rel = targets > 0
    if not bool(rel.any(1).all()):
        raise ValueError("every query needs at least one positive in targets (its retrieval set)")
    total = torch.zeros(scores.shape[0], dtype=torch.float64, device=scores.device)
    count = torch.zeros_like(total)
    for b in torch.unique(batch_ids):
        cols = batch_ids == b
        has = rel[:, cols].any(1)
        if not bool(has.all()) and empty_batch == "raise":
            raise ValueError(f"batch {int(b)} has no positive for {int((~has).sum())} query(ies) (empty_batch='raise')")
        if bool(has.any()):
            m = metric(scores[has][:, cols], targets[has][:, cols]).double()
            total[has] += m
            count[has] += 1
    gap = total / count - metric(scores, targets).double()
    return gap[0] if one else gap


def random_batches(n: int, batch_size: int, *, seed: int = 0, targets: torch.Tensor | None = None) -> torch.Tensor:
    """A random partition of ``n`` items into ``n / batch_size`` equal batches, ``(n,)`` batch ids.

    Args:
        n: number of items; must be a multiple of ``batch_size`` (thesis: ``N / B = K`` integer).
        batch_size: B.
        seed: RNG seed.
        targets: ``(n,)`` relevance of one query; when given, positives are spread evenly over the
            batches (round-robin after shuffling), so every batch gets ``floor`` or ``ceil`` of
            ``|P| / K`` positives (the thesis assumes equal positives per batch).

    Returns:
        ``(n,)`` long tensor of batch ids in ``[0, n / batch_size)``.
    """
    n, batch_size = check_positive_int(n, "n"), check_positive_int(batch_size, "batch_size")
    if n % batch_size:
        raise ValueError(f"n={n} must be a multiple of batch_size={batch_size}")
    k = n // batch_size
    gen = torch.Generator().manual_seed(int(seed))
    if targets is None:
        perm = torch.randperm(n, generator=gen)
        ids = torch.empty(n, dtype=torch.long)
        ids[perm] = torch.arange(n) // batch_size
        return ids
    pos = torch.as_tensor(targets).reshape(-1).cpu() > 0
    if pos.numel() != n:
        raise ValueError(f"targets has {pos.numel()} items but n={n}")
    order = torch.cat([torch.nonzero(pos).squeeze(1), torch.nonzero(~pos).squeeze(1)])
    order = torch.cat([order[: int(pos.sum())][torch.randperm(int(pos.sum()), generator=gen)], order[int(pos.sum()) :][torch.randperm(n - int(pos.sum()), generator=gen)]])
    slots = torch.arange(n) % k  # round robin: positives first, spread evenly
    ids = torch.empty(n, dtype=torch.long)
    ids[order] = slots
    return ids


def expected_decomposability_gap(
    scores: torch.Tensor,
    targets: torch.Tensor,
    batch_size: int,
    *,
    n_draws: int = 10,
    seed: int = 0,
    balanced: bool = True,
    metric: Metric | None = None,
) -> tuple[float, float]:
    """Mean and std of DG over ``n_draws`` random partitions of one query's retrieval set.

    Args:
        scores, targets: ``(N,)`` scores and relevance of one query.
        batch_size: B (``N`` must be a multiple).
        n_draws: number of random partitions.
        seed: base seed (draw i uses ``seed + i``).
        balanced: spread the positives evenly over the batches (:func:`random_batches`).
        metric: see :func:`decomposability_gap`.

    Returns:
        ``(mean, std)`` as floats.
    """
    scores, targets = _one_query(scores, targets)
    vals = []
    for i in range(check_positive_int(n_draws, "n_draws")):
        ids = random_batches(scores.numel(), batch_size, seed=seed + i, targets=targets if balanced else None)
        vals.append(float(decomposability_gap(scores, targets, ids, metric=metric)))
    t = torch.tensor(vals, dtype=torch.float64)
    return float(t.mean()), float(t.std()) if len(vals) > 1 else 0.0


def embedding_decomposability_gap(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int,
    *,
    n_draws: int = 5,
    seed: int = 0,
    metric: Metric | None = None,
) -> tuple[float, float]:
    """Mean DG (Eq. 3.6 of the Ramzi thesis) of a labelled embedding set, over queries and partitions.

    The first item of every class (in the order of ``torch.unique(labels)``) is a query; the
    other ``N`` items form the retrieval set, scored by cosine similarity. Each draw splits the
    retrieval set into ``N / batch_size`` random batches (:func:`random_batches`, not
    class-balanced) shared by all queries, and computes every query's DG with
    :func:`decomposability_gap` (a batch holding none of a query's positives is skipped for that
    query). With ``batch_size / N`` small, a query's batch metric is that of a few positives among
    ``batch_size`` random items, against its metric over the whole set.

    Args:
        embeddings: ``(n, d)`` embeddings (normalised here).
        labels: ``(n,)`` integer class labels; every class needs at least 2 items.
        batch_size: B; the retrieval set size ``N = n - n_classes`` must be a multiple of it.
        n_draws: number of random partitions.
        seed: base seed (draw i uses ``seed + i``).
        metric: see :func:`decomposability_gap` (default: AP).

    Returns:
        ``(mean, std)``: the mean DG over queries and draws, and the standard deviation over the
        draws of the per-draw mean over queries (0.0 for one draw).

    Raises:
        ValueError: bad shapes or values, a class with a single item, ``N`` not a multiple of
            ``batch_size``.
    """
    emb = check_embeddings(embeddings, "embeddings")
    lab = check_labels(labels, emb.shape[0], "labels")
    if lab.ndim != 1:
        raise ValueError(f"labels must have shape (n,), got {tuple(lab.shape)}")
    batch_size = check_positive_int(batch_size, "batch_size")
    n_draws = check_positive_int(n_draws, "n_draws")
    classes, counts = torch.unique(lab, return_counts=True)
    if bool((counts < 2).any()):
        raise ValueError(
            f"labels: every class needs at least 2 items (a query and a positive), class "
            f"{int(classes[counts < 2][0])} has 1"
        )
    queries = torch.stack([torch.nonzero(lab == c)[0, 0] for c in classes])
    gallery = torch.ones(len(lab), dtype=torch.bool, device=lab.device)
    gallery[queries] = False
    n = int(gallery.sum())
    if n % batch_size:
        raise ValueError(
            f"batch_size={batch_size} must divide the retrieval set size N={n} "
            f"(items minus one query per class)"
        )
    emb = torch.nn.functional.normalize(emb.double(), dim=1)
    scores = emb[queries] @ emb[gallery].T
    targets = lab[queries][:, None] == lab[gallery][None, :]
    per_draw = torch.tensor(
        [
            float(decomposability_gap(scores, targets, random_batches(n, batch_size, seed=seed + i),
                                      metric=metric).mean())
            for i in range(n_draws)
        ],
        dtype=torch.float64,
    )
    return float(per_draw.mean()), float(per_draw.std()) if n_draws > 1 else 0.0


def _one_query(scores: object, targets: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the ``(N,)`` scores and relevance of one query (finite, same shape, non-empty)."""
    s = torch.as_tensor(scores)
    if s.ndim != 1:
        raise ValueError(f"scores must have shape (N,) (one query), got {tuple(s.shape)}")
    s, t = check_scores_targets(s, targets)
    return s[0], t[0]


def _counts(name: str, values: Sequence[int]) -> list[int]:
    vals = [int(v) for v in values]
    if not vals or any(v < 0 for v in vals):
        raise ValueError(f"{name} must be a non-empty sequence of non-negative ints, got {values!r}")
    return vals


def _check_equal_batches(p: list[int], n: list[int], what: str, names: str) -> None:
    """The setting of the proofs of Eqs. 3.18-3.19 (Ramzi thesis App. A.1.3): equal batches, equal positives."""
    if len(set(p)) > 1 or len(set(n)) > 1:
        raise ValueError(
            f"{what} is proven for batches of equal composition (Ramzi thesis App. A.1.3), got {names} giving "
            f"positives {p} and negatives {n} per batch; with unequal batches it is not a bound (e.g. P_b = "
            "[3, 1], N_b = [1, 3] gives 0.05 while the worst case is 0.382): use worst_case_dg_brute_force"
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
    _check_equal_batches([a + b for a, b in zip(gp, ep, strict=True)], [a + b for a, b in zip(gn, en, strict=True)],
                         "dg_calibrated_bound (Eq. 3.19)", "good_pos + bad_pos / good_neg + bad_neg")
    acc, gp_before, en_before, p_before, n_before = 0.0, 0, 0, 0, 0
    for g_p, e_p, g_n, e_n in zip(gp, ep, gn, en, strict=True):
        acc += sum((j + gp_before) / (j + gp_before + en_before) for j in range(1, g_p + 1))
        acc += sum((j + g_p + p_before) / (j + g_p + p_before + n_before) for j in range(1, e_p + 1))
        gp_before, en_before = gp_before + g_p, en_before + e_n
        p_before, n_before = p_before + g_p + e_p, n_before + g_n + e_n
    return 1.0 - acc / total_p


def calibration_counts(
    scores: torch.Tensor, targets: torch.Tensor, batch_ids: torch.Tensor, alpha: float = 0.9, beta: float = 0.6
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per-batch ``(G+, E+, G-, E-)`` of one query for :func:`dg_calibrated_bound`, batches by sorted id.

    Args:
        scores: ``(N,)``; targets: ``(N,)`` relevance; batch_ids: ``(N,)``; alpha, beta: the thresholds.
    """
    scores, targets = _one_query(scores, targets)
    targets = targets > 0
    alpha, beta = check_float(alpha, "alpha"), check_float(beta, "beta")
    batch_ids = torch.as_tensor(batch_ids)
    if batch_ids.shape != scores.shape:
        raise ValueError(f"batch_ids has shape {tuple(batch_ids.shape)} but scores has shape {tuple(scores.shape)}")
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
    pos_per_batch: Sequence[int], neg_per_batch: Sequence[int], *, dtype: torch.dtype = torch.float64
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
    targets = torch.tensor([t for pb, nb in zip(p, n, strict=True) for t in [True] * pb + [False] * nb])
    batch_ids = torch.tensor([b for b, (pb, nb) in enumerate(zip(p, n, strict=True)) for _ in range(pb + nb)])
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
        raise ValueError(f"{n_orders} orderings exceed max_orderings={max_orderings}; use a smaller case")
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

