"""Matrix entries of :mod:`rank_lab.memory`, :mod:`rank_lab.utils`, :mod:`rank_lab.cost`,
:mod:`rank_lab.book.publish` and :mod:`rank_lab.stats`."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import torch

import rank_lab.book.publish as P
import rank_lab.cost as C
import rank_lab.losses as L
import rank_lab.memory as MEM
import rank_lab.registry as RG
import rank_lab.stats as S
import rank_lab.utils as U

from .factories import emb, labels
from .framework import cls, fn

ENTRIES = [
    cls(
        MEM.CrossBatchMemory,
        {"size": 8, "dim": 4},
        {"size": "posint", "dim": "posint", "n_levels": "nonnegint"},
        calls=[
            (
                "enqueue",
                lambda: dict(embeddings=emb(6), labels=labels(6)),
                {"embeddings": "x", "labels": "labels"},
            )
        ],
        rows=(("enqueue.embeddings", "enqueue.labels"),),
        legal={"enqueue.embeddings:int": "integer vectors are cast to float"},
    ),
    cls(
        MEM.MemoryLoss,
        lambda: dict(loss=L.SmoothAP(), memory=MEM.CrossBatchMemory(24, 4), activate_after=1),
        {"batch_weight": "nonneg", "memory_weight": "nonneg", "activate_after": "nonnegint"},
        calls=[
            (
                "__call__",
                lambda: dict(embeddings=emb(12), labels=labels(12)),
                {"embeddings": "x", "labels": "labels"},
            )
        ],
        rows=(("__call__.embeddings", "__call__.labels"),),
        legal={"__call__.embeddings:int": "integer vectors are cast to float"},
    ),
    fn(U.get_device, {"device": "cpu"}, {"device": "choice"}),
    fn(U.seed_everything, {"seed": 0}, {"seed": "nonnegint"}),
]

# ----------------------------------------------------------------------------- rank_lab.cost
ENTRIES += [
    fn(
        C.CostEstimate,
        {"cpu_seconds": 10.0, "gpu_seconds": 1.0, "description": "toy"},
        {"cpu_seconds": "nonneg", "gpu_seconds": "nonneg"},
        extra={"not_str": ("description", lambda: 3, ("description",))},
    ),
    fn(C.FullRunOnCPUError),
    fn(
        C.memory_estimate,
        {"backbone": "resnet18", "image_size": 32, "batch_size": 2, "training": True},
        {
            "backbone": "choice",
            "image_size": "posint",
            "batch_size": "posint",
            "in_channels": "posint",
        },
        extra={
            "size3": ("image_size", lambda: (32, 32, 3), ("image_size",)),
            "training": ("training", lambda: "yes", ("training",)),
            "number": ("backbone", lambda: 3, ("backbone",)),
        },
    ),
    fn(
        C.declared_cost,
        {"cpu_seconds": 10.0, "description": "toy", "gpu_seconds": 1.0},
        {"cpu_seconds": "nonneg", "gpu_seconds": "nonneg"},
    ),
    fn(
        C.format_duration,
        {"seconds": 42.0},
        {"seconds": "nonneg"},
        legal={"seconds:inf": "an infinite duration is written 'forever' (documented)"},
    ),
    fn(
        C.forward_flops,
        {"backbone": "tiny_cnn", "image_size": 8, "in_channels": 1},
        {"backbone": "choice", "image_size": "posint", "in_channels": "posint"},
    ),
    fn(
        C.training_cost,
        {
            "backbone": "tiny_cnn",
            "image_size": 8,
            "in_channels": 1,
            "epochs": 2,
            "train_images": 10,
            "test_images": 5,
        },
        {
            "epochs": "nonnegint",
            "train_images": "nonnegint",
            "test_images": "nonnegint",
            "evaluations": "nonnegint",
            "runs": "nonnegint",
            "image_size": "posint",
        },
        extra={"unknown_dataset": ("train_images", lambda: None, ("dataset",))},
    ),
    fn(
        C.guard_full_run,
        lambda: {"smoke": False, "device": "cpu", "cost": C.declared_cost(10.0, "toy")},
        {"device": "choice", "budget_s": "nonneg"},
        extra={"not_cost": ("cost", lambda: 10.0, ("cost",))},
    ),
]

# -----------------------------------------------------------------------------
# rank_lab.book.publish
URL = "https://github.com/test-org/test-repo"
LINK = (
    "https://colab.research.google.com/github/test-org/test-repo/blob/gh-pages/_notebooks/a.ipynb"
)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)


def _repo() -> Path:
    """A clean repository whose ``_config.yml`` names a GitHub URL, with a ``gh-pages`` branch."""
    root = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_")) / "site"
    root.mkdir()
    (root / "_config.yml").write_text(f"title: t\nrepository:\n  url: {URL}\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "rank_lab matrix")
    _git(root, "config", "user.email", "matrix@example.org")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "site")
    _git(root, "branch", "gh-pages")
    return root


def _html() -> Path:
    """A built site: one page with one Colab link, and the twin it names."""
    html = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_")) / "html"
    (html / "_notebooks").mkdir(parents=True)
    (html / "index.html").write_text(f'<a href="{LINK}">Open in Colab</a>')
    (html / "_notebooks" / "a.ipynb").write_text("{}")
    return html


def _remote() -> str:
    remote = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_")) / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True, capture_output=True)
    return str(remote)


ENTRIES += [
    fn(P.PublishError),
    fn(P.repository_url, lambda: {"root": _repo()}, {"root": "path"}),
    fn(P.github_repo, {"url": URL}, extra={"not_str": ("url", lambda: 3, ("url",))}),
    fn(P.check_publishable, lambda: {"root": _repo()}, {"root": "path"}),
    fn(P.colab_links, lambda: {"html_dir": _html()}, {"html_dir": "path"}),
    fn(P.branch_files, lambda: {"git_dir": _repo(), "branch": "gh-pages"}, {"git_dir": "path"}),
    fn(
        P.missing_twins,
        lambda: {
            "html_dir": _html(),
            "files": {"_notebooks/a.ipynb"},
            "repo": "test-org/test-repo",
        },
        {"html_dir": "path"},
        extra={
            "files_str": ("files", lambda: "_notebooks/a.ipynb", ("files",)),
            "repo_not_str": ("repo", lambda: 3, ("repo",)),
        },
    ),
    fn(
        P.publish,
        lambda: {"root": _repo(), "html_dir": _html(), "remote": _remote()},
        {"root": "path", "html_dir": "path"},
    ),
    fn(P.main, lambda: {"argv": ["check", "--root", str(_repo())]}),
]

# ----------------------------------------------------------------------------- rank_lab.registry
ENTRIES += [
    cls(
        RG.Registry,
        {"kind": "thing"},
        extra={
            "kind_number": ("kind", lambda: 5, ("kind",)),
            "kind_empty": ("kind", lambda: "", ("kind",)),
        },
        calls=[
            ("register", {"name": "a", "obj": 1, "note": "one"}, {"name": "choice"}),
            ("entry", {"name": "a"}, {"name": "choice"}),
            ("list", {"filter": "*"}, None),
            ("unregister", {"name": "a"}, {"name": "choice"}),
        ],
    ),
    fn(RG.Entry, {"name": "a", "obj": 1}),
    fn(RG.UnknownNameError, {"args": None} and (lambda: {})),
]

# ----------------------------------------------------------------------------- rank_lab.stats
_RUNS = lambda: torch.tensor([0.5, 0.6, 0.7, 0.65])  # noqa: E731

ENTRIES += [
    fn(
        S.mean_ci,
        lambda: {"values": [0.5, 0.6, 0.7]},
        {"values": "x", "level": "prob"},
        legal={"values:int": "integer results are cast to float"},
    ),
    fn(S.t_quantile, {"level": 0.95, "dof": 4}, {"level": "prob", "dof": "posint"}),
    fn(
        S.ci_summary,
        lambda: {"values": _RUNS()},
        {"values": "x", "level": "prob"},
        legal={"values:int": "integer results are cast to float"},
    ),
    fn(
        S.paired_difference,
        lambda: {"a": _RUNS(), "b": _RUNS().flip(0)},
        {"a": "x", "b": "x", "level": "prob"},
        rows=(("a", "b"),),
        legal={
            "a:int": "integer results are cast to float",
            "b:int": "integer results are cast to float",
        },
    ),
    fn(
        S.minimum_detectable_effect,
        {"std": 0.01, "n": 5, "power": 0.8},
        {"std": "nonneg", "n": "posint", "power": "prob", "alpha": "prob"},
        extra={
            "one": ("n", lambda: 1, ("n",)),
            "below_alpha": ("power", lambda: 0.01, ("power",)),
            "str": ("std", lambda: "0.01", ("std",)),
        },
    ),
    fn(
        S.ci_sign,
        {"summary": {"lo": -0.1, "hi": 0.2}},
        extra={
            "list": ("summary", lambda: [-0.1, 0.2], ("summary",)),
            "order": ("summary", lambda: {"lo": 0.2, "hi": -0.1}, ("summary",)),
            "nan": ("summary", lambda: {"lo": float("nan"), "hi": 0.2}, ("summary",)),
        },
    ),
]
