"""The "Rerun at full scale" box of a chapter, generated from data (never hand-written).

A chapter declares in its front matter what its full run reads, costs and should reach::

    rank_lab:
      rerun:
        datasets: [sop, cub]               # keys of DATASETS (official source, size, layout)
        parameters: {dataset: sop, data_dir: /path/to/Stanford_Online_Products}
        estimate: {backbone: resnet50, image_size: 224, epochs: 0, dataset: sop, batch_size: 64}
        expect:
          - what: "R@1 and mAP@R of a ResNet-50 trained with Sup-AP on SOP"
            value: "81.2 and 54.8"
            where: "Ramzi thesis, Tab. 3.3"

and the page places the box with the ``rerun-box`` directive (``book/_ext/rerun_box.py``;
the Colab twins render the same Markdown). :func:`rerun_markdown` writes it:

* how to run it: the command line and the parameters to set in the notebook (Colab);
* the data: each dataset's official source (:data:`rank_lab.data.datasets.sources.DATASET_SOURCES`),
  its size and the layout its loader expects (:data:`DATASETS`);
* the time and GPU memory to expect: estimates of :mod:`rank_lab.cost` (``training_cost`` with the
  ``estimate`` arguments, ``memory_estimate`` at its ``batch_size``), labelled as estimates until a
  GPU record of the chapter exists (``recorded/<name>.gpu.json``), whose times are then shown;
  the recorded CPU run's own times come from its record;
* what a correct full run should reach: the source's figures, quoted with their place;
* whether the CUDA paths have been checked on hardware: not until the GPU check report
  (``benchmarks/gpu_check_report.md``, ``make gpu-check``) is recorded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rank_lab.cost import format_duration, memory_estimate, training_cost
from rank_lab.data.datasets.alegoria import load_alegoria
from rank_lab.data.datasets.cars import load_cars
from rank_lab.data.datasets.cifar import load_cifar
from rank_lab.data.datasets.cub import load_cub
from rank_lab.data.datasets.dyml import load_dyml
from rank_lab.data.datasets.inaturalist import load_inaturalist
from rank_lab.data.datasets.landuse import load_landuse_pool
from rank_lab.data.datasets.sop import load_sop
from rank_lab.data.datasets.sources import DATASET_SOURCES

from .links import browse_url
from .notebooks import book_dir, find_notebook, front_matter
from .recorded import load_record

__all__ = [
    "DatasetInfo",
    "DATASETS",
    "RerunError",
    "RerunSpec",
    "rerun_spec",
    "rerun_markdown",
    "GPU_REPORT",
]

#: Where the GPU check writes its report (relative to the repository root).
GPU_REPORT = "benchmarks/gpu_check_report.md"


class RerunError(ValueError):
    """A chapter's ``rank_lab.rerun`` block that the box cannot be written from."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a reader needs to fetch a dataset: its name, size and the layout the loader expects.

    Attributes:
        name: the dataset's name as papers write it.
        size: images (and classes) of the splits the book uses.
        layout: the folder the loader expects (a short tree or sentence).
        loader: the function that reads it (its dotted name is linked from the box).
        source: key of :data:`~rank_lab.data.datasets.sources.DATASET_SOURCES` (official URL,
            reference).
    """

    name: str
    size: str
    layout: str
    loader: Callable[..., Any]
    source: str

    @property
    def loader_name(self) -> str:
        """The loader's dotted name, e.g. ``rank_lab.data.datasets.sop.load_sop``."""
        return f"{self.loader.__module__}.{self.loader.__qualname__}"


