"""Checkpoint files of the engine: sealed, atomic, rotated, verified on load; RNG state
capture/restore.

A run interrupted at any point and resumed from its last checkpoint reproduces the uninterrupted
run exactly (on CPU; on CUDA see ``docs/decisions.md``): the engine's checkpoint
(:class:`rank_lab.engine.loop.Engine`) holds the modules, optimisers, grad scaler, generators, the
Python / NumPy / torch (and CUDA) RNG states, the history and the fingerprint of what produced it
(:mod:`rank_lab.engine.fingerprint`); the batches depend only on the seed, the epoch and those
generators, and the learning rate only on the global step (:func:`rank_lab.engine.schedule.lr_at`).

**The file.** A checkpoint is a ``torch.save`` archive (``torch.load`` reads it) *sealed* by
:func:`save_checkpoint` with one more record, ``<archive>/.rank_lab_checkpoint.json``: the number
of records, their total size in bytes and a SHA-256 of their names and contents. Writes are
atomic (a temporary file in the same folder, fsynced, then renamed over the target), so a crash
never leaves half a file under the checkpoint's name, and a failed run never replaces a good
checkpoint. Before the newest checkpoint ``last.pt`` is replaced, it is verified and kept as
``last.prev.pt`` (:func:`previous_path`; a hard link, or a copy where links are not supported).

**Reading.** :func:`read_checkpoint` verifies the seal (a truncated file is not a complete zip
archive; a changed byte changes the hash or a record's CRC) before unpickling (``weights_only``:
tensors and plain data). When the newest file fails, the previous one is used with a
:class:`CheckpointWarning`; when both fail, :class:`CheckpointCorruptError` names both files, the
reason of each and how to start fresh. Every error names the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "CheckpointError",
    "CheckpointCorruptError",
    "CheckpointMismatchError",
    "CheckpointWarning",
    "CheckpointRead",
    "save_checkpoint",
    "verify_checkpoint",
    "read_checkpoint",
    "load_checkpoint",
    "previous_path",
    "atomic_write_json",
    "get_rng_state",
    "set_rng_state",
]

#: The format named by the seal of every checkpoint file.
FORMAT = "rank_lab.checkpoint/2"
_SEAL = ".rank_lab_checkpoint.json"
_CHUNK = 1 << 20
_DEFAULT_HINT = "delete it or train with resume=False"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable (:class:`CheckpointCorruptError`) or written by
    another run (:class:`CheckpointMismatchError`). The message names the file and how to start
    fresh."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file (and its previous one) is truncated, corrupted or not a rank_lab
    checkpoint."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint was written by another run: other data, other code or another configuration."""


class CheckpointWarning(UserWarning):
    """The newest checkpoint was unusable and the previous one was used (or a CUDA RNG state
    mapped)."""


class CheckpointRead(NamedTuple):
    """What :func:`read_checkpoint` returns: the state, the file it came from, and why the newest
    file was passed over (``None`` when the newest was used)."""

    state: dict[str, Any]
    path: Path
    fallback_reason: str | None


