"""What only a GPU can show (``make gpu-check``; ``cuda``-marked: skipped on machines without CUDA).

* the certified float16 / bfloat16 search at a size where ``precision="auto"`` would pick a
  reduced format (20,000 x 512: ``Q N d`` far above 2^33) gives, per query, the CPU exact route's
  neighbours and scores bit for bit;
* every registered loss gives the same value and gradient inside ``torch.autocast("cuda")``
  (float16, and bfloat16 where the GPU has it) as outside, to float32 rounding;
* an interrupted and resumed 2-epoch Trainer run on CUDA ends with the straight run's weights, bit
  for bit. Scope of that assertion (``docs/decisions.md``): ``deterministic=True``, one process, one
  GPU, the same GPU model, driver and library versions for both runs; nothing is promised across
  GPU models or versions, nor without deterministic algorithms.

The device-mismatch functions run on the GPU in ``test_device_functions.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rank_lab.metrics import knn_search

from .registered_losses import NAMES, batch, build

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
ROOT = Path(__file__).resolve().parents[2]


def _clustered(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(n // 20, d, generator=g)
    x = centres.repeat_interleave(20, 0)[:n] + 0.5 * torch.randn(n, d, generator=g)
    return torch.nn.functional.normalize(x, dim=1)


@pytest.fixture(scope="module")
def cpu_exact() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = _clustered(20_000, 512, seed=0)
    scores, idx = knn_search(x, x, 100, exclude_self=True, precision="exact", device="cpu")
    return x, scores, idx


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32", "auto"])
def test_certified_search_on_cuda_is_the_cpu_exact_route_per_query(
    precision: str, cpu_exact
) -> None:  # noqa: ANN001
    x, scores, idx = cpu_exact
    s, i = knn_search(x, x, 100, exclude_self=True, precision=precision, device="cuda")
    same = (i.cpu() == idx).all(1) & (s.cpu() == scores).all(1)
    assert bool(same.all()), (
        f"precision={precision}: {int((~same).sum())} of {same.numel()} queries differ from CPU "
        "exact"
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_every_registered_loss_ignores_autocast_on_cuda(name: str, dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("this GPU has no bfloat16 (compute capability < 8.0)")
    emb, labels, refs, ref_labels = batch(name, device="cuda")
    loss = build(name).cuda()
    out = []
    for enabled in (False, True):
        emb.grad = None
        torch.manual_seed(0)
        with torch.autocast("cuda", dtype=dtype, enabled=enabled):
            value = (
                loss(emb, labels, refs, ref_labels) if loss_takes_refs(loss) else loss(emb, labels)
            )
        value.backward()
        out.append((value.detach(), emb.grad.clone()))
    torch.testing.assert_close(out[1][0], out[0][0])
    torch.testing.assert_close(out[1][1], out[0][1])


def loss_takes_refs(loss: torch.nn.Module) -> bool:
    return bool(getattr(loss, "uses_references", True))


RESUME = r"""
import json, sys, tempfile
from pathlib import Path
import torch
from rank_lab.data import make_open_set
from rank_lab.losses import SmoothAP
from rank_lab.train import Trainer

class Stop(Exception):
    pass

def stop_after_first(trainer, record):
    if record.get("epoch") == 1:
        raise Stop

def run(ckpt, callbacks=()):
    s = make_open_set(n_classes=16, per_class=16, dim=16, input_dim=24, seed=0)
    cfg = dict(backbone="mlp", hidden_dims=(64,), embed_dim=16, batch_size=32, m_per_class=4, epochs=2,
               batches_per_epoch=4, lr=1e-3, progress=False, device="cuda", deterministic=True, checkpoint_dir=ckpt)
    tr = Trainer(None, SmoothAP(), (s.x_train, s.y_train), None, cfg, callbacks=callbacks)
    tr.fit()
    return {k: v.detach().cpu() for k, v in tr.model.state_dict().items()}

tmp = Path(tempfile.mkdtemp())
straight = run(str(tmp / "a"))
try:
    run(str(tmp / "b"), callbacks=[stop_after_first])
except Stop:
    pass
resumed = run(str(tmp / "b"))
print(json.dumps({"same": all(torch.equal(straight[k], resumed[k]) for k in straight),
                  "deterministic": torch.are_deterministic_algorithms_enabled()}))
"""  # noqa: E501


def test_an_interrupted_trainer_run_resumes_bit_exactly_on_cuda() -> None:
    """In a fresh interpreter: deterministic=True must set CUBLAS_WORKSPACE_CONFIG before CUDA
    starts."""
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"} | {
        "PYTHONPATH": str(ROOT)
    }
    proc = subprocess.run(
        [sys.executable, "-c", RESUME], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"same": True, "deterministic": True}
