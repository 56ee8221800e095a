"""``load_embedding_file``: the three layouts, and one clear error per unreadable file (issue 26
item 6)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from rank_lab.data import EmbeddingFileError, load_embedding_file


def _arrays(n: int = 6, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, 3, n)


def test_the_three_layouts_give_the_same_tensors(tmp_path: Path) -> None:
    e, y = _arrays()
    np.save(tmp_path / "e.npy", e)
    np.save(tmp_path / "e_labels.npy", y)
    np.savez(tmp_path / "e.npz", embeddings=e, labels=y)
    torch.save(
        {"embeddings": torch.from_numpy(e), "labels": torch.from_numpy(y)}, tmp_path / "e.pt"
    )
    for name in ("e.npy", "e.npz", "e.pt"):
        emb, lab = load_embedding_file(tmp_path / name)
        assert emb.dtype == torch.float32 and lab.dtype == torch.int64
        assert torch.equal(emb, torch.from_numpy(e)) and torch.equal(lab, torch.from_numpy(y))
    np.save(tmp_path / "h.npy", e.astype(np.float64))
    np.save(tmp_path / "h_labels.npy", np.stack([y, y // 2], 1))  # hierarchical labels (N, L)
    assert load_embedding_file(str(tmp_path / "h.npy"))[1].shape == (6, 2)


def _npy_pair(tmp_path: Path, emb: object, lab: object) -> Path:
    np.save(tmp_path / "x.npy", emb, allow_pickle=True)
    np.save(tmp_path / "x_labels.npy", lab, allow_pickle=True)
    return tmp_path / "x.npy"


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda t: (t / "x.npy").write_bytes(os.urandom(100)) and t / "x.npy",
            "is not a NumPy .npy file",
        ),
        (
            lambda t: _npy_pair(t, np.array([{"a": 1}], dtype=object), np.zeros(1, int)),
            "holds Python objects",
        ),
        (
            lambda t: (
                (
                    np.save(t / "y.npy", _arrays()[0]),
                    (t / "x.npy").write_bytes((t / "y.npy").read_bytes()[:90]),
                    np.save(t / "x_labels.npy", _arrays()[1]),
                )[0]
                or t / "x.npy"
            ),
            "cannot be read as a .npy array",
        ),
        (
            lambda t: (t / "x.npz").write_bytes(b"PK\x03\x04" + os.urandom(50)) and t / "x.npz",
            "is not a readable .npz archive",
        ),
        (
            lambda t: (t / "x.pt").write_bytes(os.urandom(64)) and t / "x.pt",
            "is not a readable torch.save file",
        ),
        (lambda t: (t / "x.csv").write_text("1,2") and t / "x.csv", "unknown suffix '.csv'"),
        (
            lambda t: _npy_pair(t, np.zeros(4, np.float32), np.zeros(4, int)),
            "non-empty (N, d) real array",
        ),
        (
            lambda t: _npy_pair(t, np.full((4, 2), np.nan, np.float32), np.zeros(4, int)),
            "NaN or inf",
        ),
        (
            lambda t: _npy_pair(t, np.zeros((4, 2), np.float32), np.zeros(3, int)),
            "labels must be integers of shape (4,)",
        ),
        (
            lambda t: _npy_pair(t, np.zeros((4, 2), np.float32), np.zeros(4, np.float32)),
            "labels must be integers",
        ),
        (
            lambda t: (np.savez(t / "x.npz", emb=np.zeros((2, 2))), t / "x.npz")[1],
            "not embeddings and labels",
        ),
    ],
)
def test_unreadable_files_give_one_line_naming_the_file(tmp_path: Path, make, message: str) -> None:  # noqa: ANN001
    path = make(tmp_path)
    with pytest.raises(EmbeddingFileError) as err:
        load_embedding_file(path)
    msg = str(err.value)
    assert message in msg and str(path) in msg and "\n" not in msg and "allow_pickle" not in msg, (
        msg
    )
    assert isinstance(err.value, ValueError)


def test_missing_files_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_embedding_file(tmp_path / "none.npy")
    np.save(tmp_path / "e.npy", _arrays()[0])
    with pytest.raises(FileNotFoundError, match="e_labels.npy"):
        load_embedding_file(tmp_path / "e.npy")
    with pytest.raises(TypeError, match="path"):
        load_embedding_file(3)  # type: ignore[arg-type]
