"""Bad inputs of rank_lab.ood (issue 16): one direct test per rule the matrix cannot spell out.

The generated matrix (tests/bad_inputs) checks that every bad variant raises a ValueError /
TypeError naming the argument; these tests pin the subtle rules: the energies' shared NaN check,
SGLD stopping at the first non-finite iterate, float64 accepted with the float32 result, the legal
limits (``beta = +inf``, any number of spatial dims, an elementwise activation on any shape), and
``save_feature_folder`` writing nothing when its input is bad.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rank_lab.ood import (
    HEAT,
    ClassGaussianEnergy,
    HEATConfig,
    HybridEnergy,
    LogitEnergy,
    ReAct,
    ResidualMLP,
    ZeroEnergy,
    avg_pool,
    compose_energies,
    extract_features,
    kth_neighbour_distance,
    save_feature_folder,
    schedule_values,
    sgld,
    std_pool,
)
from rank_lab.ood.resflow import LipSwish, ResFlow
from rank_lab.ood.toy import SmallConvNet, energy_grid, train_classifier

NAN = float("nan")
SMALL = dict(hidden_dim=8, n_layers=2, epochs=1, batch_size=8, sgld_steps=2)


def _poke(x: torch.Tensor, v: float) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[0] = v
    return x


def _energies() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    z, y = torch.randn(24, 4), torch.arange(24) % 3
    hybrid = HybridEnergy(ClassGaussianEnergy(), 4, **SMALL).fit(z, y, device="cpu")
    return {
        "LogitEnergy": LogitEnergy(torch.randn(3, 4)),
        "ClassGaussianEnergy": ClassGaussianEnergy().fit(z, y),
        "ZeroEnergy": ZeroEnergy().fit(z),
        "HybridEnergy": hybrid,
    }


@pytest.mark.parametrize(
    "name", ["LogitEnergy", "ClassGaussianEnergy", "ZeroEnergy", "HybridEnergy"]
)
@pytest.mark.parametrize("bad", [NAN, math.inf, -math.inf])
def test_every_energy_refuses_non_finite_features(name: str, bad: float) -> None:
    energy = _energies()[name]
    z = torch.randn(5, 4)
    assert torch.isfinite(energy.energy(z)).all()
    with pytest.raises(ValueError, match=r"\bz contains 1 NaN or inf"):  # was a silent NaN energy
        energy.energy(_poke(z, bad))


def test_residual_mlp_checks_its_input_and_casts_float64() -> None:
    torch.manual_seed(0)
    mlp = ResidualMLP(4, 8, 3)
    z = torch.randn(5, 4)
    assert torch.equal(mlp(z.double()), mlp(z))
    with pytest.raises(ValueError, match=r"z must have shape \(N, 4\)"):
        mlp(z[None])
    with pytest.raises(ValueError, match="n_layers must be >= 2"):
        ResidualMLP(4, 8, 1)  # silently built 2 layers before
    with pytest.raises(ValueError, match="dim must be >= 1"):
        HybridEnergy(None, 0)


def test_sgld_stops_at_the_first_non_finite_iterate() -> None:
    seen: list[bool] = []

    def energy(z: torch.Tensor) -> torch.Tensor:
        seen.append(bool(torch.isfinite(z).all()))
        return -(z**4).sum(1)  # explodes

    with pytest.raises(ValueError, match=r"SGLD diverged at step \d+"):
        sgld(energy, torch.ones(2, 2), steps=50, step_size=10.0, noise=0.0)
    assert all(seen)  # the energy never saw the non-finite iterate
    with pytest.raises(ValueError, match="schedule must be one of"):
        sgld(lambda z: z.sum(1), torch.ones(2, 2), schedule="bogus")  # named 'kind' before


def test_schedule_values_checks() -> None:
    assert schedule_values((1.0, 0.0), 0) == []
    with pytest.raises(ValueError, match="steps must be >= 0"):
        schedule_values(0.1, -1)  # an empty list before
    with pytest.raises(ValueError, match="power must be > 0"):
        schedule_values((1.0, 0.1), 3, "polynomial", power=0.0)
    with pytest.raises(ValueError, match="spec must be finite"):
        schedule_values((NAN, 0.1), 3)


def test_heat_config_and_beta() -> None:
    with pytest.raises(ValueError, match="lr must be > 0"):
        HEATConfig(lr=0.0)
    with pytest.raises(ValueError, match="lam must be finite"):
        HEATConfig(lam=math.inf)
    with pytest.raises(TypeError, match="sgld_steps must be an int >= 0"):
        HEATConfig(sgld_steps=1.5)  # type: ignore[arg-type]
    comp = {"a": HybridEnergy(ClassGaussianEnergy(), 4, **SMALL)}
    with pytest.raises(ValueError, match="beta must be a real number or"):
        HEAT(comp, beta=NAN)
    e = torch.randn(6, 3)
    assert torch.equal(compose_energies(e, math.inf), e.max(1).values)  # +inf: the documented max
    assert HEAT(comp, beta=math.inf).beta == math.inf


def test_pooling_any_spatial_dims_finite_and_non_empty() -> None:
    fmap = torch.randn(2, 3, 4, 5, 6)  # (N, C, T, H, W): legal
    assert torch.allclose(avg_pool(fmap), fmap.flatten(2).mean(2))
    assert torch.allclose(std_pool(fmap), fmap.flatten(2).std(2))
    with pytest.raises(ValueError, match="fmap contains 1 NaN"):
        avg_pool(_poke(fmap, NAN))  # was a silent NaN
    with pytest.raises(ValueError, match="fmap is empty"):
        avg_pool(fmap[:0])
    with pytest.raises(ValueError, match="fmap is empty"):
        std_pool(fmap[:, :, :0])  # zero spatial positions: NaN before


def test_extract_features_checks_data_and_model_outputs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3)).train()
    x = torch.rand(5, 3, 2, 2)
    ref = extract_features(model, x, batch_size=2, progress=False, device="cpu")["logits"]
    assert torch.equal(
        extract_features(model, x.double(), batch_size=2, progress=False, device="cpu")["logits"],
        ref,
    )
    bad = x.clone()
    bad[3, 0, 0, 0] = NAN
    with pytest.raises(ValueError, match=r"data \(items 2\.\.3\) contains 1 NaN"):
        extract_features(model, bad, batch_size=2, progress=False, device="cpu")
    assert model.training  # the model's mode is restored after a failure
    with pytest.raises(ValueError, match=r"model failed on a batch of data of shape \(2, 2, 2\)"):
        extract_features(model, x[:, 0], batch_size=2, progress=False, device="cpu")
    poisoned = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    with torch.no_grad():
        poisoned[1].bias[0] = math.inf
    with pytest.raises(
        ValueError, match=r"model returned NaN or inf \['logits'\] on finite data items 0\.\.1"
    ):
        extract_features(poisoned, x, batch_size=2, progress=False, device="cpu")


def test_float64_features_give_the_float32_scores() -> None:
    torch.manual_seed(0)
    q, bank = (
        torch.nn.functional.normalize(torch.randn(4, 5), dim=1),
        torch.nn.functional.normalize(torch.randn(9, 5), dim=1),
    )
    # was "expected m1 and m2 to have the same dtype"
    mixed = kth_neighbour_distance(q.double(), bank, 3)
    assert mixed.dtype == torch.float64
    assert torch.allclose(mixed, kth_neighbour_distance(q.double(), bank.double(), 3))
    z, y = torch.randn(30, 3), torch.arange(30) % 2
    flow = ResFlow(n_blocks=1, hidden_dim=8, epochs=1, batch_size=16).fit(
        {"features": z, "labels": y}
    )
    assert torch.equal(flow.score(z[:5].double()), flow.score(z[:5]))


def test_react_percentile_range() -> None:
    head = nn.Linear(4, 3)
    assert ReAct(head, percentile=1.5).percentile == 1.5  # a percentile, not a probability
    with pytest.raises(ValueError, match="percentile must be <= 100"):
        ReAct(head, percentile=150.0)


def test_save_feature_folder_writes_nothing_on_bad_input(tmp_path) -> None:
    z, y = torch.randn(6, 4), torch.arange(6) % 3
    head = nn.Linear(4, 3)
    good = {"features": z, "logits": head(z).detach(), "labels": y}
    sets = {
        "train": good,
        "test": good,
        "ood/noise": {"features": z[:2], "logits": good["logits"][:2]},
    }
    root = save_feature_folder(tmp_path / "f", sets, head)
    before = {p: p.read_bytes() for p in root.rglob("*.pt")}
    nan_set = {**good, "features": _poke(z, NAN)}
    with pytest.raises(ValueError, match=r"sets\['train'\] is not a valid feature dict.*NaN"):
        save_feature_folder(root, {"train": nan_set}, head)
    with pytest.raises(ValueError, match=r"head has weight \(3, 3\)"):
        save_feature_folder(root, sets, nn.Linear(3, 3))
    assert {p: p.read_bytes() for p in root.rglob("*.pt")} == before  # the good folder is untouched


def test_lip_swish_is_elementwise_and_refuses_non_finite_input() -> None:
    act = LipSwish()
    x = torch.randn(2, 3, 4)
    assert torch.equal(act(x), x * torch.sigmoid(x) / 1.1)
    assert act(torch.zeros(0, 4)).shape == (0, 4)
    with pytest.raises(ValueError, match=r"\bx contains 1 NaN"):
        act(_poke(x, NAN))
    with pytest.raises(TypeError, match=r"\bx must be a floating tensor"):
        act(torch.ones(3, dtype=torch.long))


def test_toy_helpers_refuse_bad_inputs() -> None:
    with pytest.raises(ValueError, match="energy_fn's output contains"):
        energy_grid(lambda z: z[:, 0] * NAN, n=4)  # was a silent NaN log-density
    with pytest.raises(ValueError, match="bounds must satisfy"):
        energy_grid(lambda z: z.pow(2).sum(1), bounds=(1.0, -1.0, -1.0, 1.0), n=4)
    net = SmallConvNet(3, width=4)
    x, y = torch.rand(6, 1, 6, 6), torch.arange(6) % 3
    with pytest.raises(ValueError, match=r"\bx contains 1 NaN"):
        train_classifier(net, _poke(x, NAN), y, epochs=1, device="cpu")
    with pytest.raises(ValueError, match=r"x has 1 rows but y has 6"):
        train_classifier(net, x[None], y, epochs=1, device="cpu")
    with pytest.raises(ValueError, match=r"x must have shape \(N, 1, H, W\)"):
        net(torch.rand(2, 3, 6, 6))
