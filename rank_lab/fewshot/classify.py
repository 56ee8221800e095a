"""Data-driven classification with retrieval (Gominski thesis chapter 5, §5.4-5.5).

**Training** (Fig. 5.15): a retrieval model (CNN -> GeM -> L2N -> whitening -> L2N) trained with
Smooth-AP -- no classifier -- on batches drawn from a *pool of datasets*: ``N`` times, (1) draw a
dataset uniformly, (2) a class uniformly within it, (3) ``k`` images of that class
(:class:`MultiDatasetSampler`; author's code: ``N = 32``, ``k = 5``, classes with fewer than 5
images dropped, classes of different datasets never merged). Schedule (:func:`fit_multi_dataset`):
15 epochs, Adam (lr 1e-4, beta1 = 0.5), constant for 10 epochs then linear decay over 5 (the
author's code); leave-one-dataset-out: the target dataset is never seen.

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

``shortlist=n`` (not in the thesis) restricts the Mahalanobis / nearest-mean decision to the
classes among the query's ``n`` nearest support images (classification of a query over its
retrieved neighbours). :func:`episodic_evaluate` is the usual 5-way protocol, for comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)

__all__ = [
    "global_class_ids",
    "MultiDatasetSampler",
    "fit_multi_dataset",
    "allways_split",
    "classify_by_retrieval",
    "allways_evaluate",
    "episodic_evaluate",
    "METHODS",
]

METHODS = ("mahalanobis", "euclidean", "cosine", "knn", "diffusion")


def global_class_ids(dataset_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One id per ``(dataset, class)`` pair: classes of different datasets are never merged."""
    d = check_labels(dataset_ids, name="dataset_ids")
    y = check_labels(labels, d.shape[0], "labels")
    _, inv = torch.unique(torch.stack([d, y], 1), dim=0, return_inverse=True)
    return inv


class MultiDatasetSampler:
    """Batch sampler of §5.4: ``n_classes`` times dataset -> class -> ``k`` images (Fig. 5.15).

    Every batch holds ``n_classes * k`` indices, class by class (``k`` consecutive indices of one
    class, drawn without replacement). Distinct ``(dataset, class)`` pairs per batch by default.
    Batch ``b`` of epoch ``e`` depends only on ``(seed, e, b)``.

    Args:
        dataset_ids: ``(n,)`` dataset of every image.
        labels: ``(n,)`` class within its dataset.
        n_classes: ``N`` draws per batch (author's code: 32).
        k: images per draw (5).
        batches: batches per epoch (author's code: ``50000 // 32``).
        min_per_class: classes with fewer images are dropped (5 in the author's code; at least ``k``).
        distinct: never draw the same class twice in a batch.
        seed: random seed.

    Raises:
        ValueError: a dataset with no usable class, or fewer usable classes than ``n_classes``
            with ``distinct``.
    """

    def __init__(self, dataset_ids: torch.Tensor, labels: torch.Tensor, n_classes: int = 32, k: int = 5, batches: int = 1562,
                 *, min_per_class: int = 5, distinct: bool = True, seed: int = 0) -> None:
        d = check_labels(dataset_ids, name="dataset_ids").cpu().numpy()
        y = check_labels(labels, d.shape[0], "labels").cpu().numpy()
        self.n_classes, self.k = check_positive_int(n_classes, "n_classes"), check_positive_int(k, "k")
        self.batches = check_positive_int(batches, "batches")
        self.min_per_class = max(check_nonneg_int(min_per_class, "min_per_class"), self.k)
        self.distinct, self.seed, self.epoch = bool(distinct), int(seed), 0
        self.datasets = sorted(int(v) for v in np.unique(d))
        self.members: dict[int, list[np.ndarray]] = {}
        for ds in self.datasets:
            groups = [np.flatnonzero((d == ds) & (y == c)) for c in np.unique(y[d == ds])]
            groups = [g for g in groups if len(g) >= self.min_per_class]
            if not groups:
                raise ValueError(f"dataset {ds} has no class with at least {self.min_per_class} images "
                                 f"(k={self.k} images per draw, min_per_class={int(min_per_class)})")
            self.members[ds] = groups
        n_usable = sum(len(v) for v in self.members.values())
        if self.distinct and n_usable < self.n_classes:
            raise ValueError(f"n_classes={n_classes} distinct classes per batch but only {n_usable} usable classes")

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches :meth:`__iter__` yields."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.batches

    def batch(self, b: int) -> list[int]:
        """Batch ``b`` of the current epoch: ``n_classes * k`` indices, class by class."""
        rng = np.random.default_rng([self.seed, self.epoch, int(b)])
        seen: set[tuple[int, int]] = set()
        out = []
        while len(out) < self.n_classes:
            ds = self.datasets[int(rng.integers(len(self.datasets)))]
            c = int(rng.integers(len(self.members[ds])))
            if self.distinct and (ds, c) in seen:
                if len(seen) >= sum(len(self.members[x]) for x in self.datasets):
                    raise RuntimeError("no class left to draw")  # pragma: no cover - guarded in __init__
                continue
            seen.add((ds, c))
            out.append(rng.choice(self.members[ds][c], self.k, replace=False))
        return np.concatenate(out).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for b in range(self.batches):
            yield self.batch(b)


