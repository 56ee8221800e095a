"""Embedding files: a set of embeddings and their labels saved by the user, read with clear errors.

Three layouts, the same as ``embeddings_path`` of the evaluation chapter:

* ``.pt``: ``torch.save({"embeddings": (N, d), "labels": (N,) or (N, L)}, path)`` (read with
  ``weights_only``: tensors and plain data only);
* ``.npz``: ``np.savez(path, embeddings=..., labels=...)``;
* ``.npy``: the embeddings, with the labels in ``<stem>_labels.npy`` beside it.

Nothing is unpickled: a file that would need it (a Python object, not numbers) is refused, as is a
truncated file or one of another format, with one line naming the file and what was expected.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["EmbeddingFileError", "load_embedding_file"]

_LAYOUT = (
    'expected a .pt file of {"embeddings": (N, d), "labels": (N,)}, a .npz file with the arrays '
    "embeddings and labels, or a .npy file of embeddings with <stem>_labels.npy beside it"
)


class EmbeddingFileError(ValueError):
    """An embedding file that cannot be read (truncated, another format, Python objects) or whose
    arrays are not embeddings and labels."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _npy(path: Path) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"embedding file {str(path)!r} does not exist")
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY":
        raise EmbeddingFileError(
            f"{str(path)!r} is not a NumPy .npy file (it lacks the .npy header: truncated "
            f"or another format); {_LAYOUT}"
        )
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "pickled" in str(exc) or "allow_pickle" in str(exc):
            raise EmbeddingFileError(
                f"{str(path)!r} holds Python objects, not an array of numbers: save the "
                "embeddings with np.save(path, array) of a float array"
            ) from exc
        raise EmbeddingFileError(
            f"{str(path)!r} cannot be read as a .npy array (truncated?): {_first_line(exc)}"
        ) from exc
    except (OSError, EOFError) as exc:
        raise EmbeddingFileError(
            f"{str(path)!r} cannot be read as a .npy array (truncated?): {_first_line(exc)}"
        ) from exc


def _read(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return {"embeddings": _npy(path), "labels": _npy(path.with_name(path.stem + "_labels.npy"))}
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            why = (
                "it holds Python objects"
                if "pickle" in str(exc)
                else f"{type(exc).__name__}: {_first_line(exc)}"
            )
            raise EmbeddingFileError(
                f"{str(path)!r} is not a readable .npz archive ({why}); {_LAYOUT}"
            ) from exc
    if suffix == ".pt":
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file: one line, file named
            raise EmbeddingFileError(
                f"{str(path)!r} is not a readable torch.save file of tensors (truncated, "
                f"another format or Python objects): {type(exc).__name__}: {_first_line(exc)}"
            ) from exc
    raise EmbeddingFileError(f"{str(path)!r}: unknown suffix {path.suffix!r}; {_LAYOUT}")


def load_embedding_file(path: str | os.PathLike[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Read embeddings and labels saved in one of the layouts of the module docstring.

    Args:
        path: a ``.pt``, ``.npz`` or ``.npy`` file.

    Returns:
        ``(embeddings (N, d) float32, labels (N,) or (N, L) int64)``.

    Raises:
        TypeError: ``path`` is not a path.
        FileNotFoundError: the file (or the ``_labels.npy`` beside a ``.npy``) does not exist.
        EmbeddingFileError: (a ``ValueError``) the file cannot be read, holds Python objects, lacks
            ``embeddings`` or ``labels``, or they are not a finite ``(N, d)`` float array and
            ``(N,)`` / ``(N, L)`` integer labels with the same ``N``; the message names the file.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path, got {type(path).__name__}")
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"embedding file {str(path)!r} does not exist")
    blob = _read(path)
    if not isinstance(blob, dict) or not {"embeddings", "labels"} <= set(blob):
        keys = sorted(blob) if isinstance(blob, dict) else type(blob).__name__
        raise EmbeddingFileError(
            f"{str(path)!r} holds {keys}, not embeddings and labels; {_LAYOUT}"
        )
    try:
        emb, lab = torch.as_tensor(blob["embeddings"]), torch.as_tensor(blob["labels"])
    except (TypeError, ValueError, RuntimeError) as exc:
        raise EmbeddingFileError(
            f"{str(path)!r}: embeddings and labels must be numeric arrays ({_first_line(exc)})"
        ) from exc
    if (
        emb.ndim != 2
        or emb.shape[0] == 0
        or emb.shape[1] == 0
        or not (
            emb.is_floating_point()
            or emb.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
        )
    ):
        raise EmbeddingFileError(
            f"{str(path)!r}: embeddings must be a non-empty (N, d) real array, got "
            f"{tuple(emb.shape)} {emb.dtype}"
        )
    emb = emb.float()
    if not bool(torch.isfinite(emb).all()):
        raise EmbeddingFileError(
            f"{str(path)!r}: the embeddings hold NaN or inf (or overflow float32)"
        )
    if (
        lab.ndim not in (1, 2)
        or lab.shape[0] != emb.shape[0]
        or lab.is_floating_point()
        or lab.is_complex()
        or lab.dtype == torch.bool
    ):
        raise EmbeddingFileError(
            f"{str(path)!r}: labels must be integers of shape ({emb.shape[0]},) or "
            f"({emb.shape[0]}, L), got {tuple(lab.shape)} {lab.dtype}"
        )
    return emb, lab.long()