def _as_path(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path, got {type(path).__name__}")
    return Path(path)


def previous_path(path: str | Path) -> Path:
    """The file that keeps the previous checkpoint of ``path``: ``last.pt`` -> ``last.prev.pt``."""
    p = _as_path(path)
    return p.with_name(f"{p.stem}.prev{p.suffix}" if p.suffix else f"{p.name}.prev")


def _seal_hash(archive: zipfile.ZipFile) -> tuple[str, int, int]:
    """SHA-256 over the records (name, size, content) other than the seal; total size; count.

    Reading each record to its end makes :mod:`zipfile` check its CRC-32 too.
    """
    h = hashlib.sha256()
    size = count = 0
    for info in archive.infolist():
        if info.filename.endswith("/" + _SEAL):
            continue
        h.update(info.filename.encode() + b"\0" + info.file_size.to_bytes(8, "little"))
        with archive.open(info) as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        size += info.file_size
        count += 1
    return h.hexdigest(), size, count


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - a folder that cannot be opened (some platforms)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - fsync of a folder is not supported everywhere
        pass
    finally:
        os.close(fd)


def _seal(path: Path) -> None:
    """Append the seal record to a fresh ``torch.save`` archive and flush it to disk."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        sha, size, count = _seal_hash(z)
    prefix = names[0].split("/", 1)[0] if names and "/" in names[0] else "archive"
    seal = {"format": FORMAT, "records": count, "bytes": size, "sha256": sha}
    with zipfile.ZipFile(path, "a") as z:
        z.writestr(f"{prefix}/{_SEAL}", json.dumps(seal))
    _fsync(path)


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check that ``path`` is a complete, unaltered checkpoint file; return its seal.

    Returns:
        ``{"format", "records", "bytes", "sha256"}`` as written by :func:`save_checkpoint`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointCorruptError: the file is truncated (not a complete archive), lacks the seal
            (not written by :func:`save_checkpoint`), or its size or hash differs from the seal;
            the message names the file and the reason.
    """
    path = _as_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    nbytes = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as z:
            seals = [n for n in z.namelist() if n.endswith("/" + _SEAL)]
            if not seals:
                raise CheckpointCorruptError(
                    f"checkpoint {str(path)!r} has no rank_lab seal: it was not written by "
                    "rank_lab.engine.checkpoint.save_checkpoint (or by an older rank_lab)"
                )
            seal = json.loads(z.read(seals[-1]))
            sha, size, count = _seal_hash(z)
    except CheckpointCorruptError:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        OSError,
        ValueError,
        KeyError,
    ) as exc:
        raise CheckpointCorruptError(
            f"checkpoint {str(path)!r} ({nbytes} bytes) is truncated or corrupted: "
            f"{type(exc).__name__}: {_first_line(exc)}"
        ) from exc
    if not isinstance(seal, dict) or seal.get("format") != FORMAT:
        raise CheckpointCorruptError(
            f"checkpoint {str(path)!r}: unknown seal {seal!r} (expected format {FORMAT})"
        )
    if (size, count) != (seal.get("bytes"), seal.get("records")):
        raise CheckpointCorruptError(
            f"checkpoint {str(path)!r} holds {count} records of {size} bytes, its seal says "
            f"{seal.get('records')} of {seal.get('bytes')} bytes: it was truncated or altered"
        )
    if sha != seal.get("sha256"):
        raise CheckpointCorruptError(
            f"checkpoint {str(path)!r}: its content hash differs from its seal: it was corrupted"
        )
    return seal


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def save_checkpoint(obj: Any, path: str | Path, *, keep_previous: bool = True) -> Path:
    """Write ``obj`` with ``torch.save`` as a sealed checkpoint, atomically, keeping the previous
    one.

    Args:
        obj: the state (tensors and plain data, so that ``weights_only`` loading reads it).
        path: the checkpoint file.
        keep_previous: keep the file being replaced as :func:`previous_path` when it verifies
            (a corrupt newest file is replaced, and the previous good one stays).

    Returns:
        ``path``.

    Raises:
        TypeError: ``path`` is not a path, or ``obj`` holds something ``torch.save`` cannot pickle.
        ValueError: ``path`` is a folder.
        OSError: the folder cannot be written (the checkpoint on disk is left as it was).
    """
    path = _as_path(path)
    if path.is_dir():
        raise ValueError(f"path {str(path)!r} is a folder: name the checkpoint file")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            torch.save(obj, tmp)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise TypeError(
                f"obj cannot be saved by torch.save: {type(exc).__name__}: {_first_line(exc)}"
            ) from exc
        _seal(tmp)
        if keep_previous and path.is_file():
            _keep_previous(path)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync(path.parent)
    return path


