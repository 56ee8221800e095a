"""Command-line entry point of a (multi-GPU) training run, made for ``torchrun``.

One GPU, or the CPU::

    python -m rank_lab.train.distributed.launch --config cfg.json

``N`` GPUs of one node (one process per GPU; ``batch_size`` in the config is the global batch)::

    torchrun --standalone --nproc_per_node=N -m rank_lab.train.distributed.launch --config cfg.json

Several nodes: the same command on every node with ``--nnodes``, ``--node_rank`` and a rendezvous
endpoint (see the SLURM script of the book page "Scaling up"). The config file is a JSON
:class:`~rank_lab.train.TrainConfig` (flat, nested or ``{"recipe": ...}`` keys) plus an optional
``"data"`` dict of keyword arguments for the data builder (:func:`build_data`); ``--set key=value``
overrides a key (the value is parsed as JSON when it can be). A run with ``checkpoint_dir``
resumes from ``checkpoint_dir/last.pt`` -- written by any number of ranks.

:func:`launch_local` starts ``torchrun`` on this machine as a subprocess and returns the run's JSON
log (used by the benchmark and the book).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rank_lab._validation import check_float, check_positive_int
from rank_lab.data import load_digits, make_open_set
from rank_lab.data.datasets.retrieval import load_retrieval_dataset
from rank_lab.train.config import TrainConfig
from rank_lab.train.distributed.collectives import cleanup_distributed, init_distributed
from rank_lab.train.distributed.trainer import DistributedTrainer

__all__ = ["build_data", "load_config", "run", "main", "launch_local"]


def build_data(cfg: TrainConfig, data: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    """``(train_data, test_data)`` for ``cfg.dataset``.

    ``"synthetic"``: :func:`rank_lab.data.make_open_set` (``seed=cfg.seed`` + ``data`` kwargs);
    ``"digits"``: :func:`rank_lab.data.load_digits`; any other name: the train and test splits of
    :func:`rank_lab.data.datasets.retrieval.load_retrieval_dataset` read from ``cfg.data_dir``
    (``image_size=cfg.image_size`` + ``data`` kwargs).

    Raises:
        TypeError: ``cfg`` not a :class:`~rank_lab.train.TrainConfig` (or a dict for it), ``data``
            not a mapping.
        ValueError: no dataset, or an unknown one (the loader's message lists the known names).
    """
    if isinstance(cfg, Mapping):
        cfg = TrainConfig.from_dict(cfg)
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig or a dict, got {type(cfg).__name__}")
    if data is not None and not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping of keyword arguments, got {type(data).__name__}")
    kw = dict(data or {})
    name = (cfg.dataset or "").lower()
    if not name:
        raise ValueError(
            "cfg.dataset is not set (config.dataset): use 'synthetic', 'digits' or a retrieval "
            "dataset name"
        )
    if name in ("synthetic", "digits"):
        kw.setdefault("seed", cfg.seed)
        split = make_open_set(**kw) if name == "synthetic" else load_digits(**kw)
        return (split.x_train, split.y_train), (split.x_test, split.y_test)
    kw.setdefault("image_size", cfg.image_size)
    return (
        load_retrieval_dataset(name, cfg.data_dir, "train", **kw),
        load_retrieval_dataset(name, cfg.data_dir, "test", **kw),
    )


def load_config(
    path: str | Path | None, overrides: Sequence[str] = ()
) -> tuple[TrainConfig, dict[str, Any]]:
    """Read a JSON config file (``None``: defaults) and ``key=value`` overrides; return
    ``(config, data kwargs)``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not a JSON object, an override is not ``key=value``, an unknown key.
    """
    if isinstance(overrides, str):
        raise TypeError(
            f"overrides must be a list of 'key=value' strings, got the str {overrides!r}"
        )
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"config file {str(p)!r} does not exist")
        try:
            raw = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {str(p)!r} (path) is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{str(p)!r} must hold a JSON object")
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f"overrides (--set) expect key=value, got {item!r}")
        key, value = item.split("=", 1)
        try:
            raw[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            raw[key.strip()] = value
    data = raw.pop("data", None) or {}
    if not isinstance(data, Mapping):
        raise ValueError(f"'data' must be a JSON object of keyword arguments, got {data!r}")
    return TrainConfig.from_dict(raw), dict(data)


def run(
    config: TrainConfig | Mapping[str, Any],
    *,
    data: Mapping[str, Any] | None = None,
    train_data: Any = None,
    test_data: Any = None,
    eval_gpus: int | None = None,
    timeout_s: float = 1800.0,
) -> Any:
    """Build the data (unless given) and a :class:`~rank_lab.train.distributed.DistributedTrainer`,
    fit it, return it.

    The process group is created from the ``torchrun`` environment (an existing one is reused and
    left alone; one created here is destroyed at the end).

    Raises:
        TypeError: ``config`` is neither a :class:`~rank_lab.train.TrainConfig` nor a mapping; and
            the errors of :func:`build_data`, :func:`init_distributed` and the trainer.
    """
    cfg = _as_config(config)
    env = init_distributed(device=cfg.device, timeout_s=timeout_s)
    try:
        if train_data is None:
            train_data, built_test = build_data(cfg, data)
            test_data = built_test if test_data is None else test_data
        trainer = DistributedTrainer(
            None, None, train_data, test_data, cfg, env=env, eval_gpus=eval_gpus
        )
        trainer.fit()
    finally:
        cleanup_distributed(env)
    return trainer


def _as_config(config: object) -> TrainConfig:
    if isinstance(config, TrainConfig):
        return config
    if isinstance(config, Mapping):
        return TrainConfig.from_dict(config)
    raise TypeError(f"config must be a TrainConfig or a mapping, got {type(config).__name__}")


def main(argv: Sequence[str] | None = None) -> Any:
    """``python -m rank_lab.train.distributed.launch --config cfg.json [--set key=value ...]``;
    returns the trainer."""
    ap = argparse.ArgumentParser(
        prog="python -m rank_lab.train.distributed.launch", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--config", default=None, help="JSON TrainConfig (+ optional 'data' kwargs)")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (repeatable)",
    )
    ap.add_argument(
        "--eval-gpus",
        type=int,
        default=None,
        help="GPUs of the faiss evaluation index (default: all)",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="collective timeout in seconds")
    args = ap.parse_args(argv)
    cfg, data = load_config(args.config, args.overrides)
    trainer = run(cfg, data=data, eval_gpus=args.eval_gpus, timeout_s=args.timeout)
    if trainer.env.is_main and trainer.history:
        last = trainer.history[-1]
        print(
            json.dumps(
                {
                    "epoch": last["epoch"],
                    "loss": last.get("loss"),
                    "metrics": last.get("metrics"),
                    "world_size": trainer.env.world_size,
                },
                default=str,
            )
        )
    return trainer


def launch_local(
    config: TrainConfig | Mapping[str, Any],
    nproc: int,
    *,
    workdir: str | Path | None = None,
    data: Mapping[str, Any] | None = None,
    threads_per_proc: int | None = None,
    timeout: float = 600.0,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run ``torchrun --standalone --nproc_per_node=nproc -m rank_lab.train.distributed.launch`` and
    return its log.

    Args:
        config: the run's config (``log_path`` defaults to ``workdir/log.json``).
        nproc: processes (GPUs with CUDA; CPU processes with the gloo backend otherwise).
        workdir: folder of the config file and log (default: a temporary folder).
        data: data kwargs (:func:`build_data`).
        threads_per_proc: ``OMP_NUM_THREADS`` of each process (default: CPU cores // nproc).
        timeout: seconds before the run is killed.
        dry_run: write the config file and return ``{"command": [...], "config_path": ...,
            "log_path": ..., "env": {"OMP_NUM_THREADS": ..., "PYTHONPATH": ...}}`` without
            starting anything (to run the command elsewhere, e.g. in a cluster script).

    Returns:
        The JSON log ``{"config": ..., "history": [...]}`` plus ``"stdout"`` (rank 0's summary);
        with ``dry_run``, the command instead.

    Raises:
        TypeError, ValueError: ``config`` neither a TrainConfig nor a mapping, ``nproc`` or
            ``threads_per_proc`` not a positive int, ``timeout`` not a finite positive number.
        RuntimeError: the run failed (its stderr tail is in the message).
    """
    nproc = check_positive_int(nproc, "nproc")
    if threads_per_proc is not None:
        threads_per_proc = check_positive_int(threads_per_proc, "threads_per_proc")
    timeout = check_float(timeout, "timeout", low=0.0, low_open=True)
    cfg = _as_config(config)
    work = (
        Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="rank_lab_launch_"))
    )
    work.mkdir(parents=True, exist_ok=True)
    if cfg.log_path is None and cfg.checkpoint_dir is None:
        cfg = cfg.replace(log_path=str(work / "log.json"))
    log_path = Path(cfg.log_path) if cfg.log_path else Path(cfg.checkpoint_dir) / "log.json"  # type: ignore[arg-type]
    cfg_path = work / "config.json"
    cfg_path.write_text(json.dumps({**cfg.to_dict(), "data": dict(data or {})}, indent=2))
    threads = threads_per_proc or max(1, (os.cpu_count() or 1) // nproc)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "rank_lab.train.distributed.launch",
        "--config",
        str(cfg_path),
    ]
    if dry_run:
        return {
            "command": cmd,
            "config_path": str(cfg_path),
            "log_path": str(log_path),
            "env": {"OMP_NUM_THREADS": env["OMP_NUM_THREADS"], "PYTHONPATH": env["PYTHONPATH"]},
        }
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    out = json.loads(log_path.read_text())
    out["stdout"] = proc.stdout
    return out


if __name__ == "__main__":  # pragma: no cover
    main()
