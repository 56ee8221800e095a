"""Tests of the training recipes (rank_lab.train.recipes): the TrainConfig recipes of the Ramzi thesis
and papers, the RS@k recipes of Section 5.3.2 of the Patel thesis, and the former names."""

from __future__ import annotations

import pytest
import torch

from rank_lab.losses import SmoothRecallAtK
from rank_lab.train import TrainConfig
from rank_lab.train.recipes import (
    RECALL_RECIPES,
    RECIPES,
    RecallRecipe,
    get_recall_recipe,
    list_recall_recipes,
    list_recipes,
)


def test_rs_at_k_recipes():
    names = list_recall_recipes()
    assert {"sop_resnet50", "cars196_resnet50", "inaturalist_vit_b16", "gldv1_resnet101"} <= set(names)
    cars = get_recall_recipe("cars196_resnet50")
    assert (cars.batch_size, cars.lr, cars.epochs, cars.milestones) == (392, 1e-4, 170, (80, 140))
    assert (cars.tau_star, cars.tau) == (1.0, 0.01)  # the thesis' tau_1, tau_2
    loss = cars.build_loss()
    assert isinstance(loss, SmoothRecallAtK) and loss.ks == (1, 2, 4, 8, 16)
    assert loss.tau_star == (1.0,) * 5 and loss.tau == 0.01 and not loss.simix
    simix_loss = cars.build_loss(simix=True)
    assert simix_loss.simix and simix_loss.ks == (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)
    gld = get_recall_recipe("gldv1_resnet101")
    assert gld.build_loss().ks == (1, 2, 4) and gld.build_loss(simix=True).ks == (1, 2, 4, 8)
    assert get_recall_recipe("sop_resnet50", batch_size=384).batch_size == 384
    opt, sched = get_recall_recipe("sop_vit_b16").build_optimizer([torch.nn.Parameter(torch.zeros(2))], steps_per_epoch=3)
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["lr"] == 5e-5 and opt.defaults["weight_decay"] == 4e-4
    assert (sched.kind, sched.milestones, sched.gamma, sched.step_unit, sched.total_steps) == ("step", (25, 50), 0.3, 3, 165)
    with pytest.raises(ValueError, match="unknown RS@k recipe name 'nope'"):
        get_recall_recipe("nope")


def test_recipes_are_checked():
    with pytest.raises(ValueError, match="lr must be > 0"):
        get_recall_recipe("sop_resnet50", lr=-1.0)  # a recipe was any dataclass
    with pytest.raises(ValueError, match=r"unknown RecallRecipe field\(s\) \['learning_rate'\]"):
        get_recall_recipe("sop_resnet50", learning_rate=1e-4)
    with pytest.raises(TypeError, match="name must be a str"):
        get_recall_recipe(5)
    with pytest.raises(ValueError, match="epochs and n_batches are both None"):
        RecallRecipe("sop", "resnet50", "adam", 1e-4, None, ())
    with pytest.raises(ValueError, match="tau_star must be > 0"):
        get_recall_recipe("sop_resnet50", tau_star=0.0)


def test_train_config_recipes():
    assert set(list_recipes()) == set(RECIPES) and all(list_recipes().values())
    for name in RECIPES:
        cfg = TrainConfig.recipe(name)
        assert cfg.recipe_name == name and cfg.lr == RECIPES[name]["lr"]
    assert "sop_resnet50" in RECALL_RECIPES and "roadmap_sop" in RECIPES  # two kinds of recipes, one module


@pytest.mark.parametrize("name", ["sop_vit_b16", "cars196_vit_b32", "gldv1_resnet101"])
def test_recall_recipe_schedule_is_torch_multisteplr(name):
    """The engine's "step" schedule of a recipe gives, at every optimiser step, the rate that torch's
    MultiStepLR(milestones, gamma) stepped once per epoch gives (the recipe's original scheduler)."""
    recipe, per_epoch = get_recall_recipe(name), 2
    opt, sched = recipe.build_optimizer([torch.nn.Parameter(torch.zeros(1))], steps_per_epoch=per_epoch)
    reference = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(recipe.milestones), gamma=recipe.gamma)
    for epoch in range(min(sched.total_steps // per_epoch, 60)):
        expected = reference.get_last_lr()[0]
        for s in range(per_epoch):
            assert sched.lr(epoch * per_epoch + s, recipe.lr) == pytest.approx(expected, rel=1e-12)
        opt.step()
        reference.step()
    with pytest.raises(ValueError, match="steps_per_epoch"):
        recipe.schedule(0)
