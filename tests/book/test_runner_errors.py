"""The runner never reports work it did not do, and its user errors are one line (issue 26 items
4-6).

* a notebook re-run with the same ``--out`` after its data changed refuses the earlier checkpoints
  in one line (the reported bug: they were reused silently); ``--fresh`` trains again;
  ``results.json`` records what was restored and trained;
* refused before running (exit 2, nothing touched): ``--out`` naming a file, a device this machine
  lacks, a parameter given twice, a bad ``--timeout``, YAML 1.1 words for booleans;
* refused after running began (exit 1, ``status: "failed"`` with the error): a per-cell timeout;
  Ctrl-C (exit 130, error ``KeyboardInterrupt`` with its message); a corrupt data or weight file;
* YAML 1.2 numbers, path parameters resolved against the caller's directory, results.json readable.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rank_lab import book
from rank_lab.book import cli
from rank_lab.book.parameters import ParameterError, ParameterTypeError, notebook_schema
from rank_lab.book.runner import OutputFolderError, check_device

HEAD = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
rank_lab:
  results_keys: [training]
  parameters:
    device: {type: str}
    data_dir: {type: str, path: true}
    weights: {path: {keywords: [imagenet, none]}}
    epochs: {min: 1}
---
"""
#: A notebook that trains a linear model on ``data_dir/x.npy`` with a checkpoint in its output
#: folder.
TRAIN = (
    HEAD
    + """
```{code-cell} ipython3
:tags: [parameters]
smoke = True
device = None
data_dir = "data"
weights = "imagenet"
epochs = 2
tau = 0.5
sleep_s = 0.0
```

```{code-cell} ipython3
import time
from pathlib import Path

import torch

from rank_lab.book import save_results, start_run
from rank_lab.data import load_embedding_file
from rank_lab.engine import Batch, EngineConfig, fit

start_run(globals())
Path("started").write_text("1")
time.sleep(sleep_s)
x, y = load_embedding_file(Path(data_dir) / "x.npy")
torch.manual_seed(0)
model = torch.nn.Linear(x.shape[1], 1)
if weights not in ("imagenet", "none"):
    from rank_lab.models.weights import load_weights_file

    load_weights_file(model, weights)
g = torch.Generator().manual_seed(1)


def batches(e):
    perm = torch.randperm(x.shape[0], generator=g)
    return [Batch(perm[i:i + 4], indices=perm[i:i + 4]) for i in range(0, x.shape[0], 4)]


engine = fit(model, lambda i: (model(x[i]).squeeze(1) - y[i].float()).pow(2).mean(), batches,
             EngineConfig(epochs=epochs, checkpoint="checkpoints/linear.pt"), lr=0.1, device="cpu",
             generators={"batches": g}, run_key={"lr": 0.1}, trained_on=(x, y))
results = {"training": {"weight": model.weight.detach().reshape(-1).tolist(), "tau": tau, \
"weights": weights,
                        "data_dir": data_dir}}
save_results(results, "results.json")
```
"""
)


@pytest.fixture()
def train_book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "book"
    root.mkdir()
    (root / "train.md").write_text(TRAIN)
    monkeypatch.setenv("RANK_LAB_BOOK", str(root))
    monkeypatch.chdir(tmp_path)
    _write_data(tmp_path / "data", seed=0)
    return root


def _write_data(folder: Path, seed: int) -> None:
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    np.save(folder / "x.npy", rng.normal(size=(12, 3)).astype(np.float32))
    np.save(folder / "x_labels.npy", rng.integers(0, 3, 12))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("error:")]


