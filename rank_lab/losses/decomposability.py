"""The decomposability gap (DG) and the losses that reduce it (Ramzi thesis Sec. 3.2.3; SupRank
III-C).

Rank metrics do not decompose over mini-batches: the mean of per-batch metrics differs from the
metric on the whole retrieval set. For one query whose retrieval set is split into K batches
(Eq. 3.6 of the thesis; SupRank Eq. 6; ROADMAP Eq. 6)::

    DG = (1/K) sum_b M_b - M

Losses:

* :class:`PairDGLoss` -- ``L_DG`` (Eq. 3.7 of the thesis = ROADMAP's ``L_calibr.``, Eq. 7):
  positives above an absolute threshold alpha, negatives below beta, the contrastive loss of Hadsell
  et al. reused to *calibrate* scores across batches. alpha = 0.9, beta = 0.6 (ROADMAP paper Sec. 4;
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

The bounds on DG (Eqs. 3.18-3.19 of the thesis: :func:`dg_upper_bound`, :func:`dg_calibrated_bound`,
:func:`calibration_counts`, :func:`juxtaposed_batches`, :func:`worst_case_dg_brute_force`) are in
:mod:`rank_lab.losses.decomposability_bounds`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_float,
    check_labels,
    check_one_query,
    check_positive_int,
    check_scores_targets,
    unit_rows,
)
from rank_lab.losses.base import MetricLoss
from rank_lab.losses.pairs import PairReduction, pair_margin_loss_trusted
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
]

Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@register_loss("pair_dg")
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

    def __init__(
        self,
        alpha: float = 0.9,
        beta: float = 0.6,
        pair_reduction: PairReduction = "per_query_mean",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        alpha, beta = check_float(alpha, "alpha"), check_float(beta, "beta")
        if not beta < alpha:
            raise ValueError(f"beta must be < alpha, got alpha={alpha}, beta={beta}")
        self.alpha, self.beta = alpha, beta
        self.pair_reduction = check_choice(
            pair_reduction, "pair_reduction", ("per_query_mean", "per_query_sum", "avg_nonzero")
        )

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:
        return pair_margin_loss_trusted(
            batch.scores,
            batch.relevance,
            batch.valid,
            self.alpha,
            self.beta,
            self.pair_reduction,
            self.reduction,
        )

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
        raise ValueError(
            f"batch_ids must have shape ({scores.shape[1]},), got {tuple(batch_ids.shape)}"
        )
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
            raise ValueError(
                f"batch {int(b)} has no positive for {int((~has).sum())} query(ies) "
                "(empty_batch='raise')"
            )
        if bool(has.any()):
            m = metric(scores[has][:, cols], targets[has][:, cols]).double()
            total[has] += m
            count[has] += 1
    gap = total / count - metric(scores, targets).double()
    return gap[0] if one else gap


def random_batches(
    n: int, batch_size: int, *, seed: int = 0, targets: torch.Tensor | None = None
) -> torch.Tensor:
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
    order = torch.cat(
        [
            order[: int(pos.sum())][torch.randperm(int(pos.sum()), generator=gen)],
            order[int(pos.sum()) :][torch.randperm(n - int(pos.sum()), generator=gen)],
        ]
    )
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
    scores, targets = check_one_query(scores, targets)
    vals = []
    for i in range(check_positive_int(n_draws, "n_draws")):
        ids = random_batches(
            scores.numel(), batch_size, seed=seed + i, targets=targets if balanced else None
        )
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
    """Mean DG (Eq. 3.6 of the Ramzi thesis) of a labelled embedding set, over queries and
    partitions.

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
    emb = unit_rows(emb.double(), dim=1)
    scores = emb[queries] @ emb[gallery].T
    targets = lab[queries][:, None] == lab[gallery][None, :]
    per_draw = torch.tensor(
        [
            float(
                decomposability_gap(
                    scores, targets, random_batches(n, batch_size, seed=seed + i), metric=metric
                ).mean()
            )
            for i in range(n_draws)
        ],
        dtype=torch.float64,
    )
    return float(per_draw.mean()), float(per_draw.std()) if n_draws > 1 else 0.0