def _lr_factor(epoch: int, niter: int, niter_decay: int) -> float:
    """Author's-code schedule: 1 for ``niter`` epochs, then linear decay over ``niter_decay``."""
    return 1.0 - max(0, epoch + 1 - niter) / float(niter_decay + 1)


def fit_multi_dataset(
    model: torch.nn.Module,
    images: object,
    dataset_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    n_classes: int = 32,
    k: int = 5,
    epochs: int = 15,
    batches_per_epoch: int = 1562,
    lr: float = 1e-4,
    betas: tuple[float, float] = (0.5, 0.999),
    niter: int = 10,
    niter_decay: int = 5,
    tau: float = 0.01,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    seed: int = 0,
    device: object = None,
    checkpoint_path: str | Path | None = None,
    progress: bool = True,
) -> list[float]:
    """Multi-dataset Smooth-AP training of §5.4 (resumable per epoch from ``checkpoint_path``).

    Args:
        model: maps images ``(B, C, H, W)`` to descriptors ``(B, d)`` (e.g.
            :func:`rank_lab.models.build_model` with GeM and a 512-d projection).
        images: ``(n, C, H, W)`` tensor or a dataset of ``(image, label)``.
        dataset_ids, labels: ``(n,)`` dataset and within-dataset class of each image.
        n_classes, k, batches_per_epoch: see :class:`MultiDatasetSampler`.
        epochs, lr, betas, niter, niter_decay: schedule (author's code: 15 = 10 + 5, 1e-4, 0.5).
        tau: Smooth-AP temperature.
        transform: batch augmentation.
        seed, device, checkpoint_path, progress: as usual.

    Returns:
        Mean loss of every epoch.

    Raises:
        TypeError, ValueError: ``epochs`` not a positive int, ``lr`` not a finite positive number,
            ``niter`` / ``niter_decay`` not ints >= 0, and the errors of :class:`MultiDatasetSampler`.
    """
    from rank_lab.fewshot.episodes import gather_images
    from rank_lab.losses import SmoothAP
    from rank_lab.utils import get_device

    epochs = check_positive_int(epochs, "epochs")
    lr = check_float(lr, "lr", low=0.0, low_open=True)
    niter, niter_decay = check_nonneg_int(niter, "niter"), check_nonneg_int(niter_decay, "niter_decay")
    dev = get_device(device)
    model.to(dev)
    y = global_class_ids(dataset_ids, labels)
    sampler = MultiDatasetSampler(dataset_ids, labels, n_classes, k, batches_per_epoch, seed=seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr, betas=betas)
    loss_fn = SmoothAP(tau=tau)
    history: list[float] = []
    ckpt = Path(checkpoint_path) if checkpoint_path is not None else None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=dev, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        history = list(state["history"])
    for epoch in range(len(history), epochs):
        for g in opt.param_groups:
            g["lr"] = lr * _lr_factor(epoch, niter, niter_decay)
        sampler.set_epoch(epoch)
        model.train()
        batches = iter(sampler)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, total=len(sampler), desc=f"epoch {epoch + 1}/{epochs}", leave=False)
        total = 0.0
        for idx in batches:
            x = gather_images(images, idx).to(dev)
            if transform is not None:
                x = transform(x)
            loss = loss_fn(model(x), y[idx].to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach())
        history.append(total / len(sampler))
        if ckpt is not None:
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "history": history}, ckpt)
    model.eval()
    return history


