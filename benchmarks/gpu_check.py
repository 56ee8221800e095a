"""GPU readiness check (``make gpu-check``; never in CI): run every CUDA path once and write one
report.

Steps, each in its own process with a time limit:

1. the environment: ``nvidia-smi``, torch / CUDA / cuDNN versions, the device;
2. the ``cuda``-marked tests (``pytest -m cuda tests``): among them ``tests/device/test_cuda.py``
   (the certified float16 / bfloat16 search at 20,000 x 512 against the CPU exact route per query,
   every registered loss under CUDA autocast, an interrupted and resumed 2-epoch Trainer run) and
   ``tests/device/test_device_functions.py`` (the functions that refused CUDA input, on the GPU);
3. one notebook at full scale on synthetic data (``python -m rank_lab.book run evaluating_retrieval
   -p smoke false -p dataset synthetic``; more with ``--notebook``);
4. every benchmark that takes ``--device``, with ``--device cuda`` (``--quick`` for the short
   sizes).

A step fails on a non-zero exit status, on its time limit, and -- for the benchmarks -- on any
line that reports results that are not identical (:func:`non_identical_lines`: a line mentioning
"identical" that answers "no", or saying "not identical", "differ" or "mismatch"): identity is a
check, not a line to read.

The report (Markdown, default ``benchmarks/gpu_check_report.md``) holds the environment, the test
summary, the notebooks' results and the benchmark tables. It replaces an earlier report only when
every step passed; otherwise it is written next to it as ``*.failed.md`` and the exit status is 1.
Without a CUDA device the script stops at once with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "benchmarks"
DEFAULT_NOTEBOOKS = ("evaluating_retrieval",)
NO_GPU_MESSAGE = (
    "gpu-check needs a CUDA device, and torch.cuda.is_available() is False here (torch {torch}, "
    "built for CUDA {cuda}). Run it on a machine with an NVIDIA GPU and a CUDA build of torch "
    "(e.g. a Colab GPU runtime: Runtime > Change runtime type > GPU); nothing was run and no "
    "report was written."
)


@dataclass
class Step:
    """One command of the check and what it gave."""

    title: str
    command: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""
    details: str = ""
    results_dir: Path | None = None
    identity_checked: bool = False

    @property
    def ok(self) -> bool:
        """Whether the command exited with status 0 (and, for a benchmark, reported no
        difference)."""
        return self.returncode == 0 and not (
            self.identity_checked and non_identical_lines(self.output)
        )


_NOT_IDENTICAL = re.compile(
    r"identical[^\n]*?:\s*(no|false)\b|not identical|\bdiffers?\b|mismatch", re.IGNORECASE
)


def non_identical_lines(output: str) -> list[str]:
    """The lines of a benchmark's output that report a difference between routes or devices.

    The benchmarks state each identity check on one line:
    ``... bit-identical to the fp32 route: yes`` (or ``NO``). A line that mentions "identical" and
    answers no / false, or says "not identical", "differs" or "mismatch", is a failure of the check
    (column headers and notes that name differences as a quantity, such as ``max |score diff|``, do
    not match).
    """
    return [ln.strip() for ln in output.splitlines() if _NOT_IDENTICAL.search(ln)]


def cuda_benchmarks(bench_dir: Path = BENCH_DIR) -> list[Path]:
    """The ``bench_*.py`` scripts that accept ``--device`` (the others have no CUDA path)."""
    return sorted(
        p for p in bench_dir.glob("bench_*.py") if '"--device"' in p.read_text(encoding="utf-8")
    )


def run_step(step: Step, timeout: float, cwd: Path = ROOT) -> Step:
    """Run ``step.command``, keeping its exit status, duration and combined output."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            step.command, cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
        step.returncode, step.output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        step.returncode = 124
        step.output = (
            out.decode(errors="replace") if isinstance(out, bytes) else out
        ) + f"\n[timed out after {timeout:.0f} s]"
    step.seconds = time.perf_counter() - t0
    return step