def _keep_previous(path: Path) -> None:
    """Make the current newest checkpoint the previous one, if it is a good checkpoint."""
    try:
        verify_checkpoint(path)
    except (CheckpointCorruptError, FileNotFoundError):
        return  # never let a corrupt newest file replace the last good one
    prev = previous_path(path)
    tmp = prev.with_name(f".{prev.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        # no copy: the newest file is replaced by a rename, the link keeps its data
        os.link(path, tmp)
    except OSError:
        shutil.copy2(path, tmp)
    os.replace(tmp, prev)


def read_checkpoint(
    path: str | Path,
    map_location: str | torch.device = "cpu",
    *,
    fallback: bool = True,
    hint: str = _DEFAULT_HINT,
) -> CheckpointRead:
    """Verify and read a checkpoint; fall back to the previous one when the newest is unusable.

    Args:
        path: the checkpoint file (its previous one is :func:`previous_path`).
        map_location: where the tensors go (``torch.load``).
        fallback: use the previous file, with a :class:`CheckpointWarning`, when ``path`` is
            truncated, corrupted or unreadable.
        hint: how to start fresh, quoted by the errors.

    Returns:
        A :class:`CheckpointRead` (state, the file used, why the newest was passed over).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointCorruptError: neither ``path`` nor (with ``fallback``) its previous file is a
            readable rank_lab training checkpoint; the message names both files and the reasons.
    """
    path = _as_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        return CheckpointRead(_read_one(path, map_location), path, None)
    except CheckpointCorruptError as exc:
        newest = str(exc)
        prev = previous_path(path)
        if not fallback or not prev.is_file():
            raise CheckpointCorruptError(
                f"{newest}; no previous checkpoint {str(prev)!r} to fall back to; "
                f"to start fresh, {hint}"
            ) from exc
        try:
            state = _read_one(prev, map_location)
        except CheckpointCorruptError as exc2:
            raise CheckpointCorruptError(
                f"{newest}; the previous one is unusable too: {exc2}; to start fresh, {hint}"
            ) from exc2
    warnings.warn(
        CheckpointWarning(
            f"{newest}; resuming from the previous checkpoint {str(prev)!r} "
            f"(epoch {state.get('epoch')}, step {state.get('step')})"
        ),
        stacklevel=3,
    )
    return CheckpointRead(state, prev, newest)


def _read_one(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    verify_checkpoint(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - one line naming the file, the cause chained
        raise CheckpointCorruptError(
            f"checkpoint {str(path)!r} could not be unpickled: {type(exc).__name__}: "
            f"{_first_line(exc)}"
        ) from exc
    if not isinstance(ckpt, dict) or "model" not in ckpt or "epoch" not in ckpt:
        raise CheckpointCorruptError(
            f"{str(path)!r} is not a rank_lab training checkpoint (no 'model' and 'epoch')"
        )
    return ckpt


def load_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", *, fallback: bool = True
) -> dict[str, Any]:
    """Read a checkpoint written by a training loop (verified; see :func:`read_checkpoint`).

    Returns:
        The state: ``model`` (the model's state dict), ``epoch``, ``step``, ``history``,
        ``config``, ``fingerprint``, ...

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        CheckpointCorruptError: (a ``ValueError``) the file and its previous one are unusable.
    """
    return read_checkpoint(path, map_location, fallback=fallback).state


def atomic_write_json(obj: Any, path: str | Path) -> None:
    """Write JSON atomically (temporary file + rename).

    NumPy scalars, one-element tensors, tuples, sets and paths are converted; NaN and inf are
    written as JSON's ``NaN`` / ``Infinity`` extensions (Python's ``json`` reads them back).

    Raises:
        TypeError: ``obj`` holds a value JSON cannot represent (nothing is written).
    """
    # before touching the disk
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, torch.Tensor) and o.numel() == 1:
        return o.item()
    if isinstance(o, (tuple, set)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"obj holds a value that is not JSON serialisable: {type(o).__name__}")


def get_rng_state() -> dict[str, Any]:
    """The Python, NumPy, torch CPU (and CUDA, one per device) RNG states,
    ``weights_only``-loadable."""
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [
            np_state[0],
            torch.from_numpy(np_state[1].astype(np.int64)),
            int(np_state[2]),
            int(np_state[3]),
            float(np_state[4]),
        ],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` captured.

    CUDA states are restored per device. A checkpoint written with more CUDA devices than this
    machine has restores the first ones and drops the rest; one written with fewer restores those
    and seeds the other devices from the saved ones; both with a :class:`CheckpointWarning`. On a
    machine without CUDA the CUDA states are not used (nothing draws from them).

    Raises:
        TypeError, ValueError: ``state`` is not such a dict (a missing key, a malformed entry).
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be the dict of get_rng_state(), got {type(state).__name__}")
    missing = [k for k in ("python", "numpy", "torch") if k not in state]
    if missing:
        raise ValueError(
            f"state lacks {missing}: pass the dict of get_rng_state() (a checkpoint's 'rng')"
        )
    try:
        _set_rng_state(state)
    except (TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise ValueError(f"state is not a valid get_rng_state() dict: {exc}") from exc


def _set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, cached))
    # a checkpoint loaded with map_location="cuda" moves it
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        _set_cuda_rng_states([s.cpu() for s in state["cuda"]])


def _set_cuda_rng_states(saved: list[torch.Tensor]) -> None:
    """Restore per-device CUDA RNG states, mapping a different number of devices (with a
    warning)."""
    have = torch.cuda.device_count()
    for i in range(min(have, len(saved))):
        torch.cuda.set_rng_state(saved[i], device=i)
    if len(saved) > have:
        warnings.warn(
            CheckpointWarning(
                f"the checkpoint holds the CUDA RNG states of {len(saved)} devices, this machine "
                f"has {have}: restored those of devices 0-{have - 1}, dropped the rest (CUDA "
                "random draws follow the original run's first devices only)"
            ),
            stacklevel=4,
        )
    elif len(saved) < have and saved:
        for i in range(len(saved), have):
            h = hashlib.sha256(saved[i % len(saved)].numpy().tobytes() + bytes([i % 256]))
            seed = int.from_bytes(bytes.fromhex(h.hexdigest()[:16]), "little")
            torch.cuda.default_generators[i].manual_seed(seed)
        warnings.warn(
            CheckpointWarning(
                f"the checkpoint holds the CUDA RNG states of {len(saved)} devices, this machine "
                f"has {have}: devices {len(saved)}-{have - 1} were seeded from the saved states"
            ),
            stacklevel=4,
        )