# ------------------------------------------------------------------------------- the reported bug
def test_a_rerun_after_the_data_changed_refuses_the_earlier_checkpoints(
    train_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "run", "train", "--out", "out")
    assert code == 0 and "training: resumed" not in out
    doc = book.load_results(tmp_path / "out" / "train")
    first = doc["results"]["training"]["weight"]
    t = doc["provenance"]["training"]
    assert (t["resumed"], t["fresh"], t["loops"], t["trained"], t["restored"]) == (
        False,
        False,
        1,
        {"epochs": 2, "steps": 6},
        {"epochs": 0, "steps": 0},
    )

    # the same run again: it resumes, trains nothing, and says so
    code, out, _ = _cli(capsys, "run", "train", "--out", "out")
    assert (
        code == 0
        and "training: resumed from checkpoints (6 steps restored, 0 trained in this run" in out
    )
    doc = book.load_results(tmp_path / "out" / "train")
    t = doc["provenance"]["training"]
    assert (
        t["resumed"]
        and t["trained"] == {"epochs": 0, "steps": 0}
        and t["restored"] == {"epochs": 2, "steps": 6}
    )
    assert t["resumes"][0]["resumed_from"] == str(
        tmp_path / "out" / "train" / "checkpoints" / "linear.pt"
    )
    assert doc["results"]["training"]["weight"] == first

    # the data changed: the checkpoint is refused in one line, the failure recorded
    _write_data(tmp_path / "data", seed=1)
    code, _, err = _cli(capsys, "run", "train", "--out", "out")
    assert code == 1 and len(_error_lines(err)) == 1 and "Traceback" not in err
    line = _error_lines(err)[0]
    assert (
        "CheckpointMismatchError" in line and "other training data" in line and "linear.pt" in line
    )
    assert "--fresh" in line and "new --out" in line
    doc = book.load_results(tmp_path / "out" / "train")
    assert (
        doc["provenance"]["status"] == "failed"
        and doc["provenance"]["error"]["type"] == "CheckpointMismatchError"
    )

    # --fresh: trains again on the new data, and the record says the old checkpoint was ignored
    code, out, _ = _cli(capsys, "run", "train", "--out", "out", "--fresh")
    assert code == 0
    doc = book.load_results(tmp_path / "out" / "train")
    t = doc["provenance"]["training"]
    assert t["fresh"] and not t["resumed"] and t["trained"] == {"epochs": 2, "steps": 6}
    assert (
        t["resumes"][0]["ignored"].endswith("linear.pt")
        and doc["results"]["training"]["weight"] != first
    )
    ckpts = tmp_path / "out" / "train" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["linear.prev.pt", "linear.pt"]


def test_a_rerun_with_other_notebook_code_refuses_the_checkpoints(
    train_book: Path, tmp_path: Path
) -> None:
    book.run_notebook("train", {}, tmp_path / "out")
    md = train_book / "train.md"
    # another loss, the same run key
    md.write_text(md.read_text().replace(".pow(2).mean()", ".abs().mean()"))
    with pytest.raises(
        book.NotebookRunError,
        match=r"CheckpointMismatchError: .*written by other code \(notebook_sha256",
    ):
        book.run_notebook("train", {}, tmp_path / "out")


def test_a_truncated_checkpoint_resumes_from_the_previous_one(
    train_book: Path, tmp_path: Path
) -> None:
    book.run_notebook("train", {"epochs": 2}, tmp_path / "out")
    # constant schedule: continues, epoch 3 saved
    book.run_notebook("train", {"epochs": 3}, tmp_path / "out")
    ck = tmp_path / "out" / "train" / "checkpoints" / "linear.pt"
    ck.write_bytes(ck.read_bytes()[:-7])
    doc = book.load_results(book.run_notebook("train", {"epochs": 3}, tmp_path / "out"))
    t = doc["provenance"]["training"]
    assert t["resumed"] and t["restored"]["epochs"] == 2 and t["trained"]["epochs"] == 1
    assert (
        t["resumes"][0]["resumed_from"].endswith("linear.prev.pt")
        and "truncated" in t["resumes"][0]["fallback"]
    )


# ------------------------------------------------------------------------------- refused before
# running
def test_out_naming_a_file_is_refused_in_one_line(
    train_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("mine")
    code, _, err = _cli(capsys, "run", "train", "--out", "afile")
    assert code == 2 and err.strip().splitlines() == [_error_lines(err)[0]]
    assert "is a file, not a folder" in err and (tmp_path / "afile").read_text() == "mine"
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "train").write_text("in the way")
    with pytest.raises(OutputFolderError, match="is a file, not the run's folder"):
        book.run_notebook("train", {}, tmp_path / "o")


def test_a_device_this_machine_lacks_is_refused_before_running(
    train_book: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = _cli(capsys, "run", "train", "-p", "device", "cuda", "--out", "out")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "parameter 'device' of train: got 'cuda', but this machine has no CUDA GPU" in err
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_device("cuda:0")
    with pytest.raises(ParameterError, match="has 1 CUDA device"):
        check_device("cuda:1")
    with pytest.raises(ParameterError, match="not a torch device name"):
        check_device("gpu")
    check_device(None)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["-p", "epochs", "1", "-p", "epochs", "2"],
            "parameter 'epochs' of train is given twice (-p epochs 1, -p epochs 2)",
        ),
        (["-p", "smoke", "yes"], "YAML 1.2: yes, no, on and off are strings; write true or false"),
        (["-p", "smoke", "no"], "got 'no' (str), expected a bool (true or false)"),
        (["-p", "epochs", "1e3"], "1000.0 is a float in YAML; write it as an integer, e.g. 1000"),
        (["--timeout", "0"], "--timeout takes whole seconds (a positive integer), got '0'"),
        (["--timeout", "1.5"], "--timeout takes whole seconds"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    train_book: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    code, out, err = _cli(capsys, "run", "train", "--out", "out", *argv)
    assert (
        code == 2
        and out == ""
        and err.count("\n") == 1
        and err.startswith("error: ")
        and message in err
    ), err
    assert not (tmp_path / "out").exists()


def test_argparse_errors_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["run"])
    err = capsys.readouterr().err
    assert (
        exc.value.code == 2
        and err.count("\n") == 1
        and err.startswith("error: ")
        and "--help" in err
    )


