"""The prepared batch of the common loss call: checked inputs, cosine scores, relevance, retrieval
mask.

Every loss of :mod:`rank_lab.losses` turns its call ``loss(embeddings, labels[, ref_embeddings,
ref_labels], ref_self_index=...)`` (see :mod:`rank_lab.losses.base`) into one
:class:`PreparedBatch` with :func:`prepare_batch`:

* the scores are cosine similarities ``s = v_q^T v_j`` of L2-normalised embeddings (Sec. 2.0 of
  the Ramzi thesis), computed in float32 (float64 for float64 input) even under autocast;
* the binary relevance is ``1[label_q == label_j]`` at one hierarchy level
  (:func:`binary_relevance`);
* the retrieval mask (:func:`rank_lab.ranking.ranks.retrieval_mask`) says which items each query
  is ranked against: in-batch, the query's own item is removed (``query_role="excluded"``, the
  papers' ``B \\ q``) or kept as a positive (``"positive"``, the official ROADMAP/HAPPIER/SupRank
  code); :func:`check_query_role` checks that choice.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import torch

from rank_lab._validation import check_embeddings, check_finite, check_labels, unit_rows
from rank_lab.ranking.ranks import (
    check_self_index,
    retrieval_mask_trusted,
    self_index_in_range,
    self_index_message,
)

__all__ = ["PreparedBatch", "binary_relevance", "prepare_batch"]

_F = TypeVar("_F", bound=Callable[..., Any])
_HALF = (torch.float16, torch.bfloat16)

#: The role of the query's own item in its retrieval set (see :mod:`rank_lab.losses.base`).
QueryRole = Literal["excluded", "positive", "competitor"]
QUERY_ROLES = ("excluded", "positive", "competitor")


@dataclass
class PreparedBatch:
    """Everything a loss needs, shapes ``Q`` queries x ``N`` retrieval-set items.

    Attributes:
        embeddings: ``(Q, d)`` (normalised if asked).
        ref_embeddings: ``(N, d)``.
        labels: ``(Q,)`` or ``(Q, L)``.
        ref_labels: ``(N,)`` or ``(N, L)``.
        scores: ``(Q, N)`` float32/float64 cosine scores.
        relevance: ``(Q, N)`` binary relevance (same label at ``hierarchy_level``), scores' dtype.
        valid: ``(Q, N)`` bool retrieval-set mask (the query's own column removed or not).
        in_batch: True when the refs are the batch itself.
    """

    embeddings: torch.Tensor
    ref_embeddings: torch.Tensor
    labels: torch.Tensor
    ref_labels: torch.Tensor
    scores: torch.Tensor
    relevance: torch.Tensor
    valid: torch.Tensor
    in_batch: bool


def _autocast_off(tensors: list[torch.Tensor]) -> Any:
    """A context with autocast disabled on the device type of ``tensors`` (a no-op where it is
    off)."""
    kind = tensors[0].device.type if tensors else "cpu"
    if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind):
        return torch.autocast(kind, enabled=False)
    return contextlib.nullcontext()


def full_precision(method: _F) -> _F:
    """Decorate a loss' ``forward``, score-level call or functional form: autocast off, half inputs
    in float32.

    Rank losses divide score differences by temperatures of 0.01 (Eq. 2.6 of the Ramzi thesis): in
    float16 / bfloat16 (8 bits of mantissa for bfloat16) the smoothed ranks lose their meaning, and
    autocast would recast the score matmul to half precision even on float32 embeddings. Every
    floating ``float16`` / ``bfloat16`` tensor argument (a model's output under autocast) is cast to
    float32 (gradients flow back through the cast) and the body runs with autocast disabled on the
    inputs' device, so a loss gives the same value and gradient inside a ``torch.autocast`` block as
    outside it (tested for every registered loss).
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args = tuple(
            a.float() if isinstance(a, torch.Tensor) and a.dtype in _HALF else a for a in args
        )
        kwargs = {
            k: v.float() if isinstance(v, torch.Tensor) and v.dtype in _HALF else v
            for k, v in kwargs.items()
        }
        with _autocast_off([a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]):
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _level(labels: torch.Tensor, level: int, name: str) -> torch.Tensor:
    if labels.ndim == 1:
        if level != 0:
            raise ValueError(
                f"hierarchy_level={level} needs (N, L) {name}, got shape {tuple(labels.shape)}"
            )
        return labels
    if not 0 <= level < labels.shape[1]:
        raise ValueError(
            f"hierarchy_level={level} is out of range for {name} with {labels.shape[1]} levels"
        )
    return labels[:, level]


def binary_relevance(
    labels: torch.Tensor, ref_labels: torch.Tensor, level: int = 0
) -> torch.Tensor:
    """``rel[q, j] = 1[label_q == label_j]`` at hierarchy level ``level`` (0 = fine), ``(Q, N)``
    bool."""
    labels, ref_labels = (
        check_labels(labels, None, "labels"),
        check_labels(ref_labels, None, "ref_labels"),
    )
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ValueError(f"level must be an int >= 0, got {level!r}")
    if labels.ndim != ref_labels.ndim:
        raise ValueError(
            f"labels and ref_labels must have the same number of dims, got {labels.ndim} and "
            f"{ref_labels.ndim}"
        )
    a, b = _level(labels, level, "labels"), _level(ref_labels, level, "ref_labels")
    return a[:, None] == b[None, :].to(a.device)


def prepare_batch(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    ref_embeddings: torch.Tensor | None = None,
    ref_labels: torch.Tensor | None = None,
    *,
    ref_self_index: torch.Tensor | None = None,
    normalize: bool = True,
    hierarchy_level: int = 0,
    query_role: QueryRole = "excluded",
    trusted: bool = False,
) -> PreparedBatch:
    """Validate the common call, normalise, and build scores, relevance and the retrieval mask.

    Args:
        embeddings, labels, ref_embeddings, ref_labels, ref_self_index: the common call
            (:mod:`rank_lab.losses.base`).
        normalize: L2-normalise the embeddings (cosine scores).
        hierarchy_level: label column of the binary relevance.
        query_role: ``"excluded"`` (the query's own item is removed from its retrieval set) or
            ``"positive"`` (it stays, as a positive); a loss that supports ``"competitor"`` builds
            it on top of the ``"positive"`` batch (:class:`rank_lab.losses.recall.SmoothRecallAtK`).
        trusted: skip the finite check of the scores (a loss whose caller checked the values:
            a combined loss, or a step of the training engine,
            :func:`rank_lab._validation.trusted_inputs`).

    Raises:
        ValueError / TypeError: naming the argument (shapes, NaN, dtypes, a lone ref argument).
    """
    query_role = check_query_role(query_role, "prepare_batch", ("excluded", "positive"))
    # finite: checked once, on the scores
    emb = check_embeddings(embeddings, "embeddings", finite=False)
    lab = check_labels(labels, emb.shape[0], "labels").to(emb.device)
    refs = check_references(emb, ref_embeddings, ref_labels, finite=False)
    in_batch = refs is None
    if refs is None:
        ref, ref_lab = emb, lab
        if ref_self_index is not None:
            raise ValueError("ref_self_index is only used with ref_embeddings")
        self_index = torch.arange(emb.shape[0], device=emb.device)
    else:
        ref, ref_lab = refs
        self_index = (
            None
            if ref_self_index is None  # its range is checked with the scores, below
            else check_self_index(
                ref_self_index,
                emb.shape[0],
                ref.shape[0],
                "ref_self_index",
                emb.device,
                in_range=False,
            )
        )
    given = (emb, None if in_batch else ref)
    work = torch.float64 if emb.dtype == torch.float64 else torch.float32
    emb, ref = emb.to(work), ref.to(work)
    with _autocast_off([emb]):  # float32 scores even inside a torch.autocast block
        if normalize:
            emb = unit_rows(emb, dim=1)
            ref = emb if in_batch else unit_rows(ref, dim=1)
        scores = emb @ ref.T
    if not trusted:  # every value check of the call, one host sync
        index_ok = (
            None
            if in_batch or self_index is None
            else self_index_in_range(self_index, ref.shape[0])
        )
        check_finite_scores(scores, *given, index_ok=index_ok)
    elif not in_batch and self_index is not None:
        # trusted: never index out of range on a device
        self_index = self_index.clamp(-1, ref.shape[0] - 1)
    rel = binary_relevance(lab, ref_lab, hierarchy_level).to(work)
    valid = retrieval_mask_trusted(
        scores.shape[0],
        scores.shape[1],
        self_index,
        exclude_self=query_role == "excluded",
        device=emb.device,
    )
    return PreparedBatch(emb, ref, lab, ref_lab, scores, rel, valid, in_batch)


def check_finite_scores(
    scores: torch.Tensor,
    embeddings: torch.Tensor,
    ref_embeddings: torch.Tensor | None,
    *,
    index_ok: torch.Tensor | None = None,
) -> None:
    """The one finite check of a loss call, on its ``(Q, N)`` scores (one host sync).

    A NaN or inf in ``embeddings`` or ``ref_embeddings`` makes a whole row or column of scores
    non-finite (``inf * 0`` is NaN), and so does a product that overflows the float range
    (``normalize=False`` with huge embeddings): checking the scores checks both. Only when they
    are not finite are the inputs inspected, to name the argument. ``index_ok`` (a 0-dim bool
    tensor: ``ref_self_index`` is in range, :func:`rank_lab.ranking.ranks.self_index_in_range`) is
    fetched in the same sync.

    Raises:
        ValueError: naming ``embeddings`` or ``ref_embeddings`` (NaN / inf), or saying that their
            products overflow; naming ``ref_self_index`` (out of range).
    """
    if scores.device.type == "meta":
        return
    flags = [torch.isfinite(scores).all()] + (
        [] if index_ok is None else [index_ok.to(scores.device)]
    )
    finite, *index = torch.stack(flags).tolist()  # the call's one host sync
    if index and not index[0]:
        raise ValueError(self_index_message("ref_self_index", scores.shape[1]))
    if finite:
        return
    check_finite(embeddings, "embeddings")
    if ref_embeddings is not None:
        check_finite(ref_embeddings, "ref_embeddings")
    raise ValueError(
        f"the scores of embeddings and ref_embeddings overflow {scores.dtype} (products of "
        f"unnormalised embeddings beyond {torch.finfo(scores.dtype).max:.3g}): pass normalize=True "
        "or scale the embeddings down"
    )


def check_references(
    embeddings: torch.Tensor, ref_embeddings: object, ref_labels: object, *, finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Check the reference half of the common call: ``None`` (in-batch) or
    ``(ref (N, d), ref_labels)``.

    Losses that ignore a reference set (proxy losses, ``uses_references = False``) check it too, so
    the common call refuses the same bad inputs whatever the loss.

    Args:
        embeddings: the checked ``(B, d)`` query embeddings.
        ref_embeddings, ref_labels: ``(N, d)`` and ``(N,)|(N, L)``, both or neither.
        finite: check that ``ref_embeddings`` is finite (:func:`prepare_batch` checks its scores
            instead).

    Raises:
        ValueError / TypeError: naming ``ref_embeddings`` or ``ref_labels``.
    """
    if (ref_embeddings is None) != (ref_labels is None):
        raise ValueError("ref_embeddings and ref_labels must be given together")
    if ref_embeddings is None:
        return None
    ref = check_embeddings(ref_embeddings, "ref_embeddings", finite=finite).to(embeddings.device)
    ref_lab = check_labels(ref_labels, ref.shape[0], "ref_labels").to(embeddings.device)
    if ref.shape[1] != embeddings.shape[1]:
        raise ValueError(
            f"ref_embeddings has dimension {ref.shape[1]} but embeddings has {embeddings.shape[1]}"
        )
    return ref, ref_lab


def check_query_role(query_role: str, owner: str, allowed: tuple[str, ...]) -> str:
    """``query_role`` checked against ``allowed``.

    The role of the query's own item in its retrieval set: ``"excluded"`` (the papers' ``B \\ q``,
    Sec. 2.0 of the Ramzi thesis), ``"positive"`` (official ROADMAP/HAPPIER/SupRank code) or
    ``"competitor"`` (official RS@k code).

    Args:
        query_role: one of :data:`QUERY_ROLES`.
        owner: the name of the loss or function, for the messages.
        allowed: the roles ``owner`` supports.

    Returns:
        The role, one of ``allowed``.

    Raises:
        ValueError: a role outside ``allowed``.
    """
    if query_role not in allowed:
        extra = (
            "" if query_role not in QUERY_ROLES else f" ({owner} does not support {query_role!r})"
        )
        raise ValueError(f"query_role must be one of {allowed}, got {query_role!r}{extra}")
    return query_role
