"""benchmarks/gpu_check.py (``make gpu-check``): the refusal without CUDA, the steps and the
report."""

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


def test_refuses_at_once_without_a_cuda_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path / "report.md")]) == 2
    err = capsys.readouterr().err
    assert (
        "needs a CUDA device" in err
        and "torch.cuda.is_available() is False" in err
        and "no report" in err
    )
    assert list(tmp_path.iterdir()) == []


def test_refusal_from_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path / "r.md")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
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
    good = gpu_check.run_step(
        gpu_check.Step("ok", [sys.executable, "-c", "print('table row')"]), timeout=60
    )
    bad = gpu_check.run_step(
        gpu_check.Step("bad", [sys.executable, "-c", "import sys; sys.exit(3)"]), timeout=60
    )
    slow = gpu_check.run_step(
        gpu_check.Step("slow", [sys.executable, "-c", "import time; time.sleep(30)"]), timeout=1
    )
    assert (
        good.ok
        and not bad.ok
        and bad.returncode == 3
        and slow.returncode == 124
        and "timed out" in slow.output
    )
    text = gpu_check.render_report("- env line", [good], "2026-11-25 10:00")
    assert (
        text.startswith("# GPU check, 2026-11-25 10:00: all steps passed") and "table row" in text
    )
    path = tmp_path / "gpu_check_report.md"
    assert gpu_check.write_report(path, text, ok=True) == path
    failed = gpu_check.render_report("- env line", [good, bad], "2026-11-25 11:00")
    assert "SOME STEPS FAILED" in failed and "## bad: FAILED (exit status 3)" in failed
    assert gpu_check.write_report(path, failed, ok=False) == tmp_path / "gpu_check_report.failed.md"
    assert path.read_text() == text


def test_a_non_identical_benchmark_line_fails_the_step(tmp_path: Path) -> None:
    lines = gpu_check.non_identical_lines(
        "      N   method   seconds\n"
        "  10000 per-query values of the certified route bit-identical to the fp32 route: yes\n"
        "  60502 per-query values of the certified route bit-identical to the fp32 route: NO\n"
        "  max |score diff| 0.0e+00; top-100 identical (ties within 1e-5 aside) for 500/500 items\n"
        "  sup_ap  3.1  2.0  VALUES DIFFER\n"
    )
    assert lines == [
        "60502 per-query values of the certified route bit-identical to the fp32 route: NO",
        "sup_ap  3.1  2.0  VALUES DIFFER",
    ]
    code = "print('per-query values bit-identical to the fp32 route: NO')"
    bench = gpu_check.run_step(
        gpu_check.Step("bench", [sys.executable, "-c", code], identity_checked=True), timeout=60
    )
    assert bench.returncode == 0 and not bench.ok  # exit status 0, yet the check fails
    other = gpu_check.run_step(gpu_check.Step("tests", [sys.executable, "-c", code]), timeout=60)
    assert other.ok  # only benchmark steps are read for identity lines
    text = gpu_check.render_report("- env", [bench], "2026-11-27 09:00")
    assert "## bench: FAILED (1 non-identical line(s))" in text and "SOME STEPS FAILED" in text
    assert all(s.identity_checked for s in gpu_check.build_steps([], True, tmp_path)[1:])


def test_the_cuda_tests_cover_what_issue_27_asks() -> None:
    """The cuda-marked tests the check runs: certified fp16/bf16 at 20,000 x 512, autocast on CUDA,
    a resumed
    Trainer run, the device-mismatch functions on the GPU (they skip here; their code must
    exist)."""
    text = (ROOT / "tests" / "device" / "test_cuda.py").read_text(encoding="utf-8")
    for needle in (
        "_clustered(20_000, 512",
        '"fp16", "bf16"',
        'torch.autocast("cuda"',
        "deterministic=True",
        "test_an_interrupted_trainer_run_resumes_bit_exactly_on_cuda",
    ):
        assert needle in text, needle
    assert "def test_on_a_real_gpu" in (
        ROOT / "tests" / "device" / "test_device_functions.py"
    ).read_text(encoding="utf-8")
