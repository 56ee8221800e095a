"""Where a backbone's initial weights come from: one parameter, ``weights``, for every backbone.

``weights`` takes one of three values, the same in every notebook and builder:

* ``"imagenet"``: timm's ImageNet-pretrained weights, fetched the way timm fetches them
  (``timm.create_model(name, pretrained=True)``: the Hugging Face Hub, then its local cache; the
  network is needed the first time). For the ResNets of the papers the tag is ``tv_in1k``, the
  torchvision ``IMAGENET1K_V1`` weights that the official ROADMAP / SupRank / HAPPIER code loads
  (``torchvision.models.resnet50(pretrained=True)``); other timm names use timm's default tag, and a
  name that already carries a tag (``"resnet50.a1_in1k"``) keeps it.
* ``"none"``: random initialisation (nothing is downloaded).
* a path to a local weight file (a ``state_dict`` or a checkpoint wrapping one, torchvision or timm
  key names), loaded strictly: a missing, unexpected or mis-shaped parameter is an error naming the
  file.

Every builder returns a *weights record* for ``results.json`` and stores it on the module as
``weights_record``: ``{"weights": "imagenet", "source": "timm:resnet50.tv_in1k"}``,
``{"weights": "file", "path": "/abs/r50.pth", "sha256": "..."}`` or ``{"weights": "none"}``.
When timm cannot fetch its weights (offline), :class:`WeightsUnavailableError` is raised before
anything trains; its message names the two offline alternatives and the underlying cause.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rank_lab._validation import check_module

__all__ = [
    "CLASSIFIER_PREFIXES",
    "WEIGHTS_NAMES",
    "PAPER_TAGS",
    "WeightsUnavailableError",
    "WeightsFileError",
    "parse_weights",
    "timm_pretrained_name",
    "file_sha256",
    "file_record",
    "load_backbone_weights",
    "load_weights_file",
    "create_timm_model",
    "check_weights",
    "find_weights_record",
]

#: The two named values of ``weights`` (anything else is a file path).
WEIGHTS_NAMES: tuple[str, ...] = ("imagenet", "none")

#: timm pretrained tags used for ``weights="imagenet"``: the torchvision ImageNet weights of the
#: papers.
PAPER_TAGS: dict[str, str] = {
    "resnet18": "tv_in1k",
    "resnet34": "tv_in1k",
    "resnet50": "tv_in1k",
    "resnet101": "tv_in1k",
}

_ALTERNATIVES = (
    "Offline, pass weights='none' (random initialisation) or weights='/path/to/weights.pth' "
    "(a local state dict with torchvision or timm key names)."
)


class WeightsUnavailableError(RuntimeError):
    """timm could not fetch the pretrained weights asked for with ``weights="imagenet"``."""


class WeightsFileError(ValueError):
    """A local weight file (``weights=<path>``) cannot be read, or its parameters do not fit the
    model."""


WeightsSpec = str | Path


def parse_weights(
    weights: str | os.PathLike[str] | None, *, argument: str = "weights"
) -> WeightsSpec:
    """Normalise a ``weights`` value: ``"imagenet"``, ``"none"`` or an existing file ``Path``.

    Args:
        weights: ``"imagenet"``, ``"none"`` (case-insensitive), ``None`` (= ``"none"``) or a path.
        argument: the argument's name, for the messages.

    Raises:
        TypeError: if ``weights`` is not a string, a path or ``None``.
        FileNotFoundError: if it is neither name nor an existing file (the message lists the names).
    """
    if weights is None:
        return "none"
    if not isinstance(weights, (str, os.PathLike)):
        raise TypeError(f"{argument} must be 'imagenet', 'none' or a file path, got {weights!r}")
    if isinstance(weights, str) and weights.strip().lower() in WEIGHTS_NAMES:
        return weights.strip().lower()
    path = Path(weights).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"{argument}={str(weights)!r} is neither 'imagenet', 'none' nor an existing weight file"
        )
    return path


def timm_pretrained_name(name: str) -> str:
    """The timm ``"<architecture>.<tag>"`` loaded for ``weights="imagenet"``.

    ``"resnet50"`` -> ``"resnet50.tv_in1k"`` (:data:`PAPER_TAGS`); a name with a tag is kept; any
    other name gets timm's default tag.

    Raises:
        ValueError: if timm has no pretrained weights for ``name``.
    """
    # optional dependency (extra "timm"), imported where it is used
    import timm

    # optional dependency (extra "timm"), imported where it is used
    from timm.models import get_pretrained_cfg

    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a timm model name (a non-empty str), got {name!r}")
    if "." in name:
        arch, tag = name.split(".", 1)
    else:
        arch, tag = name, PAPER_TAGS.get(name, "")
        if not tag:
            cfg = get_pretrained_cfg(name) if timm.is_model(name) else None
            tag = getattr(cfg, "tag", "") or ""
    full = f"{arch}.{tag}" if tag else arch
    if not timm.list_pretrained(full):
        raise ValueError(
            f"timm has no pretrained weights for backbone name={name!r}; use weights='none' or a "
            "weight file"
        )
    return full


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The weights record of a local file:
    ``{"weights": "file", "path": <absolute>, "sha256": <hex>}``."""
    path = Path(path).resolve()
    return {"weights": "file", "path": str(path), "sha256": file_sha256(path)}


