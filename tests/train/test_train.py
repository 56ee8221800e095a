"""Tests of rank_lab.train: config validation and presets, LR schedule, trainer, checkpoint/resume,
log."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from rank_lab.data import make_open_set
from rank_lab.engine import load_checkpoint, lr_at
from rank_lab.train import RECIPES, TrainConfig, Trainer, list_recipes


class PairLoss(nn.Module):
    """Contrastive pair loss (the L_DG form, Ramzi thesis Eq. 3.7) written for the tests only."""

    def __init__(self, alpha: float = 0.9, beta: float = 0.6) -> None:
        super().__init__()
        self.alpha, self.beta = alpha, beta
        self.calls: list[int] = []

    def forward(self, emb, labels, ref_emb=None, ref_labels=None, ref_self_index=None):
        self.calls.append(0 if ref_emb is None else ref_emb.shape[0])
        same = ref_emb is None
        ref_emb, ref_labels = (emb, labels) if same else (ref_emb, ref_labels)
        s = emb @ ref_emb.T
        pos = labels[:, None] == ref_labels[None, :]
        if same:
            pos = pos & ~torch.eye(len(labels), dtype=torch.bool, device=emb.device)
        elif ref_self_index is not None:  # the query's own copy in the memory is not a positive
            rows = torch.nonzero(ref_self_index >= 0).squeeze(1)
            pos[rows, ref_self_index[rows]] = False
        neg = labels[:, None] != ref_labels[None, :]
        return torch.relu(self.alpha - s)[pos].mean() + torch.relu(s - self.beta)[neg].mean()


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is faster than two contending ones (restored after)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def split():
    return make_open_set(n_classes=16, per_class=16, dim=8, input_dim=16, seed=0)


def _cfg(**kw):
    base = dict(
        backbone="mlp",
        hidden_dims=(32,),
        embed_dim=8,
        batch_size=16,
        m_per_class=4,
        epochs=3,
        lr=3e-3,
        eval_ks=(1, 4),
        progress=False,
    )
    base.update(kw)
    return TrainConfig.from_dict(base)


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------- config
def test_config_roundtrip_and_key_forms():
    cfg = TrainConfig.from_dict(
        {"lr": 1e-2, "backbone": "tiny_cnn", "model": {"embed_dim": 16}, "model.width": 8}
    )
    assert (
        cfg.lr == 1e-2
        and cfg.model.backbone == "tiny_cnn"
        and cfg.model.embed_dim == 16
        and cfg.model.width == 8
    )
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert TrainConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert (
        TrainConfig.from_dict({"lr": 0.1, "smoke": True, "seed": 3}, ignore_unknown=True).seed == 3
    )
    new = cfg.replace(epochs=7, embed_dim=4)
    assert new.epochs == 7 and new.model.embed_dim == 4 and cfg.epochs == 10


@pytest.mark.parametrize(
    ("bad", "err", "match"),
    [
        ({"lrr": 1e-3}, ValueError, r"Did you mean \['lr'\]"),
        ({"lr": -1.0}, ValueError, "lr must be > 0"),
        ({"lr": float("nan")}, ValueError, "lr must be finite"),
        ({"epochs": 0}, ValueError, "epochs must be >= 1"),
        ({"epochs": 2.5}, TypeError, "epochs must be an int"),
        ({"batch_size": 30}, ValueError, "multiple of m_per_class"),
        ({"batch_size": 4, "m_per_class": 4}, ValueError, "at least 2 classes"),
        ({"optimizer": "rmsprop"}, ValueError, "optimizer must be one of"),
        ({"scheduler": "exponential"}, ValueError, "scheduler must be one of"),
        ({"warmup_epochs": 10, "epochs": 10}, ValueError, "warmup_epochs"),
        ({"min_lr": 1.0, "lr": 0.1}, ValueError, "min_lr"),
        ({"amp": "yes"}, TypeError, "amp must be a bool"),
        ({"eval_ks": (0, 1)}, ValueError, "eval_ks"),
        ({"grad_clip": 0.0}, ValueError, "grad_clip must be > 0"),
        ({"embed_dim": 0}, ValueError, "model.embed_dim"),
        ({"model": "resnet50"}, TypeError, "model must be a dict"),
        ({"model.foo": 1}, ValueError, "unknown config key 'model.foo'"),
    ],
)
def test_config_validation_errors(bad, err, match):
    with pytest.raises(err, match=match):
        TrainConfig.from_dict(bad)


def test_recipes_transcribe_the_papers():
    sop = TrainConfig.recipe("roadmap_sop")
    assert (sop.lr, sop.batch_size, sop.m_per_class, sop.epochs, sop.scheduler) == (
        5e-5,
        256,
        4,
        100,
        "cosine",
    )
    assert (sop.model.backbone, sop.model.pooling, sop.model.embed_dim, sop.model.layer_norm) == (
        "resnet50",
        "avg",
        512,
        True,
    )
    assert sop.model.weights is None and sop.recipe_name == "roadmap_sop"
    inat = TrainConfig.recipe("roadmap_inat")
    assert (inat.lr, inat.weight_decay, inat.min_lr, inat.eval_ks) == (
        1e-5,
        4e-4,
        1e-6,
        (1, 4, 16, 32),
    )
    cub = TrainConfig.recipe("roadmap_cub")
    assert (cub.model.pooling, cub.image_size, cub.eval_ks) == ("max", 256, (1, 2, 4, 8))
    assert TrainConfig.recipe("roadmap_sop_sota").model.pooling == "gem"
    assert TrainConfig.recipe("roadmap_sop_sota").memory_size == 59551
    assert TrainConfig.recipe("happier_sop").freeze_backbone_epochs == 5
    over = TrainConfig.recipe("roadmap_sop", epochs=2, weights="/x/r50.pth")
    assert over.epochs == 2 and over.model.weights == "/x/r50.pth" and over.lr == 5e-5
    assert TrainConfig.from_dict({"recipe": "roadmap_inat", "epochs": 3}).lr == 1e-5
    assert list_recipes() == sorted(RECIPES) and all(
        RECIPES.entry(n).summary for n in list_recipes()
    )
    with pytest.raises(ValueError, match="unknown recipe"):
        TrainConfig.recipe("roadmap_xyz")


# ---------------------------------------------------------------------------- schedule
def test_lr_schedule_matches_torch_cosine_and_warmup():
    base, total = 0.1, 20
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=base)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total, eta_min=0.01)
    for step in range(total):
        assert lr_at(step, base, total_steps=total, min_lr=0.01) == pytest.approx(
            opt.param_groups[0]["lr"], rel=1e-9
        )
        opt.step()
        sched.step()
    warm = [lr_at(s, base, total_steps=total, warmup_steps=4) for s in range(total)]
    assert warm[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert warm[4] == pytest.approx(base) and all(
        a >= b for a, b in zip(warm[4:], warm[5:], strict=False)
    )
    assert lr_at(7, base, total_steps=total, schedule="constant") == base


# ---------------------------------------------------------------------------- training
def test_short_run_lowers_the_loss_and_logs(split, tmp_path):
    cfg = _cfg(
        epochs=4,
        eval_at_start=True,
        log_path=str(tmp_path / "log.json"),
        eval_metrics=("R@k", "mAP@R", "mAP"),
    )
    loss = PairLoss()
    tr = Trainer(None, loss, (split.x_train, split.y_train), (split.x_test, split.y_test), cfg)
    with torch.no_grad():
        before = float(loss(tr.model(split.x_train), split.y_train))
    hist = tr.fit()
    tr.model.eval()
    with torch.no_grad():
        after = float(loss(tr.model(split.x_train), split.y_train))
    assert after < 0.8 * before
    assert hist[-1]["loss"] < hist[1]["loss"]
    log = json.loads((tmp_path / "log.json").read_text())
    assert log["config"]["lr"] == 3e-3 and log["config"]["model"]["input_dim"] == 16
    recs = log["history"]
    assert [r["epoch"] for r in recs] == [0, 1, 2, 3, 4]
    for r in recs[1:]:
        assert {"loss", "lr", "lrs", "time", "metrics", "step", "n_batches"} <= set(r)
        assert r["time"] > 0 and math.isfinite(r["loss"])
        assert {"R@1", "R@4", "mAP@R", "mAP"} <= set(r["metrics"])
        assert 0 <= r["metrics"]["mAP@R"] <= 1
    assert recs[0]["loss"] is None and recs[0]["metrics"]["n_queries"] == split.x_test.shape[0]
    lrs = [r["lr"] for r in recs[1:]]
    assert all(a > b for a, b in zip(lrs, lrs[1:], strict=False))
    assert recs[-1]["step"] == 4 * tr.steps_per_epoch


def test_interrupt_and_resume_equals_uninterrupted(split, tmp_path):
    data = ((split.x_train, split.y_train), (split.x_test, split.y_test))
    kw = dict(epochs=3, eval_every=1, grad_clip=5.0, warmup_epochs=1)

    full = Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "a"), **kw))
    full.fit()

    class Crash(PairLoss):
        def forward(self, *a, **k):
            if len(self.calls) == full.steps_per_epoch + 3:  # mid-way through epoch 2
                raise KeyboardInterrupt
            return super().forward(*a, **k)

    cfg_b = _cfg(checkpoint_dir=str(tmp_path / "b"), **kw)
    with pytest.raises(KeyboardInterrupt):
        Trainer(None, Crash(), *data, cfg_b).fit()
    ckpt = load_checkpoint(tmp_path / "b" / "last.pt")
    assert ckpt["epoch"] == 1 and len(ckpt["history"]) == 1
    resumed = Trainer(None, PairLoss(), *data, cfg_b)
    resumed.fit()
    for k, v in _params(full.model).items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    strip = lambda h: [{k: v for k, v in r.items() if k not in ("time",)} for r in h]  # noqa: E731
    a, b = strip(full.history), strip(resumed.history)
    for ra, rb in zip(a, b, strict=True):
        ra["metrics"].pop("eval_time"), rb["metrics"].pop("eval_time")
    assert a == b
    log = json.loads((tmp_path / "b" / "log.json").read_text())
    assert [r["epoch"] for r in log["history"]] == [1, 2, 3]
    # a finished run resumes as a no-op; a different config is refused
    assert len(Trainer(None, PairLoss(), *data, cfg_b).fit()) == 3
    with pytest.raises(ValueError, match="different config"):
        Trainer(None, PairLoss(), *data, cfg_b.replace(lr=1e-2)).fit()


def test_step_scheduler_follows_multisteplr_and_resumes_longer(split, tmp_path):
    """scheduler="step": every step's rate is the MultiStepLR rate of its epoch (per group); a run
    resumed with more epochs equals the straight longer run (the step schedule is length-free), and
    other milestones are refused on resume."""
    data = ((split.x_train, split.y_train), None)
    kw = dict(scheduler="step", milestones=(1, 2), gamma=0.5, head_lr=6e-3, eval_every=0)
    tr = Trainer(None, PairLoss(), *data, _cfg(epochs=3, **kw))
    tr.fit()
    assert [r["lrs"] for r in tr.history] == [
        {"backbone": 3e-3 * f, "head": 6e-3 * f} for f in (1.0, 0.5, 0.25)
    ]
    short = _cfg(epochs=2, checkpoint_dir=str(tmp_path), **kw)
    Trainer(None, PairLoss(), *data, short).fit()
    longer = Trainer(None, PairLoss(), *data, short.replace(epochs=3))
    longer.fit()
    for k, v in _params(tr.model).items():
        assert torch.equal(v, longer.model.state_dict()[k]), k
    with pytest.raises(ValueError, match="another schedule.*milestones"):
        Trainer(None, PairLoss(), *data, short.replace(epochs=3, milestones=(2,))).fit()


def test_same_seed_same_model_different_seed_differs(split):
    runs = [
        Trainer(None, PairLoss(), (split.x_train, split.y_train), None, _cfg(epochs=1, seed=s))
        for s in (0, 0, 1)
    ]
    for r in runs:
        r.fit()
    p = [_params(r.model) for r in runs]
    assert all(torch.equal(p[0][k], p[1][k]) for k in p[0])
    assert not all(torch.equal(p[0][k], p[2][k]) for k in p[0])


def test_param_groups_and_head_lr(split):
    loss = PairLoss()
    loss.scale = nn.Parameter(torch.ones(()))  # a learnable loss parameter (like proxies)
    tr = Trainer(
        None,
        loss,
        (split.x_train, split.y_train),
        None,
        _cfg(lr=1e-3, head_lr=4e-3, loss_lr=9e-3, scheduler="constant", epochs=1),
    )
    groups = {g["name"]: g for g in tr.optimizer.param_groups}
    assert set(groups) == {"backbone", "head", "loss"}
    tr.fit()
    assert (groups["backbone"]["lr"], groups["head"]["lr"], groups["loss"]["lr"]) == (
        1e-3,
        4e-3,
        9e-3,
    )
    assert tr.history[-1]["lrs"] == {"backbone": 1e-3, "head": 4e-3, "loss": 9e-3}


def test_freeze_backbone_epochs(split):
    tr = Trainer(
        None,
        PairLoss(),
        (split.x_train, split.y_train),
        None,
        _cfg(epochs=2, freeze_backbone_epochs=1),
    )
    bb0, hd0 = _params(tr.model.backbone), _params(tr.model.head)
    tr.train_epoch()
    tr.epoch += 1
    assert all(torch.equal(v, tr.model.backbone.state_dict()[k]) for k, v in bb0.items())
    assert not all(torch.equal(v, tr.model.head.state_dict()[k]) for k, v in hd0.items())
    tr.train_epoch()
    assert not all(torch.equal(v, tr.model.backbone.state_dict()[k]) for k, v in bb0.items())


def test_gradient_clipping_bounds_the_step(split):
    cfg = _cfg(
        optimizer="sgd",
        momentum=0.0,
        lr=1.0,
        scheduler="constant",
        grad_clip=1e-3,
        epochs=1,
        batches_per_epoch=1,
    )
    tr = Trainer(None, PairLoss(), (split.x_train, split.y_train), None, cfg)
    before = torch.cat([p.detach().flatten().clone() for p in tr.model.parameters()])
    rec = tr.train_epoch()
    after = torch.cat([p.detach().flatten() for p in tr.model.parameters()])
    assert rec["grad_norm"] > 1e-3  # the raw gradient was larger than the clip ...
    assert float((after - before).norm()) <= 1e-3 * (1 + 1e-4)  # ... and the step was clipped


def test_memory_is_used_after_activation(split):
    from rank_lab.memory import CrossBatchMemory, MemoryLoss

    loss = PairLoss()
    mem = CrossBatchMemory(40, 8)
    cfg = _cfg(epochs=2, memory_activate_epoch=1, batches_per_epoch=3)
    tr = Trainer(None, loss, (split.x_train, split.y_train), None, cfg, memory=mem)
    assert isinstance(tr.loss_fn, MemoryLoss) and tr.memory is mem
    # official (batch + memory) / 2
    assert (tr.loss_fn.batch_weight, tr.loss_fn.memory_weight) == (0.5, 0.5)
    tr.fit()
    assert loss.calls[:3] == [0, 0, 0]  # epoch 1: batch loss only, nothing enqueued
    assert loss.calls[3:] == [0, 16, 0, 32, 0, 40]  # epoch 2: batch + memory (enqueue, then read)
    assert [r["memory_active"] for r in tr.history] == [False, True]


def test_memory_from_config_checkpoints_and_resumes(split, tmp_path):
    data = ((split.x_train, split.y_train), None)
    kw = dict(epochs=2, memory_size=24, batches_per_epoch=2)
    full = Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "a"), **kw))
    full.fit()
    assert len(full.memory) == 24

    def stop(trainer, rec):
        raise KeyboardInterrupt

    part = Trainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "b"), **kw), callbacks=[stop]
    )
    with pytest.raises(KeyboardInterrupt):
        part.fit()
    assert load_checkpoint(tmp_path / "b" / "last.pt")["epoch"] == 1
    resumed = Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "b"), **kw))
    resumed.fit()
    assert torch.equal(resumed.memory.embeddings, full.memory.embeddings)
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k])
    uniq = Trainer(
        None,
        PairLoss(),
        *data,
        _cfg(memory_size=1, memory_unique=True, epochs=1, batches_per_epoch=2),
    )
    assert uniq.memory.size == len(split.y_train) and uniq.memory.unique
    uniq.fit()
    assert len(uniq.memory) == 32  # two batches of 16 distinct items, one slot each


def test_memory_loss_combination_formula(split):
    from rank_lab.memory import CrossBatchMemory

    class Const(nn.Module):
        def forward(self, emb, y, ref=None, ref_y=None, ref_self_index=None):
            return emb.sum() * 0 + (1.0 if ref is None else 4.0)

    cfg = _cfg(epochs=1, memory_weight=3.0, batches_per_epoch=1)
    tr = Trainer(
        None, Const(), (split.x_train, split.y_train), None, cfg, memory=CrossBatchMemory(64, 8)
    )
    rec = tr.train_epoch()
    assert rec["loss"] == pytest.approx((1.0 + 3.0 * 4.0) / 4.0)
    with pytest.raises(TypeError, match="CrossBatchMemory"):
        Trainer(None, Const(), (split.x_train, split.y_train), None, cfg, memory=object())


def test_nan_loss_raises(split):
    class NaNLoss(nn.Module):
        def forward(self, emb, y):
            return emb.sum() * float("nan")

    tr = Trainer(None, NaNLoss(), (split.x_train, split.y_train), None, _cfg(epochs=1))
    with pytest.raises(FloatingPointError, match="loss is nan"):
        tr.fit()


def test_input_checks(split):
    with pytest.raises(TypeError, match="train_data"):
        Trainer(None, PairLoss(), [1, 2, 3], None, _cfg())
    with pytest.raises(ValueError, match="rows"):
        Trainer(None, PairLoss(), (split.x_train, split.y_train[:-1]), None, _cfg())
    with pytest.raises(ValueError, match="no loss given"):
        Trainer(None, None, (split.x_train, split.y_train), None, _cfg())
    tr = Trainer(None, PairLoss(), (split.x_train, split.y_train), None, _cfg())
    with pytest.raises(ValueError, match="no evaluation data"):
        tr.evaluate()
    # one rule with retrieval_metrics: a k larger than the gallery is refused, never dropped
    with pytest.raises(ValueError, match=r"eval_ks holds k=\[4\] but data has 4 items"):
        tr.evaluate((split.x_test[:4], split.y_test[:4]))
    with pytest.raises(ValueError, match=r"eval_ks holds k=\[4\] but test_data has 4 items"):
        Trainer(
            None,
            PairLoss(),
            (split.x_train, split.y_train),
            (split.x_test[:4], split.y_test[:4]),
            _cfg(),
        )


def test_tiny_cnn_on_images_and_a_given_model():
    torch.manual_seed(0)
    x = torch.rand(48, 1, 8, 8)
    y = torch.arange(12).repeat_interleave(4)
    x = x + y[:, None, None, None].float() / 12  # class-dependent brightness
    cfg = _cfg(backbone="tiny_cnn", in_channels=1, width=4, epochs=1, eval_ks=(1,))
    tr = Trainer(None, PairLoss(), (x, y), (x, y), cfg)
    hist = tr.fit()
    assert hist[-1]["metrics"]["n_queries"] == 48
    emb, lab = tr.embed((x, y))
    assert emb.shape == (48, 8) and torch.equal(lab, y)
    from rank_lab.models import build_model

    model = build_model(cfg.model)
    tr2 = Trainer(model, PairLoss(), (x, y), None, cfg)
    assert tr2.model is model
    tr2.fit()


def test_supap_training_improves_map_at_r_on_unseen_classes():
    """The issue's check: a short SupAP run beats the untrained model on held-out classes.

    The task: 40 Gaussian classes in R^16 through a random nonlinear map to R^64 plus observation
    noise off the 16-d manifold; learning to discard the noise transfers to unseen classes.
    """
    from rank_lab.losses import SupAP

    split = make_open_set(n_classes=40, per_class=16, dim=16, input_dim=64, obs_noise=0.5, seed=0)
    cfg = _cfg(
        hidden_dims=(128,),
        embed_dim=32,
        batch_size=32,
        epochs=4,
        eval_at_start=True,
        eval_ks=(1, 10),
    )
    hist = Trainer(
        None, SupAP(), (split.x_train, split.y_train), (split.x_test, split.y_test), cfg
    ).fit()
    first, last = hist[0]["metrics"], hist[-1]["metrics"]
    assert first["n_queries"] == split.x_test.shape[0]
    assert last["mAP@R"] > first["mAP@R"] + 0.02, (first["mAP@R"], last["mAP@R"])
    assert last["R@1"] > first["R@1"]


def test_loss_by_name_gets_classes_dim_and_relabelled_labels(split):
    y_train = split.y_train * 7 + 100  # original ids far from 0..C-1
    cfg = _cfg(loss="roadmap_tpami", loss_lr=10.0, epochs=1, batches_per_epoch=2)
    tr = Trainer(None, None, (split.x_train, y_train), None, cfg)
    proxies = tr.loss_fn.dg_loss.proxies
    assert proxies.shape == (split.n_classes_train, 8)
    groups = {g["name"]: g for g in tr.optimizer.param_groups}
    assert groups["loss"]["lr"] == 10.0 and any(p is proxies for p in groups["loss"]["params"])
    assert tr.train_labels.min() == 0 and tr.train_labels.max() == split.n_classes_train - 1
    before = proxies.detach().clone()
    tr.fit()
    assert not torch.equal(before, proxies.detach())
    nr = Trainer(
        None,
        None,
        (split.x_train, split.y_train),
        None,
        _cfg(loss="roadmap_neurips", epochs=1, batches_per_epoch=1),
    )
    assert "loss" not in {g["name"] for g in nr.optimizer.param_groups}  # pair L_DG: no parameter
    with pytest.raises(ValueError, match="unknown loss"):
        Trainer(None, None, (split.x_train, split.y_train), None, _cfg(loss="no_such_loss"))


@pytest.mark.cuda
def test_mixed_precision_on_cuda(split):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    tr = Trainer(
        None,
        PairLoss(),
        (split.x_train, split.y_train),
        (split.x_test, split.y_test),
        _cfg(epochs=1, device="cuda", amp=True),
    )
    assert tr.amp and tr.scaler.is_enabled()
    hist = tr.fit()
    assert math.isfinite(hist[-1]["loss"])


def test_hierarchical_sampler_option_draws_super_classes() -> None:
    """``sampler="hierarchical"``: every batch holds ``super_classes_per_batch`` super-classes."""
    from rank_lab.data import make_hierarchical_open_set
    from rank_lab.train import TrainConfig, Trainer

    data = make_hierarchical_open_set(n_coarse=6, fine_per_coarse=4, per_class=8, seed=0)
    cfg = TrainConfig(
        epochs=1,
        batch_size=16,
        m_per_class=4,
        sampler="hierarchical",
        super_classes_per_batch=2,
        batches_per_epoch=3,
        device="cpu",
        eval_every=0,
    )
    from rank_lab.losses import SupAP
    from rank_lab.models import EmbeddingHead, EmbeddingModel, MLPBackbone

    model = EmbeddingModel(MLPBackbone(data.x_train.shape[1], (16,)), None, EmbeddingHead(16, 8))
    trainer = Trainer(model, SupAP(), (data.x_train, data.y_train), None, cfg)
    for batch in trainer.sampler:
        coarse = trainer.train_labels[batch, 1]
        assert len(torch.unique(coarse)) == 2
    trainer.fit()
    assert len(trainer.history) == 1
    with pytest.raises(ValueError, match="sampler"):
        TrainConfig(sampler="bogus")
