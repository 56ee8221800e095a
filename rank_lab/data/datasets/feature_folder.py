"""A folder of pre-extracted features: the HEAT chapter's real-data input (``dataset="features"``).

Features are extracted once on a GPU with :func:`rank_lab.ood.extract_features` (e.g. a ResNet-34
trained on CIFAR-10, ``layer="layer4"``) and saved with :func:`save_feature_folder`; the chapter
then fits HEAT and the baselines on them (Ramzi thesis §5.3). Layout::

    root/train.pt        {"features": (N, d), "std": (N, d_std), "logits": (N, C), "labels": (N,)}
    root/test.pt         the same for the in-distribution test set
    root/head.pt         (weight (C, d), bias (C,)) of the classifier's last linear layer
    root/ood/<name>.pt   one per OOD set: the same keys, "labels" optional

``std`` (the std-pooled features of GMM_std) is optional but must then be present in every set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from rank_lab.data.datasets.base import DatasetFolderError

__all__ = ["FEATURE_FOLDER_LAYOUT", "save_feature_folder", "load_feature_folder"]

FEATURE_FOLDER_LAYOUT = (
    "Expected train.pt and test.pt (dicts with 'features' (N, d), 'logits' (N, C), 'labels' (N,) "
    "and optionally 'std' (N, d_std)), head.pt ((weight (C, d), bias (C,)) of the last linear "
    "layer) and ood/<name>.pt (the same dict, 'labels' optional), as written by "
    "rank_lab.ood.save_feature_folder from extract_features outputs."
)
FeatureSet = dict[str, torch.Tensor]


def save_feature_folder(
    root: str | Path,
    sets: Mapping[str, Mapping[str, torch.Tensor]],
    head: nn.Linear | tuple[torch.Tensor, torch.Tensor],
) -> Path:
    """Write ``sets`` (``"train"``, ``"test"`` and ``"ood/<name>"`` -> feature dicts) and ``head``.

    Args:
        root: the folder (created).
        sets: feature dicts as returned by :func:`rank_lab.ood.extract_features`.
        head: the classifier's last linear layer, or its ``(weight, bias)``.

    Returns:
        ``root``. The folder is checked by :func:`load_feature_folder` before returning.

    Raises:
        ValueError, TypeError: a bad key of ``sets``, a set that is not a valid feature dict
            (missing keys, mismatched rows or widths, NaN / inf), or a ``head`` that does not fit
            the features.
            Everything is checked before any file is written; each file is written atomically.
        DatasetFolderError: the folder as a whole is incomplete after writing (e.g. no OOD set yet).
    """
    sets, (w, b) = _check_save(sets, head)
    root = Path(root)
    (root / "ood").mkdir(parents=True, exist_ok=True)
    for name, feats in sets.items():
        _atomic_save({k: v.detach().cpu() for k, v in feats.items()}, root / f"{name}.pt")
    _atomic_save((w.detach().cpu(), b.detach().cpu()), root / "head.pt")
    load_feature_folder(root)
    return root


def _atomic_save(obj: object, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def _check_save(
    sets: object, head: object
) -> tuple[dict[str, FeatureSet], tuple[torch.Tensor, torch.Tensor]]:
    """The arguments of :func:`save_feature_folder`, checked before anything is written."""
    if not isinstance(sets, Mapping) or not sets:
        raise ValueError(
            "sets must be a non-empty mapping of 'train' / 'test' / 'ood/<name>' to feature "
            f"dicts, got {sets!r}"
        )
    out: dict[str, FeatureSet] = {}
    for name, feats in sets.items():
        if name not in ("train", "test") and not (
            isinstance(name, str) and name.startswith("ood/") and len(name) > 4
        ):
            raise ValueError(f"sets keys must be 'train', 'test' or 'ood/<name>', got {name!r}")
        try:
            out[name] = _check_set(name, feats, labels=name in ("train", "test"))
        except DatasetFolderError as exc:
            raise ValueError(f"sets[{name!r}] is not a valid feature dict: {exc}") from None
    widths = {(f["features"].shape[1:], f["logits"].shape[1:], "std" in f) for f in out.values()}
    if len(widths) != 1:
        raise ValueError(f"sets disagree on (feature dim, classes, has std): {widths}")
    if isinstance(head, nn.Linear):
        w = head.weight
        b = head.bias if head.bias is not None else torch.zeros(w.shape[0], dtype=w.dtype)
    elif (
        isinstance(head, (tuple, list))
        and len(head) == 2
        and all(isinstance(t, torch.Tensor) for t in head)
    ):
        w, b = head
    else:
        raise TypeError(
            "head must be an nn.Linear or a (weight, bias) pair of tensors, got "
            f"{type(head).__name__}"
        )
    f = next(iter(out.values()))
    c, d = f["logits"].shape[1], f["features"].shape[1]
    if tuple(w.shape) != (c, d) or tuple(b.shape) != (c,):
        raise ValueError(
            f"head has weight {tuple(w.shape)} and bias {tuple(b.shape)}; the features need ({c}, "
            f"{d}) and ({c},)"
        )
    if not (bool(torch.isfinite(w).all()) and bool(torch.isfinite(b).all())):
        raise ValueError("head holds NaN or inf values")
    return out, (w, b)


def _load(path: Path) -> object:
    if not path.is_file():
        raise DatasetFolderError(
            f"feature folder: {str(path)!r} is missing. {FEATURE_FOLDER_LAYOUT}"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - re-raised with the file name
        raise DatasetFolderError(f"feature folder: could not read {str(path)!r}: {exc}") from exc


def _check_set(name: str, obj: object, labels: bool) -> FeatureSet:
    need = ("features", "logits", "labels") if labels else ("features", "logits")
    if not isinstance(obj, Mapping) or any(k not in obj for k in need):
        raise DatasetFolderError(
            f"feature folder: {name}.pt must be a dict with keys {list(need)}. "
            f"{FEATURE_FOLDER_LAYOUT}"
        )
    feats = {str(k): v for k, v in obj.items()}
    for k in ("features", "logits"):
        if not isinstance(feats[k], torch.Tensor) or feats[k].ndim != 2 or feats[k].shape[0] == 0:
            raise DatasetFolderError(
                f"feature folder: {name}.pt[{k!r}] must be a non-empty (N, dim) tensor. "
                f"{FEATURE_FOLDER_LAYOUT}"
            )
    n = feats["features"].shape[0]
    for k, v in feats.items():
        if not isinstance(v, torch.Tensor) or v.shape[0] != n:
            raise DatasetFolderError(
                f"feature folder: {name}.pt[{k!r}] must be a tensor with {n} rows like 'features'"
            )
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise DatasetFolderError(f"feature folder: {name}.pt[{k!r}] holds NaN or inf values")
    return feats


def load_feature_folder(root: str | Path) -> tuple[dict[str, FeatureSet], nn.Linear]:
    """Read a feature folder (module docstring) and check that its parts agree.

    Returns:
        ``(feats, head)``: ``feats`` maps ``"train"``, ``"test"`` and each OOD set's name to its
        dict; ``head`` is the ``nn.Linear`` rebuilt from ``head.pt``.

    Raises:
        DatasetFolderError: a missing or unreadable file, a missing key, mismatched rows or
            dimensions, no OOD set, or non-finite values; the message gives the layout.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFolderError(
            f"feature folder: {str(root)!r} does not exist or is not a folder. "
            f"{FEATURE_FOLDER_LAYOUT}"
        )
    feats = {s: _check_set(s, _load(root / f"{s}.pt"), labels=True) for s in ("train", "test")}
    ood = sorted((root / "ood").glob("*.pt")) if (root / "ood").is_dir() else []
    if not ood:
        raise DatasetFolderError(
            f"feature folder: no OOD set in {str(root / 'ood')!r}. {FEATURE_FOLDER_LAYOUT}"
        )
    for p in ood:
        feats[p.stem] = _check_set(f"ood/{p.stem}", _load(p), labels=False)
    dims = {
        name: (f["features"].shape[1:], f["logits"].shape[1:], "std" in f)
        for name, f in feats.items()
    }
    if len(set(dims.values())) != 1:
        raise DatasetFolderError(
            f"feature folder: the sets disagree on (feature dim, classes, has std): {dims}"
        )
    head = _load(root / "head.pt")
    if not (
        isinstance(head, (tuple, list))
        and len(head) == 2
        and all(isinstance(t, torch.Tensor) for t in head)
    ):
        raise DatasetFolderError(
            f"feature folder: head.pt must hold (weight, bias). {FEATURE_FOLDER_LAYOUT}"
        )
    w, b = head
    d, c = feats["train"]["features"].shape[1], feats["train"]["logits"].shape[1]
    if tuple(w.shape) != (c, d) or tuple(b.shape) != (c,):
        raise DatasetFolderError(
            f"feature folder: head.pt has weight {tuple(w.shape)} and bias {tuple(b.shape)}; "
            f"the features need ({c}, {d}) and ({c},)"
        )
    linear = nn.Linear(d, c)
    with torch.no_grad():
        linear.weight.copy_(w)
        linear.bias.copy_(b)
    return feats, linear
