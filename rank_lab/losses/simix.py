"""SiMix, similarity mixup (Eqs. 5.8-5.10 of the Patel thesis; Patel, Tolias & Matas, CVPR 2022).

A virtual example ``xz_alpha`` is made from every pair of same-class examples ``x, z`` of the batch,
with one ``alpha ~ U(0, 1)`` each, and stands for the *un-normalised* mixed embedding
``v = alpha x + (1 - alpha) z`` (Eq. 5.8). Because ``v`` is not re-normalised, every similarity
that involves it is a mix of the original similarities (Eqs. 5.9, 5.10), so no embedding is ever
built. In matrix form, with the mixing matrix ``A`` of shape ``(M + V, M)`` (the identity on the
``M`` originals; a virtual row holds ``alpha`` at column ``x`` and ``1 - alpha`` at column ``z``):

.. math:: S_{full} = A S A^\\top = (A E)(A E)^\\top,\\qquad S = E E^\\top.

:func:`simix_scores` computes ``A S A^T`` with two gathers (``O((M + V)^2)`` time and memory, never
the dense ``A``). Virtual examples carry their parents' label, so no false negative is created;
they are queries and database items alike. With ``m`` samples per class there are
``C(m, 2)`` virtual examples per class (6 for ``m = 4``: a batch of 4096 becomes 10240).

:func:`mix_embeddings` and :func:`mixing_matrix` build the explicit mixed embeddings / dense ``A``:
they are the reference the tests compare against, not the training path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_inner_products,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)

__all__ = [
    "SiMixBatch",
    "same_class_pairs",
    "simix_parents",
    "simix_scores",
    "simix",
    "mixing_matrix",
    "mix_embeddings",
]


@dataclass
class SiMixBatch:
    """The expanded batch ``B u B^`` of SiMix.

    Attributes:
        scores: ``(M + V, M + V)`` similarities ``A S A^T`` (originals first, then virtual).
        labels: ``(M + V,)`` labels (a virtual example inherits its parents' class).
        parents: ``(M + V, 2)`` long, the two parents ``(x, z)`` of each row (``(i, i)`` for an
            original).
        alphas: ``(M + V,)`` the mixing coefficient of the first parent (1 for originals).
        n_original: ``M``.
    """

    scores: torch.Tensor
    labels: torch.Tensor
    parents: torch.Tensor
    alphas: torch.Tensor
    n_original: int

    @property
    def n_virtual(self) -> int:
        """Number ``V`` of virtual examples."""
        return self.scores.shape[0] - self.n_original

    def shared_parent_mask(self) -> torch.Tensor:
        """``(M + V, M + V)`` bool: rows and columns that share a parent (the diagonal included).

        Used by ``exclude_self_mixtures``: a virtual example made from the query itself is then not
        one of its positives.
        """
        p = self.parents
        a, b = p[:, 0], p[:, 1]
        return (
            (a[:, None] == a[None, :])
            | (a[:, None] == b[None, :])
            | (b[:, None] == a[None, :])
            | (b[:, None] == b[None, :])
        )

    def ranking_problem(
        self, *, exclude_self_mixtures: bool = False, query_is_competitor: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(scores, positives, database)``, each ``(M + V, M + V)``: every row ranked against
        ``B u B^``.

        A row's positives are the other rows of its class; its database is every other row
        (Algorithm 3 of the Patel thesis: virtual examples are queries and database items alike).

        Args:
            exclude_self_mixtures: also remove from a row's positives and database the rows that
                share a parent with it (virtual examples made from the query itself).
            query_is_competitor: keep the row itself in its database as a non-positive (the official
                RS@k code; ``query_role="competitor"``).
        """
        eye = torch.eye(self.scores.shape[0], dtype=torch.bool, device=self.scores.device)
        excluded = self.shared_parent_mask() if exclude_self_mixtures else eye
        positives = (self.labels[:, None] == self.labels[None, :]) & ~excluded
        database = ~excluded | eye if query_is_competitor else ~excluded
        return self.scores, positives, database


def same_class_pairs(labels: torch.Tensor) -> torch.Tensor:
    """All unordered pairs ``(x, z)``, ``x < z``, of same-class items, grouped by class.

    Args:
        labels: ``(M,)`` integer labels.

    Returns:
        ``(V, 2)`` long indices, ``V = sum_c C(n_c, 2)``.
    """
    labels = check_labels(labels, name="labels")
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (M,), got {tuple(labels.shape)}")
    same = labels[:, None] == labels[None, :]
    x, z = torch.nonzero(torch.triu(same, diagonal=1), as_tuple=True)
    # group by class, then by (x, z): a stable sort on the label of x
    order = torch.sort(labels[x], stable=True).indices
    return torch.stack([x[order], z[order]], dim=1)


def simix_parents(
    labels: torch.Tensor,
    *,
    alphas: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    max_virtual: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Parents, mixing coefficients and labels of the expanded batch (Eq. 5.8).

    Args:
        labels: ``(M,)`` labels of the original batch.
        alphas: ``(V,)`` coefficients for the virtual examples (default: ``U(0, 1)`` draws).
        generator: torch generator for the draws (and for the subset when ``max_virtual`` is set).
        max_virtual: keep a random subset of at most this many virtual examples.

    Returns:
        ``(parents (M + V, 2), alphas (M + V,), labels (M + V,))``.
    """
    labels = check_labels(labels, name="labels")
    dev = labels.device
    pairs = same_class_pairs(labels)
    if max_virtual is not None:
        max_virtual = check_nonneg_int(max_virtual, "max_virtual")
        if pairs.shape[0] > max_virtual:
            keep = torch.randperm(
                pairs.shape[0],
                generator=generator,
                device=dev if generator is None else generator.device,
            )
            pairs = pairs[keep[:max_virtual].to(dev).sort().values]
    v = pairs.shape[0]
    if alphas is None:
        gdev = generator.device if generator is not None else dev
        alphas = torch.rand(v, generator=generator, device=gdev, dtype=torch.float64).to(dev)
    else:
        alphas = as_tensor(alphas, "alphas").to(dev)
        if alphas.shape != (v,):
            raise ValueError(
                f"alphas must have shape ({v},) (one per same-class pair), got "
                f"{tuple(alphas.shape)}"
            )
        if bool(((alphas < 0) | (alphas > 1)).any()) or not bool(torch.isfinite(alphas).all()):
            raise ValueError("alphas must lie in [0, 1]")
    m = labels.shape[0]
    ar = torch.arange(m, device=dev)
    parents = torch.cat([torch.stack([ar, ar], 1), pairs], dim=0)
    all_alphas = torch.cat([torch.ones(m, device=dev, dtype=alphas.dtype), alphas])
    all_labels = torch.cat([labels, labels[pairs[:, 0]]])
    return parents, all_alphas, all_labels


def simix_scores(scores: torch.Tensor, parents: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    """``A S A^T`` without building ``A`` or any mixed embedding (Eqs. 5.9-5.10).

    Row ``i`` of ``A`` has ``alpha_i`` at ``parents[i, 0]`` and ``1 - alpha_i`` at
    ``parents[i, 1]``, so ``(A S)[i] = alpha_i S[p_i0] + (1 - alpha_i) S[p_i1]`` and likewise for
    the columns.

    Args:
        scores: ``(M, M)`` similarities ``S = E E^T`` of the original batch.
        parents: ``(R, 2)`` long parent indices into ``[0, M)``.
        alphas: ``(R,)`` weights of the first parent.

    Returns:
        ``(R, R)`` similarities of the mixed examples (differentiable w.r.t. ``scores``).
    """
    scores = _square_scores(scores, None)
    parents, alphas = _check_mixing(parents, alphas, scores.shape[0], "scores")
    return _simix_scores(scores, parents, alphas)


def _square_scores(scores: object, m: int | None) -> torch.Tensor:
    """A finite ``(M, M)`` floating matrix (``M = m`` when given), or raise naming ``scores``."""
    s = as_tensor(scores, "scores")
    if (
        s.ndim != 2
        or s.shape[0] != s.shape[1]
        or s.shape[0] == 0
        or (m is not None and s.shape[0] != m)
    ):
        want = "(M, M)" if m is None else f"({m}, {m})"
        raise ValueError(f"scores must be a non-empty square {want} matrix, got {tuple(s.shape)}")
    if not s.is_floating_point():
        s = s.float()
    check_finite(s, "scores")
    return s


def _check_mixing(
    parents: object, alphas: object, m: int, what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(R, 2)`` parent indices into ``[0, m)`` and ``(R,)`` coefficients in ``[0, 1]``, or raise
    naming them."""
    p = as_tensor(parents, "parents")
    if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
        raise TypeError(f"parents must hold integer indices, got dtype {p.dtype}")
    if p.ndim != 2 or p.shape[1] != 2 or p.shape[0] == 0:
        raise ValueError(f"parents must have shape (R, 2) with R > 0, got {tuple(p.shape)}")
    if int(p.min()) < 0 or int(p.max()) >= m:
        raise ValueError(
            f"parents must index the {m} rows of {what}, got range [{int(p.min())}, {int(p.max())}]"
        )
    a = as_tensor(alphas, "alphas")
    if a.shape != (p.shape[0],):
        raise ValueError(
            f"alphas must have shape ({p.shape[0]},): one per row of parents, got {tuple(a.shape)}"
        )
    if not a.is_floating_point():
        a = a.double()
    check_finite(a, "alphas")
    if bool(((a < 0) | (a > 1)).any()):
        raise ValueError("alphas must lie in [0, 1]")
    return p.long(), a


def _simix_scores(
    scores: torch.Tensor, parents: torch.Tensor, alphas: torch.Tensor
) -> torch.Tensor:
    w = alphas.to(scores.dtype)
    p0, p1 = parents[:, 0], parents[:, 1]
    rows = w[:, None] * scores[p0] + (1 - w)[:, None] * scores[p1]  # (R, M) = A S
    return w[None, :] * rows[:, p0] + (1 - w)[None, :] * rows[:, p1]  # (R, R) = A S A^T


def simix(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    *,
    alphas: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    max_virtual: int | None = None,
    scores: torch.Tensor | None = None,
) -> SiMixBatch:
    """Expand a batch with SiMix virtual examples (Algorithm 3, lines 11-15 of the Patel thesis).

    Args:
        embeddings: ``(M, d)`` embeddings of the batch (L2-normalised by the caller).
        labels: ``(M,)`` labels.
        alphas: optional ``(V,)`` mixing coefficients (default ``U(0, 1)``).
        generator: torch generator for the coefficients.
        max_virtual: keep at most this many virtual examples (random subset).
        scores: optional precomputed ``(M, M)`` similarities ``E E^T``.

    Returns:
        A :class:`SiMixBatch` with the ``(M + V, M + V)`` similarity matrix ``A S A^T``.
    """
    emb = check_embeddings(embeddings, "embeddings")
    if scores is None:
        check_inner_products(emb, "embeddings")  # the scores E E^T
    lab = check_labels(labels, emb.shape[0], "labels")
    if lab.ndim != 1:
        raise ValueError(f"labels must have shape (M,), got {tuple(lab.shape)}")
    lab = lab.to(emb.device)
    parents, all_alphas, all_labels = simix_parents(
        lab, alphas=alphas, generator=generator, max_virtual=max_virtual
    )
    s = emb @ emb.T if scores is None else _square_scores(scores, emb.shape[0])
    return SiMixBatch(
        scores=_simix_scores(s, parents, all_alphas),
        labels=all_labels,
        parents=parents,
        alphas=all_alphas.to(emb.dtype),
        n_original=emb.shape[0],
    )


def mixing_matrix(parents: torch.Tensor, alphas: torch.Tensor, n_original: int) -> torch.Tensor:
    """The dense mixing matrix ``A`` of shape ``(R, M)`` (reference / teaching; memory ``R x M``).

    Args:
        parents: ``(R, 2)`` parent indices.
        alphas: ``(R,)`` first-parent weights.
        n_original: ``M``.
    """
    parents, alphas = _check_mixing(
        parents,
        alphas,
        check_positive_int(n_original, "n_original"),
        "the original batch (n_original)",
    )
    r = parents.shape[0]
    a = torch.zeros(r, n_original, dtype=alphas.dtype, device=alphas.device)
    rows = torch.arange(r, device=alphas.device)
    a.index_put_((rows, parents[:, 0]), alphas, accumulate=True)
    a.index_put_((rows, parents[:, 1]), 1 - alphas, accumulate=True)
    return a


def mix_embeddings(
    embeddings: torch.Tensor, parents: torch.Tensor, alphas: torch.Tensor
) -> torch.Tensor:
    """Explicit mixed embeddings ``v = alpha x + (1 - alpha) z`` (Eq. 5.8), no re-normalisation.

    The reference implementation SiMix is equivalent to: ``mix_embeddings(E) @ mix_embeddings(E).T``
    equals :func:`simix_scores` ``(E E^T)``.

    Args:
        embeddings: ``(M, d)``.
        parents: ``(R, 2)``.
        alphas: ``(R,)``.

    Returns:
        ``(R, d)``.
    """
    embeddings = check_embeddings(embeddings, "embeddings")
    parents, alphas = _check_mixing(parents, alphas, embeddings.shape[0], "embeddings")
    w = alphas.to(embeddings.dtype)[:, None]
    return w * embeddings[parents[:, 0]] + (1 - w) * embeddings[parents[:, 1]]
