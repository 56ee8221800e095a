"""Regression tests of issue 26, item 3: complex and ``meta`` tensors refused once at the public
entry (the shared checks of ``rank_lab._validation``), the few entry points that do not pass
through them, and the numerical kinds of the bad-input matrix (overflow, requires-grad,
subnormal)."""

from __future__ import annotations

import pytest
import torch

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_finite_input,
    check_inner_products,
    check_input,
    check_magnitude,
    check_overflow,
    check_real,
    check_scores_targets,
    shape_only,
    trusted_inputs,
    unit_rows,
)
from rank_lab.cost import forward_flops


def _complex(x: torch.Tensor) -> torch.Tensor:
    return torch.complex(x, torch.full_like(x, 0.5))


# ------------------------------------------------------------------ the shared checks
@pytest.mark.parametrize(
    "check",
    [
        lambda x: as_tensor(x, "emb"),
        lambda x: check_embeddings(x, "emb"),
        lambda x: check_finite(x, "emb"),
        lambda x: check_finite_input(x, "emb"),
        lambda x: check_input(x, "emb", 2),
        lambda x: check_real(x, "emb"),
        lambda x: check_scores_targets(x, torch.ones(3, 4), "emb"),
    ],
)
def test_complex_and_meta_tensors_are_refused_naming_the_argument(check):
    x = torch.randn(3, 4)
    with pytest.raises(
        TypeError, match=r"^emb must hold real numbers, got complex dtype torch.complex64"
    ):
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


# ------------------------------------------------------------------ magnitudes: overflow and
# underflow
def test_check_magnitude_refuses_values_whose_squares_overflow_and_optionally_underflow():
    x = torch.randn(4, 3)
    check_magnitude(x * 1e18, "x")  # squares up to ~1e37: fine
    with pytest.raises(
        ValueError, match=r"^x holds values up to .* their squares overflow torch.float32"
    ):
        check_magnitude(x * 1e20, "x")
    check_magnitude((x * 1e20).double(), "x")  # float64 holds them
    check_magnitude(x * 1e-40, "x")  # underflow is refused on request only
    with pytest.raises(
        ValueError, match=r"^z holds values of magnitude .* their squares underflow torch.float32"
    ):
        check_magnitude(x * 1e-40, "z", underflow=True)
    check_magnitude(torch.zeros(3), "z", underflow=True)  # zeros are not small values
    check_magnitude(x * 1e20, "x", trusted=True)  # the caller checked its data
    module = torch.nn.Linear(3, 2)
    with trusted_inputs([module]):
        check_input(x * 1e20, "x", 2, like=module)  # inside a training step, like the finite check
    with pytest.raises(ValueError, match=r"^x holds values up to"):
        check_input(x * 1e20, "x", 2, like=module)


def test_module_inputs_that_overflow_are_refused_naming_the_input():
    from rank_lab.models import TinyCNN

    net = TinyCNN(3, 4)
    with pytest.raises(ValueError, match=r"^x holds values up to"):
        # was: zeros out, an infinite BatchNorm running variance kept
        net(torch.rand(2, 3, 8, 8) * 1e20)
    assert all(bool(torch.isfinite(b).all()) for b in net.buffers() if b.is_floating_point())


def test_check_inner_products_is_cauchy_schwarz_on_the_largest_rows():
    a = torch.randn(5, 4)
    check_inner_products(a * 1e18, "a")  # norms ~4e18: products ~1.6e37
    check_inner_products(a * 1e20, "queries", a, "gallery")  # 1e20 x 4 fits float32
    with pytest.raises(ValueError, match=r"^queries: rows of norm up to .* overflow torch.float32"):
        check_inner_products(a * 1e20, "queries")
    with pytest.raises(ValueError, match=r"^queries/gallery: "):
        check_inner_products(a * 1e19, "queries", a * 1e19, "gallery")
    check_inner_products((a * 1e20).double(), "queries")
    check_inner_products(a * 1e-40, "a")  # no underflow rule here


def test_check_overflow_names_the_argument_of_a_non_finite_result():
    assert check_overflow(torch.ones(3), "x", "the sums").shape == (3,)
    with pytest.raises(ValueError, match=r"^x: the covariance entries overflow torch.float32"):
        check_overflow(torch.tensor([1.0, float("inf")]), "x", "the covariance entries")


