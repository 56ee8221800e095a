"""benchmarks/gpu_check.py (``make gpu-check``): the refusal without CUDA, the steps and the report."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
assert _spec.loader is not None
sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up
_spec.loader.exec_module(gpu_check)


def test_refuses_at_once_without_a_cuda_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path / "report.md")]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA device" in err and "torch.cuda.is_available() is False" in err and "no report" in err
    assert list(tmp_path.iterdir()) == []


def test_refusal_from_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path / "r.md")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "needs a CUDA device" in proc.stderr
    assert not (tmp_path / "r.md").exists()


def test_steps_cover_tests_notebook_and_every_cuda_benchmark(tmp_path: Path) -> None:
    benches = [p.name for p in gpu_check.cuda_benchmarks()]
    assert "bench_metrics.py" in benches and "bench_losses.py" in benches
    assert "bench_diffusion.py" not in benches  # it has no --device option
    steps = gpu_check.build_steps(["evaluating_retrieval"], True, tmp_path)
    cmds = [" ".join(s.command) for s in steps]
    assert "-m pytest -m cuda" in cmds[0]
    assert "rank_lab.book run evaluating_retrieval -p smoke false -p dataset synthetic" in cmds[1]
    assert steps[1].results_dir == tmp_path / "evaluating_retrieval"
    assert [c.split()[1].rsplit("/", 1)[-1] for c in cmds[2:]] == benches
    assert all(c.endswith("--device cuda --quick") for c in cmds[2:])


def test_report_and_a_failed_check_never_replaces_a_good_report(tmp_path: Path) -> None:
    good = gpu_check.run_step(gpu_check.Step("ok", [sys.executable, "-c", "print('table row')"]), timeout=60)
    bad = gpu_check.run_step(gpu_check.Step("bad", [sys.executable, "-c", "import sys; sys.exit(3)"]), timeout=60)
    slow = gpu_check.run_step(gpu_check.Step("slow", [sys.executable, "-c", "import time; time.sleep(30)"]), timeout=1)
    assert good.ok and not bad.ok and bad.returncode == 3 and slow.returncode == 124 and "timed out" in slow.output
    text = gpu_check.render_report("- env line", [good], "2026-11-25 10:00")
    assert text.startswith("# GPU check, 2026-11-25 10:00: all steps passed") and "table row" in text
    path = tmp_path / "gpu_check_report.md"
    assert gpu_check.write_report(path, text, ok=True) == path
    failed = gpu_check.render_report("- env line", [good, bad], "2026-11-25 11:00")
    assert "SOME STEPS FAILED" in failed and "## bad: FAILED (exit status 3)" in failed
    assert gpu_check.write_report(path, failed, ok=False) == tmp_path / "gpu_check_report.failed.md"
    assert path.read_text() == text