#: State-dict prefixes of classification layers, dropped when loading backbone weights.
CLASSIFIER_PREFIXES: tuple[str, ...] = ("fc.", "head.", "classifier.", "last_linear.", "head_dist.")


def _unwrap_state_dict(obj: Any) -> dict[str, torch.Tensor]:
    """Find the tensor dict inside a checkpoint (``state_dict`` / ``model`` / ``net`` wrappers)."""
    for _ in range(3):
        if (
            isinstance(obj, Mapping)
            and obj
            and all(isinstance(v, torch.Tensor) for v in obj.values())
        ):
            return dict(obj)
        if isinstance(obj, Mapping):
            for key in ("state_dict", "model", "net", "model_state", "backbone"):
                if key in obj and isinstance(obj[key], Mapping):
                    obj = obj[key]
                    break
            else:
                break
        elif isinstance(obj, nn.Module):
            return obj.state_dict()
        else:
            break
    if isinstance(obj, Mapping):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if tensors:
            return tensors
    raise ValueError(
        "the weight file holds no state dict (a mapping of parameter names to tensors)"
    )


def load_backbone_weights(
    module: nn.Module,
    path: str | Path,
    *,
    strict: bool = False,
    strip_prefixes: Sequence[str] = ("module.", "backbone.", "model."),
    drop_prefixes: Sequence[str] = CLASSIFIER_PREFIXES,
) -> dict[str, list[str]]:
    """Load a local weight file into ``module`` (no download).

    Accepts a plain ``state_dict`` (e.g. torchvision's ``resnet50-*.pth``, whose key names timm's
    ResNets share) or a checkpoint that wraps one under ``state_dict`` / ``model`` / ``net``.
    ``module.`` (DataParallel) and other listed prefixes are stripped when that makes keys match;
    classifier weights (``fc.``, ``head.`` ...) are dropped.

    Args:
        module: the model to load into.
        path: a file written by :func:`torch.save`.
        strict: raise if a key of ``module`` is missing from the file or a kept key of the file is
            not used.
        strip_prefixes: prefixes removed (repeatedly) from a file key that ``module`` does not have.
        drop_prefixes: prefixes of keys never loaded (classification layers).

    Returns:
        ``{"loaded": [...], "missing": [...], "unexpected": [...], "mismatched": [...]}`` key lists.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        WeightsFileError: (a ``ValueError``) the file is not a readable ``torch.save`` file
            (truncated, another format) or holds no state dict, no parameter of the file matches
            ``module`` (wrong architecture), or, with ``strict``, some keys do not match; the
            message names the file, in one line.
    """
    check_module(module, "module")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weight file {str(path)!r} does not exist or is not a file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - re-raised with the file name, in one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise WeightsFileError(
            f"weight file {str(path)!r} ({path.stat().st_size} bytes) is not a readable "
            f"torch.save file (truncated or another format?): {type(exc).__name__}: {first}"
        ) from exc
    try:
        src = _unwrap_state_dict(obj)
    except ValueError as exc:
        raise WeightsFileError(f"weight file {str(path)!r}: {exc}") from exc
    target = module.state_dict()
    loaded: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    mismatched: list[str] = []
    for key, value in src.items():
        k = key
        stripped = True
        while k not in target and stripped:
            stripped = False
            for p in strip_prefixes:
                if k.startswith(p):
                    k, stripped = k[len(p) :], True
                    break
        if any(k.startswith(p) for p in drop_prefixes) and k not in target:
            continue
        if k not in target:
            unexpected.append(key)
        elif tuple(target[k].shape) != tuple(value.shape):
            mismatched.append(f"{k}: file {tuple(value.shape)} vs model {tuple(target[k].shape)}")
        else:
            loaded[k] = value
    if not loaded:
        raise WeightsFileError(
            f"no parameter of the weight file {str(path)!r} matches the model ({len(src)} keys in "
            f"the file, e.g. {list(src)[:3]}; model keys e.g. {list(target)[:3]}): wrong "
            "architecture?"
        )
    missing = [k for k in target if k not in loaded]
    if strict and (missing or unexpected or mismatched):
        raise WeightsFileError(
            f"strict loading of the weight file {str(path)!r} failed: missing={missing[:5]}, "
            f"unexpected={unexpected[:5]}, mismatched={mismatched[:5]}"
        )
    module.load_state_dict(loaded, strict=False)
    return {
        "loaded": sorted(loaded),
        "missing": missing,
        "unexpected": unexpected,
        "mismatched": mismatched,
    }


