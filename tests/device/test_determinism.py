"""Determinism stated and made true where it is claimed (issue 27), and the Colab-sized defaults.

* bit-exact resume is promised on the CPU for every loop (tests/train/test_train_engine.py), and on
  CUDA only under ``seed_everything(seed, deterministic=True)``: ``warn_only=False``,
  ``CUBLAS_WORKSPACE_CONFIG`` set before CUDA starts (checked in fresh interpreters), and the rank
  kernel's backward accumulating without atomic adds (bit-identical to the CPU's serial order);
* DataLoader workers seed NumPy and ``random`` from the loader's generator;
* ``num_workers`` never above the machine's CPUs; bfloat16 autocast refused below compute capability
  8.0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import rank_lab.ranking.row_kernel as RK
import rank_lab.utils as TD
from rank_lab.engine import Engine, EngineConfig
from rank_lab.losses import SmoothAP, SmoothHAP, SupAP, SupRecallAtK

from .fake_cuda import fake_cuda

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def deterministic():
    """Deterministic algorithms on for one test (restored after)."""
    before, warn_only = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=False)
    yield
    torch.use_deterministic_algorithms(before, warn_only=warn_only)


@pytest.mark.parametrize("shape", [(7, 5), (40,)])
def test_index_add_in_order_is_the_serial_cpu_sum(shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    index = torch.randint(0, shape[0], (200,), generator=g)  # many duplicates, in no order
    src = torch.randn(200, *shape[1:], generator=g, dtype=torch.float32) * 1e3
    base = torch.randn(shape, generator=g)
    expect = base.clone().index_add_(0, index, src)  # CPU: serial, in row order
    got = RK.index_add_in_order(base.clone(), index, src)
    assert torch.equal(got, expect)
    # the order matters in float32: another order gives other bits, so the equality above is not
    # vacuous
    perm = torch.randperm(200, generator=g)
    assert not torch.equal(base.clone().index_add_(0, index[perm], src[perm]), expect)
    assert torch.equal(RK.index_add_in_order(base.clone(), index[:0], src[:0]), base)


@pytest.mark.parametrize(
    "loss", [SmoothAP(), SupAP(), SupRecallAtK(), SmoothHAP()], ids=lambda m: type(m).__name__
)
def test_deterministic_backward_equals_the_default_bit_for_bit(
    loss: torch.nn.Module, deterministic: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(48, 8, generator=g)
    fine = torch.arange(48) % 12
    labels = torch.stack([fine, fine // 3], 1) if isinstance(loss, SmoothHAP) else fine
    grads = []
    calls = {"n": 0}
    original = RK.index_add_in_order

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(RK, "index_add_in_order", counting)
    for mode in (False, True):
        torch.use_deterministic_algorithms(mode, warn_only=False)
        x = emb.clone().requires_grad_(True)
        loss(x, labels).backward()
        grads.append(x.grad)
    if not isinstance(loss, SmoothHAP):  # Smooth-H-AP's rank sums run without the custom backward
        assert calls["n"] > 0, "the deterministic scatter was not used"
    assert torch.equal(grads[0], grads[1])


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    full.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300
    )


def test_deterministic_seeding_sets_cublas_before_cuda_starts() -> None:
    """A fresh interpreter: the variable is set, CUDA not started, warn_only off (errors, not
    warnings)."""
    proc = _python(
        "import json, os, torch\n"
        "from rank_lab.utils import seed_everything\n"
        "seed_everything(0, deterministic=True)\n"
        "print(json.dumps([os.environ.get('CUBLAS_WORKSPACE_CONFIG'), "
        "torch.cuda.is_initialized(),\n                  "
        "torch.are_deterministic_algorithms_enabled(),\n                  "
        "torch.is_deterministic_algorithms_warn_only_enabled()]))"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [":4096:8", False, True, False]


def test_deterministic_seeding_refuses_after_cuda_started() -> None:
    """CUDA already initialised (simulated) without the variable: refused, naming the fix; with the
    user's valid value it is kept."""
    code = (
        "import os, torch\n"
        "torch.cuda.is_initialized = lambda: True\n"
        "from rank_lab.utils import seed_everything\n"
        "try:\n"
        "    seed_everything(0, deterministic=True)\n"
        "except RuntimeError as exc:\n"
        "    print('refused:', exc)\n"
        "else:\n"
        "    print('kept', os.environ.get('CUBLAS_WORKSPACE_CONFIG'), "
        "torch.are_deterministic_algorithms_enabled())\n"
    )
    refused = _python(code)
    assert refused.returncode == 0, refused.stderr
    assert (
        "refused:" in refused.stdout and "export CUBLAS_WORKSPACE_CONFIG=:4096:8" in refused.stdout
    )
    kept = _python(code, {"CUBLAS_WORKSPACE_CONFIG": ":16:8"})
    assert kept.stdout.strip() == "kept :16:8 True", kept.stdout + kept.stderr


