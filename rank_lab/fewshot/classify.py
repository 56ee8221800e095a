"""Data-driven classification with retrieval (Gominski thesis chapter 5, §5.4-5.5).

**Training** (Fig. 5.15): a retrieval model (CNN -> GeM -> L2N -> whitening -> L2N) trained with
Smooth-AP -- no classifier -- on batches drawn from a *pool of datasets*: ``N`` times, (1) draw a
dataset uniformly, (2) a class uniformly within it, (3) ``k`` images of that class
(:class:`MultiDatasetSampler`; author's code: ``N = 32``, ``k = 5``, classes with fewer than 5
images dropped, classes of different datasets never merged). Schedule (:func:`fit_multi_dataset`):
15 epochs, Adam (lr 1e-4, beta1 = 0.5), constant for 10 epochs then linear decay over 5 (the
author's code); leave-one-dataset-out: the target dataset is never seen. The training code lives in
:mod:`rank_lab.fewshot.multi_dataset`.

**Testing** ("k-shot, all-ways", :func:`allways_evaluate`): ``k in {1, 5}`` random supports per
class of the target dataset, every remaining image is a query, each query goes to the closest class
with Simple CNAPS' Mahalanobis rule (eqs. 5.1-5.2, :mod:`rank_lab.fewshot.mahalanobis`), and the
overall accuracy (OA) is reported; 5 models x 5 support draws, mean +- 95 % Student-t interval.
Before classification, alpha-QE (eq. 4.10, ``alpha = 3``, ``n = 10``, neighbours only) is applied
to the query descriptors among all support and query descriptors, untuned (Table 5.6); the
author's code expands the queries only, as here (it does not clamp negative similarities before
the odd power 3; :func:`rank_lab.retrieval.alpha_qe` clamps them at 0).

Methods of :func:`classify_by_retrieval` (``method=``):

* ``"mahalanobis"`` -- the thesis; ``"euclidean"`` / ``"cosine"`` -- nearest class mean;
* ``"knn"`` -- kNN voting over the retrieved support neighbours
  (:func:`rank_lab.metrics.classification.knn_classify`; not in the thesis);
* ``"diffusion"`` -- [EXT, not in the thesis' chapter 5] label propagation on the kNN graph of all
  support and query descriptors (the CG diffusion of :mod:`rank_lab.retrieval.diffusion`): class
  ``c`` diffuses from its supports, ``F_c = (1 - a)(I - a S)^{-1} y_c``, and a query takes the
  class of largest ``F_c``.

Each method is a rule registered in :data:`METHODS` (a function of the queries, the support set and
:class:`RuleOptions`): a new rule is one registration. ``shortlist=n`` (not in the thesis)
restricts the decision of a class-scoring rule (:func:`nearest_class`: Mahalanobis, nearest mean,
diffusion) to the classes among the query's ``n`` nearest support images (classification of a
query over its retrieved neighbours). :func:`episodic_evaluate` is the usual 5-way protocol, for
comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_labels,
    check_positive_int,
    unit_rows,
)
from rank_lab.fewshot.mahalanobis import mahalanobis_logits, nearest_mean_logits
from rank_lab.metrics import knn_search
from rank_lab.metrics.classification import knn_classify
from rank_lab.registry import Registry
from rank_lab.retrieval import alpha_qe, build_graph
from rank_lab.retrieval.diffusion_graph import diffuse

__all__ = [
    "allways_split",
    "classify_by_retrieval",
    "allways_evaluate",
    "episodic_evaluate",
    "METHODS",
    "RuleOptions",
    "nearest_class",
]


@dataclass(frozen=True)
class RuleOptions:
    """The options of :func:`classify_by_retrieval` that its rules read (checked there).

    Attributes:
        knn_k, vote: kNN classification (``"knn"``).
        shortlist: restrict a class-scoring rule to the classes among each query's ``shortlist``
            nearest support images (``None``: every class); :func:`nearest_class` applies it.
        graph_k, diffusion_alpha: the kNN graph and ``alpha`` of ``"diffusion"``.
        mahalanobis: options of :class:`~rank_lab.fewshot.mahalanobis.MahalanobisClassifier`.
    """

    knn_k: int = 1
    vote: str = "majority"
    shortlist: int | None = None
    graph_k: int = 10
    diffusion_alpha: float = 0.9
    mahalanobis: Mapping[str, object] = field(default_factory=dict)


#: A rule: ``rule(queries (Q, d), support (S, d), support_labels (S,), options) -> classes (Q,)``.
Rule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, RuleOptions], torch.Tensor]

#: The classification rules of :func:`classify_by_retrieval` by name (``METHODS.list()``): a new
#: rule is one function registered here (``@METHODS.register("name", summary=...)``); a rule that
#: scores the classes ends with :func:`nearest_class`.
METHODS: Registry[Rule] = Registry("few-shot method")


def nearest_class(
    classes: torch.Tensor,
    logits: torch.Tensor,
    queries: torch.Tensor,
    support: torch.Tensor,
    support_labels: torch.Tensor,
    options: RuleOptions,
) -> torch.Tensor:
    """The class of largest score for every query, among the shortlist when ``options.shortlist`` is
    set.

    Args:
        classes: ``(C,)`` the classes scored; logits: ``(Q, C)`` their scores.
        queries, support, support_labels: the rule's inputs (the shortlist ranks the support by
            cosine).
        options: the rule's options.

    Returns:
        ``(Q,)`` predicted classes (CPU).
    """
    if options.shortlist is not None:
        kk = min(check_positive_int(options.shortlist, "shortlist"), support.shape[0])
        _, nn_idx = knn_search(
            unit_rows(queries.float(), dim=1), unit_rows(support.float(), dim=1), kk
        )
        dev = nn_idx.device  # the search's device: the labels and classes meet the indices there
        allowed = (
            support_labels.to(dev)[nn_idx][:, :, None] == classes.to(dev)[None, None, :]
        ).any(1)
        logits = torch.where(allowed.to(logits.device), logits, torch.full_like(logits, -torch.inf))
    return classes.to(logits.device)[logits.argmax(1)].cpu()


@METHODS.register(
    "mahalanobis", summary="nearest class by Simple CNAPS' Mahalanobis rule (eqs. 5.1-5.2)"
)
def _mahalanobis_rule(
    q: torch.Tensor, s: torch.Tensor, ys: torch.Tensor, options: RuleOptions
) -> torch.Tensor:
    classes, logits = mahalanobis_logits(q, s, ys, **options.mahalanobis)
    return nearest_class(classes, logits, q, s, ys, options)


@METHODS.register("euclidean", summary="nearest class mean, Euclidean distance")
def _euclidean_rule(
    q: torch.Tensor, s: torch.Tensor, ys: torch.Tensor, options: RuleOptions
) -> torch.Tensor:
    classes, logits = nearest_mean_logits(q, s, ys, metric="euclidean")
    return nearest_class(classes, logits, q, s, ys, options)


@METHODS.register("cosine", summary="nearest class mean, cosine similarity")
def _cosine_rule(
    q: torch.Tensor, s: torch.Tensor, ys: torch.Tensor, options: RuleOptions
) -> torch.Tensor:
    classes, logits = nearest_mean_logits(q, s, ys, metric="cosine")
    return nearest_class(classes, logits, q, s, ys, options)


@METHODS.register("knn", summary="k nearest support images and a vote (knn_k, vote)")
def _knn_rule(
    q: torch.Tensor, s: torch.Tensor, ys: torch.Tensor, options: RuleOptions
) -> torch.Tensor:
    return knn_classify(q, s, ys, k=options.knn_k, vote=options.vote).labels  # type: ignore[arg-type]


@METHODS.register(
    "diffusion",
    summary=(
        "class of the largest diffusion mass from the support images (graph_k, diffusion_alpha)"
    ),
)
def _diffusion_rule(
    q: torch.Tensor, s: torch.Tensor, ys: torch.Tensor, options: RuleOptions
) -> torch.Tensor:
    allv = unit_rows(torch.cat([s, q]).float(), dim=1)
    graph = build_graph(allv, min(options.graph_k, allv.shape[0] - 1), mutual=False)
    classes, inv = torch.unique(ys, return_inverse=True)
    y = torch.zeros(classes.shape[0], allv.shape[0])
    y[inv, torch.arange(s.shape[0])] = 1.0
    y = y / y.sum(1, keepdim=True)
    f = diffuse(graph, y, alpha=options.diffusion_alpha, progress=False)  # (C, n)
    return nearest_class(classes, f[:, s.shape[0] :].T, q, s, ys, options)


def allways_split(
    labels: torch.Tensor, k: int, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` random supports per class, every other item a query (§5.5, "k-shot, all-ways").

    Returns:
        ``(support_index (C k,), query_index)``, supports grouped by class.

    Raises:
        ValueError: if a class has ``k`` items or fewer (it would have no query).
    """
    y = check_labels(labels, name="labels").cpu().numpy()
    k = check_positive_int(k, "k")
    rng = np.random.default_rng(seed)
    sup = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        if len(idx) <= k:
            raise ValueError(
                f"class {int(c)} has {len(idx)} items: k={k} supports would leave no query"
            )
        sup.append(rng.choice(idx, k, replace=False))
    s = np.concatenate(sup)
    q = np.setdiff1d(np.arange(len(y)), s)
    return torch.from_numpy(s).long(), torch.from_numpy(q).long()


