"""ResFlow (residual normalizing flow OOD baseline, Tab. 5.3 of the Ramzi thesis)."""

from __future__ import annotations

import math

import pytest
import torch

from rank_lab.engine import EngineConfig
from rank_lab.metrics.ood import auroc
from rank_lab.ood.resflow import InvertibleResidualBlock, ResFlow, ResidualFlow


def _blobs(n: int, seed: int, shift: float = 0.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    z = (
        0.5 * torch.randn(n, 6, generator=g)
        + 3.0 * torch.nn.functional.one_hot(y, 6).float()
        + shift
    )
    return {"features": z, "labels": y}


def _block(seed: int = 0, d: int = 4) -> InvertibleResidualBlock:
    torch.manual_seed(seed)
    return InvertibleResidualBlock(d, hidden_dim=16, n_layers=3, coeff=0.9).double().eval()


def test_block_is_contractive_and_invertible() -> None:
    b = _block()
    x = 2 * torch.randn(50, 4, dtype=torch.double)
    x2 = torch.randn(50, 4, dtype=torch.double)
    with torch.no_grad():
        lip = ((b.g(x) - b.g(x2)).norm(dim=1) / (x - x2).norm(dim=1)).max()
        y, _ = b(x, logdet="series", n_terms=2)
    assert lip < 0.9 + 1e-6
    torch.testing.assert_close(b.inverse(y, n_iter=300, tol=1e-13), x, atol=1e-10, rtol=0)


def test_flow_inverse_recovers_input() -> None:
    torch.manual_seed(1)
    flow = ResidualFlow(3, n_blocks=3, hidden_dim=16).double().eval()
    data = torch.randn(200, 3, dtype=torch.double) @ torch.tensor(
        [[2.0, 0.5, 0], [0, 1, 0], [0, 0.3, 0.2]], dtype=torch.double
    )
    flow.set_whitening(data)
    x = data[:20]
    with torch.no_grad():
        u, _ = flow(x, logdet="series", n_terms=1)
    torch.testing.assert_close(flow.inverse(u, n_iter=300, tol=1e-13), x, atol=1e-9, rtol=0)


def test_exact_logdet_matches_brute_force_and_hutchinson() -> None:
    b = _block(2)
    x = torch.randn(6, 4, dtype=torch.double)
    _, exact = b(x, logdet="exact")
    # independent brute force: numerical Jacobian of F by central differences
    eps, eye = 1e-6, torch.eye(4, dtype=torch.double)
    with torch.no_grad():
        for i in range(6):
            cols = [
                (b.g(x[i : i + 1] + eps * eye[j]) - b.g(x[i : i + 1] - eps * eye[j]))[0] / (2 * eps)
                for j in range(4)
            ]
            jac = torch.stack(cols, 1)
            assert math.isclose(
                float(torch.linalg.det(eye + jac).log()), float(exact[i]), abs_tol=1e-7
            )
            # truncated power series with exact traces (Chen et al. Eq. 4)
            series = sum(
                (-1) ** (k + 1) / k * torch.trace(torch.linalg.matrix_power(jac, k))
                for k in range(1, 40)
            )
            assert math.isclose(float(series), float(exact[i]), abs_tol=1e-4)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        # 4000 probes per sample, batched by repeating the rows
        _, est = b(x.repeat(4000, 1), logdet="series", n_terms=30, n_samples=1, generator=g)
    torch.testing.assert_close(est.view(4000, 6).mean(0), exact.detach(), atol=0.02, rtol=0)
    with torch.no_grad():  # several probes in one call average the same way
        _, est2 = b(x, logdet="series", n_terms=30, n_samples=50, generator=g)
    assert (est2 - exact).abs().max() < 0.2


def test_series_logdet_is_differentiable() -> None:
    b = _block(3)
    b.train()
    x = torch.randn(8, 4, dtype=torch.double)
    _, ld = b(x, logdet="series", n_terms=3, generator=torch.Generator().manual_seed(0))
    ld.sum().backward()
    # every weight matters (the last bias does not enter the Jacobian, hence no gradient there)
    grads = [p.grad for n, p in b.named_parameters() if "weight" in n]
    assert len(grads) == 3 and all(
        gr is not None and torch.isfinite(gr).all() and gr.abs().sum() > 0 for gr in grads
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"class_conditional": True, "reduction": "max"},
        {"class_conditional": True, "reduction": "logsumexp"},
        {"class_conditional": False},
    ],
)
def test_fitted_flow_scores_shifted_data_higher(kw: dict) -> None:
    train, test_in, test_out = _blobs(300, 0), _blobs(150, 1), _blobs(150, 2, shift=2.0)
    s = ResFlow(n_blocks=2, hidden_dim=32, epochs=4, device="cpu", **kw).fit(train)
    assert s.history[-1] < s.history[0]  # maximum likelihood decreases the NLL
    s_in, s_out = s.score(test_in), s.score(test_out)
    assert s_in.shape == (150,) and torch.isfinite(s_in).all()
    assert s_in.mean() < s_out.mean()
    assert auroc(s_in, s_out) > 0.9