class _NumpyDraws(Dataset):
    """Items drawn with NumPy's and Python's global generators (as augmentations do)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        import random

        return torch.tensor([float(np.random.rand()), random.random()])


def _draws(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        _NumpyDraws(), batch_size=2, num_workers=2, generator=gen, worker_init_fn=TD.seed_worker
    )
    return torch.cat(list(loader))


def test_workers_seed_numpy_and_random_from_the_loader_generator() -> None:
    a, b, c = _draws(0), _draws(0), _draws(1)
    assert torch.equal(a, b)  # the same generator seed: the same draws
    assert not torch.equal(a, c)
    # the two workers draw different numbers
    assert len({round(float(v), 12) for v in a[:, 0]}) == 8


def test_num_workers_never_above_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TD, "_cpu_count", lambda: 2)
    monkeypatch.setattr(TD, "_WARNED_WORKERS", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert TD.loader_workers(8) == 2 and TD.loader_workers(8) == 2  # Colab: 2 vCPUs
        assert TD.loader_workers(2) == 2 and TD.loader_workers(0) == 0
    assert [str(w.message) for w in seen] == [
        "num_workers=8 but this machine gives the process 2 CPU(s): using 2 DataLoader worker(s)"
    ]  # once
    monkeypatch.setattr(TD, "_cpu_count", lambda: 8)
    monkeypatch.setattr(TD, "_WARNED_WORKERS", set())
    # torchrun, 4 processes on this machine: 2 CPUs each
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.warns(
        UserWarning, match=r"2 CPU\(s\) \(its share among 4 processes on this machine\)"
    ):
        assert TD.loader_workers(8) == 2
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        TD.loader_workers(-1)
    with pytest.raises(TypeError, match="num_workers"):
        TD.loader_workers(1.5)


def test_the_trainer_clamps_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from rank_lab.train import Trainer

    seen = {}
    real = TD.loader_workers

    def spy(n, name="num_workers"):  # noqa: ANN001, ANN202
        seen["asked"] = n
        return real(n, name)

    import rank_lab.train.trainer as TT

    monkeypatch.setattr(TT, "loader_workers", spy)
    monkeypatch.setattr(TD, "_cpu_count", lambda: 1)
    x, y = torch.randn(16, 6), torch.arange(16) % 4
    tr = Trainer(
        None,
        SmoothAP(),
        (x, y),
        None,
        dict(
            backbone="mlp",
            hidden_dims=(8,),
            embed_dim=4,
            batch_size=8,
            m_per_class=4,
            epochs=1,
            batches_per_epoch=1,
            num_workers=8,
            progress=False,
            device="cpu",
        ),
    )
    with pytest.warns(UserWarning, match="num_workers=8 but this machine gives the process 1 CPU"):
        tr.fit()
    assert seen["asked"] == 8


@pytest.mark.parametrize("capability", [(7, 5), (8, 0)])
def test_bfloat16_autocast_refused_below_compute_capability_8(capability: tuple[int, int]) -> None:
    model = torch.nn.Linear(2, 2)
    with fake_cuda(capability):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if capability < (8, 0):
            with pytest.raises(
                ValueError,
                match=r"amp_dtype='bfloat16' needs a GPU of compute capability 8\.0.*"
                r"has 7\.5.*use amp_dtype='float16'",
            ):
                Engine(model, opt, EngineConfig(amp=True, amp_dtype="bfloat16"), device="cuda")
        else:
            assert Engine(
                model, opt, EngineConfig(amp=True, amp_dtype="bfloat16"), device="cuda"
            ).amp
        # float16 everywhere
        Engine(model, opt, EngineConfig(amp=True, amp_dtype="float16"), device="cuda")
    Engine(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        EngineConfig(amp=True, amp_dtype="bfloat16"),
        device="cpu",
    )
