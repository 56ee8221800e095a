"""Classification with retrieval embeddings: kNN voting, observation aggregation, accuracy,
macro-F1.

Section 5.4 of the Patel thesis (Picek, Sulc, Patel & Matas 2022): an RS@k retrieval model is
trained, and a test image is classified by nearest-neighbour search in the *training* set; "the
most confident image prediction is used for all images belonging to the same observation". The
thesis gives neither k nor the voting rule; the defaults here are 1-NN, with confidence = the top
similarity (k = 1) or the vote share (k > 1), and the options below.

* Voting rules (:func:`knn_classify`): ``"majority"`` (one vote per neighbour), ``"similarity"``
  (votes weighted by the similarity clamped at 0) and ``"softmax"`` (weights ``exp(s / T)``).
  Ties between classes go to the class of the nearest neighbour among the tied ones.
* Observation aggregation (:func:`aggregate_observations`): ``"max_confidence"`` (the thesis),
  ``"mean_scores"`` (average class scores) or ``"majority"``.
* Metrics: :func:`accuracy`, :func:`macro_f1` (mean of per-class F1, over the union of true and
  predicted classes like scikit-learn), :func:`per_class_accuracy` (Fig. 5.5 histogram) and
  :func:`classification_metrics` (image or observation level).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_float,
    check_labels,
    check_positive_int,
    unit_rows,
)
from rank_lab.metrics.engine.search.knn import knn_search
from rank_lab.utils import DeviceLike

__all__ = [
    "KNNPrediction",
    "knn_classify",
    "aggregate_observations",
    "accuracy",
    "per_class_f1",
    "macro_f1",
    "per_class_accuracy",
    "confusion_matrix",
    "observation_level",
    "classification_metrics",
]

Vote = Literal["majority", "similarity", "softmax"]


@dataclass
class KNNPrediction:
    """Output of :func:`knn_classify`.

    Attributes:
        labels: ``(Q,)`` predicted classes.
        confidence: ``(Q,)`` confidence of each prediction.
        class_scores: ``(Q, C)`` normalised votes (rows sum to 1).
        neighbor_indices: ``(Q, k)`` gallery indices of the neighbours, nearest first.
        neighbor_scores: ``(Q, k)`` their similarities.
    """

    labels: torch.Tensor
    confidence: torch.Tensor
    class_scores: torch.Tensor
    neighbor_indices: torch.Tensor
    neighbor_scores: torch.Tensor


def _pair(pred: object, target: object) -> tuple[torch.Tensor, torch.Tensor]:
    pred = check_labels(pred, name="predictions")
    target = check_labels(target, name="targets")
    if pred.ndim != 1 or target.ndim != 1:
        raise ValueError("predictions and targets must be 1-D label vectors")
    if pred.shape != target.shape:
        raise ValueError(f"predictions has {pred.shape[0]} rows but targets has {target.shape[0]}")
    return pred, target.to(pred.device)


def knn_classify(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    gallery_labels: torch.Tensor,
    k: int = 1,
    *,
    vote: Vote = "majority",
    temperature: float = 0.1,
    n_classes: int | None = None,
    confidence: Literal["auto", "vote", "similarity"] = "auto",
    normalize: bool = True,
    exclude_self: bool = False,
    backend: Literal["auto", "torch", "faiss"] = "auto",
    device: DeviceLike = None,
    chunk_size: int | None = None,
) -> KNNPrediction:
    """k-nearest-neighbour classification in an embedding space (Section 5.4 of the Patel thesis).

    Args:
        queries: ``(Q, d)`` test embeddings.
        gallery: ``(N, d)`` labelled (training) embeddings.
        gallery_labels: ``(N,)`` their classes in ``[0, C)``.
        k: neighbours (default 1).
        vote: ``"majority"``, ``"similarity"`` (weights ``max(s, 0)``) or ``"softmax"``
            (weights ``exp(s / temperature)``).
        temperature: of the softmax vote.
        n_classes: ``C`` (default ``max(gallery_labels) + 1``).
        confidence: ``"vote"`` (the winner's share), ``"similarity"`` (the highest similarity
            among the winner's neighbours) or ``"auto"`` (similarity for k = 1, else vote).
        normalize: L2-normalise embeddings (cosine similarity).
        exclude_self: queries are the gallery; skip each query's own index (leave-one-out).
        backend, device, chunk_size: passed to :func:`rank_lab.metrics.knn_search`.

    Returns:
        :class:`KNNPrediction`.
    """
    q = check_embeddings(queries, "queries")
    g = check_embeddings(gallery, "gallery")
    glab = check_labels(gallery_labels, g.shape[0], "gallery_labels")
    if glab.ndim != 1:
        raise ValueError(f"gallery_labels must have shape (N,), got {tuple(glab.shape)}")
    if bool((glab < 0).any()):
        raise ValueError("gallery_labels must be non-negative class indices")
    k = check_positive_int(k, "k")
    temperature = check_float(temperature, "temperature", low=0.0, low_open=True)
    if vote not in ("majority", "similarity", "softmax"):
        raise ValueError(f"vote must be 'majority', 'similarity' or 'softmax', got {vote!r}")
    if confidence not in ("auto", "vote", "similarity"):
        raise ValueError(f"confidence must be 'auto', 'vote' or 'similarity', got {confidence!r}")
    c = int(glab.max()) + 1 if n_classes is None else check_positive_int(n_classes, "n_classes")
    if int(glab.max()) >= c:
        raise ValueError(f"gallery_labels hold class {int(glab.max())} but n_classes={c}")
    if normalize:
        q, g = unit_rows(q, dim=1), unit_rows(g, dim=1)
    scores, idx = knn_search(
        q, g, k, exclude_self=exclude_self, backend=backend, device=device, chunk_size=chunk_size
    )
    nb_lab = glab.to(idx.device)[idx]  # (Q, k)
    s = scores.to(torch.float64)
    if vote == "majority":
        w = torch.ones_like(s)
    elif vote == "similarity":
        w = s.clamp_min(0) + 1e-12
    else:
        w = torch.softmax(s / temperature, dim=1)
    votes = torch.zeros(s.shape[0], c, dtype=torch.float64, device=s.device).scatter_add_(
        1, nb_lab, w
    )
    class_scores = votes / votes.sum(1, keepdim=True)
    tied = class_scores >= class_scores.max(1, keepdim=True).values - 1e-12
    first = tied.gather(1, nb_lab).to(torch.int8).argmax(1)  # nearest neighbour of a tied class
    pred = nb_lab.gather(1, first[:, None]).squeeze(1)
    mode = ("similarity" if k == 1 else "vote") if confidence == "auto" else confidence
    if mode == "vote":
        conf = class_scores.gather(1, pred[:, None]).squeeze(1)
    else:
        conf = torch.where(nb_lab == pred[:, None], s, torch.full_like(s, -torch.inf)).max(1).values
    return KNNPrediction(pred, conf.to(scores.dtype), class_scores.to(scores.dtype), idx, scores)


def aggregate_observations(
    predictions: torch.Tensor,
    confidence: torch.Tensor,
    observation_ids: torch.Tensor,
    *,
    class_scores: torch.Tensor | None = None,
    rule: Literal["max_confidence", "mean_scores", "majority"] = "max_confidence",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One prediction per observation (several images of the same specimen), Table 5.11's rule.

    Args:
        predictions: ``(N,)`` per-image predicted classes.
        confidence: ``(N,)`` finite per-image confidences (cast to float64).
        observation_ids: ``(N,)`` integer id of the observation of each image.
        class_scores: ``(N, C)`` finite per-image class scores (needed by ``"mean_scores"``; cast to
            float64).
        rule: ``"max_confidence"`` (the most confident image decides; ties: first image),
            ``"mean_scores"`` (argmax of the mean class scores) or ``"majority"`` (most frequent
            prediction; ties: larger summed confidence).

    Returns:
        ``(per_image (N,), observations (O,), per_observation (O,))``: the observation's
        prediction broadcast to its images, the sorted unique ids and their predictions.
    """
    pred = check_labels(predictions, name="predictions")
    conf = as_tensor(confidence, "confidence").to(dtype=torch.float64, device=pred.device)
    obs = check_labels(observation_ids, pred.shape[0], "observation_ids").to(pred.device)
    if conf.shape != pred.shape:
        raise ValueError(
            f"confidence has shape {tuple(conf.shape)} but predictions has {tuple(pred.shape)}"
        )
    check_finite(conf, "confidence")
    uniq, inv = torch.unique(obs, return_inverse=True)
    o = uniq.shape[0]
    if rule == "max_confidence":
        best = torch.full((o,), -torch.inf, dtype=torch.float64, device=pred.device).scatter_reduce(
            0, inv, conf, "amax"
        )
        is_best = conf == best[inv]
        n = pred.shape[0]
        pos = torch.where(is_best, torch.arange(n, device=pred.device), torch.full_like(pred, n))
        first = torch.full((o,), n, dtype=torch.long, device=pred.device).scatter_reduce(
            0, inv, pos, "amin"
        )
        per_obs = pred[first]
    elif rule == "mean_scores":
        if class_scores is None:
            raise ValueError("rule='mean_scores' needs class_scores")
        cs = as_tensor(class_scores, "class_scores").to(dtype=torch.float64, device=pred.device)
        if cs.ndim != 2 or cs.shape[0] != pred.shape[0]:
            raise ValueError(
                f"class_scores must have shape (N, C) with N={pred.shape[0]}, got {tuple(cs.shape)}"
            )
        check_finite(cs, "class_scores")
        sums = torch.zeros(o, cs.shape[1], dtype=torch.float64, device=pred.device).index_add_(
            0, inv, cs
        )
        per_obs = sums.argmax(1)
    elif rule == "majority":
        c = int(pred.max()) + 1
        counts = torch.zeros(o, c, dtype=torch.float64, device=pred.device).index_put_(
            (inv, pred), torch.ones_like(conf), accumulate=True
        )
        confs = torch.zeros(o, c, dtype=torch.float64, device=pred.device).index_put_(
            (inv, pred), conf, accumulate=True
        )
        key = counts * (2 * conf.abs().sum() + 1) + confs  # count first, then summed confidence
        per_obs = key.argmax(1)
    else:
        raise ValueError(
            f"rule must be 'max_confidence', 'mean_scores' or 'majority', got {rule!r}"
        )
    return per_obs[inv], uniq, per_obs


def accuracy(predictions: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of correct predictions."""
    pred, target = _pair(predictions, targets)
    return float((pred == target).double().mean())


def confusion_matrix(
    predictions: torch.Tensor, targets: torch.Tensor, n_classes: int | None = None
) -> torch.Tensor:
    """``(C, C)`` counts, rows = true class, columns = predicted class.

    Args:
        predictions, targets: ``(N,)`` class indices ``>= 0``.
        n_classes: ``C`` (default: the largest class + 1); must exceed every class index.
    """
    pred, target = _pair(predictions, targets)
    for t, name in ((pred, "predictions"), (target, "targets")):
        if bool((t < 0).any()):
            raise ValueError(f"{name} must be class indices >= 0, got {int(t.min())}")
    top = int(max(int(pred.max()), int(target.max())))
    c = top + 1 if n_classes is None else check_positive_int(n_classes, "n_classes")
    if top >= c:
        raise ValueError(f"n_classes={c} but predictions / targets hold class {top}")
    return torch.bincount(target * c + pred, minlength=c * c).reshape(c, c)


def per_class_f1(
    predictions: torch.Tensor, targets: torch.Tensor, labels: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class F1 ``2 P R / (P + R)`` (0 when undefined).

    Args:
        predictions, targets: ``(N,)`` class labels.
        labels: classes to report (default: the union of the true and predicted classes).

    Returns:
        ``(classes (C',), f1 (C',))``.
    """
    pred, target = _pair(predictions, targets)
    if labels is None:
        classes = torch.unique(torch.cat([pred, target]))
    else:
        classes = check_labels(labels, name="labels").to(pred.device)
        if classes.ndim != 1:
            raise ValueError(
                f"labels must be a (C',) vector of classes, got shape {tuple(classes.shape)}"
            )
    tp = ((pred[:, None] == classes) & (target[:, None] == classes)).sum(0).double()
    n_pred = (pred[:, None] == classes).sum(0).double()
    n_true = (target[:, None] == classes).sum(0).double()
    den = n_pred + n_true
    return classes, torch.where(den > 0, 2 * tp / den.clamp_min(1), torch.zeros_like(den))


def macro_f1(
    predictions: torch.Tensor, targets: torch.Tensor, labels: torch.Tensor | None = None
) -> float:
    """Macro-F1: the mean of the per-class F1 (Table 5.11); equals scikit-learn's
    ``average="macro"``."""
    return float(per_class_f1(predictions, targets, labels)[1].mean())


def per_class_accuracy(
    predictions: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Accuracy (recall) of each true class, ``(classes, acc)`` (Fig. 5.5 histograms these)."""
    pred, target = _pair(predictions, targets)
    classes, inv = torch.unique(target, return_inverse=True)
    correct = torch.zeros(classes.shape[0], dtype=torch.float64, device=pred.device).index_add_(
        0, inv, (pred == target).double()
    )
    return classes, correct / torch.bincount(inv, minlength=classes.shape[0]).double()


def observation_level(
    predictions: torch.Tensor, targets: torch.Tensor, observation_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Collapse per-image rows to one row per observation.

    Raises:
        ValueError: if an observation mixes true classes or (not yet aggregated) predictions.
    """
    pred, target = _pair(predictions, targets)
    obs = check_labels(observation_ids, pred.shape[0], "observation_ids").to(pred.device)
    uniq, inv = torch.unique(obs, return_inverse=True)
    first = torch.full((uniq.shape[0],), pred.shape[0], device=pred.device).scatter_reduce(
        0, inv, torch.arange(pred.shape[0], device=pred.device), "amin"
    )
    if not bool((target == target[first][inv]).all()):
        raise ValueError("an observation holds images of different true classes")
    if not bool((pred == pred[first][inv]).all()):
        raise ValueError(
            "an observation holds different predictions: aggregate them first "
            "(aggregate_observations)"
        )
    return pred[first], target[first]


def classification_metrics(
    predictions: torch.Tensor, targets: torch.Tensor, *, observation_ids: torch.Tensor | None = None
) -> dict[str, float]:
    """Accuracy and macro-F1, per image or (with ``observation_ids``) per observation.

    Returns:
        ``{"accuracy", "macro_f1", "n"}``.
    """
    pred, target = _pair(predictions, targets)
    if observation_ids is not None:
        pred, target = observation_level(pred, target, observation_ids)
    return {
        "accuracy": accuracy(pred, target),
        "macro_f1": macro_f1(pred, target),
        "n": float(pred.shape[0]),
    }