def test_exact_logdet_training_and_nll_is_a_density() -> None:
    # 1-D sanity: NLL of a flow with exact log-det on N(0, 4) data is close to the true NLL
    g = torch.Generator().manual_seed(0)
    z = 2.0 * torch.randn(400, 1, generator=g)
    s = ResFlow(
        n_blocks=1, hidden_dim=8, epochs=3, logdet="exact", class_conditional=False, device="cpu"
    ).fit(z)
    nll = s.score(z).mean()
    true = 0.5 * math.log(2 * math.pi * 4) + 0.5
    assert abs(float(nll) - true) < 0.15


def test_determinism_with_seed(tmp_path) -> None:
    train, test = _blobs(200, 0), _blobs(50, 1)
    a = ResFlow(n_blocks=1, hidden_dim=16, epochs=2, seed=3, device="cpu").fit(train).score(test)
    b = ResFlow(n_blocks=1, hidden_dim=16, epochs=2, seed=3, device="cpu").fit(train).score(test)
    c = ResFlow(n_blocks=1, hidden_dim=16, epochs=2, seed=4, device="cpu").fit(train).score(test)
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)
    # interrupted + resumed training equals one uninterrupted run
    ck = tmp_path / "rf.pt"
    ResFlow(
        n_blocks=1,
        hidden_dim=16,
        epochs=1,
        seed=3,
        device="cpu",
        engine=EngineConfig(checkpoint=ck),
    ).fit(train)
    r = ResFlow(
        n_blocks=1,
        hidden_dim=16,
        epochs=2,
        seed=3,
        device="cpu",
        engine=EngineConfig(checkpoint=ck),
    ).fit(train)
    torch.testing.assert_close(r.score(test), a)


def test_bad_inputs() -> None:
    train = _blobs(60, 0)
    with pytest.raises(ValueError, match="coeff"):
        ResFlow(coeff=1.0)
    with pytest.raises(ValueError, match="coeff"):
        InvertibleResidualBlock(3, coeff=0.0)
    with pytest.raises(ValueError, match="reduction"):
        ResFlow(reduction="mean")
    with pytest.raises(ValueError, match="logdet"):
        ResFlow(logdet="russian")
    with pytest.raises(ValueError, match="n_blocks"):
        ResFlow(n_blocks=0)
    with pytest.raises(RuntimeError, match="not fitted"):
        ResFlow().score(train)
    with pytest.raises(ValueError, match="labels"):
        ResFlow(epochs=1).fit({"features": train["features"]})
    with pytest.raises(ValueError, match="rows"):
        ResFlow(epochs=1).fit({"features": train["features"], "labels": train["labels"][:-1]})
    bad = train["features"].clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        ResFlow(epochs=1).fit({"features": bad, "labels": train["labels"]})
    s = ResFlow(n_blocks=1, hidden_dim=8, epochs=1, device="cpu").fit(train)
    with pytest.raises(ValueError, match="fitted on d=6"):
        s.score(torch.randn(5, 4))
    with pytest.raises(ValueError, match="empty"):
        s.score(torch.zeros(0, 6))
