"""Resume semantics (a checkpoint records its schedule) and the numerical guard of the trainers
(issue 16)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rank_lab.data import make_open_set
from rank_lab.engine import load_checkpoint
from rank_lab.engine.guard import NonFiniteTrainingError
from rank_lab.train import TrainConfig, Trainer
from rank_lab.train.distributed import DistributedTrainer


class PairLoss(nn.Module):
    """Contrastive pair loss (the L_DG form, Ramzi thesis Eq. 3.7), written for the tests only."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, emb, labels, ref_emb=None, ref_labels=None, ref_self_index=None):
        self.calls += 1
        s = emb @ emb.T
        pos = (labels[:, None] == labels[None, :]) & ~torch.eye(
            len(labels), dtype=torch.bool, device=emb.device
        )
        neg = labels[:, None] != labels[None, :]
        return torch.relu(0.9 - s)[pos].mean() + torch.relu(s - 0.6)[neg].mean()


@pytest.fixture(scope="module")
def data():
    split = make_open_set(n_classes=8, per_class=8, dim=8, input_dim=12, seed=0)
    return (split.x_train, split.y_train), (split.x_test, split.y_test)


def _cfg(**kw) -> TrainConfig:
    base = dict(
        backbone="mlp",
        hidden_dims=(16,),
        embed_dim=8,
        batch_size=8,
        m_per_class=4,
        epochs=2,
        lr=3e-3,
        eval_ks=(1, 4),
        progress=False,
        batches_per_epoch=3,
    )
    base.update(kw)
    return TrainConfig.from_dict(base)


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    sb = b.state_dict()
    return all(torch.equal(v, sb[k]) for k, v in a.state_dict().items())


# ---------------------------------------------------------------------------------- resume rule
def test_checkpoint_records_its_schedule(data, tmp_path):
    tr = Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path), warmup_epochs=1))
    tr.fit()
    sched = load_checkpoint(tmp_path / "last.pt")["schedule"]
    assert sched["epochs"] == 2 and sched["steps_per_epoch"] == 3 and sched["total_steps"] == 6
    assert (
        sched["warmup_steps"] == 3
        and sched["scheduler"] == "cosine"
        and sched["base_lrs"] == {"backbone": 3e-3, "head": 3e-3}
    )


def test_more_epochs_with_the_constant_schedule_equals_the_straight_run(data, tmp_path):
    kw = dict(scheduler="constant", warmup_epochs=1, grad_clip=5.0)
    Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "a"), epochs=2, **kw)).fit()
    longer = Trainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "a"), epochs=4, **kw)
    )
    longer.fit()
    straight = Trainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "b"), epochs=4, **kw)
    )
    straight.fit()
    assert longer.epoch == straight.epoch == 4 and longer.step == straight.step == 12
    assert _same_weights(longer.model, straight.model)
    assert [r["lr"] for r in longer.history] == [r["lr"] for r in straight.history]
    assert load_checkpoint(tmp_path / "a" / "last.pt")["schedule"]["epochs"] == 4


def test_more_epochs_with_the_cosine_schedule_is_refused(data, tmp_path):
    # the case: 2 epochs, then epochs=4 on the same folder used to restart the cosine
    # schedule
    first = Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path), epochs=2))
    first.fit()
    before = load_checkpoint(tmp_path / "last.pt")
    longer = Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path), epochs=4))
    with pytest.raises(
        ValueError, match=r"epochs: 2 -> 4.*cosine.*start a new run: set resume=False"
    ):
        longer.fit()
    assert longer.epoch == 0 and longer.step == 0  # nothing was loaded or trained
    after = load_checkpoint(tmp_path / "last.pt")
    assert after["epoch"] == before["epoch"] == 2 and all(
        torch.equal(v, after["model"][k]) for k, v in before["model"].items()
    )
    # the documented way out: a new run
    fresh = Trainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path), epochs=4, resume=False)
    )
    assert len(fresh.fit()) == 4


def test_fewer_epochs_than_done_and_other_schedule_changes_are_refused(data, tmp_path):
    kw = dict(checkpoint_dir=str(tmp_path), scheduler="constant", batches_per_epoch=None)
    Trainer(None, PairLoss(), *data, _cfg(epochs=3, **kw)).fit()
    with pytest.raises(ValueError, match="already done 3 epochs"):
        Trainer(None, PairLoss(), *data, _cfg(epochs=2, **kw)).fit()
    # a smaller training set changes the steps per epoch: the schedule would change mid-run
    (x, y), test = data
    keep = y != int(y.unique()[0])
    smaller = Trainer(None, PairLoss(), (x[keep], y[keep]), test, _cfg(epochs=3, **kw))
    with pytest.raises(ValueError, match=r"steps_per_epoch: \d+ -> \d+.*start a new run"):
        smaller.fit()
    with pytest.raises(
        ValueError, match=r"different config \(lr: 0.003 -> 0.01\).*start a new run"
    ):
        Trainer(None, PairLoss(), *data, _cfg(epochs=3, lr=1e-2, **kw)).fit()


