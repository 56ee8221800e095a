"""The few-shot retrieval formulation (Gominski thesis §4.3.1) and its episodes (§4.3.2-4.3.3).

**Few-shot retrieval**: "Given k examples from an unseen class, retrieve all examples from the same
class, in a pool of images from an unknown number of classes". Real-time constraints are relaxed,
so *a different (adapted) model may be used for each class*: the base is described once per target
class, with a feature extractor adapted to that class' support set.

Training episodes (Fig. 4.8, :class:`EpisodeSampler`): pick a target class ``c*``, ``k`` support
images of ``c*`` and a batch of ``m`` images from each of ``N`` classes including ``c*``
(thesis: ``k = 5``, ``m = 10``, ``N = 6``; 60 images). Support and batch images of ``c*`` are
disjoint (a rank_lab decision, the thesis does not say; ``disjoint=False`` allows overlap).

Evaluation (Fig. 4.9, :func:`evaluate_fewshot_retrieval`): for every class, draw a support, describe
the whole base with the adapted model and rank the base for the queries of that class; the rows of
all classes form one ``(Q, N)`` score matrix evaluated with the cross-source protocol
(:func:`rank_lab.retrieval.cross_domain_evaluate`: mAP, per-domain mAP, mP1, qP1, mAPD). Setups:

* ``"A"``: 1 random support image per class; ``"B"``: 5;
* ``"C"``: no adaptation (the same network with ``gamma = 1, beta = 0``), deterministic;
* ``"D"``: like A with N(0, 1) noise of image shape as the support (does the model use it?);
* ``"R"``: a random-support control added here (not in the thesis): ``k`` images drawn from
  *other* classes, i.e. a real but irrelevant support.

Queries are the labelled items (label ``>= 0``); items with label ``< 0`` are distractors, only in
the base. Each query is removed from its own ranking. Whether support images stay in the base is
not stated by the thesis: they stay by default (``exclude_support=True`` removes them from the
queries and from the rankings of their class).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from rank_lab._progress import tqdm
from rank_lab._validation import check_labels, check_positive_int
from rank_lab.retrieval import CrossDomainReport, cross_domain_evaluate

__all__ = [
    "Episode",
    "EpisodeSampler",
    "SETUPS",
    "gather_images",
    "sample_supports",
    "setup_supports",
    "fewshot_retrieval_scores",
    "evaluate_fewshot_retrieval",
]

SETUPS = ("A", "B", "C", "D", "R")
Describe = Callable[[torch.Tensor | None], torch.Tensor]


@dataclass
class Episode:
    """One training episode (Fig. 4.8 of the thesis).

    Attributes:
        target: the target class id ``c*``.
        support: ``(k,)`` indices of the support images (all of class ``c*``).
        batch: ``(N * m,)`` indices of the batch, grouped by class, ``c*`` first.
        batch_labels: ``(N * m,)`` their class ids.
        classes: ``(N,)`` the batch classes, ``classes[0] == target``.
    """

    target: int
    support: torch.Tensor
    batch: torch.Tensor
    batch_labels: torch.Tensor
    classes: torch.Tensor


class EpisodeSampler:
    """Episodes of rCNAPS training: target class, ``k`` supports, ``m`` images of ``N`` classes.

    Episode ``i`` depends only on ``(seed, epoch, i)``, so an interrupted run resumes exactly.

    Args:
        labels: ``(n,)`` class ids; negative ids (distractors) are never sampled.
        k: support size (thesis 5).
        m: images per class in the batch (thesis 10).
        n_classes: ``N`` classes per batch, the target included (thesis 6).
        episodes: episodes per epoch (``len(sampler)``).
        seed: random seed.
        disjoint: support and batch images of the target class are disjoint (needs ``k + m``
            images in a target class; otherwise ``max(k, m)``).
        groups: ``(n,)`` group of every item, or None (one group). Each episode first draws a
            group (uniformly), then takes all its classes from that group: items of two groups
            never meet in an episode. Several retrieval *tasks* over the same images (one copy of
            the images per task, each labelled by its task) train this way without one task's
            positives appearing as another task's negatives.

    Raises:
        ValueError: if no class can be a target or fewer than ``N`` classes have ``m`` images
            (in some group), or a class spans two groups.
    """

    def __init__(
        self,
        labels: torch.Tensor,
        k: int = 5,
        m: int = 10,
        n_classes: int = 6,
        episodes: int = 1000,
        seed: int = 0,
        *,
        disjoint: bool = True,
        groups: torch.Tensor | None = None,
    ) -> None:
        y = check_labels(labels, name="labels")
        if y.ndim != 1:
            raise ValueError(f"labels must have shape (n,), got {tuple(y.shape)}")
        self.k, self.m = check_positive_int(k, "k"), check_positive_int(m, "m")
        self.n_classes = check_positive_int(n_classes, "n_classes")
        self.episodes = check_positive_int(episodes, "episodes")
        self.seed, self.disjoint, self.epoch = int(seed), bool(disjoint), 0
        y_np = y.cpu().numpy()
        self.members = {int(c): np.flatnonzero(y_np == c) for c in np.unique(y_np[y_np >= 0])}
        need = self.k + self.m if self.disjoint else max(self.k, self.m)
        if groups is None:
            g_np = np.zeros_like(y_np)
        else:
            gr = check_labels(groups, y.shape[0], "groups")
            if gr.ndim != 1:
                raise ValueError(f"groups must have shape (n,), got {tuple(gr.shape)}")
            g_np = gr.cpu().numpy()
        group_of = {}
        for c, idx in self.members.items():
            gs = np.unique(g_np[idx])
            if len(gs) > 1:
                raise ValueError(
                    f"class {c} has items in groups {gs.tolist()}; a class must lie in one group"
                )
            group_of[c] = int(gs[0])
        self.grouped = groups is not None  # (one group draws the same episodes as None)
        self.groups = sorted(set(group_of.values()))
        self.targets, self.others = {}, {}
        for g in self.groups:
            cls = [c for c in sorted(self.members) if group_of[c] == g]
            self.targets[g] = np.array(
                [c for c in cls if len(self.members[c]) >= need], dtype=np.int64
            )
            self.others[g] = np.array(
                [c for c in cls if len(self.members[c]) >= self.m], dtype=np.int64
            )
            where = "" if groups is None else f" in group {g}"
            if len(self.targets[g]) == 0:
                raise ValueError(
                    f"no class{where} has the {need} images a target class needs (k={k}, m={m}, "
                    f"disjoint={disjoint})"
                )
            if len(self.others[g]) < self.n_classes:
                raise ValueError(
                    f"n_classes={n_classes} classes with at least m={m} images are needed, labels "
                    f"have {len(self.others[g])}{where}"
                )

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose episodes :meth:`__iter__` yields."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.episodes

    def episode(self, i: int) -> Episode:
        """Episode ``i`` of the current epoch (deterministic given ``(seed, epoch, i)``)."""
        rng = np.random.default_rng([self.seed, self.epoch, int(i)])
        g = int(rng.choice(self.groups)) if len(self.groups) > 1 else self.groups[0]
        target = int(rng.choice(self.targets[g]))
        others = self.others[g][self.others[g] != target]
        classes = np.concatenate([[target], rng.choice(others, self.n_classes - 1, replace=False)])
        own = rng.permutation(self.members[target])
        support = own[: self.k]
        batch = [
            own[self.k : self.k + self.m]
            if self.disjoint
            else rng.choice(self.members[target], self.m, replace=False)
        ]
        for c in classes[1:]:
            batch.append(rng.choice(self.members[int(c)], self.m, replace=False))
        b = torch.from_numpy(np.concatenate(batch)).long()
        labels = torch.from_numpy(np.repeat(classes, self.m)).long()
        return Episode(
            target, torch.from_numpy(support).long(), b, labels, torch.from_numpy(classes).long()
        )

    def __iter__(self) -> Iterator[Episode]:
        for i in range(self.episodes):
            yield self.episode(i)


def gather_images(images: object, index: torch.Tensor | np.ndarray | list[int]) -> torch.Tensor:
    """Images at ``index`` from a tensor ``(n, C, H, W)`` or a dataset of ``(image, label)`` items.

    Raises:
        TypeError: ``index`` is not integer, or ``images`` has no length.
        ValueError: an index outside ``[0, n)``.
    """
    idx = torch.as_tensor(index)
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"index must hold integer positions, got dtype {idx.dtype}")
    idx = idx.long().reshape(-1)
    try:
        n = images.shape[0] if isinstance(images, torch.Tensor) else len(images)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            "images must be a tensor (n, C, H, W) or a dataset of (image, label), got "
            f"{type(images).__name__}"
        ) from None
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        bad = idx[(idx < 0) | (idx >= n)][:5].tolist()
        raise ValueError(f"index holds positions {bad} outside [0, {n}) (images has {n} items)")
    if isinstance(images, torch.Tensor):
        return images[idx]
    return torch.stack([torch.as_tensor(images[int(i)][0]) for i in idx])


def sample_supports(
    labels: torch.Tensor, k: int, *, seed: int = 0, classes: list[int] | None = None
) -> dict[int, torch.Tensor]:
    """``k`` random support indices for every class (setups A/B of §4.3.3).

    Args:
        labels: ``(n,)`` class ids (negative = distractor, never sampled).
        k: support size per class.
        seed: random seed.
        classes: classes to draw for (default: every class with at least ``k`` items).

    Returns:
        ``{class: (k,) indices}``.

    Raises:
        ValueError: a listed class with fewer than ``k`` items, or (``classes=None``) no class with
            ``k`` items at all (an empty result would evaluate nothing).
    """
    y = check_labels(labels, name="labels").cpu().numpy()
    k = check_positive_int(k, "k")
    rng = np.random.default_rng(seed)
    cls = (
        sorted(int(c) for c in np.unique(y[y >= 0]))
        if classes is None
        else [int(c) for c in classes]
    )
    out = {}
    for c in cls:
        idx = np.flatnonzero(y == c)
        if len(idx) < k:
            if classes is None:
                continue
            raise ValueError(f"class {c} has {len(idx)} items, fewer than k={k}")
        out[c] = torch.from_numpy(rng.choice(idx, k, replace=False)).long()
    if not out and cls:
        raise ValueError(
            f"no class has k={k} items (the largest has {max(int((y == c).sum()) for c in cls)})"
        )
    return out


def setup_supports(
    setup: str, images: object, labels: torch.Tensor, *, k: int | None = None, seed: int = 0
) -> tuple[dict[int, torch.Tensor | None], dict[int, torch.Tensor]]:
    """Support images for one evaluation setup of §4.3.3 (``"A"``, ``"B"``, ``"C"``, ``"D"``,
    ``"R"``).

    Args:
        setup: see the module docstring.
        images: ``(n, C, H, W)`` tensor or a dataset of ``(image, label)``.
        labels: ``(n,)`` class ids.
        k: support size (default 1 for A/D/R, 5 for B).
        seed: random seed.

    Returns:
        ``(support_images, support_index)``: ``{class: (k, C, H, W) tensor or None}`` (None =
        unadapted) and ``{class: (k,) indices}`` of the supports taken from the base (empty for
        C and D).
    """
    if setup not in SETUPS:
        raise ValueError(f"setup must be one of {SETUPS}, got {setup!r}")
    y = check_labels(labels, name="labels")
    k = (5 if setup == "B" else 1) if k is None else check_positive_int(k, "k")
    classes = sorted(int(c) for c in torch.unique(y[y >= 0]))
    if setup == "C":
        return dict.fromkeys(classes), {}
    if setup == "D":
        g = torch.Generator().manual_seed(int(seed))
        shape = tuple(gather_images(images, [0]).shape[1:])
        return {c: torch.randn((k, *shape), generator=g) for c in classes}, {}
    if setup == "R":
        rng = np.random.default_rng(seed)
        y_np = y.cpu().numpy()
        out = {}
        for c in classes:
            pool = np.flatnonzero((y_np >= 0) & (y_np != c))
            if len(pool) < k:
                raise ValueError(
                    f"setup 'R' draws k={k} supports from the other classes, but class {c} has "
                    f"only {len(pool)} other items"
                )
            out[c] = torch.from_numpy(rng.choice(pool, k, replace=False)).long()
        return {c: gather_images(images, i) for c, i in out.items()}, {}
    idx = sample_supports(y, k, seed=seed)
    return {c: gather_images(images, i) for c, i in idx.items()}, idx


def fewshot_retrieval_scores(
    describe: Describe,
    labels: torch.Tensor,
    supports: Mapping[int, torch.Tensor | None],
    *,
    progress: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank the base for each class with a model adapted to that class' support (Fig. 4.9).

    Args:
        describe: ``describe(support)`` returns the ``(N, d)`` L2-normalised descriptors of the
            whole base computed with the model adapted to ``support`` (``None``: unadapted, computed
            once and reused).
        labels: ``(N,)`` base labels (negative = distractor).
        supports: ``{class: support images or None}``; the queries are the base items of these
            classes.
        progress: show a tqdm bar over classes.

    Returns:
        ``(scores (Q, N), query_index (Q,))``: row ``i`` ranks the base for query
        ``query_index[i]`` with its class' adapted descriptors. Both on the CPU, whatever the
        device of ``labels`` and of the descriptors (the evaluation runs there).
    """
    y = check_labels(labels, name="labels").cpu()
    rows, qidx = [], []
    cache: torch.Tensor | None = None
    items = list(supports.items())
    if progress:
        items = tqdm(items, desc="classes")
    for c, sup in items:
        q = torch.nonzero(y == c).flatten()
        if q.numel() == 0:
            continue
        if sup is None:
            cache = describe(None) if cache is None else cache
            desc = cache
        else:
            desc = describe(sup)
        if desc.ndim != 2 or desc.shape[0] != y.shape[0]:
            raise ValueError(
                f"describe must return ({y.shape[0]}, d) base descriptors, got {tuple(desc.shape)}"
            )
        desc = desc.detach().float().cpu()
        rows.append(desc[q] @ desc.T)
        qidx.append(q)
    if not rows:
        raise ValueError("no query: no base item belongs to a class of supports")
    return torch.cat(rows), torch.cat(qidx)


