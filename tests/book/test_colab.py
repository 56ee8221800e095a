"""A simulated Colab runs the twins: pinned install cell, then the notebook, in a fresh environment.

What the simulation assumes a Colab runtime already holds (it does, and nothing of rank_lab):

* ``pip`` (a fresh ``python -m venv``) and ``ipykernel`` (the kernel that runs the cells);
* ``torch`` and ``torchvision`` with what they depend on (numpy, pillow, ...). They are *exposed*
  from the interpreter running the tests (a ``.pth`` file naming a folder of links to exactly those
  distributions), not installed again: the CUDA build of torch is 5.5 GB, and Colab ships its own.

Everything else comes from the twin's own install cell: ``rank_lab[<extras>] @ git+file://...@<commit>``
(a temporary repository holding one commit of the current working tree, so uncommitted work is
what runs and the checkout is never written), its dependencies (scipy, scikit-learn, matplotlib,
timm, faiss-cpu ...) through pip and its cache, and ``animal-mnist --no-deps`` where declared. Then
papermill executes the twin with that environment's kernel, in smoke mode (the defaults), with no
runner: ``start_run`` reads the parameters from the kernel's namespace, so the install cell must
bind no public name. Two twins: ``heat`` (animal-mnist) and ``optimising_recall_at_k`` (a training
notebook with the faiss and timm extras), in one environment, as a user opening two chapters.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

from rank_lab.book import check_document, find_notebook, front_matter, notebook_schema
from rank_lab.book.twins import make_twin

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ("heat", "optimising_recall_at_k")
#: Distributions a Colab runtime provides (with their dependencies), exposed to the fresh
#: environment.
COLAB_PROVIDES = ("torch", "torchvision")
KERNEL = "colab-sim"
PROBE = """
import importlib.metadata as m, importlib.util as u, json, rank_lab
vcs = json.loads(m.distribution("rank_lab").read_text("direct_url.json"))["vcs_info"]
names = ("papermill", "jupyter_book", "sphinx", "nbval", "jupytext", "animal_mnist", "timm", \
"faiss", "matplotlib", "lmdb")
print(json.dumps({"file": rank_lab.__file__, "commit": vcs["commit_id"], **{n: u.find_spec(n) is \
not None for n in names}}))
"""


def _run(cmd: list[str], **kw: object) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def _snapshot(dest: Path) -> str:
    """A one-commit repository of the working tree (tracked and untracked, not ignored files); its
    commit."""
    listed = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT).split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    git = [
        "git",
        "-c",
        "user.name=colab-sim",
        "-c",
        "user.email=colab-sim@example.org",
        "-c",
        "commit.gpgsign=false",
    ]
    _run([*git, "init", "-q"], cwd=dest)
    _run([*git, "add", "-A"], cwd=dest)
    _run([*git, "commit", "-q", "-m", "snapshot of the working tree"], cwd=dest)
    return _run(["git", "rev-parse", "HEAD"], cwd=dest).strip()


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` and everything they require (extras left out)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _fresh_colab(tmp: Path) -> Path:
    """A fresh venv with ipykernel and (exposed) torch/torchvision: the Colab this test assumes."""
    _run([sys.executable, "-m", "venv", str(tmp / "venv")])
    python = tmp / "venv" / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).strip()
    )
    provided = tmp / "colab_provided"
    provided.mkdir()
    for dist in _closure(COLAB_PROVIDES):
        base = Path(str(dist.locate_file("")))
        for top in {Path(f).parts[0] for f in dist.files or []}:
            if top.startswith("..") or top.endswith(".pth") or top in ("__pycache__", "bin"):
                continue
            if (base / top).exists() and not (provided / top).exists():
                (provided / top).symlink_to(base / top)
    (site / "colab_provided.pth").write_text(f"{provided}\n")
    _run([str(python), "-m", "pip", "install", "-q", "ipykernel"])
    kernel = tmp / "jupyter" / "kernels" / KERNEL
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "simulated Colab",
                "language": "python",
            }
        )
    )
    return python


def _finite(obj: object) -> bool:
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return not isinstance(obj, float) or math.isfinite(obj)


@pytest.mark.colab
def test_twins_install_and_run_on_a_simulated_colab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import papermill as pm

    src = tmp_path / "src"
    src.mkdir()
    sha = _snapshot(src)
    repo = f"file://localhost{src}"  # pip's URL parser needs a host part in git+file URLs
    python = _fresh_colab(tmp_path)
    # the kernel sees only the fresh environment
    for var in ("PYTHONPATH", "RANK_LAB_RUN", "RANK_LAB_BOOK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")

    for name in NOTEBOOKS:
        md = find_notebook(name, root=src / "book")
        twin = make_twin(md, tmp_path / "twins" / f"{name}.ipynb", repo, sha, root=src / "book")
        run_dir = tmp_path / "run" / name
        run_dir.mkdir(parents=True)
        executed = run_dir / f"{name}.ipynb"
        pm.execute_notebook(
            str(twin),
            str(executed),
            kernel_name=KERNEL,
            cwd=str(run_dir),
            progress_bar=False,
            execution_timeout=600,
            log_output=False,
        )
        nb = nbformat.read(executed, as_version=4)
        install = "".join(
            o.get("text", "") for o in nb.cells[0].outputs if o.get("output_type") == "stream"
        )
        assert f"at {sha[:12]}" in install and "device: cpu" in install, install
        doc = check_document(json.loads((run_dir / "results.json").read_text()))
        assert doc["provenance"]["status"] == "ok" and doc["provenance"]["runner"] == "none"
        assert (doc["provenance"]["git_commit"], doc["provenance"]["git_dirty"]) == (sha, False), (
            f"{name}: results.json must name the commit the install cell pinned"
        )
        assert doc["parameters"] == json.loads(json.dumps(notebook_schema(md).defaults())), (
            f"{name}: start_run read other names than the parameters cell's (the install cell must "
            "bind none)"
        )
        assert set(front_matter(md)["rank_lab"]["results_keys"]) <= set(doc["results"])
        assert _finite(doc["results"])

    info = json.loads(
        _run(
            [str(python), "-c", PROBE],
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            cwd=tmp_path,
        )
        .strip()
        .splitlines()[-1]
    )
    assert info["commit"] == sha and info["file"].startswith(str(tmp_path / "venv")), info
    assert not any(info[n] for n in ("papermill", "jupyter_book", "sphinx", "nbval", "jupytext")), (
        f"the book/test extras reached the Colab environment: {info}"
    )
    assert info["animal_mnist"] and info["timm"] and info["faiss"] and info["matplotlib"], info
    assert not info["lmdb"], "the data extra was installed though neither notebook declares it"