# ------------------------------------------------------------------------------- parameter values
def test_yaml_1_2_numbers_and_booleans() -> None:
    assert book.parse_parameter("1e-3") == 0.001 and book.parse_parameter("1e3") == 1000.0
    assert book.parse_parameter("-2.5E+2") == -250.0 and book.parse_parameter("1_000") == 1000
    for word in ("yes", "no", "on", "off", "y", "n"):
        assert book.parse_parameter(word) == word  # strings in YAML 1.2
    assert book.parse_parameter("true") is True and book.parse_parameter("False") is False


def test_yaml_values_through_the_schema(train_book: Path) -> None:
    schema = notebook_schema("train")
    assert schema.parse_cli([("tau", "1e-3"), ("epochs", "3")]) == {"tau": 0.001, "epochs": 3}
    assert schema.parse_cli([("tau", "1e3")]) == {"tau": 1000.0}
    with pytest.raises(ParameterTypeError, match="write true or false"):
        schema.parse_cli([("smoke", "on")])
    with pytest.raises(ParameterError, match="given twice"):
        schema.parse_cli([("tau", "1"), ("tau", "1")])


def test_path_parameters_are_resolved_against_the_callers_directory(
    train_book: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = notebook_schema("train")
    base = tmp_path / "here"
    got = schema.resolve_paths({"data_dir": "sub/data", "weights": "w.pth", "tau": 1.0}, base)
    assert got == {
        "data_dir": str(base / "sub" / "data"),
        "weights": str(base / "w.pth"),
        "tau": 1.0,
    }
    assert schema.resolve_paths({"weights": "ImageNet", "data_dir": "/abs"}, base) == {
        "weights": "ImageNet",
        "data_dir": "/abs",
    }
    assert schema.resolve_paths({"data_dir": "~/d"}, base)["data_dir"] == str(
        Path("~/d").expanduser()
    )
    # through the runner: the notebook runs in out/train/ but reads ./data of the caller
    doc = book.load_results(
        book.run_notebook("train", {"data_dir": "data", "weights": "none"}, tmp_path / "out")
    )
    assert (
        doc["parameters"]["data_dir"]
        == str(tmp_path / "data")
        == doc["results"]["training"]["data_dir"]
    )
    assert doc["parameters"]["weights"] == "none"


def test_exclusive_bounds_multiples_and_list_lengths(tmp_path: Path) -> None:
    md = tmp_path / "c.md"
    md.write_text(
        TRAIN.replace(
            "    epochs: {min: 1}\n",
            "    epochs: {min: 1}\n    rate: {gt: 0, lt: 1}\n"
            "    sizes: {items: int, min: 8, multiple_of: 8, min_length: 1}\n",
        ).replace("epochs = 2\n", "epochs = 2\nrate = 0.5\nsizes = [8, 16]\n")
    )
    schema = notebook_schema(md)
    assert schema.check({"rate": 1e-9, "sizes": [8, 40]}) == {"rate": 1e-9, "sizes": [8, 40]}
    assert schema.parameters["rate"].expected() == "a float > 0 and < 1"
    assert (
        schema.parameters["sizes"].expected()
        == "a list of int with items >= 8 and a multiple of 8, at least 1 item"
    )
    for values, message in [
        ({"rate": 0.0}, "got 0.0 (float), expected a float > 0 and < 1"),
        ({"rate": 1}, "expected a float > 0 and < 1"),
        ({"sizes": [8, 12]}, "got [8, 12] (list)"),
        ({"sizes": []}, "at least 1 item"),
    ]:
        with pytest.raises(ParameterError, match=re.escape(message)):
            schema.check(values)
    md.write_text(md.read_text().replace("multiple_of: 8", "multiple_of: 0"))
    with pytest.raises(ValueError, match="multiple_of must be an int >= 1"):
        notebook_schema(md)


@pytest.mark.parametrize(
    "spec, default, message",
    [
        ("{path: yes}", "'a'", "path must be true or"),
        ("{path: {keywords: imagenet}}", "'a'", "path must be true or"),
        ("{path: {words: [a]}}", "'a'", "path must be true or"),
        ("{path: true}", "1", "path applies to a str parameter"),
    ],
)
def test_malformed_path_declarations_are_refused(
    tmp_path: Path, spec: str, default: str, message: str
) -> None:
    md = tmp_path / "bad.md"
    md.write_text(
        TRAIN.replace(
            "    epochs: {min: 1}\n", f"    epochs: {{min: 1}}\n    other: {spec}\n"
        ).replace("epochs = 2\n", f"epochs = 2\nother = {default}\n")
    )
    with pytest.raises(ValueError, match=message):
        notebook_schema(md)


# ------------------------------------------------------------------------------- failures after the
# start
def test_a_cell_timeout_is_one_line_and_recorded(
    train_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(
        capsys, "run", "train", "-p", "sleep_s", "30", "--timeout", "3", "--out", "out"
    )
    assert code == 1 and len(_error_lines(err)) == 1 and "Traceback" not in err
    assert "ran longer than the per-cell timeout of 3 s" in _error_lines(err)[0]
    doc = book.load_results(tmp_path / "out" / "train")
    assert doc["provenance"]["status"] == "failed"
    assert doc["provenance"]["error"]["type"] == "CellTimeoutError"
    assert (
        "cell 3 ran longer than the per-cell timeout of 3 s"
        in doc["provenance"]["error"]["message"]
    )


def test_ctrl_c_is_recorded_as_interrupted(train_book: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rank_lab.book",
            "run",
            "train",
            "-p",
            "sleep_s",
            "60",
            "--out",
            "out",
            "--quiet",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    started = tmp_path / "out" / "train" / "started"
    deadline = time.time() + 240
    while not started.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert started.exists(), proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the runner and its kernel get SIGINT
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "KeyboardInterrupt: interrupted (Ctrl-C) after" in lines[0]
    assert err.strip().splitlines() == [
        lines[0],
        f"results: {tmp_path / 'out' / 'train' / 'results.json'} (status: failed)",
    ]
    doc = book.load_results(tmp_path / "out" / "train")
    assert (
        doc["provenance"]["status"] == "failed"
        and doc["provenance"]["error"]["type"] == "KeyboardInterrupt"
    )
    assert doc["provenance"]["error"]["message"].startswith("interrupted (Ctrl-C) after")


def test_a_corrupt_data_file_is_one_line(
    train_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.npy").write_bytes(os.urandom(100))
    (tmp_path / "bad" / "x_labels.npy").write_bytes(os.urandom(100))
    code, _, err = _cli(capsys, "run", "train", "-p", "data_dir", "bad", "--out", "out")
    assert code == 1 and len(_error_lines(err)) == 1 and "Traceback" not in err
    line = _error_lines(err)[0]
    assert (
        "EmbeddingFileError" in line
        and "is not a NumPy .npy file" in line
        and "allow_pickle" not in line
    )
    assert str(tmp_path / "bad" / "x.npy") in line


def test_a_corrupt_weight_file_is_one_line_naming_the_file(
    train_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "w.pth"
    torch.save(torch.nn.Linear(3, 1).state_dict(), good)
    (tmp_path / "bad.pth").write_bytes(good.read_bytes()[:-40])  # truncated
    code, _, err = _cli(capsys, "run", "train", "-p", "weights", "bad.pth", "--out", "out")
    assert code == 1 and len(_error_lines(err)) == 1 and "Traceback" not in err
    line = _error_lines(err)[0]
    assert (
        "WeightsFileError: weight file" in line
        and str(tmp_path / "bad.pth") in line
        and "weights_path" not in line
    )
    assert _cli(capsys, "run", "train", "-p", "weights", "w.pth", "--out", "out")[0] == 0


# ------------------------------------------------------------------------------- results.json
def test_a_pip_installed_rank_lab_records_its_pinned_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib import metadata

    from rank_lab.book import provenance

    class Dist:
        def __init__(self, text: str | None) -> None:
            self.text = text

        def read_text(self, name: str) -> str | None:
            return self.text if name == "direct_url.json" else None

    sha = "0123456789abcdef0123456789abcdef01234567"
    real = metadata.distribution
    # no checkout: a Colab twin's install
    monkeypatch.setattr(provenance, "git_output", lambda *a: None)
    for text, commit, dirty in [
        (
            json.dumps(
                {"url": "git+https://github.com/o/r", "vcs_info": {"vcs": "git", "commit_id": sha}}
            ),
            sha,
            False,
        ),
        (json.dumps({"url": "file:///src", "dir_info": {"editable": True}}), None, None),
        ("not json", None, None),
        (None, None, None),
    ]:
        monkeypatch.setattr(
            metadata,
            "distribution",
            lambda name, t=text: Dist(t) if name == "rank_lab" else real(name),
        )
        prov = provenance.provenance(notebook="nb", device="cpu")
        assert (prov["git_commit"], prov["git_dirty"]) == (commit, dirty), text

    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    assert provenance.installed_commit() is None


def test_results_json_is_readable_like_any_new_file(train_book: Path, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = book.run_notebook("train", {}, tmp_path / "out")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((out / "results.json").stat().st_mode)
    assert mode == 0o644, oct(mode)
    assert json.loads((out / "results.json").read_text())["provenance"]["status"] == "ok"
