"""The fake-CUDA harness itself (tests/device/fake_cuda.py): it fails where CUDA would, and only
there."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from .fake_cuda import DeviceMismatch, fake_cuda, is_marked


def test_moves_mark_and_report_cuda() -> None:
    originals = (
        torch.cuda.is_available,
        torch.Generator,
        torch.load,
        torch.nn.RNNBase.flatten_parameters,
    )
    with fake_cuda():
        x = torch.randn(4, 3).to("cuda")
        assert (
            is_marked(x)
            and x.is_cuda
            and x.device == torch.device("cuda", 0)
            and x.get_device() == 0
        )
        assert is_marked(torch.zeros(2, device="cuda")) and is_marked(
            torch.zeros(2, device=x.device)
        )
        assert is_marked(x + 1) and is_marked(x.sum()) and is_marked(x.T) and is_marked(x[0])
        assert is_marked(torch.randn(3).cuda()) and is_marked(torch.randn(3).to(x))
        assert is_marked(x.to(torch.float64)) and x.to(torch.float64).dtype == torch.float64
        y = x.cpu()
        assert not is_marked(y) and y.device.type == "cpu" and not is_marked(x.to("cpu"))
        assert not is_marked(torch.zeros_like(x, device="cpu"))
        m = torch.nn.Linear(3, 2).to("cuda")
        assert is_marked(m.weight) and is_marked(m.bias) and is_marked(m(x))
        assert is_marked(copy.deepcopy(m).weight)
        assert torch.cuda.is_available() and torch.cuda.get_device_capability() == (8, 0)
    assert (
        torch.cuda.is_available,
        torch.Generator,
        torch.load,
        torch.nn.RNNBase.flatten_parameters,
    ) == originals
    assert not torch._C._is_torch_function_mode_enabled()  # everything restored on exit


@pytest.mark.parametrize(
    "case",
    [
        "op",
        "matmul_weight",
        "cat",
        "cpu_indexed",
        "cpu_assigned",
        "index_put_values",
        "numpy",
        "array",
        "generator",
        "cuda_scalar_cpu_tensor",
    ],
)
def test_planted_mismatches_raise(case: str) -> None:
    """Each planted mismatch is one CUDA would refuse: the harness must raise on it."""
    with fake_cuda(), pytest.raises(DeviceMismatch):
        x = torch.randn(4, 3, device="cuda")
        cpu = torch.randn(4, 3)
        if case == "op":
            x + cpu
        elif case == "matmul_weight":
            torch.nn.Linear(3, 2)(x)  # a module left on the CPU
        elif case == "cat":
            torch.cat([x, cpu])
        elif case == "cpu_indexed":
            cpu[torch.tensor([0, 2], device="cuda")]
        elif case == "cpu_assigned":
            cpu[torch.tensor([0, 2], device="cuda")] = 1.0
        elif case == "index_put_values":
            x[torch.tensor([0, 2])] = torch.ones(2, 3)
        elif case == "numpy":
            x.numpy()
        elif case == "array":
            np.asarray(x)
        elif case == "generator":
            torch.rand(3, generator=torch.Generator(device="cuda"))
        elif case == "cuda_scalar_cpu_tensor":
            cpu * x.sum()


def test_planted_cpu_gradient_in_a_custom_backward_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank kernel's custom backward that builds its gradient on the CPU (checked under the
    harness too)."""
    from rank_lab.ranking.row_kernel import _RowStepSum, row_step_sums

    original = _RowStepSum.backward

    def cpu_backward(ctx, grad_out):  # noqa: ANN001, ANN202
        out = original(ctx, grad_out)
        return (out[0].detach().cpu(), *out[1:])

    monkeypatch.setattr(_RowStepSum, "backward", staticmethod(cpu_backward))
    with fake_cuda(), pytest.raises(DeviceMismatch, match="backward returned a CPU gradient"):
        scores = torch.randn(4, 6, device="cuda", requires_grad=True)
        idx = torch.tensor([0, 1], device="cuda")
        row_step_sums(scores, idx, idx + 1).sum().backward()


def test_what_cuda_accepts_passes() -> None:
    with fake_cuda():
        x = torch.randn(4, 3, device="cuda")
        x * torch.tensor(2.0)  # a CPU scalar
        x[torch.tensor([0, 2])]  # a CUDA tensor indexed by CPU indices
        x[torch.tensor([True, False, True, False])]
        x[0:2] = torch.ones(2, 3)  # a copy across devices
        torch.as_tensor(torch.arange(3.0), device=x.device)
        torch.nn.functional.ctc_loss(
            torch.randn(5, 2, 4, device="cuda").log_softmax(-1),
            torch.ones(2, 2, dtype=torch.long, device="cuda"),
            torch.tensor([5, 5]),
            torch.tensor([2, 2]),
        )
        torch.rand(3, generator=torch.Generator(device="cuda"), device="cuda")


def test_host_syncs_are_counted() -> None:
    with fake_cuda() as fc:
        x = torch.randn(4, 3, device="cuda")
        float(x.sum()), int(x.argmax()), bool((x > 0).any()), x[0, 0].item(), x[0].tolist()
        x.cpu()
        torch.randn(3).sum().item()  # a CPU tensor: no sync
        assert fc.syncs == {"float": 1, "int": 1, "bool": 1, "item": 1, "tolist": 1, "cpu": 1}
        assert fc.n_syncs == 6 and "test_fake_cuda.py" not in fc.where["float"][0]


def test_autograd_gradients_stay_on_the_device() -> None:
    from rank_lab.losses import SupAP

    with fake_cuda():
        emb = torch.randn(12, 4, device="cuda", requires_grad=True)
        # the custom backward of the rank kernel
        SupAP()(emb, torch.arange(12, device="cuda") % 3).backward()
        assert is_marked(emb.grad)
