"""Checkpoints fail safe and belong to what produced them (issue 26 items 4-5, issue 27 item 4).

* files: sealed (size + SHA-256), atomic, the previous one kept; every truncation or corruption is
  refused naming the file and how to start fresh, or passed over for the previous file with a
  warning; a failed write never replaces a good checkpoint;
* fingerprints: a checkpoint of other data or other code is refused in one line; a resumed run
  reports what it restored and what it trained;
* CUDA RNG states written on more (or fewer) devices than present are mapped, with a warning (faked
  on CPU).
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from rank_lab.engine import Batch, EngineConfig, Schedule, fit, load_checkpoint, run_report
from rank_lab.engine import checkpoint as CK
from rank_lab.engine import fingerprint as FP
from rank_lab.engine.checkpoint import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointWarning,
    previous_path,
    read_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)


@pytest.fixture(autouse=True)
def _clean_process_state():
    run_report.start_fresh(False)
    run_report.reset_training_report()
    FP.set_code_context(None)
    yield
    run_report.start_fresh(False)
    run_report.reset_training_report()
    FP.set_code_context(None)


def _state(epoch: int) -> dict:
    torch.manual_seed(epoch)
    return {
        "model": {"w": torch.randn(64, 8)},
        "epoch": epoch,
        "step": 3 * epoch,
        "history": [epoch],
    }


# ---------------------------------------------------------------------------------- the file
def test_a_sealed_checkpoint_round_trips_and_torch_still_reads_it(tmp_path: Path) -> None:
    path = save_checkpoint(_state(1), tmp_path / "last.pt")
    seal = verify_checkpoint(path)
    assert seal["format"] == CK.FORMAT and len(seal["sha256"]) == 64 and seal["bytes"] > 64 * 8 * 4
    with zipfile.ZipFile(path) as z:  # the seal is one more record of the torch archive
        assert sum(n.endswith("/.rank_lab_checkpoint.json") for n in z.namelist()) == 1
    for state in (load_checkpoint(path), torch.load(path, weights_only=True)):
        assert state["epoch"] == 1 and torch.equal(state["model"]["w"], _state(1)["model"]["w"])
    # no previous one yet, no temporary left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_the_previous_checkpoint_is_kept_beside_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    for e in (1, 2, 3):
        save_checkpoint(_state(e), path)
    assert previous_path(path) == tmp_path / "last.prev.pt" and previous_path("ck") == Path(
        "ck.prev"
    )
    assert (
        load_checkpoint(path)["epoch"] == 3 and load_checkpoint(previous_path(path))["epoch"] == 2
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.prev.pt", "last.pt"]


def _truncate(n: int):
    def cut(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[:n] if n >= 0 else data[: len(data) + n])

    return cut


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    w = load_checkpoint(path, fallback=False)["model"]["w"].numpy().tobytes()
    at = bytes(data).find(w)  # the tensor's bytes, stored uncompressed in the archive
    assert at > 0
    data[at + len(w) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _torch_save(path: Path) -> None:
    torch.save(_state(7), path)  # not sealed: not written by save_checkpoint


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(4096))


CORRUPTIONS = {
    "empty": _truncate(0),
    "half": _truncate(2000),
    "last byte": _truncate(-1),
    "seal cut": _truncate(-30),
    "flipped byte": _flip,
    "torch.save": _torch_save,
    "garbage": _garbage,
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_an_unusable_newest_checkpoint_names_the_file_and_how_to_start_fresh(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "run.pt"
    save_checkpoint(_state(1), path)
    CORRUPTIONS[kind](path)
    with pytest.raises(CheckpointCorruptError) as err:
        read_checkpoint(path)
    msg = str(err.value)
    assert str(path) in msg and "to start fresh, delete it or train with resume=False" in msg, msg
    assert "\n" not in msg and "no previous checkpoint" in msg
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "run.pt"
    save_checkpoint(_state(1), path)
    save_checkpoint(_state(2), path)
    CORRUPTIONS[kind](path)
    with pytest.warns(
        CheckpointWarning, match=r"resuming from the previous checkpoint .*run\.prev\.pt.*epoch 1"
    ) as rec:
        read = read_checkpoint(path)
    assert str(path) in str(rec[0].message)
    assert read.path == previous_path(path) and read.state["epoch"] == 1 and read.fallback_reason
    # both unusable: one error naming both files
    CORRUPTIONS[kind](previous_path(path))
    with pytest.raises(
        CheckpointCorruptError,
        match=r"run\.pt.*the previous one is unusable too.*run\.prev\.pt.*start fresh",
    ):
        read_checkpoint(path)
    with pytest.raises(CheckpointCorruptError, match="no previous checkpoint"):
        read_checkpoint(path, fallback=False)


def test_a_corrupt_newest_file_never_replaces_the_last_good_one(tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    save_checkpoint(_state(1), path)
    save_checkpoint(_state(2), path)
    _truncate(100)(path)
    save_checkpoint(_state(3), path)  # the truncated file is replaced; the good previous one stays
    assert (
        load_checkpoint(path)["epoch"] == 3 and load_checkpoint(previous_path(path))["epoch"] == 1
    )


def test_a_failed_write_leaves_the_good_checkpoint_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.pt"
    save_checkpoint(_state(1), path)
    before = path.read_bytes()
    real = torch.save

    def crash(obj, f, *a, **k):
        real(obj, f, *a, **k)
        Path(f).write_bytes(Path(f).read_bytes()[:500])  # half written ...
        raise OSError(28, "No space left on device")  # ... then the disk is full

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(_state(2), path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]


def test_a_missing_checkpoint_and_a_checkpoint_of_no_training(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_checkpoint(tmp_path / "none.pt")
    save_checkpoint({"weights": torch.zeros(2)}, tmp_path / "w.pt")
    with pytest.raises(
        CheckpointCorruptError, match=r"w\.pt.*is not a rank_lab training checkpoint"
    ):
        load_checkpoint(tmp_path / "w.pt")


# ---------------------------------------------------------------------------------- the engine
def _run(ckpt: Path, epochs: int, x: torch.Tensor, **kw):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    g = torch.Generator().manual_seed(1)

    def data(e: int):
        perm = torch.randperm(x.shape[0], generator=g)
        return [Batch(perm[i : i + 4], indices=perm[i : i + 4]) for i in range(0, x.shape[0], 4)]

    eng = fit(
        model,
        lambda i: model(x[i]).pow(2).mean(),
        data,
        EngineConfig(epochs=epochs, checkpoint=ckpt),
        lr=0.1,
        device="cpu",
        generators={"batches": g},
        run_key={"lr": 0.1},
        schedule=Schedule("constant", epochs * 3),
        steps_per_epoch=3,
        trained_on=x,
        **kw,
    )
    return model, eng


def test_the_engine_resumes_from_the_previous_checkpoint_when_the_newest_is_corrupt(
    tmp_path: Path,
) -> None:
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(5))
    straight, _ = _run(tmp_path / "s.pt", 4, x)
    _run(tmp_path / "c.pt", 3, x)  # epochs 1-3 saved: c.pt (3) and c.prev.pt (2)
    _truncate(-1)(tmp_path / "c.pt")
    with pytest.warns(
        CheckpointWarning, match=r"c\.pt.*truncated or corrupted.*previous checkpoint .*c\.prev\.pt"
    ):
        resumed, eng = _run(tmp_path / "c.pt", 4, x)
    assert torch.equal(resumed.weight, straight.weight) and torch.equal(resumed.bias, straight.bias)
    r = eng.report
    assert (r.resumed_from, r.restored, r.trained, r.steps_restored, r.steps_trained) == (
        str(tmp_path / "c.prev.pt"),
        2,
        2,
        6,
        6,
    ) and "truncated or corrupted" in r.fallback


def test_a_checkpoint_of_other_data_is_refused_in_one_line(tmp_path: Path) -> None:
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(5))
    _run(tmp_path / "c.pt", 2, x)
    y = x.clone()
    y[7, 1] += 1e-6  # one value changed, same sizes: the old run key cannot see it
    with pytest.raises(CheckpointMismatchError) as err:
        _run(tmp_path / "c.pt", 2, y)
    msg = str(err.value)
    assert "\n" not in msg and str(tmp_path / "c.pt") in msg and "other training data" in msg
    assert "to start a new run set resume=False or use another checkpoint file" in msg
    _, eng = _run(tmp_path / "c.pt", 2, x)  # the same data still resumes: nothing trained again
    assert (eng.report.restored, eng.report.trained) == (2, 0)


def test_a_checkpoint_of_other_code_is_refused(tmp_path: Path) -> None:
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(5))
    FP.set_code_context("nb", "x = 1")
    _run(tmp_path / "c.pt", 2, x)
    FP.set_code_context("nb", "x = 2")
    with pytest.raises(
        CheckpointMismatchError,
        match=r"written by other code \(notebook_sha256: [0-9a-f]{12} -> [0-9a-f]{12}\)",
    ):
        _run(tmp_path / "c.pt", 2, x)
    state = load_checkpoint(tmp_path / "c.pt")
    assert state["fingerprint"]["code"]["notebook"] == "nb" and state["fingerprint"][
        "data"
    ] == FP.data_fingerprint(x)
    state.pop("fingerprint")
    save_checkpoint(state, tmp_path / "old.pt")
    with pytest.raises(CheckpointMismatchError, match="records no fingerprint"):
        _run(tmp_path / "old.pt", 2, x)


def test_a_trainer_refuses_a_checkpoint_evaluated_on_other_test_data(tmp_path: Path) -> None:
    from rank_lab.data import make_open_set
    from rank_lab.losses import SmoothAP
    from rank_lab.train import TrainConfig, Trainer

    s = make_open_set(n_classes=4, per_class=6, dim=4, input_dim=6, seed=0)
    cfg = TrainConfig.from_dict(
        dict(
            backbone="mlp",
            hidden_dims=(8,),
            embed_dim=4,
            batch_size=8,
            m_per_class=4,
            epochs=1,
            eval_ks=(1,),
            progress=False,
            batches_per_epoch=1,
            device="cpu",
            checkpoint_dir=str(tmp_path / "ck"),
        )
    )
    Trainer(None, SmoothAP(), (s.x_train, s.y_train), (s.x_test, s.y_test), cfg).fit()
    with pytest.raises(
        CheckpointMismatchError, match="other training data.*use another checkpoint_dir"
    ):
        Trainer(None, SmoothAP(), (s.x_train, s.y_train), (s.x_test + 1, s.y_test), cfg).fit()


def test_fresh_mode_ignores_earlier_checkpoints_and_reports_it(tmp_path: Path) -> None:
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(5))
    _run(tmp_path / "c.pt", 2, x)
    run_report.reset_training_report()
    run_report.start_fresh()
    _, eng = _run(tmp_path / "c.pt", 2, x)
    assert (eng.report.ignored, eng.report.resumed_from, eng.report.trained) == (
        str(tmp_path / "c.pt"),
        None,
        2,
    )
    _, again = _run(tmp_path / "c.pt", 2, x)  # a checkpoint this process wrote is resumed from
    assert (again.report.restored, again.report.trained) == (2, 0)
    rep = run_report.training_report()
    assert rep["fresh"] and rep["resumed"] and rep["loops"] == 2
    assert rep["trained"] == {"epochs": 2, "steps": 6} and rep["restored"] == {
        "epochs": 2,
        "steps": 6,
    }
    assert [r["ignored"] for r in rep["resumes"]] == [str(tmp_path / "c.pt"), None]
    json.dumps(rep)  # goes into results.json


# ---------------------------------------------------------------------------------- fingerprints
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=30), st.data()
)
def test_the_data_fingerprint_sees_every_value_dtype_and_shape(
    values: list[float], data: st.DataObject
) -> None:
    t = torch.tensor(values, dtype=torch.float32)
    fp = FP.data_fingerprint(t)
    assert FP.data_fingerprint(t.clone()) == fp and FP.data_fingerprint((t.clone(),)) != fp
    i = data.draw(st.integers(0, len(values) - 1))
    u = t.clone()
    u[i] = torch.nextafter(u[i], torch.tensor(float("inf")))
    assert FP.data_fingerprint(u) != fp
    assert FP.data_fingerprint(t.double()) != fp and FP.data_fingerprint(t.reshape(1, -1)) != fp
    assert FP.data_fingerprint(t.numpy()) == FP.data_fingerprint(t.numpy().copy())


def test_the_data_fingerprint_of_files_datasets_and_closures(tmp_path: Path) -> None:
    from rank_lab.data.datasets import ImageListDataset

    f = tmp_path / "a.jpg"
    f.write_bytes(b"x" * 10)
    ds = ImageListDataset([f], [0])
    fp = FP.data_fingerprint(ds)
    assert FP.data_fingerprint(ImageListDataset([f], [0])) == fp
    assert FP.data_fingerprint(ImageListDataset([f], [1])) != fp
    os.utime(f, ns=(1, 1))
    assert FP.data_fingerprint(ds) != fp  # the file's modification time changed
    w = torch.ones(3)

    def loss(i):
        return w[i].sum()

    before = FP.data_fingerprint(loss)
    w[0] = 2.0  # a captured tensor changed
    assert FP.data_fingerprint(loss) != before
    node = type("Node", (), {})()
    node.me, node.items = node, [node, 1]  # an object that holds itself: hashed, no endless loop
    assert FP.data_fingerprint(node) == FP.data_fingerprint(node)
    assert FP.short(None) == "none" and FP.short("0123456789abcdef") == "0123456789ab"
    code = FP.code_fingerprint()
    assert set(code) == {"rank_lab", "sources_sha256"} and len(code["sources_sha256"]) == 64


# ---------------------------------------------------------------------------------- CUDA RNG states
class _FakeGenerator:
    def __init__(self) -> None:
        self.seeds: list[int] = []

    def manual_seed(self, seed: int) -> None:
        self.seeds.append(seed)


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, n: int) -> tuple[dict, list]:
    restored: dict[int, torch.Tensor] = {}
    gens = [_FakeGenerator() for _ in range(n)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(
        torch.cuda, "set_rng_state", lambda s, device: restored.__setitem__(device, s.clone())
    )
    monkeypatch.setattr(torch.cuda, "default_generators", tuple(gens))
    return restored, gens


def _with_cuda(n: int) -> dict:
    torch.manual_seed(0)
    state = CK.get_rng_state()
    state["cuda"] = [torch.randint(0, 255, (16,), dtype=torch.uint8) for _ in range(n)]
    return state


def test_cuda_rng_states_of_more_devices_than_present_are_mapped_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _with_cuda(4)
    restored, _ = _fake_cuda(monkeypatch, 1)
    with pytest.warns(
        CheckpointWarning,
        match="CUDA RNG states of 4 devices, this machine has 1: restored those of devices 0-0",
    ):
        CK.set_rng_state(state)
    assert list(restored) == [0] and torch.equal(restored[0], state["cuda"][0])


def test_cuda_rng_states_of_fewer_devices_seed_the_others_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _with_cuda(1)
    restored, gens = _fake_cuda(monkeypatch, 3)
    with pytest.warns(CheckpointWarning, match="devices 1-2 were seeded from the saved states"):
        CK.set_rng_state(state)
    assert (
        list(restored) == [0]
        and gens[0].seeds == []
        and len(gens[1].seeds) == len(gens[2].seeds) == 1
    )
    assert gens[1].seeds != gens[2].seeds
    restored2, gens2 = _fake_cuda(monkeypatch, 3)
    with pytest.warns(CheckpointWarning):
        CK.set_rng_state(state)
    assert gens2[1].seeds == gens[1].seeds  # the same seeds on every resume: reproducible


def test_the_same_number_of_cuda_devices_restores_silently_and_a_cpu_ignores_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _with_cuda(2)
    restored, _ = _fake_cuda(monkeypatch, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CK.set_rng_state(state)
        assert sorted(restored) == [0, 1]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        CK.set_rng_state(state)  # no CUDA here: nothing draws from those states


def test_data_fingerprint_feeds_the_runs_own_state_by_type_only() -> None:
    """A loss function that closes over the model it trains: the model's values are the run's state
    (restored by the checkpoint), not its data, so training does not change the data fingerprint;
    a captured tensor of data still does."""
    from torch import nn

    from rank_lab.engine.fingerprint import data_fingerprint

    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.arange(6.0).reshape(3, 2)

    def batch_loss(idx: torch.Tensor) -> torch.Tensor:
        return model(x[idx]).square().mean() + 0 * model[2].weight.sum()

    before = data_fingerprint(batch_loss, state=[model, opt])
    plain_before = data_fingerprint(batch_loss)
    batch_loss(torch.arange(3)).backward()
    opt.step()
    assert data_fingerprint(batch_loss, state=[model, opt]) == before
    assert data_fingerprint(batch_loss) != plain_before  # without state the weights count as data
    x.add_(1.0)  # the data changes: the fingerprint does
    assert data_fingerprint(batch_loss, state=[model, opt]) != before
    assert data_fingerprint([None, 1, "a"], state=[None]) == data_fingerprint([None, 1, "a"])
