"""Tests of the training recipes (rank_lab.train.recipes): one schema, the TrainConfig keys, for the
recipes of the Ramzi thesis and papers and the RS@k recipes of Section 5.3.2 of the Patel thesis."""

from __future__ import annotations

import pytest
import torch

from rank_lab.engine.optim import build_optimizer
from rank_lab.losses import SmoothRecallAtK, build_loss
from rank_lab.train import TrainConfig
from rank_lab.train.recipes import RECIPES, list_recipes


def _loss(cfg: TrainConfig) -> SmoothRecallAtK:
    return build_loss(cfg.loss, **cfg.loss_kwargs)


def test_rs_at_k_recipes():
    names = list_recipes("recall_*")
    assert {
        "recall_sop_resnet50",
        "recall_cars196_resnet50",
        "recall_inaturalist_vit_b16",
        "recall_gldv1_resnet101",
    } <= set(names)
    assert {n for n in names if not n.endswith("_simix")} == {
        n[: -len("_simix")] for n in names if n.endswith("_simix")
    }
    cars = TrainConfig.recipe("recall_cars196_resnet50")
    assert (cars.batch_size, cars.lr, cars.epochs, cars.milestones) == (392, 1e-4, 170, (80, 140))
    # the thesis' tau_1, tau_2
    assert (cars.loss_kwargs["tau_star"], cars.loss_kwargs["tau"]) == (1.0, 0.01)
    assert (cars.m_per_class, cars.multistage_chunk_size, cars.recipe_name) == (
        4,
        98,
        "recall_cars196_resnet50",
    )
    loss = _loss(cars)
    assert isinstance(loss, SmoothRecallAtK) and loss.ks == (1, 2, 4, 8, 16)
    assert loss.tau_star == (1.0,) * 5 and loss.tau == 0.01 and not loss.simix
    simix_loss = _loss(TrainConfig.recipe("recall_cars196_resnet50_simix"))
    assert simix_loss.simix and simix_loss.ks == (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)
    gld, gld_simix = (
        TrainConfig.recipe("recall_gldv1_resnet101"),
        TrainConfig.recipe("recall_gldv1_resnet101_simix"),
    )
    assert (
        _loss(gld).ks == (1, 2, 4)
        and _loss(gld_simix).ks == (1, 2, 4, 8)
        and _loss(gld_simix).simix
    )
    assert (
        gld.epochs * gld.batches_per_epoch,
        gld.batch_size,
        gld.model.embed_dim,
        gld.model.layer_norm,
    ) == (500, 4096, 2048, False)
    assert TrainConfig.recipe("recall_sop_resnet50", batch_size=384).batch_size == 384
    vit = TrainConfig.recipe("recall_sop_vit_b16")
    assert vit.model.backbone == "vit_base_patch16_224" and vit.dataset == "sop"
    opt = build_optimizer(
        [torch.nn.Parameter(torch.zeros(2))],
        vit.optimizer,
        lr=vit.lr,
        weight_decay=vit.weight_decay,
    )
    sched = vit.schedule(steps_per_epoch=3)
    assert (
        isinstance(opt, torch.optim.AdamW)
        and opt.defaults["lr"] == 5e-5
        and opt.defaults["weight_decay"] == 4e-4
    )
    assert (sched.kind, sched.milestones, sched.gamma, sched.step_unit, sched.total_steps) == (
        "step",
        (25, 50),
        0.3,
        3,
        165,
    )
    with pytest.raises(ValueError, match="unknown recipe 'recall_nope'"):
        TrainConfig.recipe("recall_nope")


def test_recipes_are_checked():
    with pytest.raises(ValueError, match="lr must be > 0"):
        TrainConfig.recipe("recall_sop_resnet50", lr=-1.0)
    with pytest.raises(ValueError, match="unknown config key 'learning_rate'"):
        TrainConfig.recipe("recall_sop_resnet50", learning_rate=1e-4)
    with pytest.raises(TypeError, match="name must be a str"):
        TrainConfig.recipe(5)
    with pytest.raises(TypeError, match="epochs must be an int"):
        TrainConfig.recipe("recall_sop_resnet50", epochs=None)
    with pytest.raises(ValueError, match="milestones must be ints >= 0"):
        TrainConfig.recipe("recall_sop_resnet50", milestones=(-1,))
    with pytest.raises(ValueError, match="gamma must be > 0"):
        TrainConfig.recipe("recall_sop_resnet50", gamma=0.0)
    bad = TrainConfig.recipe("recall_sop_resnet50")
    with pytest.raises(ValueError, match="tau_star must be > 0"):
        build_loss(bad.loss, **{**bad.loss_kwargs, "tau_star": 0.0})


def test_train_config_recipes():
    assert list_recipes() == sorted(RECIPES) and all(
        RECIPES.entry(n).summary for n in list_recipes()
    )
    for name in RECIPES:
        cfg = TrainConfig.recipe(name)
        assert cfg.recipe_name == name and cfg.lr == RECIPES[name]["lr"]
        assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert "recall_sop_resnet50" in RECIPES and "roadmap_sop" in RECIPES  # one schema, one table


@pytest.mark.parametrize(
    "name", ["recall_sop_vit_b16", "recall_cars196_vit_b32", "recall_gldv1_resnet101"]
)
def test_recall_recipe_schedule_is_torch_multisteplr(name):
    """The trainer's schedule of a recipe gives, at every optimiser step, the rate that torch's
    MultiStepLR(milestones, gamma) stepped once per epoch gives (the recipe's original
    scheduler)."""
    recipe, per_epoch = TrainConfig.recipe(name), 2
    opt = build_optimizer(
        [torch.nn.Parameter(torch.zeros(1))],
        recipe.optimizer,
        lr=recipe.lr,
        weight_decay=recipe.weight_decay,
    )
    sched = recipe.schedule(per_epoch)
    gamma = recipe.gamma if recipe.scheduler == "step" else 1.0
    reference = torch.optim.lr_scheduler.MultiStepLR(
        opt, milestones=list(recipe.milestones), gamma=gamma
    )
    for epoch in range(min(sched.total_steps // per_epoch, 60)):
        expected = reference.get_last_lr()[0]
        for s in range(per_epoch):
            assert sched.lr(epoch * per_epoch + s, recipe.lr) == pytest.approx(expected, rel=1e-12)
        opt.step()
        reference.step()
    with pytest.raises(ValueError, match="steps_per_epoch"):
        recipe.schedule(0)
