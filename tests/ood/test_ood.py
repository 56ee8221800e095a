"""HEAT and the post-hoc OOD scorers: priors, SGLD, residual EBM, composition, baselines,
features."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from rank_lab.engine import EngineConfig
from rank_lab.metrics.ood import auroc
from rank_lab.ood import (
    DICE,
    GMM,
    HEAT,
    KNN,
    MSP,
    ODIN,
    SSD,
    ClassGaussianEnergy,
    EnergyScore,
    HEATConfig,
    HybridEnergy,
    KLMatching,
    LogitEnergy,
    Mahalanobis,
    MaxLogit,
    ReAct,
    Residual,
    ResidualMLP,
    ViM,
    ZeroEnergy,
    avg_pool,
    compose_energies,
    extract_features,
    kth_neighbour_distance,
    schedule_values,
    sgld,
    std_pool,
)
from rank_lab.ood.toy import (
    SmallConvNet,
    energy_grid,
    make_ring_ood,
    make_ring_segments,
    make_split_classes,
)

# ------------------------------------------------------------------ shared synthetic features


def _clusters(n_per=60, n_cls=3, d=8, seed=0):
    """ID: clusters at 4 e_c (dims 0..C-1), noise 0.5. OOD: origin in those dims, std 2
    elsewhere."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.zeros(n_cls, d)
    mu[torch.arange(n_cls), torch.arange(n_cls)] = 4.0
    y = torch.arange(n_cls).repeat_interleave(n_per)
    z = mu[y] + 0.5 * torch.randn(len(y), d, generator=g)
    ood = torch.cat(
        [
            0.5 * torch.randn(len(y), n_cls, generator=g),
            2.0 * torch.randn(len(y), d - n_cls, generator=g),
        ],
        1,
    )
    head = nn.Linear(d, n_cls)
    with torch.no_grad():  # the LDA head of isotropic Gaussians: l_c = mu_c.z - |mu_c|^2 / 2
        head.weight.copy_(mu)
        head.bias.copy_(-0.5 * (mu * mu).sum(1))
    return z, y, ood, head


@pytest.fixture(scope="module")
def clusters():
    z, y, ood, head = _clusters()
    zt, yt, _, _ = _clusters(seed=1)
    with torch.no_grad():
        train = {"features": z, "labels": y, "logits": head(z)}
        test = {"features": zt, "labels": yt, "logits": head(zt)}
        out = {"features": ood, "logits": head(ood)}
    return train, test, out, head


# ------------------------------------------------------------------ prior energies


def test_logit_energy_formula_and_gradcheck():
    head = nn.Linear(5, 4).double()
    z = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    e = LogitEnergy.from_linear(head)
    assert torch.allclose(e.energy(z), -torch.logsumexp(head(z), 1))
    e_t = LogitEnergy.from_linear(head, temperature=3.0)
    assert torch.allclose(e_t(z), -3.0 * torch.logsumexp(head(z) / 3.0, 1))
    assert torch.autograd.gradcheck(lambda x: e.energy(x), (z,))
    with pytest.raises(ValueError, match="dimensions"):
        e.energy(torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="temperature"):
        LogitEnergy(torch.randn(3, 2), temperature=0.0)


def test_class_gaussian_fit_matches_numpy_and_torch_mixture():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(90, 4, generator=g, dtype=torch.float64) * torch.tensor(
        [1.0, 2.0, 0.5, 1.5], dtype=torch.float64
    )
    y = torch.arange(3).repeat(30)
    z = z + 3 * torch.nn.functional.one_hot(y, 4)[:, :4].double()
    e = ClassGaussianEnergy(temperature=1e3, reg=0.0).fit(z, y)
    zn, yn = z.numpy(), y.numpy()
    means = np.stack([zn[yn == c].mean(0) for c in range(3)])
    cov = np.cov((zn - means[yn]).T, bias=True)
    assert np.allclose(e.means.numpy(), means) and np.allclose(
        e.chol.numpy() @ e.chol.numpy().T, cov
    )
    q = torch.randn(6, 4, generator=g, dtype=torch.float64)
    prec = np.linalg.inv(cov)
    d2 = np.stack([np.einsum("ni,ij,nj->n", q.numpy() - m, prec, q.numpy() - m) for m in means], 1)
    assert np.allclose(e.mahalanobis(q).numpy(), d2)
    # thesis form: -log sum_c exp(-d2/2) / T_G
    assert torch.allclose(e.energy(q), -torch.logsumexp(-0.5 * torch.from_numpy(d2), 1) / 1e3)
    # the official code's form: -log p(z) of MixtureSameFamily(Categorical(counts), MVN(mu_c,
    # Sigma)) / T_G
    e_code = ClassGaussianEnergy(temperature=1e3, weights="counts", normalizer=True, reg=0.0).fit(
        z, y
    )
    mix = torch.distributions.MixtureSameFamily(
        torch.distributions.Categorical(probs=torch.full((3,), 1 / 3, dtype=torch.float64)),
        torch.distributions.MultivariateNormal(
            torch.from_numpy(means), covariance_matrix=torch.from_numpy(cov)
        ),
    )
    assert torch.allclose(e_code.energy(q), -mix.log_prob(q) / 1e3)
    qq = q.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: e.energy(x), (qq,))