def evaluate_fewshot_retrieval(
    describe: Describe,
    images: object,
    labels: torch.Tensor,
    domains: torch.Tensor | None = None,
    *,
    setup: str = "B",
    k: int | None = None,
    seed: int = 0,
    exclude_support: bool = False,
    query_groups: Mapping[str, object] | None = None,
    progress: bool = False,
) -> CrossDomainReport:
    """One run of a few-shot retrieval setup on a base (§4.3.3); returns a ``CrossDomainReport``.

    Args:
        describe: see :func:`fewshot_retrieval_scores`.
        images: ``(N, C, H, W)`` base images or a dataset (supports are drawn from it).
        labels: ``(N,)`` classes (negative = distractor).
        domains: ``(N,)`` source of each item (default: one domain; inter-domain values are NaN).
        setup: ``"A"``, ``"B"``, ``"C"``, ``"D"`` or ``"R"``.
        k: support size (default: 1, or 5 for B).
        seed: seed of the support draw (vary it over the 5 runs of the thesis).
        exclude_support: remove support items from the queries and from their class' rankings.
        query_groups: extra ``{name: (N,)}`` attributes for per-group mAP.
        progress: tqdm over classes.

    Returns:
        :class:`rank_lab.retrieval.CrossDomainReport` (``summary["mAP"]`` x 100, mP1, qP1, mAPD).
    """
    # the evaluation runs on the CPU (its scores are there)
    y = check_labels(labels, name="labels").cpu()
    d = torch.zeros_like(y) if domains is None else torch.as_tensor(domains).long().cpu()
    if d.shape != y.shape:
        raise ValueError(f"domains has shape {tuple(d.shape)} but labels has {tuple(y.shape)}")
    sup_images, sup_index = setup_supports(setup, images, y, k=k, seed=seed)
    scores, q = fewshot_retrieval_scores(describe, y, sup_images, progress=progress)
    ignore = torch.zeros_like(scores, dtype=torch.bool)
    keep = torch.ones(q.shape[0], dtype=torch.bool)
    if exclude_support and sup_index:
        for c, idx in sup_index.items():
            rows = y[q] == c
            ignore[rows.nonzero().flatten()[:, None], idx[None, :]] = True
            keep &= ~torch.isin(q, idx)
    scores, q, ignore = scores[keep], q[keep], ignore[keep]
    positives = y[q][:, None] == y[None, :]
    groups = {k_: torch.as_tensor(v).cpu()[q] for k_, v in (query_groups or {}).items()}
    return cross_domain_evaluate(
        scores, positives, d[q], d, self_index=q, ignore=ignore, query_groups=groups
    )