def classify_by_retrieval(
    queries: torch.Tensor,
    support: torch.Tensor,
    support_labels: torch.Tensor,
    *,
    method: str = "mahalanobis",
    aqe: tuple[float, int] | None = (3.0, 10),
    knn_k: int = 1,
    vote: str = "majority",
    shortlist: int | None = None,
    graph_k: int = 10,
    diffusion_alpha: float = 0.9,
    **mahalanobis_kwargs: object,
) -> torch.Tensor:
    """Label every query from a labelled support set (chapter 5 of the thesis).

    Args:
        queries: ``(Q, d)`` query descriptors.
        support: ``(S, d)`` support descriptors.
        support_labels: ``(S,)`` their classes.
        method: one of :data:`METHODS` (see the module docstring).
        aqe: ``(alpha, n)`` of the alpha-QE post-processing of the queries (thesis ``(3, 10)``),
            or ``None``. With alpha-QE, supports and queries are L2-normalised first (the thesis'
            descriptors are unit-norm).
        knn_k, vote: kNN classification (``method="knn"``): ``knn_k`` in ``[1, S]``, ``vote`` one of
            ``"majority"``, ``"similarity"``, ``"softmax"`` (checked whatever the method).
        shortlist: restrict class-mean methods to the classes among the ``shortlist`` nearest
            support images (cosine), or ``None`` (every class; the thesis).
        graph_k, diffusion_alpha: kNN graph size and ``alpha`` of ``method="diffusion"``.
        **mahalanobis_kwargs: options of
            :class:`~rank_lab.fewshot.mahalanobis.MahalanobisClassifier`.

    Returns:
        ``(Q,)`` predicted classes (an evaluation: descriptors that require grad are detached).

    Raises:
        TypeError, ValueError: bad descriptors or labels, an unknown ``method`` or ``vote``, a
            ``knn_k`` that is not an int in ``[1, S]``.
    """
    q = check_embeddings(queries, "queries").detach()
    s = check_embeddings(support, "support").detach()
    ys = check_labels(support_labels, s.shape[0], "support_labels")
    if s.shape[1] != q.shape[1]:
        raise ValueError(f"queries have d={q.shape[1]} but support has d={s.shape[1]}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {tuple(METHODS)}, got {method!r}")
    method = METHODS.key(method)
    check_choice(vote, "vote", ("majority", "similarity", "softmax"))
    knn_k = check_positive_int(knn_k, "knn_k")
    if knn_k > s.shape[0]:
        raise ValueError(
            f"knn_k={knn_k} exceeds the {s.shape[0]} support vectors (set knn_k <= {s.shape[0]})"
        )
    if aqe is not None:
        alpha, n = aqe
        # descriptors are unit-norm in the thesis
        allv = unit_rows(torch.cat([s, q]).float(), dim=1)
        s = allv[: s.shape[0]]
        q = alpha_qe(
            allv, n=min(int(n), allv.shape[0] - 1), alpha=float(alpha), include_self=False
        )[s.shape[0] :]
    options = RuleOptions(
        knn_k=knn_k,
        vote=vote,
        shortlist=shortlist,
        graph_k=graph_k,
        diffusion_alpha=diffusion_alpha,
        mahalanobis=mahalanobis_kwargs,
    )
    return METHODS[method](q, s, ys, options)


