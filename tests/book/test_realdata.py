"""Every real-data branch of every notebook runs, on a tiny fixture in the dataset's published
layout.

For each notebook and each real dataset its front matter offers (``dataset`` choices other than the
offline ``synthetic`` / ``digits``), :func:`rank_lab.fixtures.write_fixture` writes a few
32-pixel images in that dataset's published layout, and :func:`rank_lab.book.run_notebook` runs the
notebook on it in smoke mode with ``weights="none"`` (random initialisation, no download), a tiny
backbone where the notebook takes one, and one short epoch. The run must end with ``status: "ok"``,
record the dataset and its folder in ``parameters``, hold finite figures, record ``weights: none``
where it builds a backbone, and print key figures that differ from the default smoke run's (so the
real branch ran, not the default one).

``weights="imagenet"`` at notebook level (timm's Hugging Face download monkeypatched inside the
kernel through an IPython startup file, as no network is assumed): offline, a real-data training run
stops with ``WeightsUnavailableError`` naming ``weights='none'`` and a local file before any
training; with the download served, the results record ImageNet weights.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from rank_lab.book import (
    NotebookRunError,
    list_notebooks,
    load_results,
    notebook_schema,
    run_notebook,
)
from rank_lab.book.cells import is_checked_cell
from rank_lab.fixtures import write_fixture

REFERENCE = Path(__file__).resolve().parents[1] / "notebook_reference"
#: Dataset options that need no data folder (bundled or generated).
OFFLINE = {"synthetic", "digits"}

#: notebook -> {dataset option: (fixture name, fixture arguments)}.
REAL_DATA: dict[str, dict[str, tuple[str, dict[str, int]]]] = {
    "evaluating_retrieval": {d: (d, {}) for d in ("sop", "cub", "cars196", "inaturalist")},
    "optimising_recall_at_k": {d: (d, {}) for d in ("cars196", "cub", "sop", "inaturalist")},
    "decomposability_roadmap": {
        "sop": ("sop", {}),
        "cub": ("cub", {}),
        "cars196": ("cars196", {}),
        "inaturalist": ("inaturalist", {}),
    },
    "hierarchical_retrieval": {
        "sop": ("sop", {}),
        "inat_base": ("inaturalist", {}),
        "inat_full": ("inaturalist", {}),
        "dyml_vehicle": ("dyml", {}),
        "dyml_animal": ("dyml", {}),
        "dyml_product": ("dyml", {}),
    },
    "heat_benchmark": {"features": ("features", {})},
    "esupcon": {"cifar10": ("cifar10", {}), "cifar100": ("cifar100", {})},
    "feds": {"lmdb": ("lmdb", {})},
    "learned_surrogates_ls_ed": {"lmdb": ("lmdb", {})},
    # 5-shot needs a 6th image
    "classification_by_retrieval": {"landuse": ("landuse", {"per_class": 6})},
    "fewshot_retrieval": {"alegoria": ("alegoria_fewshot", {})},
    "descriptors_cross_source": {"alegoria": ("alegoria", {})},
}
#: notebook -> parameters that keep its real-data run tiny: a tiny random-init backbone, one short
#: epoch. (hierarchical_retrieval, decomposability_roadmap and optimising_recall_at_k train one
#: epoch of two batches of 8 images on real data in smoke mode; feds and learned_surrogates_ls_ed
#: train their smoke steps.)
TINY: dict[str, dict[str, Any]] = {
    "evaluating_retrieval": {"backbone": "tiny_cnn"},
    "optimising_recall_at_k": {"backbone": "tiny_cnn"},
    "decomposability_roadmap": {"backbone": "tiny_cnn"},
    "hierarchical_retrieval": {"backbone": "tiny_cnn"},
    "heat_benchmark": {"heat_epochs": 1},
    "esupcon": {"epochs": 1},
    "feds": {},
    "learned_surrogates_ls_ed": {},
    "classification_by_retrieval": {
        "landuse_backbone": "tiny_cnn",
        "landuse_image_size": 32,
        "landuse_epochs": 1,
        "landuse_batches": 2,
    },
    "fewshot_retrieval": {"k": 1, "m": 2, "pretrain_episodes": 5, "episodes": 5, "runs": 1},
    "descriptors_cross_source": {"backbone": "tiny_cnn", "epochs": 1},
}
#: Notebooks whose smoke run on real data keeps its tiny network random: ``weights`` serves full
#: mode only.
WEIGHTS_IN_FULL_MODE_ONLY = {"fewshot_retrieval"}
CASES = [(nb, ds) for nb, options in REAL_DATA.items() for ds in options]


def _finite(obj: object) -> bool:
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return not isinstance(obj, float) or math.isfinite(obj)


def _weights_records(obj: object) -> list[object]:
    """Every value stored under a ``weights`` key of the results (the weights records)."""
    found: list[object] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "weights" and isinstance(v, dict):
                found.append(v)
            else:
                found += _weights_records(v)
    elif isinstance(obj, list):
        for v in obj:
            found += _weights_records(v)
    return found


def _names_dataset(obj: object, dataset: str) -> bool:
    """Whether the results hold ``dataset`` as a ``dataset`` entry or as a key (a section run on
    it)."""
    if isinstance(obj, dict):
        return (
            dataset in obj
            or obj.get("dataset") == dataset
            or any(_names_dataset(v, dataset) for v in obj.values())
        )
    if isinstance(obj, list):
        return any(_names_dataset(v, dataset) for v in obj)
    return False


def _printed_figures(executed: Path) -> dict[str, float]:
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    cell = next(c for c in nb.cells if is_checked_cell(c))
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
    return {
        label: float(value)
        for label, sep, value in (ln.rpartition(" = ") for ln in text.splitlines())
        if sep
    }


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """The fixture folders, written once per worker (keyed by fixture name and arguments)."""
    return {}


def _fixture(
    cache: dict[tuple[str, str], Path], root: Path, name: str, kwargs: dict[str, int]
) -> Path:
    key = (name, json.dumps(kwargs, sort_keys=True))
    if key not in cache:
        cache[key] = write_fixture(name, root / f"{name}_{len(cache)}", **kwargs)
    return cache[key]


def test_every_real_dataset_option_has_a_case() -> None:
    """The table above covers exactly the real datasets the notebooks declare (a new option needs a
    case)."""
    declared = {}
    for md in list_notebooks():
        schema = notebook_schema(md)
        if "dataset" in schema.names:
            real = set(schema.parameters["dataset"].choices or ()) - OFFLINE
            if real:
                declared[md.stem] = real
                assert "data_dir" in schema.names, (
                    f"{md.stem}: real datasets need a data_dir parameter"
                )
    assert declared == {nb: set(options) for nb, options in REAL_DATA.items()}
    for nb, params in TINY.items():
        schema = notebook_schema(nb)
        schema.check(params)  # declared, in range
        assert not {"backbone", "landuse_backbone"} & set(schema.names) - set(params), (
            f"{nb}: pass a tiny backbone to its real-data run"
        )


@pytest.mark.realdata
@pytest.mark.parametrize(("notebook", "dataset"), CASES, ids=[f"{nb}-{ds}" for nb, ds in CASES])
def test_real_data_branch_runs_on_a_fixture(
    notebook: str,
    dataset: str,
    tmp_path: Path,
    fixtures: dict[tuple[str, str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    name, kwargs = REAL_DATA[notebook][dataset]
    data_dir = _fixture(
        fixtures, tmp_path_factory.getbasetemp() / "realdata_fixtures", name, kwargs
    )
    schema = notebook_schema(notebook)
    params = {
        "seed": 0,
        "device": "cpu",
        "dataset": dataset,
        "data_dir": str(data_dir),
        **TINY[notebook],
    }
    if "weights" in schema.names:
        params["weights"] = "none"
    out = run_notebook(notebook, params, tmp_path, timeout=600)
    doc = load_results(out)
    assert doc["provenance"]["status"] == "ok"
    assert doc["parameters"]["dataset"] == dataset and doc["parameters"]["data_dir"] == str(
        data_dir
    )
    assert doc["parameters"] == schema.effective(params)
    assert _finite(doc["results"]), f"{notebook} on {dataset}: NaN or inf in results.json"
    records = _weights_records(doc["results"])
    assert all(r == {"weights": "none"} for r in records), records
    if "weights" in schema.names and notebook not in WEIGHTS_IN_FULL_MODE_ONLY:
        assert records, f"{notebook} on {dataset}: no weights record in results.json"
    # the real branch ran: the results name the dataset, or else the key figures moved off the
    # default run's
    if not _names_dataset(doc["results"], dataset):
        reference = json.loads((REFERENCE / f"{notebook}.json").read_text())["figures"]
        assert _printed_figures(out / f"{notebook}.ipynb") != reference, (
            f"{notebook} on {dataset} printed the default smoke run's figures: did the real branch "
            "run?"
        )


# ------------------------------------------------------------------------------ weights="imagenet"
STARTUP = '''
def _serve_timm_downloads():
    """Replace huggingface_hub.hf_hub_download as timm calls it (rank_lab tests: no network)."""
    import timm.models._hub as hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def fake_hf_hub_download(repo_id, filename, revision=None, cache_dir=None, **kw):
        if {offline!r}:
            raise LocalEntryNotFoundError("cannot reach huggingface.co: Name or service not known")
        import safetensors.torch, timm, torch
        arch = repo_id.split("/", 1)[1].split(".", 1)[0]
        torch.manual_seed(123)
        state = {{k: v.contiguous() for k, v in timm.create_model(arch).state_dict().items()}}
        path = {folder!r} + "/" + repo_id.replace("/", "_") + ".safetensors"
        safetensors.torch.save_file(state, path)
        return path

    hub.hf_hub_download = fake_hf_hub_download

_serve_timm_downloads()
del _serve_timm_downloads
'''


def _patched_kernel(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, offline: bool) -> None:
    """Kernels started from now on run STARTUP first (IPython profile startup file of
    $IPYTHONDIR)."""
    startup = tmp / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-fake-hub.py").write_text(STARTUP.format(offline=offline, folder=str(tmp)))
    monkeypatch.setenv("IPYTHONDIR", str(tmp / "ipython"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.realdata
def test_imagenet_weights_offline_stop_a_real_run_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patched_kernel(tmp_path, monkeypatch, offline=True)
    data_dir = write_fixture("sop", tmp_path / "sop")
    params = {
        "device": "cpu",
        "dataset": "sop",
        "data_dir": str(data_dir),
        "backbone": "test_resnet",
        "weights": "imagenet",
    }
    with pytest.raises(NotebookRunError) as info:
        run_notebook("decomposability_roadmap", params, tmp_path / "out", timeout=600)
    err = info.value
    assert err.ename == "WeightsUnavailableError"
    assert "weights='none'" in err.evalue and "weights='/path/to/weights.pth'" in err.evalue
    assert "LocalEntryNotFoundError" in err.evalue  # the cause is named
    run_dir = tmp_path / "out" / "decomposability_roadmap"
    doc = load_results(run_dir)
    assert (
        doc["provenance"]["status"] == "failed"
        and doc["provenance"]["error"]["type"] == "WeightsUnavailableError"
    )
    assert not (run_dir / "checkpoints").exists(), (
        "training started before the weights were fetched"
    )


@pytest.mark.realdata
def test_imagenet_weights_served_are_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patched_kernel(tmp_path, monkeypatch, offline=False)
    data_dir = write_fixture("sop", tmp_path / "sop")
    params = {
        "device": "cpu",
        "dataset": "sop",
        "data_dir": str(data_dir),
        "backbone": "test_resnet",
        "weights": "imagenet",
    }
    doc = load_results(run_notebook("evaluating_retrieval", params, tmp_path / "out", timeout=600))
    assert doc["provenance"]["status"] == "ok"
    record = doc["results"]["weights"]
    assert record["weights"] == "imagenet" and record["source"].startswith("timm:test_resnet"), (
        record
    )


# ------------------------------------------------------------------------------ full mode on a CPU
@pytest.mark.realdata
def test_full_mode_on_a_cpu_stops_at_once_with_the_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """smoke=False on real data and a CPU: FullRunOnCPUError with the estimate and the ways on,
    before any data is read or any network trained (rank_lab.cost.guard_full_run)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data_dir = write_fixture("sop", tmp_path / "sop")
    params = {
        "smoke": False,
        "device": "cpu",
        "dataset": "sop",
        "data_dir": str(data_dir),
        "weights": "none",
        "real_losses": ["sup_ap"],
    }
    with pytest.raises(NotebookRunError) as info:
        run_notebook("decomposability_roadmap", params, tmp_path / "out", timeout=600)
    err = info.value
    assert err.ename == "FullRunOnCPUError"
    assert re.search(
        r"would take roughly [\d.]+ days here \(about [\d.]+ h on a GPU\): resnet50 at 224 px",
        err.evalue,
    )
    # SOP's published training split, not the fixture's
    assert "59,551 training images" in err.evalue
    for way in ("run it on a GPU", "set smoke=True", "allow_cpu_full=True"):
        assert way in err.evalue
    run_dir = tmp_path / "out" / "decomposability_roadmap"
    assert not (run_dir / "checkpoints").exists()
    assert load_results(run_dir)["provenance"]["error"]["type"] == "FullRunOnCPUError"