#: The datasets the chapters' full runs read, by the key the front matter names.
DATASETS: dict[str, DatasetInfo] = {
    "sop": DatasetInfo(
        "Stanford Online Products",
        "120,053 images of 22,634 products: 59,551 train, 60,502 test",
        "`Ebay_train.txt`, `Ebay_test.txt` and the category folders (`bicycle_final/`, ...) of the "
        "`Stanford_Online_Products` archive",
        load_sop,
        "sop",
    ),
    "cub": DatasetInfo(
        "CUB-200-2011",
        "11,788 images of 200 bird species: 5,864 train (classes 1-100), 5,924 test",
        "`images.txt`, `image_class_labels.txt` and `images/` of the `CUB_200_2011` archive",
        load_cub,
        "cub",
    ),
    "cars196": DatasetInfo(
        "Cars196",
        "16,185 images of 196 car models: 8,054 train (classes 1-98), 8,131 test",
        "`car_ims/` and `cars_annos.mat` of the Stanford Cars archive",
        load_cars,
        "cars196",
    ),
    "inaturalist": DatasetInfo(
        "iNaturalist 2018 (retrieval split)",
        "461,939 images: 325,846 train, 136,093 test",
        "the 2018 competition's `train_val2018/` images with the retrieval split files of Brown et "
        "al.",
        load_inaturalist,
        "inaturalist",
    ),
    "dyml": DatasetInfo(
        "DyML-Vehicle, DyML-Animal and DyML-Product (Sun et al., CVPR 2021)",
        "three datasets with 3 label levels each; their image counts are listed with the archives "
        "(the Ramzi thesis, §4.4.1, does not give them)",
        "one folder per dataset (`dyml_vehicle/`, ...) holding `train/label.csv` with "
        "`train/imgs/`, and `bmk_fine/`, `bmk_middle/`, `bmk_coarse/` with their query and "
        "gallery lists",
        load_dyml,
        "dyml",
    ),
    "alegoria": DatasetInfo(
        "ALEGORIA (cross-source heritage images)",
        "13,174 images: 1,858 annotated images of 58 classes from 6 collections (the queries) and "
        "11,316 non-annotated distractors (Gominski thesis, Tabs. 3.3-3.5)",
        "`annotations.csv` (image, class, collection and the attributes of Tab. 3.9) beside the "
        "images; the layout is the one rank_lab documents, since none is published",
        load_alegoria,
        "alegoria",
    ),
    "landuse": DatasetInfo(
        "Land-use datasets UCM, AID, RESISC45, PatternNet, RSI-CB, RSSCN7, SIRI-WHU and WHU-RS19",
        "104,952 aerial scene images in 207 classes, from 1,005 (WHU-RS19) to 31,500 (RESISC45) "
        "per dataset (Gominski thesis, Tab. 5.4)",
        "one folder holding the datasets as their archives unpack (`UCMerced_LandUse/Images/`, "
        "`AID/`, `NWPU-RESISC45/`, `PatternNet/images/`, `RSI-CB256/`, `RSSCN7/`, "
        "`12class_tif/`, `WHU-RS19/`), one sub-folder of images per class",
        load_landuse_pool,
        "landuse",
    ),
    "cifar10": DatasetInfo(
        "CIFAR-10",
        "60,000 32 x 32 colour images of 10 classes: 50,000 train, 10,000 test",
        "`cifar-10-batches-py/` of the python archive (or `download=True`)",
        load_cifar,
        "cifar",
    ),
    "cifar100": DatasetInfo(
        "CIFAR-100",
        "60,000 32 x 32 colour images of 100 classes: 50,000 train, 10,000 test",
        "`cifar-100-python/` of the python archive (or `download=True`)",
        load_cifar,
        "cifar",
    ),
}


@dataclass(frozen=True)
class RerunSpec:
    """A chapter's ``rank_lab.rerun`` block, checked."""

    notebook: str
    path: Path
    datasets: tuple[str, ...]
    parameters: dict[str, Any]
    estimate: dict[str, Any] | None
    expect: tuple[dict[str, str], ...]


def rerun_spec(name: str | os.PathLike[str]) -> RerunSpec | None:
    """The ``rank_lab.rerun`` block of a notebook's front matter, or ``None`` when it has none.

    Raises:
        NotebookNotFoundError: no such notebook.
        RerunError: an unknown key, a dataset not in :data:`DATASETS`, an estimate that
            :func:`rank_lab.cost.training_cost` refuses, an expectation without ``what``, ``value``
            and ``where``.
    """
    md = find_notebook(name)
    block = (front_matter(md).get("rank_lab") or {}).get("rerun")
    if block is None:
        return None
    where = f"{md.name}: rank_lab.rerun"
    known = {"datasets", "parameters", "estimate", "expect"}
    if not isinstance(block, Mapping) or set(block) - known:
        raise RerunError(
            f"{where} must be a mapping with keys among {sorted(known)}, got {block!r}"
        )
    datasets = block.get("datasets") or []
    if isinstance(datasets, str) or not isinstance(datasets, list):
        raise RerunError(f"{where}.datasets must be a list of dataset keys, got {datasets!r}")
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        raise RerunError(
            f"{where}.datasets {unknown} are not in rank_lab.book.rerun.DATASETS "
            f"(known: {sorted(DATASETS)}): add their source, size and layout there"
        )
    params = block.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise RerunError(f"{where}.parameters must map parameter names to values, got {params!r}")
    estimate = block.get("estimate")
    if estimate is not None:
        if not isinstance(estimate, Mapping) or "batch_size" not in estimate:
            raise RerunError(
                f"{where}.estimate must be the arguments of rank_lab.cost.training_cost plus "
                f"batch_size, got {estimate!r}"
            )
        try:
            _estimates(dict(estimate))
        except (TypeError, ValueError) as exc:
            raise RerunError(f"{where}.estimate: {exc}") from exc
    expect = block.get("expect") or []
    if not isinstance(expect, list) or not all(
        isinstance(e, Mapping)
        and set(e) == {"what", "value", "where"}
        and all(isinstance(v, (str, int, float)) for v in e.values())
        for e in expect
    ):
        raise RerunError(
            f"{where}.expect must be a list of {{what, value, where}} (the source's figures), "
            f"got {expect!r}"
        )
    return RerunSpec(
        md.stem,
        md,
        tuple(datasets),
        dict(params),
        dict(estimate) if estimate else None,
        tuple({k: str(v) for k, v in e.items()} for e in expect),
    )