def allways_evaluate(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    k: int,
    *,
    runs: int = 5,
    seed: int = 0,
    **kwargs: object,
) -> list[float]:
    """Overall accuracy of the k-shot all-ways protocol (§5.5) for ``runs`` support draws.

    Args:
        embeddings: ``(n, d)`` descriptors of the whole target dataset.
        labels: ``(n,)`` classes.
        k: supports per class.
        runs: support draws (seeds ``seed, seed + 1, ...``).
        **kwargs: passed to :func:`classify_by_retrieval` (``method``, ``aqe`` ...).

    Returns:
        One OA (in ``[0, 1]``) per run; summarise with :func:`rank_lab.stats.mean_ci`.
    """
    x = check_embeddings(embeddings, "embeddings").detach()  # an evaluation
    y = check_labels(labels, x.shape[0], "labels")
    out = []
    for r in range(check_positive_int(runs, "runs")):
        s, q = allways_split(y, k, seed=seed + r)
        pred = classify_by_retrieval(x[q], x[s], y[s], **kwargs)  # type: ignore[arg-type]
        out.append(float((pred == y[q].cpu()).double().mean()))
    return out


def episodic_evaluate(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    k: int,
    *,
    n_way: int = 5,
    n_query: int = 15,
    episodes: int = 200,
    seed: int = 0,
    **kwargs: object,
) -> list[float]:
    """Accuracy of ``n_way``-way ``k``-shot episodes (the literature's protocol, §5.5), per episode.

    Each episode draws ``n_way`` classes, ``k`` supports and ``n_query`` queries per class (fewer
    if a class is small). kwargs go to :func:`classify_by_retrieval` (``aqe`` is applied inside the
    episode's support + query set).

    Raises:
        TypeError, ValueError: ``k``, ``n_way``, ``n_query`` or ``episodes`` not a positive int,
            fewer than ``n_way`` classes with more than ``k`` items.
    """
    x = check_embeddings(embeddings, "embeddings").detach()  # an evaluation
    y = check_labels(labels, x.shape[0], "labels")
    k, n_way = check_positive_int(k, "k"), check_positive_int(n_way, "n_way")
    n_query = check_positive_int(n_query, "n_query")
    rng = np.random.default_rng(seed)
    y_np = y.cpu().numpy()
    classes = [c for c in np.unique(y_np) if (y_np == c).sum() > k]
    if len(classes) < n_way:
        raise ValueError(
            f"n_way={n_way} needs {n_way} classes with more than k={k} items, got {len(classes)}"
        )
    accs = []
    for _ in range(check_positive_int(episodes, "episodes")):
        s_idx, q_idx = [], []
        for c in rng.choice(classes, n_way, replace=False):
            idx = rng.permutation(np.flatnonzero(y_np == c))
            s_idx.append(idx[:k])
            q_idx.append(idx[k : k + n_query])
        s, q = torch.from_numpy(np.concatenate(s_idx)), torch.from_numpy(np.concatenate(q_idx))
        pred = classify_by_retrieval(x[q], x[s], y[s], **kwargs)  # type: ignore[arg-type]
        accs.append(float((pred == y[q].cpu()).double().mean()))
    return accs