def load_weights_file(
    module: nn.Module, path: str | os.PathLike[str], *, strict: bool = True
) -> dict[str, Any]:
    """Load a local weight file into ``module`` and return its weights record.

    Classifier keys (``fc.``, ``head.`` ...) and ``module.`` / ``backbone.`` / ``model.`` prefixes
    are handled by :func:`load_backbone_weights`.

    Args:
        module: the network to initialise.
        path: a file written by :func:`torch.save`.
        strict: every parameter of ``module`` must be in the file with its shape, and every kept key
            of the file must be used.

    Returns:
        ``{"weights": "file", "path": <absolute path>, "sha256": <hex>}``.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if it holds no state dict or (``strict``) its keys do not match; the message
            names the file.
    """
    load_backbone_weights(module, path, strict=strict)
    return file_record(Path(path))


def create_timm_model(
    name: str, weights: str | os.PathLike[str] | None = "none", **kwargs: Any
) -> tuple[nn.Module, dict[str, Any]]:
    """``timm.create_model(name, **kwargs)`` initialised from ``weights``; returns
    ``(model, record)``.

    Args:
        name: a timm model name, with or without a pretrained tag.
        weights: ``"imagenet"``, ``"none"`` or a file path (see the module docstring).
        **kwargs: passed to ``timm.create_model`` (``num_classes``, ``in_chans``,
            ``features_only`` ...).

    Raises:
        WeightsUnavailableError: ``"imagenet"`` weights could not be fetched (offline); the message
            names ``weights='none'`` and a local file as alternatives, and the cause.
        ValueError: no pretrained weights exist for ``name``, or a weight file does not match.
    """
    # optional dependency (extra "timm"), imported where it is used
    import timm

    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a timm model name (a non-empty str), got {name!r}")
    spec = parse_weights(weights)
    arch = name.split(".", 1)[0]
    if not timm.is_model(arch):
        raise ValueError(f"unknown timm model name={name!r} (see timm.list_models())")
    if spec != "imagenet":
        model = timm.create_model(name, pretrained=False, **kwargs)
        if spec == "none":
            return model, {"weights": "none"}
        return model, load_weights_file(model, spec)
    full = timm_pretrained_name(name)
    try:
        model = timm.create_model(full, pretrained=True, **kwargs)
    except Exception as exc:  # noqa: BLE001 - classified below
        # a bad argument re-raises here, unchanged
        timm.create_model(full, pretrained=False, **kwargs)
        raise WeightsUnavailableError(
            f"weights='imagenet': timm could not fetch the pretrained weights {full!r} of backbone "
            f"{name!r} ({type(exc).__name__}: {exc}). {_ALTERNATIVES}"
        ) from exc
    return model, {"weights": "imagenet", "source": f"timm:{full}"}


def check_weights(
    weights: str | os.PathLike[str] | None, backbone: str, *, fetch: bool = True
) -> dict[str, Any]:
    """Check ``weights`` for ``backbone`` before anything runs and return its weights record.

    A notebook calls it right after its parameters cell, so that an offline ``"imagenet"`` or a
    missing file stops the run at once. ``"imagenet"`` needs a timm backbone with pretrained
    weights; with ``fetch`` the weights are downloaded into timm's cache now (later builds read
    the cache).

    Raises:
        WeightsUnavailableError, FileNotFoundError, ValueError: see :func:`create_timm_model`.
    """
    spec = parse_weights(weights)
    if not isinstance(backbone, str) or not backbone:
        raise TypeError(f"backbone must be a backbone name (a non-empty str), got {backbone!r}")
    if spec == "none":
        return {"weights": "none"}
    if isinstance(spec, Path):
        return file_record(spec)
    name = backbone[5:] if backbone.lower().startswith("timm:") else backbone
    if name.lower() in ("mlp", "tiny_cnn", "tiny"):
        raise ValueError(
            f"backbone {backbone!r} has no ImageNet weights; use weights='none' or a weight file"
        )
    if not fetch:
        return {"weights": "imagenet", "source": f"timm:{timm_pretrained_name(name)}"}
    _, record = create_timm_model(name, "imagenet", num_classes=0)
    return record


def find_weights_record(module: nn.Module) -> dict[str, Any] | None:
    """The ``weights_record`` of ``module`` or of its first sub-module that has one (``None`` if
    none).

    Raises:
        TypeError: ``module`` is not an ``nn.Module``.
    """
    for m in check_module(module, "module").modules():
        rec = getattr(m, "weights_record", None)
        if isinstance(rec, Mapping):
            return dict(rec)
    return None