def environment() -> str:
    """``nvidia-smi`` and the versions of torch, CUDA, cuDNN and the main libraries, as Markdown."""
    import torch

    lines = [
        f"- python {platform.python_version()}, {platform.platform()}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
        f"{torch.backends.cudnn.version()}",
    ]
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        lines.append(
            f"- cuda:{i} {p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability "
            f"{p.major}.{p.minor}"
        )
    for mod in ("torchvision", "timm", "faiss", "rank_lab"):
        try:
            lines.append(f"- {mod} {getattr(__import__(mod), '__version__', '?')}")
        except ImportError:
            lines.append(f"- {mod} not installed")
    smi = shutil.which("nvidia-smi")
    text = (
        subprocess.run([smi], capture_output=True, text=True).stdout
        if smi
        else "nvidia-smi not found"
    )
    return "\n".join(lines) + "\n\n```\n" + text.strip() + "\n```"


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def render_report(env: str, steps: list[Step], when: str) -> str:
    """The Markdown report: environment, then one section per step (status, time, output tail)."""
    status = "all steps passed" if all(s.ok for s in steps) else "SOME STEPS FAILED"
    out = [
        f"# GPU check, {when}: {status}",
        "",
        "Written by `make gpu-check` (benchmarks/gpu_check.py).",
        "",
        "## Environment",
        "",
        env,
        "",
    ]
    for s in steps:
        diffs = non_identical_lines(s.output) if s.identity_checked else []
        mark = (
            "passed"
            if s.ok
            else f"FAILED (exit status {s.returncode})"
            if s.returncode != 0
            else f"FAILED ({len(diffs)} non-identical line(s))"
        )
        out += [f"## {s.title}: {mark}, {s.seconds:.0f} s", "", f"`{' '.join(s.command)}`", ""]
        if diffs:
            out += ["Non-identical results:", "", *[f"- `{d}`" for d in diffs], ""]
        if s.details:
            out += [s.details, ""]
        out += ["```", _tail(s.output), "```", ""]
    return "\n".join(out)


def write_report(path: Path, text: str, ok: bool) -> Path:
    """Write the report atomically; a failed check never replaces an earlier report
    (``*.failed.md``)."""
    dest = path if ok else path.with_name(path.stem + ".failed.md")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(dest)
    return dest


def _results_summary(folder: Path) -> str:
    res = folder / "results.json"
    if not res.is_file():
        return "no results.json was written"
    text = json.dumps(json.loads(res.read_text(encoding="utf-8")), indent=1, sort_keys=True)
    return "results.json (first lines):\n\n```json\n" + "\n".join(text.splitlines()[:60]) + "\n```"


def build_steps(notebooks: list[str], quick: bool, out_dir: Path) -> list[Step]:
    """The commands of the check, in order."""
    py = sys.executable
    steps = [
        Step(
            "CUDA tests",
            [py, "-m", "pytest", "-m", "cuda", "-q", "-rA", "-p", "no:cacheprovider", "tests"],
        )
    ]
    for nb in notebooks:
        steps.append(
            Step(
                f"Notebook {nb}, full scale, synthetic data",
                [
                    py,
                    "-m",
                    "rank_lab.book",
                    "run",
                    nb,
                    "-p",
                    "smoke",
                    "false",
                    "-p",
                    "dataset",
                    "synthetic",
                    "--out",
                    str(out_dir),
                ],
                results_dir=out_dir / nb,
            )
        )
    for bench in cuda_benchmarks():
        steps.append(
            Step(
                f"Benchmark {bench.name}",
                [
                    py,
                    str(bench.relative_to(ROOT)),
                    "--device",
                    "cuda",
                    *(["--quick"] if quick else []),
                ],
                identity_checked=True,
            )
        )
    return steps


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 passed, 1 a step failed, 2 no CUDA device)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(BENCH_DIR / "gpu_check_report.md"), help="report file")
    ap.add_argument(
        "--notebook",
        action="append",
        default=None,
        help=f"notebook(s) to run (default {DEFAULT_NOTEBOOKS})",
    )
    ap.add_argument("--quick", action="store_true", help="benchmarks at their --quick sizes")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per step")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(
            NO_GPU_MESSAGE.format(torch=torch.__version__, cuda=torch.version.cuda), file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        steps = build_steps(list(args.notebook or DEFAULT_NOTEBOOKS), args.quick, Path(tmp))
        for s in steps:
            print(f"== {s.title}: {' '.join(s.command)}", flush=True)
            run_step(s, args.timeout)
            if s.results_dir is not None:
                s.details = _results_summary(s.results_dir)
            print(f"   {'passed' if s.ok else 'FAILED'} in {s.seconds:.0f} s", flush=True)
    ok = all(s.ok for s in steps)
    report = write_report(
        Path(args.out), render_report(environment(), steps, time.strftime("%Y-%m-%d %H:%M")), ok
    )
    print(f"report: {report}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