def test_unit_rows_equals_normalize_bit_for_bit_and_is_unit_at_any_magnitude():
    x = torch.randn(64, 9, generator=torch.Generator().manual_seed(3))
    assert torch.equal(unit_rows(x), torch.nn.functional.normalize(x, dim=-1))
    for scale in (1e20, 1e30, 1e-40, 1e-44):
        y = unit_rows(x * scale)
        torch.testing.assert_close(y.norm(dim=1), torch.ones(64), rtol=0, atol=1e-6)
        assert bool(((y > 0) == (x > 0)).all() | (y == 0).any())
    assert torch.equal(unit_rows(torch.zeros(2, 3)), torch.zeros(2, 3))
    g = x.clone().requires_grad_(True)
    unit_rows(g, dim=1).sum().backward()
    h = x.clone().requires_grad_(True)
    torch.nn.functional.normalize(h, dim=1).sum().backward()
    assert torch.equal(g.grad, h.grad)


def test_l2n_is_unit_for_rows_of_any_magnitude():
    from rank_lab.retrieval import l2n

    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(l2n(x), x / x.norm(dim=-1, keepdim=True))  # unchanged in range
    torch.testing.assert_close(l2n(x * 1e20), l2n(x))  # was all zeros (the norm overflowed)
    # was ~1e-28 (under eps)
    torch.testing.assert_close(l2n(x * 1e-40), l2n(x), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ retrieval, few-shot, OOD
def test_conjugate_gradient_is_exact_under_power_of_two_scaling_and_solves_any_magnitude():
    from rank_lab.retrieval import conjugate_gradient

    a = torch.tensor([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 2.0], [0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
    x, info = conjugate_gradient(lambda v: a @ v, b, iters=10, tol=1e-12)
    torch.testing.assert_close(x, torch.linalg.solve(a, b))
    x2, info2 = conjugate_gradient(lambda v: a @ v, b * 2.0**40, iters=10, tol=1e-12)
    assert torch.equal(x2, x * 2.0**40) and info2["iterations"] == info["iterations"]
    b32, a32 = b.float(), a.float()
    for scale in (1e20, 1e-40):  # were NaN (overflowed residuals) and a zero solution
        xs, _ = conjugate_gradient(lambda v: a32 @ v, b32 * scale, iters=10, tol=1e-6)
        torch.testing.assert_close(
            xs / scale, torch.linalg.solve(a, b).float(), rtol=1e-3, atol=1e-5
        )
    g = b.clone().requires_grad_(True)
    xg, _ = conjugate_gradient(lambda v: a @ v, g, iters=10, tol=1e-12)
    assert not xg.requires_grad and torch.equal(xg, x)  # an evaluation: b detached


def test_retrieval_evaluations_take_inputs_that_require_grad():
    from rank_lab.retrieval import alpha_qe, l2n
    from rank_lab.retrieval.graph import knn_self

    x = l2n(torch.randn(10, 4, generator=torch.Generator().manual_seed(0)))
    for f in (
        lambda t: knn_self(t, 3, backend="torch")[0],
        lambda t: alpha_qe(t, backend="torch"),
        lambda t: alpha_qe(t[:3], t, backend="torch"),
    ):
        expected = f(x)
        # was: "mm(): functions with out=... don't support automatic differentiation"
        got = f(x.clone().requires_grad_(True))
        assert torch.equal(got, expected) and not got.requires_grad


def test_retrieval_names_the_descriptors_whose_products_overflow():
    from rank_lab.retrieval import alpha_qe, build_graph, gqe
    from rank_lab.retrieval.graph import knn_self

    x = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"^x: rows of norm"):
        # was "certified search ... bound was violated (please report)"
        knn_self(x * 1e20, 3, backend="torch")
    with pytest.raises(ValueError, match=r"^gallery: rows of norm"):
        build_graph(x * 1e20, 3, backend="torch")
    with pytest.raises(ValueError, match=r"^gallery: rows of norm"):
        gqe(x * 1e20, k1=3, k2=2, backend="torch")
    with pytest.raises(ValueError, match=r"^queries: rows of norm"):
        alpha_qe(x * 1e20, backend="torch")  # was "x contains 20 NaN or inf value(s)"
    with pytest.raises(ValueError, match=r"^queries/gallery: the weighted sums"):
        alpha_qe(x[:3], x * 1e20, backend="torch")


def test_fewshot_names_the_inputs_of_an_overflowing_covariance_or_distance():
    from rank_lab.fewshot import covariance, nearest_mean_logits

    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"^x: the covariance entries overflow"):
        covariance(x * 1e20)  # was a silent NaN
    with pytest.raises(ValueError, match=r"^queries/support: the squared distances overflow"):
        nearest_mean_logits(x * 1e20, x, torch.tensor([0, 0, 1, 1, 2, 2]))  # was -inf logits


def test_ood_features_of_any_scale_are_scored_or_named():
    from rank_lab.ood import GMM, KNN, ClassGaussianEnergy, Mahalanobis

    z = torch.randn(20, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(20) % 2
    train = {"features": z, "labels": y}
    with pytest.raises(ValueError, match=r"^z holds values up to"):
        ClassGaussianEnergy().fit(z, y).energy(z * 1e20)  # was inf energies
    with pytest.raises(ValueError, match=r"^data\['features'\] holds values of magnitude"):
        # squares underflow: named, not garbage
        Mahalanobis().fit(train).score({"features": z * 1e-40})
    with pytest.raises(ValueError, match=r"^data\['features'\] holds values up to"):
        Mahalanobis().fit(train).score({"features": z * 1e20})
    for scorer in (KNN(k=3), GMM()):  # normalised features: the same scores at any magnitude
        s = scorer.fit(train).score({"features": z[:5]})
        torch.testing.assert_close(
            scorer.score({"features": z[:5] * 1e-40}), s, rtol=1e-4, atol=1e-4
        )


# ------------------------------------------------------------------ training data
def test_trainer_refuses_integer_complex_meta_and_overflowing_data_when_built():
    from rank_lab.train import Trainer

    cfg = dict(
        backbone="mlp",
        hidden_dims=(8,),
        embed_dim=4,
        batch_size=8,
        m_per_class=4,
        epochs=1,
        batches_per_epoch=1,
        eval_ks=(1,),
        progress=False,
        amp=False,
        loss="smooth_ap",
    )
    y = torch.arange(16) % 4
    x = torch.randn(16, 6)
    cases = [
        (
            x.round().long(),
            TypeError,
            r"train_data \(x\) must be a floating tensor, got dtype torch.int64",
        ),
        (torch.complex(x, x), TypeError, r"train_data \(x\) must hold real numbers"),
        (x.to("meta"), ValueError, r"train_data \(x\) is a meta tensor"),
        (x * 1e20, ValueError, r"train_data \(x\) holds values up to"),
    ]
    for bad, err, msg in cases:  # integer and complex data used to fail at step 1
        with pytest.raises(err, match=msg):
            Trainer(None, None, train_data=(bad, y), config=dict(cfg))


def test_fitting_on_data_that_requires_grad_trains_as_on_detached_data():
    from rank_lab.engine import EngineConfig
    from rank_lab.losses import SmoothAP
    from rank_lab.train.multistage import fit_multistage

    def fit(inputs):
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 4)
        fit_multistage(
            model,
            SmoothAP(),
            inputs,
            torch.arange(8) % 2,
            chunk_size=3,
            batch_size=4,
            m_per_class=2,
            # was "backward through the graph a second time"
            steps=2,
            engine=EngineConfig(progress=False),
        )
        return model.weight.detach()

    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(fit(x.clone().requires_grad_(True)), fit(x))


def test_stats_keep_python_floats_in_float64_and_take_requires_grad_tensors():
    from rank_lab.stats import mean_ci

    mean, _ = mean_ci([0.1, 0.2, 0.4])
    # was rounded through float32
    assert mean == (0.1 + 0.2 + 0.4) / 3 or abs(mean - 0.7 / 3) < 1e-15
    t = torch.tensor([0.5, 0.6, 0.7], dtype=torch.float64, requires_grad=True)
    # was "Can't call numpy() on Tensor that requires grad"
    assert mean_ci(t) == mean_ci(t.detach())
