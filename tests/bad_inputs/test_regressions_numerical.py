"""Regression tests of issue 26, item 3: complex and ``meta`` tensors refused once at the public
entry (the shared checks of ``rank_lab._validation``), the few entry points that do not pass
through them, and the numerical kinds of the bad-input matrix (overflow, requires-grad, subnormal)."""

from __future__ import annotations

import pytest
import torch

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_finite_input,
    check_input,
    check_real,
    check_scores_targets,
    shape_only,
)
from rank_lab.cost import forward_flops


def _complex(x: torch.Tensor) -> torch.Tensor:
    return torch.complex(x, torch.full_like(x, 0.5))


# ------------------------------------------------------------------ the shared checks
@pytest.mark.parametrize("check", [
    lambda x: as_tensor(x, "emb"), lambda x: check_embeddings(x, "emb"), lambda x: check_finite(x, "emb"),
    lambda x: check_finite_input(x, "emb"), lambda x: check_input(x, "emb", 2), lambda x: check_real(x, "emb"),
    lambda x: check_scores_targets(x, torch.ones(3, 4), "emb"),
])
def test_complex_and_meta_tensors_are_refused_naming_the_argument(check):
    x = torch.randn(3, 4)
    with pytest.raises(TypeError, match=r"^emb must hold real numbers, got complex dtype torch.complex64"):
        check(_complex(x))
    with pytest.raises(ValueError, match=r"^emb is a meta tensor \(a shape without values\)"):
        check(x.to("meta"))


def test_complex_arrays_are_refused_too():
    import numpy as np

    with pytest.raises(TypeError, match="^emb must hold real numbers"):
        as_tensor(np.ones((2, 2), dtype=np.complex128), "emb")


def test_meta_tensors_pass_in_shape_only_runs_and_nest():
    m = torch.empty(2, 3, device="meta")
    with shape_only():
        with shape_only():
            pass
        assert check_input(m, "x", 2) is m  # still on after the inner block
        check_finite(m, "x")
        with pytest.raises(TypeError, match="complex"):
            check_real(_complex(torch.ones(2)), "x")  # complex stays refused
    with pytest.raises(ValueError, match="x is a meta tensor"):
        check_input(m, "x", 2)


def test_flop_counting_still_runs_on_meta_tensors():
    assert forward_flops("tiny_cnn", 8, in_channels=1) > 0
