"""RS@k, the Recall@k Surrogate loss of Patel, Tolias & Matas (CVPR 2022), chapter 5 of the Patel thesis.

Recall@k of a query ``q`` over a database ``Omega`` (Eqs. 5.1-5.3) counts the positives whose rank
is at most ``k``; both the rank (a sum of Heaviside steps over similarity differences) and the
count (a Heaviside step of ``k - rank``) are replaced by sigmoids (Eq. 5.4) with two temperatures:

.. math::

    \\tilde r(q, x) = 1 + \\sum_{z \\in \\Omega, z \\neq x} \\sigma_{\\tau_2}(s_{qz} - s_{qx}),
    \\qquad
    \\tilde R^k(q) = \\frac{\\min\\big(k, \\sum_{x \\in P_q} \\sigma_{\\tau_1}(k - \\tilde r(q, x))\\big)}
                          {\\min(k, |P_q|)}

(Eq. 5.5 with the training modification of Section 5.2: the numerator is clipped at ``k`` and the
normaliser is ``min(k, |P_q|)`` so that the loss can reach 0 when a query has more than ``k``
positives). The loss is ``L^K(q) = 1/|K| sum_k (1 - R~^k(q))`` (Eqs. 5.6-5.7), averaged over every
query of the batch, each ranked against the rest of the batch ``B \\ q``.

**Query in its own ranking.** The thesis ranks against ``B \\ q``. The official code
(``yash0307/RecallatK_surrogate``, ``src/losses.py``) does not remove the query from the rank sums,
so ``sigma(s_qq - s_qx) ~ 1`` adds about one to every rank. Default ``include_query_in_rank=False``
(the thesis); ``True`` reproduces the code.

**Limit.** As ``tau1, tau2 -> 0`` (plain normalisation) the surrogate tends to Eq. 5.1 except that a
positive at rank exactly ``k`` counts 1/2 (``sigma(0) = 1/2`` where the thesis' ``H(0) = 1``); with
``tau1 = 1`` it is a soft window of a few ranks around ``k``, so even a perfect ranking keeps a
positive loss for small ``k`` (e.g. ``1 - sigma(0) - sigma(-1) - ...`` for ``k = 1``).

**Memory.** Only the ranks of the positives are needed: for each query the ``P`` positives are
gathered (``P`` = largest number of positives of a query, ``m - 1`` with ``m`` samples per class)
and their ranks computed against the ``N`` database items, an ``(Q, P, N)`` tensor, i.e.
``O(B^2 m)`` and never the ``O(B^3)`` tensor of all pairwise rank comparisons. ``chunk_size``
additionally processes the queries in chunks with activation checkpointing, so that the peak is
``O(chunk x P x N)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from rank_lab._validation import (
    check_embeddings,
    check_finite,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
    check_scores_targets,
)
from rank_lab.losses.base import ListwiseLoss, _reduce_per_query, reachable_ks
from rank_lab.losses.registry import register_loss

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_KS_SIMIX",
    "smooth_positive_ranks",
    "recall_at_k_surrogate",
    "RecallAtKSurrogate",
]

#: The k set of the thesis without SiMix (Section 5.3.2).
DEFAULT_KS: tuple[int, ...] = (1, 2, 4, 8, 16)
#: The k set of the thesis with SiMix (Section 5.3.2).
DEFAULT_KS_SIMIX: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)

Normalization = Literal["min", "positives"]


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    if isinstance(ks, int):
        ks = (ks,)
    ks = tuple(check_positive_int(k, "ks") for k in ks)
    if not ks:
        raise ValueError("ks must hold at least one value of k")
    return ks


def _check_tau1(tau1: float | Sequence[float], n_k: int) -> tuple[float, ...]:
    taus = (tau1,) * n_k if isinstance(tau1, (int, float)) else tuple(tau1)
    if len(taus) != n_k:
        raise ValueError(f"tau1 must be a number or one value per k ({n_k}), got {len(taus)} values")
    return tuple(check_float(t, "tau1", low=0.0, low_open=True) for t in taus)


def _gather_positives(positives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices ``(Q, P)`` of each row's positives (padded) and the validity mask ``(Q, P)``."""
    n_pos = positives.sum(1)
    p_max = max(int(n_pos.max()), 1)
    # a stable descending sort of the 0/1 mask puts each row's positives first, in column order
    order = torch.sort(positives.to(torch.int8), dim=1, descending=True, stable=True).indices
    idx = order[:, :p_max]
    valid = torch.arange(p_max, device=positives.device)[None, :] < n_pos[:, None]
    return idx, valid