def _estimates(estimate: dict[str, Any]) -> tuple[Any, float]:
    args = dict(estimate)
    batch = args.pop("batch_size")
    cost = training_cost(**args)
    memory = memory_estimate(
        args["backbone"], args["image_size"], batch, training=args.get("epochs", 0) > 0
    )
    return cost, memory


def _gib(n_bytes: float) -> str:
    gib = n_bytes / 2**30
    return f"{gib:.1f} GiB" if gib >= 1 else f"{n_bytes / 2**20:.0f} MiB"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    return str(v)


def rerun_markdown(name: str | os.PathLike[str]) -> str:
    """The box of chapter ``name`` as MyST Markdown (an admonition titled "Rerun at full scale").

    Raises:
        NotebookNotFoundError: no such notebook.
        RerunError: no ``rank_lab.rerun`` block, or a malformed one.
    """
    spec = rerun_spec(name)
    if spec is None:
        raise RerunError(
            f"{name}: no rank_lab.rerun block in the front matter: the box is generated from it "
            "(docs/book_contract.md)"
        )
    params = {"smoke": False, **spec.parameters}
    cli = " ".join(f"-p {k} {_value(v)}" for k, v in params.items())
    lines = [
        "````{admonition} Rerun at full scale",
        ":class: note dropdown",
        "",
        "**Run it.** From a checkout: `python -m rank_lab.book run " + spec.notebook + "` with "
        f"`{cli}`. On Colab (the link at the top of this page) choose a GPU runtime and set the "
        "same values in the parameters cell.",
    ]
    if spec.datasets:
        lines += ["", "**The data.**", ""]
        for key in spec.datasets:
            info = DATASETS[key]
            url, ref = DATASET_SOURCES[info.source]
            src = (
                f"<{url}>"
                if url.startswith("http") and " " not in url
                else (url or "not publicly distributed")
            )
            lines.append(
                f"- {info.name} ({ref}): {info.size}. Official source: {src}. Expected folder "
                f"(`data_dir`): {info.layout}; read by {{func}}`{info.loader_name}`."
            )
    lines += ["", "**Time and memory.**", ""]
    gpu = load_record(spec.path, "gpu")
    if gpu:
        lines.append(f"- Measured: the recorded GPU run took {gpu.time_sentence()}.")
    elif spec.estimate is not None:
        cost, memory = _estimates(spec.estimate)
        lines.append(
            f"- Estimate ({{mod}}`rank_lab.cost`, until a GPU run of this chapter is recorded): "
            f"about {format_duration(cost.gpu_seconds)} on one GPU "
            f"({format_duration(cost.cpu_seconds)} on a CPU) for {cost.description}; peak GPU "
            f"memory about {_gib(memory)} at batch size {spec.estimate['batch_size']}. "
            "Order-of-magnitude figures, not measurements."
        )
    rec = load_record(spec.path)
    if rec:
        lines.append(
            "- The recorded CPU run at toy scale (the tables of this page) took "
            f"{rec.time_sentence()}."
        )
    if spec.expect:
        lines += ["", "**What a correct full run should reach** (the source's figures):", ""]
        lines += [f"- {e['what']}: {e['value']} ({e['where']})." for e in spec.expect]
    report = book_dir().parent / GPU_REPORT
    link = browse_url(GPU_REPORT)
    if report.is_file():
        shown = (
            f"[the GPU check report]({link})" if link else f"the GPU check report ({GPU_REPORT})"
        )
        lines += ["", f"**CUDA.** The CUDA paths of rank_lab were run on a GPU: see {shown}."]
    else:
        lines += [
            "",
            "**CUDA.** The CUDA paths of rank_lab are reviewed and tested on a CPU, but untested "
            "on GPU hardware until a GPU check report is recorded (`make gpu-check` on a GPU "
            "machine writes it): check your first full run against the figures above.",
        ]
    lines.append("````")
    return "\n".join(lines)