def test_class_gaussian_sampling_and_errors():
    mu = torch.tensor([[0.0, 0.0], [5.0, 5.0]])
    cov = torch.tensor([[1.0, 0.5], [0.5, 2.0]])
    e = ClassGaussianEnergy.from_params(mu, cov, temperature=1.0)
    s = e.sample(20000, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(s.mean(0), mu.mean(0), atol=0.08)
    sub = s[s[:, 0] + s[:, 1] < 5]  # the first component
    assert torch.allclose(torch.cov(sub.T), cov, atol=0.1)
    assert torch.equal(
        e.sample(5, torch.Generator().manual_seed(3)), e.sample(5, torch.Generator().manual_seed(3))
    )
    with pytest.raises(RuntimeError, match="fit"):
        ClassGaussianEnergy().energy(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="labels"):
        ClassGaussianEnergy().fit(torch.randn(5, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="NaN"):
        ClassGaussianEnergy().fit(
            torch.tensor([[float("nan"), 0.0], [1.0, 1.0]]), torch.tensor([0, 1])
        )
    with pytest.raises(ValueError, match="weights"):
        ClassGaussianEnergy(weights="equal")


def test_zero_energy():
    z = torch.randn(50, 3) * 2 + 1
    p = ZeroEnergy().fit(z)
    assert torch.equal(p.energy(z), torch.zeros(50))
    assert p.sample(4, torch.Generator().manual_seed(0)).shape == (4, 3)
    with pytest.raises(RuntimeError):
        ZeroEnergy().sample(3)


# ------------------------------------------------------------------ SGLD


def test_sgld_recovers_mean_and_variance_of_a_gaussian_energy():
    mu = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64)
    # E = (z - mu)^T Sigma^-1 (z - mu) / 2
    energy = ClassGaussianEnergy.from_params(mu, cov, temperature=1.0)
    g = torch.Generator().manual_seed(0)
    z0 = torch.randn(3000, 2, generator=g, dtype=torch.float64) * 3
    # exact Langevin, Eq. 5.4
    z = sgld(energy.energy, z0, steps=600, step_size=0.02, noise=None, generator=g)
    assert torch.allclose(z.mean(0), mu[0], atol=0.05)
    assert torch.allclose(torch.cov(z.T), cov, atol=0.05, rtol=0.06)


def test_sgld_single_step_formula_and_options():
    # E = |z|^2 / 2
    e = ClassGaussianEnergy.from_params(torch.zeros(1, 3), torch.eye(3), temperature=1.0)
    z0 = torch.randn(4, 3)
    z1 = sgld(
        e.energy, z0, steps=1, step_size=0.1, noise=0.2, generator=torch.Generator().manual_seed(5)
    )
    w = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
    assert torch.allclose(z1, z0 - 0.5 * 0.1 * z0 + 0.2 * w, atol=1e-6)  # grad E = z
    z1c = sgld(
        e.energy,
        z0,
        steps=1,
        step_size=0.1,
        noise=0.2,
        grad_scale=1.0,
        generator=torch.Generator().manual_seed(5),
    )
    assert torch.allclose(z1c, z0 - 0.1 * z0 + 0.2 * w, atol=1e-6)  # official code: no 1/2
    z1e = sgld(
        e.energy,
        z0,
        steps=1,
        step_size=0.04,
        noise=None,
        generator=torch.Generator().manual_seed(5),
    )
    assert torch.allclose(z1e, z0 - 0.02 * z0 + 0.2 * w, atol=1e-6)  # sqrt(eta) noise
    assert torch.equal(sgld(e.energy, z0, steps=0), z0)
    zp, chain = sgld(e.energy, z0, steps=3, projection=torch.relu, return_chain=True)
    assert len(chain) == 4 and bool((zp >= 0).all())
    head = nn.Linear(3, 2)
    sgld(LogitEnergy.from_linear(head).energy, z0, steps=2)
    assert head.weight.grad is None  # samples are constants: no parameter gradient


def test_schedules_and_sgld_errors():
    assert schedule_values((1e-4, 1e-5), 20)[0] == 1e-4 and schedule_values((1e-4, 1e-5), 20)[
        -1
    ] == pytest.approx(1e-5)
    poly = schedule_values((1.0, 0.1), 4, "polynomial")
    assert poly == pytest.approx([(0.9) * (1 - t / 4) ** 2 + 0.1 for t in range(4)])
    assert schedule_values(0.3, 3) == [0.3, 0.3, 0.3]
    e = ClassGaussianEnergy.from_params(torch.zeros(1, 2), torch.eye(2), temperature=1.0)
    with pytest.raises(ValueError, match="diverged"):
        sgld(lambda z: -(z**4).sum(1), torch.ones(2, 2), steps=30, step_size=10.0, noise=0.0)
    with pytest.raises(ValueError, match="z0"):
        sgld(e.energy, torch.zeros(0, 2))
    with pytest.raises(ValueError, match="NaN"):
        sgld(e.energy, torch.tensor([[float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="steps"):
        sgld(e.energy, torch.zeros(2, 2), steps=-1)
    with pytest.raises(ValueError, match=r"step_size must be a float or \(start, end\)"):
        sgld(e.energy, torch.zeros(2, 2), step_size=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="schedule must be one of"):
        sgld(e.energy, torch.zeros(2, 2), schedule="cosine")
    with pytest.raises(ValueError, match="grad_scale must be finite"):
        sgld(e.energy, torch.zeros(2, 2), grad_scale=float("inf"))
    with pytest.raises(ValueError, match="noise must be >= 0"):
        sgld(e.energy, torch.zeros(2, 2), noise=(-1.0, 0.0))
    with pytest.raises(ValueError, match="shape"):
        sgld(lambda z: z, torch.zeros(2, 2), steps=1)


# ------------------------------------------------------------------ residual EBM (HEAT)

TOY_CFG = HEATConfig(
    hidden_dim=64,
    n_layers=4,
    epochs=40,
    batch_size=100,
    lr=1e-3,
    lam=1.0,
    sgld_steps=15,
    step_size=(1e-2, 1e-3),
    noise=None,
    input_noise=1e-2,
)


def _grid_ll(log_p, pts, bounds, n):
    ix = ((pts[:, 0] - bounds[0]) / (bounds[1] - bounds[0]) * (n - 1)).round().long()
    iy = ((pts[:, 1] - bounds[2]) / (bounds[3] - bounds[2]) * (n - 1)).round().long()
    return float(log_p[iy, ix].mean())


def test_heat_on_the_2d_toy_beats_its_gmm_prior():
    torch.set_num_threads(1)
    x, y = make_ring_segments(200, 2, seed=0)
    xt, _ = make_ring_segments(200, 2, seed=1)
    near, far = make_ring_ood(300, "near"), make_ring_ood(300, "far")
    h = HybridEnergy(ClassGaussianEnergy(temperature=1.0), 2, TOY_CFG).fit(
        x, y, seed=0, device="cpu"
    )
    with torch.no_grad():
        a_prior = auroc(h.prior_energy(xt), h.prior_energy(near))
        a_heat = auroc(h.energy(xt), h.energy(near))
        # far-OOD stays detected (the prior's growth)
        assert auroc(h.energy(xt), h.energy(far)) > 0.99
    assert a_heat > a_prior + 0.03
    bounds, n = (-3.5, 3.5, -3.5, 3.5), 160
    ll_prior = _grid_ll(energy_grid(h.prior_energy, bounds, n)[3], xt, bounds, n)
    ll_heat = _grid_ll(energy_grid(h.energy, bounds, n)[3], xt, bounds, n)
    # a better density of held-out ID data (exactly normalised on the grid)
    assert ll_heat > ll_prior + 0.1
    # residual raised on negatives, lowered on data
    assert h.history[-1]["e_gen"] > h.history[-1]["e_real"]


def test_split_classes_geometry_and_the_gaussian_prior_failure():
    d = make_split_classes(
        40, 30, n_classes=2, dim=4, radius=3.0, offset=2.0, noise=0.01, split=True, seed=5
    )
    assert (
        d["x_train"].shape == (80, 4) and d["near"].shape == (30, 4) and d["far"].shape == (30, 4)
    )
    assert torch.equal(d["y_train"].bincount(), torch.tensor([40, 40])) and torch.equal(
        d["y_test"], d["y_train"]
    )
    assert all(v.dtype == torch.float32 for k, v in d.items() if not k.startswith("y_"))
    again = make_split_classes(
        40, 30, n_classes=2, dim=4, radius=3.0, offset=2.0, noise=0.01, split=True, seed=5
    )
    assert all(torch.equal(d[k], again[k]) for k in d)
    assert not torch.equal(d["x_train"], d["x_test"])  # independent draws of the same classes
    # two modes 2 * offset apart, their midpoint at norm radius, 2 points per mode at noise 0.01
    for c in range(2):
        x = d["x_train"][d["y_train"] == c]
        a, b = x[0::2], x[1::2]
        assert float((a.mean(0) - b.mean(0)).norm()) == pytest.approx(4.0, abs=0.02)
        assert float(x.mean(0).norm()) == pytest.approx(3.0, abs=0.02)
        assert float(a.std(0).max()) < 0.03
    # the near set is the class centres (noise 0.01): at distance offset from every ID point of its
    # class
    dist = torch.cdist(d["near"], d["x_train"]).min(1).values
    assert float(dist.min()) == pytest.approx(2.0, abs=0.05)
    assert float((d["far"].norm(dim=1) / 2.5).min()) > 3.0 - 2.1  # scaled ID draws
    ctrl = make_split_classes(
        40, 30, n_classes=2, dim=4, radius=3.0, offset=2.0, noise=0.01, split=False, seed=5
    )
    assert float(ctrl["x_train"].norm(dim=1).sub(3.0).abs().max()) < 0.05  # one mode, at the centre
    assert float(torch.cdist(ctrl["near"], ctrl["x_train"]).min(1).values.min()) == pytest.approx(
        2.0, abs=0.05
    )
    # a class Gaussian (tied covariance) calls the gap the most ID place when split, and is right in
    # the control
    for data, worse in (
        (make_split_classes(100, 200, seed=0), True),
        (make_split_classes(100, 200, split=False, seed=0), False),
    ):
        g = GMM(normalize=False).fit({"features": data["x_train"], "labels": data["y_train"]})
        a = auroc(g.score({"features": data["x_test"]}), g.score({"features": data["near"]}))
        assert (a < 0.4) if worse else (a > 0.9)
    with pytest.raises(ValueError, match="even"):
        make_split_classes(41, 5)
    with pytest.raises(ValueError, match="dim"):
        make_split_classes(40, 5, dim=1)
    with pytest.raises(ValueError, match="noise"):
        make_split_classes(40, 5, noise=0.0)
    with pytest.raises(TypeError, match="split"):
        make_split_classes(40, 5, split=1)


def test_hybrid_energy_decomposition_and_loss_formula():
    z, y, _, head = _clusters(n_per=20, d=6)
    h = HybridEnergy(
        LogitEnergy.from_linear(head),
        6,
        HEATConfig(
            hidden_dim=16, n_layers=3, lam=2.0, input_noise=0.0, sgld_steps=0, proposal="data"
        ),
    )
    with torch.no_grad():
        assert torch.allclose(h.energy(z), LogitEnergy.from_linear(head).energy(z) + h.residual(z))
        # negatives = data: L_MLE = 0, L_C = 2 E[E_theta^2]
        loss, logs = h.loss(z, torch.Generator().manual_seed(0))
        e = h.residual(z)
        assert logs["l_mle"] == pytest.approx(0.0, abs=1e-6)
        assert float(loss) == pytest.approx(2.0 * 2 * float((e**2).mean()), rel=1e-5)


def test_residual_mlp_layers_and_shared_hidden():
    m = ResidualMLP(8, 16, n_layers=6)
    assert sum(isinstance(x, nn.Linear) for x in m.modules()) == 6
    # official code: one hidden Linear reused
    shared = ResidualMLP(8, 16, n_layers=6, share_hidden=True)
    assert sum(p.numel() for p in shared.parameters()) == 8 * 16 + 16 + 16 * 16 + 16 + 16 + 1
    assert m(torch.randn(5, 8)).shape == (5,)


def test_heat_fit_is_deterministic_and_resumes_from_a_checkpoint(tmp_path, monkeypatch):
    z, y, _, _ = _clusters(n_per=30, d=4)
    cfg = HEATConfig(hidden_dim=16, n_layers=3, epochs=4, batch_size=32, lr=1e-3, sgld_steps=3)

    def fit(seed=0, **kw):
        return HybridEnergy(ClassGaussianEnergy(1.0), 4, cfg).fit(
            z, y, seed=seed, device="cpu", **kw
        )

    a, b, c = fit(), fit(), fit(seed=1)
    pa = torch.cat([p.flatten() for p in a.residual.parameters()])
    assert torch.equal(pa, torch.cat([p.flatten() for p in b.residual.parameters()]))
    assert not torch.equal(pa, torch.cat([p.flatten() for p in c.residual.parameters()]))
    # interrupt after two epochs (3 batches each), then resume: same result as the uninterrupted run
    ckpt = tmp_path / "heat.pt"
    calls = {"n": 0}
    orig = HybridEnergy.loss

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 6:
            raise KeyboardInterrupt
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(HybridEnergy, "loss", flaky)
    with pytest.raises(KeyboardInterrupt):
        fit(engine=EngineConfig(checkpoint=ckpt))
    monkeypatch.setattr(HybridEnergy, "loss", orig)
    assert torch.load(ckpt, weights_only=False)["epoch"] == 2
    r = fit(engine=EngineConfig(checkpoint=ckpt))
    assert torch.equal(pa, torch.cat([p.flatten() for p in r.residual.parameters()]))
    assert len(r.history) == 4
    with pytest.raises(ValueError, match="checkpoint"):
        fit(seed=3, engine=EngineConfig(checkpoint=ckpt))


def test_official_code_preset_trains(clusters):
    train, test, out, _ = clusters
    z = torch.relu(train["features"])  # post-ReLU features, as the code's ReLU projection assumes
    cfg = HEATConfig.official(
        "gmm", epochs=2, hidden_dim=16, n_layers=4, batch_size=64, sgld_steps=4
    )
    h = HybridEnergy(ClassGaussianEnergy(1e3), z.shape[1], cfg).fit(
        z, train["labels"], device="cpu"
    )
    assert h.residual.hidden[0] is h.residual.hidden[1]  # shared hidden Linear
    assert all(math.isfinite(v) for v in h.history[-1].values())
    with torch.no_grad():
        assert (
            auroc(h.energy(torch.relu(test["features"])), h.energy(torch.relu(out["features"])))
            > 0.9
        )


def test_heat_config_and_fit_errors():
    off = HEATConfig.official("gmm")
    assert (off.sgld_steps, off.lr, off.betas, off.grad_scale, off.schedule) == (
        40,
        1e-5,
        (0.0, 0.999),
        1.0,
        "polynomial",
    )
    assert HEATConfig.official("gmm_std").sgld_steps == 1
    el = HEATConfig.official("el")
    assert (el.proposal, el.lam, el.step_size) == ("normal", 0.1, (1e-1, 1e-2))
    thesis = HEATConfig()
    assert (thesis.n_layers, thesis.hidden_dim, thesis.lr, thesis.lam, thesis.sgld_steps) == (
        6,
        1024,
        5e-6,
        10.0,
        20,
    )
    with pytest.raises(ValueError, match="proposal"):
        HEATConfig(proposal="buffer")
    with pytest.raises(ValueError, match="n_layers"):
        HEATConfig(n_layers=1)
    with pytest.raises(ValueError, match="prior"):
        HEATConfig.official("knn")
    h = HybridEnergy(ClassGaussianEnergy(), 3, HEATConfig(hidden_dim=8, n_layers=2, epochs=1))
    with pytest.raises(ValueError, match="labels"):
        h.fit(torch.randn(10, 3))
    with pytest.raises(ValueError, match="dimensions"):
        h.fit(torch.randn(10, 4), torch.zeros(10, dtype=torch.long))


# ------------------------------------------------------------------ composition (Eq. 5.7)


def test_compose_energies_limits_and_standardisation():
    e = torch.tensor([[1.0, 2.0, -1.0], [0.5, 0.5, 3.0]], dtype=torch.float64)
    assert torch.allclose(compose_energies(e, 0.0), e.sum(1))
    assert torch.allclose(compose_energies(e, math.inf), e.max(1).values)
    assert torch.allclose(compose_energies(e, -math.inf), e.min(1).values)
    # sum of densities
    assert torch.allclose(compose_energies(e, -1.0), -torch.log(torch.exp(-e).sum(1)))
    beta = 1e-6  # beta -> 0: (1/beta) log sum exp(beta E) = log K / beta + mean E + O(beta)
    assert torch.allclose(compose_energies(e, beta) - math.log(3) / beta, e.mean(1), atol=1e-4)
    assert torch.allclose(compose_energies(e, 50.0), e.max(1).values, atol=0.05)
    m, s = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([2.0, 1.0, 4.0])
    assert torch.allclose(
        compose_energies(e, 0.0, mean=m, std=s), ((e - m.double()) / s.double()).sum(1)
    )
    with pytest.raises(ValueError, match="shape"):
        compose_energies(torch.zeros(3))
    with pytest.raises(ValueError, match="beta"):
        compose_energies(e, float("nan"))


def test_heat_detector_composes_its_components(clusters):
    train, test, out, head = clusters
    d = train["features"].shape[1]
    cfg = HEATConfig(hidden_dim=16, n_layers=3, epochs=2, batch_size=64, lr=1e-3, sgld_steps=3)
    data = {**train, "std": train["features"].abs()}
    heat = HEAT.from_classifier(head, d, d, config=cfg, gmm_temperature=1.0).fit(data, device="cpu")
    t = {**test, "std": test["features"].abs()}
    e = heat.component_energies(t)
    assert e.shape == (t["features"].shape[0], 3)
    assert torch.allclose(e[:, 2], heat.components["el"].energy(t["features"]).detach())
    assert torch.allclose(heat.score(t), ((e - heat.mean) / heat.std).sum(1))
    assert torch.allclose(heat.score(t, beta=-1.0, standardize=False), -torch.logsumexp(-e, 1))
    assert auroc(heat.score(t), heat.score({**out, "std": out["features"].abs()})) > 0.9
    with pytest.raises(ValueError, match="std"):
        heat.score({"features": test["features"]})
    with pytest.raises(ValueError, match="std_dim"):
        HEAT.from_classifier(head, d, None, config=cfg)


# ------------------------------------------------------------------ baseline scorers


def _all_scorers(head):
    return [
        MSP(),
        MaxLogit(),
        EnergyScore(),
        ODIN(epsilon=0.0),
        KLMatching(),
        ReAct(head),
        DICE(head),
        Mahalanobis(),
        SSD(),
        SSD(covariance="tied"),
        GMM(normalize=False),
        KNN(k=5),
        ViM(head, principal_dim=3),
        Residual(head, principal_dim=3),
    ]


def test_every_scorer_gives_higher_scores_to_ood(clusters):
    train, test, out, head = clusters
    for s in _all_scorers(head):
        s.fit(train)
        a = auroc(s.score(test), s.score(out))
        assert a > 0.9, f"{s.name}: AUROC {a:.3f} (sign convention: higher = more OOD)"
        assert s.score(test).shape == (test["features"].shape[0],)


def test_logit_scorers_formulas():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.1, 0.2, 0.3]])
    p = torch.softmax(logits, 1)
    assert torch.allclose(MSP().score(logits), -p.max(1).values)
    assert torch.allclose(MaxLogit().score(logits), torch.tensor([-2.0, -0.3]))
    assert torch.allclose(EnergyScore().score(logits), -torch.log(torch.exp(logits).sum(1)))
    assert torch.allclose(
        EnergyScore(temperature=2.0).score(logits), -2 * torch.logsumexp(logits / 2, 1)
    )
    assert torch.allclose(
        ODIN(temperature=1000.0, epsilon=0.0).score(logits),
        -torch.softmax(logits / 1000, 1).max(1).values,
    )


def test_odin_input_perturbation_matches_its_formula():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    t, eps = 10.0, 0.01
    xr = x.clone().requires_grad_(True)
    out = model(xr)
    log_s = torch.log_softmax(out / t, 1).gather(1, out.argmax(1, keepdim=True)).sum()
    (g,) = torch.autograd.grad(log_s, [xr])
    x_t = x - eps * torch.sign(-g)  # x~ = x - eps sign(-grad log S_yhat(x; T))
    ref = -torch.softmax(model(x_t) / t, 1).max(1).values
    got = ODIN(t, eps, model=model).score({"inputs": x, "logits": model(x)})
    assert torch.allclose(got.double(), ref.detach())
    # the perturbation raises ID confidence
    assert got.mean() < ODIN(t, 0.0).score(model(x).detach()).mean()
    with pytest.raises(ValueError, match="inputs"):
        ODIN(t, eps).score({"logits": model(x)})


def test_mahalanobis_knn_kl_vim_dice_react_against_brute_force(clusters):
    train, test, _, head = clusters
    z, y, q = train["features"].double(), train["labels"], test["features"][:7].double()
    # Mahalanobis, one covariance per class (SSD paper) vs numpy
    m = Mahalanobis(covariance="class", reg=0.0).fit({"features": z, "labels": y})
    ref = []
    for c in range(3):
        zc = z[y == c].numpy()
        prec = np.linalg.inv(np.cov(zc.T, bias=True))
        diff = q.numpy() - zc.mean(0)
        ref.append(np.einsum("ni,ij,nj->n", diff, prec, diff))
    assert np.allclose(m.score(q).numpy(), np.min(ref, 0))
    # KNN: k-th smallest Euclidean distance between normalised vectors
    zn, qn = nn.functional.normalize(z.float(), dim=1), nn.functional.normalize(q.float(), dim=1)
    knn_ref = torch.cdist(qn, zn).sort(1).values[:, 9]
    assert torch.allclose(KNN(k=10).fit(train).score(q.float()), knn_ref, atol=1e-5)
    assert torch.allclose(
        KNN(k=10, backend="faiss").fit(train).score(q.float()), knn_ref, atol=1e-4
    )
    # chunking
    assert torch.allclose(kth_neighbour_distance(qn, zn, 10, chunk_size=3), knn_ref, atol=1e-5)
    # KL matching with explicit loops
    kl = KLMatching().fit(train)
    p_tr = torch.softmax(train["logits"].double(), 1)
    pred = p_tr.argmax(1)
    templates = [p_tr[pred == k].mean(0) for k in range(3)]
    p_q = torch.softmax(head(q.float()).double(), 1)
    kl_ref = torch.stack([(p_q * (p_q.log() - t.log())).sum(1) for t in templates], 1).min(1).values
    assert torch.allclose(kl.score({"logits": head(q.float())}).double(), kl_ref, atol=1e-5)
    # ViM (numpy, following the paper: uncentred second moment of z - o, residual of the top-D
    # space)
    w, b = head.weight.detach().double().numpy(), head.bias.detach().double().numpy()
    o = -np.linalg.pinv(w) @ b
    x = z.numpy() - o
    ev, evec = np.linalg.eigh(x.T @ x / len(x))
    r = evec[:, np.argsort(ev)[::-1][3:]]
    alpha = (z.numpy() @ w.T + b).max(1).mean() / np.linalg.norm(x @ r, axis=1).mean()
    lq = q.numpy() @ w.T + b
    vim_ref = alpha * np.linalg.norm((q.numpy() - o) @ r, axis=1) - np.log(np.exp(lq).sum(1))
    assert np.allclose(ViM(head, principal_dim=3).fit(train).score(q).numpy(), vim_ref, atol=1e-4)
    # DICE keeps the top 10 % contributions W * mean(z); ReAct clips at the 90th percentile
    dice = DICE(head, sparsity=0.9).fit(train)
    contrib = w * z.numpy().mean(0)
    mask = contrib > np.quantile(contrib, 0.9)
    assert mask.sum() == dice.mask.sum() and np.allclose(dice.mask.numpy(), mask)
    react = ReAct(head, percentile=90).fit(train)
    assert react.threshold == pytest.approx(np.percentile(z.numpy(), 90))
    zc = np.minimum(q.numpy(), react.threshold)
    assert np.allclose(
        react.score(q.float()).numpy(), -np.log(np.exp(zc @ w.T + b).sum(1)), atol=1e-4
    )


def test_scorer_errors(clusters):
    train, _, _, head = clusters
    with pytest.raises(RuntimeError, match="fit"):
        KNN().score(train)
    with pytest.raises(ValueError, match="labels"):
        Mahalanobis().fit(train["features"])
    with pytest.raises(ValueError, match="logits"):
        MSP().score({"features": train["features"]})
    with pytest.raises(ValueError, match="NaN"):
        MSP().score(torch.tensor([[float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="k ="):
        KNN(k=10_000).fit(train)
    with pytest.raises(ValueError, match="principal_dim"):
        ViM(head, principal_dim=8).fit(train)
    with pytest.raises(TypeError, match="head"):
        DICE(head="fc")
    with pytest.raises(ValueError, match="sparsity"):
        DICE(head, sparsity=1.0)


# ------------------------------------------------------------------ features


def test_pooling():
    fmap = torch.randn(3, 4, 5, 6)
    assert torch.allclose(avg_pool(fmap), fmap.mean((2, 3)))
    flat = fmap.reshape(3, 4, -1)
    ref = ((flat - flat.mean(2, keepdim=True)) ** 2).sum(2).div(29).sqrt()
    assert torch.allclose(std_pool(fmap), ref, atol=1e-6)
    assert torch.allclose(std_pool(fmap, unbiased=False), flat.std(2, unbiased=False))
    with pytest.raises(ValueError, match="feature map"):
        std_pool(torch.randn(3, 4))


class _Counting(SmallConvNet):
    seen = 0

    def forward(self, x):
        type(self).seen += x.shape[0]
        return super().forward(x)


def test_extract_features_matches_hooks_and_resumes(tmp_path):
    torch.manual_seed(0)
    model = _Counting(n_classes=3, width=8)
    x, y = torch.rand(23, 1, 8, 8), torch.randint(0, 3, (23,))
    out = extract_features(
        model, (x, y), layer="features", batch_size=4, progress=False, device="cpu"
    )
    with torch.no_grad():
        fmap = model.features(x)
        assert torch.allclose(out["features"], fmap.mean((2, 3)), atol=1e-6)
        assert torch.allclose(out["std"], fmap.flatten(2).std(2), atol=1e-6)
        assert torch.allclose(out["logits"], model(x), atol=1e-6)
    assert torch.equal(out["labels"], y)
    # cached run interrupted after 3 shards of 2 batches (24 > 23: the last shard is short)
    cache = tmp_path / "feats"
    full = extract_features(
        model,
        (x, y),
        layer="features",
        batch_size=4,
        cache_dir=cache,
        shard_batches=2,
        progress=False,
    )
    (cache / "features.pt").unlink()
    for i in (1, 2):
        (cache / f"shard_{i:05d}.pt").unlink()
    _Counting.seen = 0
    resumed = extract_features(
        model,
        (x, y),
        layer="features",
        batch_size=4,
        cache_dir=cache,
        shard_batches=2,
        progress=False,
    )
    assert _Counting.seen == 23 - 8  # only the missing batches ran
    for k in full:
        assert torch.equal(full[k], resumed[k])
    _Counting.seen = 0
    again = extract_features(
        model,
        (x, y),
        layer="features",
        batch_size=4,
        cache_dir=cache,
        shard_batches=2,
        progress=False,
    )
    assert _Counting.seen == 0 and torch.equal(again["features"], full["features"])
    with pytest.raises(ValueError, match="settings"):
        extract_features(
            model, (x, y), layer="features", batch_size=8, cache_dir=cache, progress=False
        )
    with pytest.raises(ValueError, match="sub-module"):
        extract_features(model, x, layer="layer4", progress=False)
    assert set(extract_features(model, x, progress=False)) == {"logits"}


def test_toy_helpers():
    x, y = make_ring_segments(50, 3, seed=2)
    assert x.shape == (150, 2) and torch.equal(y.bincount(), torch.tensor([50, 50, 50]))
    assert torch.equal(make_ring_segments(50, 3, seed=2)[0], x)
    assert make_ring_ood(10, "near").norm(dim=1).max() <= 0.45
    e = ClassGaussianEnergy.from_params(torch.zeros(1, 2), torch.eye(2) * 0.1, temperature=1.0)
    xx, yy, en, lp = energy_grid(e.energy, (-3, 3, -3, 3), 101)
    cell = (6 / 100) ** 2
    assert float(lp.double().exp().sum() * cell) == pytest.approx(1.0, abs=1e-6)
    # N(0, 0.1 I) peak
    assert float(lp.max()) == pytest.approx(-math.log(2 * math.pi * 0.1), abs=0.02)
    with pytest.raises(ValueError, match="kind"):
        make_ring_ood(5, "mid")