def _ranks_block(scores: torch.Tensor, database: torch.Tensor, idx: torch.Tensor, tau2: float) -> torch.Tensor:
    """Smooth ranks ``(Q, P)`` of the gathered positives ``idx`` of each row (Eq. 5.5, inner sum)."""
    s_qx = scores.gather(1, idx)  # (Q, P)
    sg = torch.sigmoid((scores[:, None, :] - s_qx[:, :, None]) / tau2)  # (Q, P, N)
    db = database.to(scores.dtype)
    total = torch.bmm(sg, db[:, :, None]).squeeze(-1)  # sum over database items z
    # the z = x term is sigma(0) = 1/2 exactly (constant, zero gradient): remove it
    return 1.0 + total - 0.5 * db.gather(1, idx)


def smooth_positive_ranks(
    scores: torch.Tensor,
    positives: torch.Tensor,
    database: torch.Tensor | None = None,
    *,
    tau2: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Smooth ranks of every query's positives, ``r~(q, x) = 1 + sum_{z != x} sigma_tau2(s_qz - s_qx)``.

    The sigmoid rank of Eq. 5.5 (Patel thesis), the inner sum of RS@k.

    Args:
        scores: ``(Q, N)`` similarities of ``Q`` queries to ``N`` items.
        positives: ``(Q, N)`` bool, the positives ``P_q`` of each query (must lie in the database).
        database: ``(Q, N)`` bool, the items each query is ranked against (default: all ``N``);
            use it to remove the query itself (``B \\ q``).
        tau2: temperature of the sigmoid on similarity differences (thesis: 0.01).

    Returns:
        ``(ranks (Q, P), valid (Q, P), index (Q, P))``: the smooth rank of the ``p``-th positive of
        each query, whether that slot holds a positive (rows are padded to the largest ``|P_q|``)
        and its column in ``scores``. A query without positives is legal here: its row has no
        valid slot (``valid`` all False); :func:`recall_at_k_surrogate` decides what to do with it.
    """
    scores, positives = check_scores_targets(scores, positives, "scores", "positives")
    positives = positives.bool()
    database = _check_database(database, positives)
    check_float(tau2, "tau2", low=0.0, low_open=True)
    idx, valid = _gather_positives(positives)
    return _ranks_block(scores, database, idx, float(tau2)), valid, idx


def _check_database(database: torch.Tensor | None, positives: torch.Tensor) -> torch.Tensor:
    if database is None:
        return torch.ones_like(positives, dtype=torch.bool)
    if not isinstance(database, torch.Tensor):
        database = torch.as_tensor(database)
    if database.shape != positives.shape:
        raise ValueError(f"database has shape {tuple(database.shape)} but positives has shape {tuple(positives.shape)}")
    database = database.to(positives.device).bool()
    if bool((positives & ~database).any()):
        raise ValueError("every positive must belong to the database (positives & ~database is not empty)")
    return database


def _loss_block(
    scores: torch.Tensor,
    positives: torch.Tensor,
    database: torch.Tensor,
    ks: tuple[int, ...],
    taus1: tuple[float, ...],
    tau2: float,
    normalization: str,
) -> torch.Tensor:
    idx, valid = _gather_positives(positives)
    ranks = _ranks_block(scores, database, idx, tau2)  # (Q, P)
    n_pos = positives.sum(1).to(scores.dtype)  # (Q,)
    vmask = valid.to(scores.dtype)
    loss = scores.new_zeros(scores.shape[0])
    for k, t1 in zip(ks, taus1, strict=True):
        counted = (torch.sigmoid((k - ranks) / t1) * vmask).sum(1)  # smooth count in the top k
        if normalization == "min":
            rec = torch.clamp(counted, max=float(k)) / torch.clamp(n_pos, max=float(k)).clamp_min(1.0)
        else:
            rec = counted / n_pos.clamp_min(1.0)
        loss = loss + (1.0 - rec)
    return loss / len(ks)


def recall_at_k_surrogate(
    scores: torch.Tensor,
    positives: torch.Tensor,
    database: torch.Tensor | None = None,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    tau1: float | Sequence[float] = 1.0,
    tau2: float = 0.01,
    normalization: Normalization = "min",
    no_positive: Literal["raise", "ignore"] = "raise",
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-query RS@k loss ``L^K(q)`` from a similarity matrix (Eqs. 5.4-5.7 of the Patel thesis).

    Args:
        scores: ``(Q, N)`` similarities ``s_qz`` (dot products of L2-normalised embeddings).
        positives: ``(Q, N)`` bool, ``P_q``.
        database: ``(Q, N)`` bool, the database each query is ranked against (``B \\ q`` in the
            thesis: pass ``~eye``); default all ``N`` items. A ``True`` entry outside ``positives``
            is a negative (or, with ``include_query_in_rank``, the query itself).
        ks: the set ``K`` of values of k (thesis: (1, 2, 4, 8, 16); with SiMix
            (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)). A k larger than the smallest retrieval set is
            clipped to it with a ``UserWarning`` (:func:`~rank_lab.losses.base.reachable_ks`).
        tau1: temperature of the sigmoid on ``k - rank`` (thesis: 1); one value or one per k (an
            early commit of the official code used ``tau1_k = k``).
        tau2: temperature of the sigmoid on similarity differences (thesis: 0.01).
        normalization: ``"min"`` (training version of Section 5.2: numerator clipped at ``k``,
            divided by ``min(k, |P_q|)``) or ``"positives"`` (plain Eq. 5.5, divided by ``|P_q|``).
        no_positive: a query without positives has no recall: ``"raise"`` a ``ValueError`` or
            ``"ignore"`` it (its loss is 0; exclude it from any mean yourself).
        chunk_size: process this many queries at a time with activation checkpointing (peak memory
            ``O(chunk x P x N)`` instead of ``O(Q x P x N)``); ``None`` = all at once.

    Returns:
        ``(Q,)`` loss per query, in ``[0, 1]``.

    Raises:
        ValueError: mismatched shapes, non-finite scores, a positive outside the database, a query
            without positives (unless ``no_positive="ignore"``), bad temperatures or ks.
    """
    scores, positives = check_scores_targets(scores, positives, "scores", "positives")
    positives = positives.bool()
    database = _check_database(database, positives)
    ks = reachable_ks(_check_ks(ks), database)
    taus1 = _check_tau1(tau1, len(ks))
    check_float(tau2, "tau2", low=0.0, low_open=True)
    if normalization not in ("min", "positives"):
        raise ValueError(f"normalization must be 'min' or 'positives', got {normalization!r}")
    if no_positive not in ("raise", "ignore"):
        raise ValueError(f"no_positive must be 'raise' or 'ignore', got {no_positive!r}")
    if chunk_size is not None:
        chunk_size = check_positive_int(chunk_size, "chunk_size")
    has_pos = positives.any(1)
    if not bool(has_pos.all()) and no_positive == "raise":
        bad = int((~has_pos).sum())
        raise ValueError(f"{bad} query(ies) have no positive (a row of positives is all False): recall@k is undefined "
                         "(use no_positive='ignore')")
    q = scores.shape[0]
    if chunk_size is None or chunk_size >= q:
        out = _loss_block(scores, positives, database, ks, taus1, float(tau2), normalization)
    else:
        parts = []
        for a in range(0, q, chunk_size):
            args = (scores[a : a + chunk_size], positives[a : a + chunk_size], database[a : a + chunk_size])
            if torch.is_grad_enabled() and scores.requires_grad:
                parts.append(
                    checkpoint(_loss_block, *args, ks, taus1, float(tau2), normalization, use_reentrant=False)
                )
            else:
                parts.append(_loss_block(*args, ks, taus1, float(tau2), normalization))
        out = torch.cat(parts)
    return torch.where(has_pos, out, torch.zeros_like(out))


@register_loss("rs_at_k", aliases=("recall_at_k_surrogate",))
class RecallAtKSurrogate(ListwiseLoss):
    """RS@k loss module: ``loss(embeddings, labels)`` or ``loss(embeddings, labels, ref_embeddings, ref_labels)``.

    Eqs. 5.1-5.7 of the Patel thesis (Recall@k Surrogate, Patel, Tolias & Matas, CVPR 2022), with
    optional SiMix (Eqs. 5.8-5.10, :mod:`rank_lab.losses.simix`). Follows the common call of
    :class:`rank_lab.losses.base.ListwiseLoss` (``forward_scores`` included).
    :class:`rank_lab.losses.recall.SmoothRecallAtK` computes the same loss without SiMix and
    without the official-code query option (the tests check that they agree).

    * ``loss(embeddings, labels)``: every batch item is a query ranked against the rest of the batch
      (``B \\ q``); with ``simix=True`` the batch is first expanded with the virtual examples of all
      same-class pairs, which are both queries and database items (Algorithm 3).
    * ``loss(embeddings, labels, ref_embeddings, ref_labels, ref_self_index=None)``: the queries
      are ranked against the reference set (e.g. a cross-batch memory); ``ref_self_index`` (the
      slot of each query in the refs, -1 if absent) removes the query from its own database.

    Args:
        ks: the set ``K`` (default (1, 2, 4, 8, 16); the thesis uses
            :data:`DEFAULT_KS_SIMIX` with SiMix).
        tau1: sigmoid temperature on ranks (default 1), a number or one per k.
        tau2: sigmoid temperature on similarity differences (default 0.01).
        include_query_in_rank: count the query among the ranked (non-positive) items, as the
            official code does (default ``False``, the thesis' ``B \\ q``). With a reference set
            that does not hold the query, the term ``sigma_tau2(s_qq - s_qx)`` is added to every
            rank.
        normalization: ``"min"`` (training version, default) or ``"positives"`` (plain Eq. 5.5).
        simix: expand the batch with SiMix virtual examples (in-batch call only).
        exclude_self_mixtures: with SiMix, remove from a query's database the items that share a
            parent with it (virtual examples made from the query itself). Default ``False`` like
            the thesis and the code.
        max_virtual: cap on the number of SiMix virtual examples (random subset); ``None`` = all.
        chunk_size: queries per checkpointed chunk (see :func:`recall_at_k_surrogate`).
        seed: seed of the generator that draws the SiMix mixing coefficients (``None``: global RNG).
        normalize, reduction, no_positive, hierarchy_level: see
            :class:`~rank_lab.losses.base.ListwiseLoss` (``no_positive="skip"`` by default: queries
            without a positive are left out of the mean; an error if none has one).

    Returns (forward):
        scalar loss, the mean of ``L^K(q)`` over the queries (with SiMix over ``B u B^``).
    """

    def __init__(
        self,
        ks: Sequence[int] = DEFAULT_KS,
        tau1: float | Sequence[float] = 1.0,
        tau2: float = 0.01,
        *,
        include_query_in_rank: bool = False,
        normalization: Normalization = "min",
        simix: bool = False,
        exclude_self_mixtures: bool = False,
        max_virtual: int | None = None,
        chunk_size: int | None = None,
        seed: int | None = None,
        **kwargs: object,
    ) -> None:
        if kwargs.get("include_query_as_positive"):
            raise ValueError(
                "RS@k never counts the query as its own positive; the official code ranks it as a "
                "competitor: use include_query_in_rank=True"
            )
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.ks = _check_ks(ks)
        self.taus1 = _check_tau1(tau1, len(self.ks))
        check_float(tau2, "tau2", low=0.0, low_open=True)
        if normalization not in ("min", "positives"):
            raise ValueError(f"normalization must be 'min' or 'positives', got {normalization!r}")
        self.tau2 = float(tau2)
        self.include_query_in_rank = bool(include_query_in_rank)
        self.normalization = normalization
        self.simix = bool(simix)
        self.exclude_self_mixtures = bool(exclude_self_mixtures)
        self.max_virtual = None if max_virtual is None else check_nonneg_int(max_virtual, "max_virtual")
        self.chunk_size = None if chunk_size is None else check_positive_int(chunk_size, "chunk_size")
        self._generator: torch.Generator | None = None
        self.seed = None if seed is None else check_nonneg_int(seed, "seed")

    def extra_repr(self) -> str:
        return (
            f"ks={self.ks}, tau1={self.taus1 if len(set(self.taus1)) > 1 else self.taus1[0]}, tau2={self.tau2}, "
            f"include_query_in_rank={self.include_query_in_rank}, normalization={self.normalization!r}, simix={self.simix}"
        )

    def _gen(self, device: torch.device) -> torch.Generator | None:
        if self.seed is None:
            return None
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(int(self.seed))
        return self._generator

    def per_query(self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Per-query RS@k ``(Q,)``: positives are the relevant items of the retrieval set ``valid``."""
        return recall_at_k_surrogate(
            scores,
            (relevance > 0) & valid,
            valid,
            ks=self.ks,
            tau1=self.taus1,
            tau2=self.tau2,
            normalization=self.normalization,
            no_positive="ignore",
            chunk_size=self.chunk_size,
        )

    def similarity_problem(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        ref_self_index: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``(scores, positives, database)`` triple the loss is computed on (all ``(Q, N)``).

        Exposed for inspection (the book plots it) and for tests.
        """
        if self.simix:
            if ref_embeddings is not None or ref_labels is not None:
                raise ValueError("SiMix mixes in-batch similarities: it cannot be used with ref_embeddings")
            from rank_lab.losses.simix import simix

            emb = check_embeddings(embeddings, "embeddings")
            lab = check_labels(labels, emb.shape[0], "labels").to(emb.device)
            lab = lab[:, self.hierarchy_level] if lab.ndim == 2 else lab
            if self.normalize:
                emb = F.normalize(emb, dim=1)
            batch = simix(emb, lab, generator=self._gen(emb.device), max_virtual=self.max_virtual)
            n = batch.scores.shape[0]
            eye = torch.eye(n, dtype=torch.bool, device=emb.device)
            excluded = batch.shared_parent_mask() if self.exclude_self_mixtures else eye
            positives = (batch.labels[:, None] == batch.labels[None, :]) & ~excluded
            database = ~excluded | eye if self.include_query_in_rank else ~excluded
            return batch.scores, positives, database
        pb = self.prepare(embeddings, labels, ref_embeddings, ref_labels, ref_self_index)
        positives = (pb.relevance > 0) & pb.valid
        database = pb.valid
        if not self.include_query_in_rank:
            return pb.scores, positives, database
        q = pb.scores.shape[0]
        if pb.in_batch:
            self_index = torch.arange(q, device=pb.scores.device)
        elif ref_self_index is not None:
            self_index = torch.as_tensor(ref_self_index, device=pb.scores.device).long()
        else:
            self_index = torch.full((q,), -1, dtype=torch.long, device=pb.scores.device)
        rows = torch.nonzero(self_index >= 0).squeeze(1)
        database = database.clone()
        database[rows, self_index[rows]] = True  # ranked as a competitor ...
        positives = positives.clone()
        positives[rows, self_index[rows]] = False  # ... never as a positive
        absent = self_index < 0
        if bool(absent.any()):  # the query is not among the refs: add its self-similarity column
            s_qq = (pb.embeddings * pb.embeddings).sum(1, keepdim=True).to(pb.scores.dtype)
            scores = torch.cat([pb.scores, s_qq], dim=1)
            positives = torch.cat([positives, positives.new_zeros(q, 1)], dim=1)
            database = torch.cat([database, absent[:, None]], dim=1)
            return scores, positives, database
        return pb.scores, positives, database

    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        *,
        ref_self_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Args: embeddings ``(B, d)``, labels ``(B,)`` (or ``(B, L)``), optional ref_embeddings
        ``(N, d)``, ref_labels ``(N,)``, ref_self_index ``(B,)``. Returns a scalar (or ``(Q,)``
        with ``reduction="none"``)."""
        scores, positives, database = self.similarity_problem(embeddings, labels, ref_embeddings, ref_labels, ref_self_index)
        check_finite(scores, "scores")
        has_pos = positives.any(1)
        if not bool(has_pos.all()):
            bad = int((~has_pos).sum())
            if self.no_positive == "raise":
                raise ValueError(
                    f"{bad} query(ies) have no positive (labels / ref_labels): RS@k needs >= 2 samples per class "
                    "(use an m-per-class sampler, or no_positive='skip')"
                )
            if not bool(has_pos.any()):
                raise ValueError("no query has a positive (no label of labels is shared in the batch or by ref_labels): "
                                 "RS@k is undefined for this batch (use an m-per-class sampler)")
        per_q = recall_at_k_surrogate(
            scores,
            positives,
            database,
            ks=self.ks,
            tau1=self.taus1,
            tau2=self.tau2,
            normalization=self.normalization,
            no_positive="ignore",
            chunk_size=self.chunk_size,
        )
        return _reduce_per_query(per_q, has_pos, self.reduction)  # type: ignore[arg-type]