def test_the_distributed_trainer_follows_the_same_rule(data, tmp_path):
    DistributedTrainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "c"), epochs=2, device="cpu")
    ).fit()
    with pytest.raises(ValueError, match="epochs: 2 -> 3.*start a new run"):
        DistributedTrainer(
            None,
            PairLoss(),
            *data,
            _cfg(checkpoint_dir=str(tmp_path / "c"), epochs=3, device="cpu"),
        ).fit()
    kw = dict(scheduler="constant", device="cpu")
    DistributedTrainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "d"), epochs=1, **kw)
    ).fit()
    longer = DistributedTrainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "d"), epochs=3, **kw)
    )
    longer.fit()
    straight = DistributedTrainer(
        None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path / "e"), epochs=3, **kw)
    )
    straight.fit()
    assert _same_weights(longer.model, straight.model)


# ---------------------------------------------------------------------------------- numerical guard
class NaNAtCall(PairLoss):
    """Finite until call number ``at`` (1-based), then NaN."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def forward(self, *a, **k):
        loss = super().forward(*a, **k)
        return loss * float("nan") if self.calls >= self.at else loss


@pytest.mark.parametrize("trainer_cls", [Trainer, DistributedTrainer])
def test_nan_loss_names_step_batch_and_last_good_checkpoint(data, tmp_path, trainer_cls):
    cfg = _cfg(checkpoint_dir=str(tmp_path), epochs=3, device="cpu")
    # 3 batches per epoch: call 5 = epoch 2, step 5
    tr = trainer_cls(None, NaNAtCall(at=5), *data, cfg)
    tr.sampler.set_epoch(1)
    expected_batch = sorted(list(tr.sampler)[1])
    with pytest.raises(
        NonFiniteTrainingError, match=r"the loss is nan at epoch 2, step 5, batch indices"
    ) as info:
        tr.fit()
    err = info.value
    assert (err.epoch, err.step) == (2, 4) and sorted(err.batch_indices) == expected_batch
    assert (
        err.checkpoint == tmp_path / "last.pt"
        and "last good checkpoint is" in str(err)
        and "(epoch 1)" in str(err)
    )
    ckpt = load_checkpoint(tmp_path / "last.pt")
    assert ckpt["epoch"] == 1 and all(
        bool(torch.isfinite(v).all()) for v in ckpt["model"].values() if v.is_floating_point()
    )
    # the NaN batch was not applied
    assert all(bool(torch.isfinite(p).all()) for p in tr.model.parameters())


def test_nan_loss_without_a_checkpoint_says_so(data):
    tr = Trainer(None, NaNAtCall(at=1), *data, _cfg(epochs=1))
    with pytest.raises(
        NonFiniteTrainingError, match="epoch 1, step 1.*no checkpoint was written yet"
    ):
        tr.fit()


class NaNGradient(PairLoss):
    """A finite loss whose gradient is NaN from call ``at`` on (sqrt at 0)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def forward(self, *a, **k):
        loss = super().forward(*a, **k)
        if self.calls >= self.at:
            return loss + torch.sqrt(a[0][0, 0] * 0.0)  # value + 0, gradient inf * 0 = NaN
        return loss


def test_nan_gradient_stops_before_the_step_and_keeps_the_checkpoint(data, tmp_path):
    tr = Trainer(None, NaNGradient(at=4), *data, _cfg(checkpoint_dir=str(tmp_path), epochs=2))
    with pytest.raises(NonFiniteTrainingError, match="gradient norm is nan at epoch 2, step 4"):
        tr.fit()
    assert all(bool(torch.isfinite(p).all()) for p in tr.model.parameters())
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1


def test_a_nan_model_is_never_saved(data, tmp_path):
    tr = Trainer(None, PairLoss(), *data, _cfg(checkpoint_dir=str(tmp_path), epochs=1))
    tr.fit()
    good = (tmp_path / "last.pt").read_bytes()
    with torch.no_grad():
        next(tr.model.parameters())[0].fill_(float("inf"))
    with pytest.raises(
        NonFiniteTrainingError, match=r"weight .* holds NaN or inf.*last good checkpoint"
    ):
        tr.save_checkpoint()
    assert (tmp_path / "last.pt").read_bytes() == good