def allways_split(labels: torch.Tensor, k: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
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
            raise ValueError(f"class {int(c)} has {len(idx)} items: k={k} supports would leave no query")
        sup.append(rng.choice(idx, k, replace=False))
    s = np.concatenate(sup)
    q = np.setdiff1d(np.arange(len(y)), s)
    return torch.from_numpy(s).long(), torch.from_numpy(q).long()


def _diffusion_logits(support: torch.Tensor, support_labels: torch.Tensor, queries: torch.Tensor, graph_k: int, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    from rank_lab.retrieval import build_graph
    from rank_lab.retrieval.diffusion import diffuse

    allv = F.normalize(torch.cat([support, queries]).float(), dim=1)
    graph = build_graph(allv, min(graph_k, allv.shape[0] - 1), mutual=False)
    classes, inv = torch.unique(support_labels, return_inverse=True)
    y = torch.zeros(classes.shape[0], allv.shape[0])
    y[inv, torch.arange(support.shape[0])] = 1.0
    y = y / y.sum(1, keepdim=True)
    f = diffuse(graph, y, alpha=alpha, progress=False)  # (C, n)
    return classes, f[:, support.shape[0]:].T


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
        **mahalanobis_kwargs: options of :class:`~rank_lab.fewshot.mahalanobis.MahalanobisClassifier`.

    Returns:
        ``(Q,)`` predicted classes.

    Raises:
        TypeError, ValueError: bad descriptors or labels, an unknown ``method`` or ``vote``, a
            ``knn_k`` that is not an int in ``[1, S]``.
    """
    from rank_lab.fewshot.mahalanobis import mahalanobis_logits, nearest_mean_logits
    from rank_lab.metrics.classification import knn_classify
    from rank_lab.retrieval import alpha_qe

    q = check_embeddings(queries, "queries")
    s = check_embeddings(support, "support")
    ys = check_labels(support_labels, s.shape[0], "support_labels")
    if s.shape[1] != q.shape[1]:
        raise ValueError(f"queries have d={q.shape[1]} but support has d={s.shape[1]}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    check_choice(vote, "vote", ("majority", "similarity", "softmax"))
    knn_k = check_positive_int(knn_k, "knn_k")
    if knn_k > s.shape[0]:
        raise ValueError(f"knn_k={knn_k} exceeds the {s.shape[0]} support vectors (set knn_k <= {s.shape[0]})")
    if aqe is not None:
        alpha, n = aqe
        allv = F.normalize(torch.cat([s, q]).float(), dim=1)  # descriptors are unit-norm in the thesis
        s = allv[: s.shape[0]]
        q = alpha_qe(allv, n=min(int(n), allv.shape[0] - 1), alpha=float(alpha), include_self=False)[s.shape[0]:]
    if method == "knn":
        return knn_classify(q, s, ys, k=knn_k, vote=vote).labels  # type: ignore[arg-type]
    if method == "diffusion":
        classes, logits = _diffusion_logits(s, ys, q, graph_k, diffusion_alpha)
    elif method == "mahalanobis":
        classes, logits = mahalanobis_logits(q, s, ys, **mahalanobis_kwargs)
    else:
        classes, logits = nearest_mean_logits(q, s, ys, metric=method)
    if shortlist is not None:
        from rank_lab.metrics import knn_search

        kk = min(check_positive_int(shortlist, "shortlist"), s.shape[0])
        _, nn_idx = knn_search(F.normalize(q.float(), dim=1), F.normalize(s.float(), dim=1), kk)
        allowed = (ys[nn_idx.cpu()][:, :, None] == classes[None, None, :].cpu()).any(1)
        logits = torch.where(allowed.to(logits.device), logits, torch.full_like(logits, -torch.inf))
    return classes.to(logits.device)[logits.argmax(1)].cpu()


def allways_evaluate(
    embeddings: torch.Tensor, labels: torch.Tensor, k: int, *, runs: int = 5, seed: int = 0, **kwargs: object
) -> list[float]:
    """Overall accuracy of the k-shot all-ways protocol (§5.5) for ``runs`` support draws.

    Args:
        embeddings: ``(n, d)`` descriptors of the whole target dataset.
        labels: ``(n,)`` classes.
        k: supports per class.
        runs: support draws (seeds ``seed, seed + 1, ...``).
        **kwargs: passed to :func:`classify_by_retrieval` (``method``, ``aqe`` ...).

    Returns:
        One OA (in ``[0, 1]``) per run; summarise with :func:`rank_lab.retrieval.mean_ci`.
    """
    x = check_embeddings(embeddings, "embeddings")
    y = check_labels(labels, x.shape[0], "labels")
    out = []
    for r in range(check_positive_int(runs, "runs")):
        s, q = allways_split(y, k, seed=seed + r)
        pred = classify_by_retrieval(x[q], x[s], y[s], **kwargs)  # type: ignore[arg-type]
        out.append(float((pred == y[q].cpu()).double().mean()))
    return out


def episodic_evaluate(
    embeddings: torch.Tensor, labels: torch.Tensor, k: int, *, n_way: int = 5, n_query: int = 15,
    episodes: int = 200, seed: int = 0, **kwargs: object,
) -> list[float]:
    """Accuracy of ``n_way``-way ``k``-shot episodes (the literature's protocol, §5.5), per episode.

    Each episode draws ``n_way`` classes, ``k`` supports and ``n_query`` queries per class (fewer
    if a class is small). kwargs go to :func:`classify_by_retrieval` (``aqe`` is applied inside the
    episode's support + query set).

    Raises:
        TypeError, ValueError: ``k``, ``n_way``, ``n_query`` or ``episodes`` not a positive int, fewer
            than ``n_way`` classes with more than ``k`` items.
    """
    x = check_embeddings(embeddings, "embeddings")
    y = check_labels(labels, x.shape[0], "labels")
    k, n_way = check_positive_int(k, "k"), check_positive_int(n_way, "n_way")
    n_query = check_positive_int(n_query, "n_query")
    rng = np.random.default_rng(seed)
    y_np = y.cpu().numpy()
    classes = [c for c in np.unique(y_np) if (y_np == c).sum() > k]
    if len(classes) < n_way:
        raise ValueError(f"n_way={n_way} needs {n_way} classes with more than k={k} items, got {len(classes)}")
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
