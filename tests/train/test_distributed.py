"""Tests of the scale-out path: process group, differentiable all-gather, distributed sampler,
DistributedTrainer (DDP, memory, multistage, evaluation, rank-0 checkpoints, resume on another
number of ranks), the launcher, and the sharded faiss evaluation.

The multi-process checks run once, in a module fixture: two CPU processes (gloo backend, forked,
``torchrun``'s environment variables set by hand) run every scenario and save what they saw; the
tests compare it with single-process computations made here.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from rank_lab.data import MPerClassSampler, make_open_set
from rank_lab.engine import load_checkpoint
from rank_lab.losses import SupAP
from rank_lab.train import TrainConfig, Trainer
from rank_lab.train.distributed import DistributedMPerClassSampler, DistributedTrainer
from rank_lab.train.distributed.collectives import (
    all_gather_tensor,
    all_gather_with_grad,
    all_reduce_mean,
    broadcast_object,
    cleanup_distributed,
    init_distributed,
)
from rank_lab.train.distributed.env import DistEnv

WORLD = 2
_DATA = dict(n_classes=16, per_class=16, dim=8, input_dim=16)


def _split():
    return make_open_set(seed=0, **_DATA)


def _cfg(**kw) -> dict:
    base = dict(
        backbone="mlp",
        hidden_dims=[32],
        embed_dim=8,
        batch_size=16,
        m_per_class=4,
        epochs=2,
        lr=3e-3,
        eval_ks=[1, 4],
        progress=False,
        loss="roadmap_tpami",
    )
    base.update(kw)
    return base


# Run A: proxies (ROADMAP L*_DG), a memory switched on at epoch 2, clipping; interrupted after epoch
# 2 of 3.
CFG_A = _cfg(epochs=3, memory_size=24, memory_activate_epoch=1, grad_clip=5.0)
# Run B (through the launcher): multistage back-propagation in chunks of 3 under DDP.
CFG_B = _cfg(multistage_chunk_size=3, eval_every=0)
# Run C: each rank ranks its own queries ("local"), backbone frozen for the first epoch (unused DDP
# params), hierarchical (N, 2) labels.
CFG_C = _cfg(dist_loss="local", freeze_backbone_epochs=1, eval_every=0)


def _hier_train(split):
    return split.x_train, torch.stack([split.y_train, split.y_train // 4], 1)


def _grad_problem():
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(16, 6, generator=g, dtype=torch.float64)
    x = torch.randn(16, 5, generator=g, dtype=torch.float64)
    y = torch.arange(4).repeat_interleave(4)[torch.randperm(16, generator=g)]
    return emb, x, y


def _linear() -> nn.Linear:
    torch.manual_seed(1)
    return nn.Linear(5, 6).double()


# ---------------------------------------------------------------------------- the 2-process worker
def _gradient_checks(rank: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel

    emb, x, y = _grad_problem()
    out: dict = {}
    for name, (a, b) in {
        "equal": (8 * rank, 8 * rank + 8),
        "unequal": ((0, 11), (11, 16))[rank],
    }.items():
        e = emb[a:b].clone().requires_grad_(True)
        loss = SupAP()(all_gather_with_grad(e), all_gather_tensor(y[a:b]))
        loss.backward()
        out[name] = (loss.detach(), e.grad.clone())
    sl = slice(8 * rank, 8 * rank + 8)
    e = emb[sl].clone().requires_grad_(True)
    e_all, y_all = all_gather_with_grad(e), all_gather_tensor(y[sl])
    local = SupAP()(e, y[sl], e_all, y_all, ref_self_index=torch.arange(8) + 8 * rank)
    local.backward()
    out["local"] = (all_reduce_mean(local.detach()), e.grad.clone())
    ddp = DistributedDataParallel(_linear())
    loss = SupAP()(all_gather_with_grad(ddp(x[sl])), y_all)
    loss.backward()
    out["ddp"] = (loss.detach(), [p.grad.clone() for p in ddp.module.parameters()])
    out["broadcast"] = broadcast_object({"from": rank})
    return out


def _worker(rank: int, port: int, tmp: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    tmp_p = Path(tmp)
    env = init_distributed(timeout_s=60)
    out: dict = {"env": env}
    try:
        out["grads"] = _gradient_checks(rank)
        sampler = DistributedMPerClassSampler(_split().y_train, m=4, batch_size=16, seed=3)
        out["sampler"] = []
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            out["sampler"].append(list(sampler))
        split = _split()
        data = ((split.x_train, split.y_train), (split.x_test, split.y_test))

        def stop_after_two(trainer, rec):
            if rec["epoch"] == 2:
                raise KeyboardInterrupt

        cfg_a = TrainConfig.from_dict(_cfg(**{**CFG_A, "checkpoint_dir": str(tmp_p / "A")}))
        tr = DistributedTrainer(None, None, *data, cfg_a, callbacks=[stop_after_two])
        try:
            tr.fit()
        except KeyboardInterrupt:
            pass
        emb_dist, lab_dist = tr.embed(data[1])
        from rank_lab.train import embed_dataset

        emb_local, _ = embed_dataset(tr.model, data[1])
        out["A"] = {
            "history": tr.history,
            "memory": tr.memory.embeddings.clone(),
            "steps": tr.steps_per_epoch,
            "embed": (emb_dist, lab_dist, emb_local),
            "sampler_len": len(tr.sampler),
            "local_batch": tr.sampler.local_batch_size,
        }
        tr.save_checkpoint(tmp_p / f"explicit_{rank}.pt")  # only rank 0 writes

        from rank_lab.train.distributed.launch import main

        cfg_path = tmp_p / "B.json"
        if rank == 0:
            cfg_path.write_text(json.dumps({**CFG_B, "dataset": "synthetic", "data": _DATA}))
        torch.distributed.barrier()
        trb = main(["--config", str(cfg_path), "--set", f"log_path={tmp_p / 'B_log.json'}"])
        out["B"] = {
            "history": trb.history,
            "params": {k: v.clone() for k, v in trb.model.state_dict().items()},
        }

        trc = DistributedTrainer(None, None, _hier_train(split), None, TrainConfig.from_dict(CFG_C))
        trc.fit()
        out["C"] = {
            "history": trc.history,
            "params": {k: v.clone() for k, v in trc.model.state_dict().items()},
        }
    finally:
        torch.save(out, tmp_p / f"rank{rank}.pt")
        cleanup_distributed(env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp: Path) -> None:
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mp.start_processes(
        _worker, args=(_free_port(), str(tmp)), nprocs=WORLD, start_method=method, join=True
    )


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Run the 2-process worker once per session (under pytest-xdist the workers share one run);
    the tests only read its folder."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        tmp = tmp_path_factory.mktemp("ddp")
        _launch(tmp)
    else:
        from filelock import FileLock

        # shared by this session's workers
        tmp = tmp_path_factory.getbasetemp().parent / "rank_lab_ddp"
        with FileLock(str(tmp) + ".lock"):
            if not (tmp / "done").is_file():
                tmp.mkdir(exist_ok=True)
                _launch(tmp)
                (tmp / "done").touch()
    res = [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    return tmp, res


def _ref_run(cfg: dict, data, **kw):
    """The single-process reference: the plain Trainer with the same global batch."""
    snaps = {}

    def snap(trainer, rec):
        snaps[rec["epoch"]] = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        if trainer.memory is not None:
            snaps[f"memory{rec['epoch']}"] = trainer.memory.embeddings.clone()

    tr = Trainer(None, None, *data, TrainConfig.from_dict(cfg), callbacks=[snap], **kw)
    tr.fit()
    return tr, snaps


@pytest.fixture(scope="module")
def ref_a():
    """Single-process reference of run A (3 epochs), with snapshots after every epoch."""
    split = _split()
    return _ref_run(CFG_A, ((split.x_train, split.y_train), (split.x_test, split.y_test)))


def _close_history(h1, h2, rel=1e-5):
    assert [r["epoch"] for r in h1] == [r["epoch"] for r in h2]
    for a, b in zip(h1, h2, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=rel), (a["epoch"], a["loss"], b["loss"])
        assert (
            a["step"] == b["step"]
            and a["n_batches"] == b["n_batches"]
            and a["lr"] == pytest.approx(b["lr"])
        )
        if a.get("metrics") is not None:
            for k in ("R@1", "R@4", "mAP@R", "n_queries"):
                assert a["metrics"][k] == pytest.approx(b["metrics"][k], abs=1e-6), k


def _close_params(p1, p2, atol=2e-5):
    assert p1.keys() == p2.keys()
    for k in p1:
        assert torch.allclose(p1[k], p2[k], atol=atol, rtol=1e-4), (
            k,
            float((p1[k] - p2[k]).abs().max()),
        )


# ---------------------------------------------------------------------------- multi-process tests
def test_gathered_loss_and_gradients_equal_the_single_process_batch(two_ranks):
    _, res = two_ranks
    emb, x, y = _grad_problem()
    e = emb.clone().requires_grad_(True)
    ref = SupAP()(e, y)
    (g_ref,) = torch.autograd.grad(ref, e)
    ref = ref.detach()
    for r, out in enumerate(res):
        assert out["env"] == DistEnv(r, WORLD, r, "gloo", owns_group=True)
        g = out["grads"]
        for name, (a, b) in {
            "equal": (8 * r, 8 * r + 8),
            "unequal": ((0, 11), (11, 16))[r],
        }.items():
            loss, grad = g[name]
            assert float(loss) == pytest.approx(float(ref), abs=1e-12)
            # documented scale: the local rows get W * dL/dE (DDP's mean over ranks restores
            # dL/dtheta)
            torch.testing.assert_close(grad, WORLD * g_ref[a:b], rtol=1e-10, atol=1e-12)
        # each rank ranks its queries: same mean loss, same gradient convention
        loss, grad = g["local"]
        assert float(loss) == pytest.approx(float(ref), abs=1e-12)
        torch.testing.assert_close(grad, WORLD * g_ref[8 * r : 8 * r + 8], rtol=1e-10, atol=1e-12)
        model = _linear()
        ref_loss = SupAP()(model(x), y)
        ref_grads = torch.autograd.grad(ref_loss, list(model.parameters()))
        loss, grads = g["ddp"]
        assert float(loss) == pytest.approx(float(ref_loss.detach()), abs=1e-12)
        # DDP parameter gradients = single-process ones
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        assert g["broadcast"] == {"from": 0}


def test_distributed_sampler_across_two_processes(two_ranks):
    _, res = two_ranks
    glob = MPerClassSampler(_split().y_train, m=4, batch_size=16, seed=3)
    for epoch in (0, 1):
        glob.set_epoch(epoch)
        ref = list(glob)
        per_rank = [out["sampler"][epoch] for out in res]
        assert all(len(b) == len(ref) for b in per_rank)
        for i, batch in enumerate(ref):
            assert per_rank[0][i] + per_rank[1][i] == batch
    assert res[0]["sampler"][0] != res[0]["sampler"][1]


def test_two_process_training_equals_one_process(two_ranks, ref_a):
    tmp, res = two_ranks
    ref, snaps = ref_a
    for out in res:
        a = out["A"]
        assert a["steps"] == ref.steps_per_epoch == a["sampler_len"] and a["local_batch"] == 8
        _close_history(a["history"], ref.history[:2])
        assert [r["memory_active"] for r in a["history"]] == [False, True]
    # the memory holds the gathered batches: the same on both ranks, equal to the 1-process memory
    # after epoch 2
    assert torch.equal(res[0]["A"]["memory"], res[1]["A"]["memory"])
    assert torch.allclose(res[0]["A"]["memory"], snaps["memory2"], atol=2e-5)
    ckpt = load_checkpoint(tmp / "A" / "last.pt")
    assert ckpt["epoch"] == 2 and ckpt["distributed"] == {
        "world_size": 2,
        "global_batch_size": 16,
        "local_batch_size": 8,
    }
    assert not any(k.startswith("module.") for k in ckpt["model"])  # unwrapped: rank-agnostic
    _close_params(ckpt["model"], snaps[2])
    log = json.loads((tmp / "A" / "log.json").read_text())
    assert [r["epoch"] for r in log["history"]] == [1, 2]


def test_resume_on_one_rank_from_a_two_rank_checkpoint(two_ranks, ref_a, tmp_path):
    tmp, _ = two_ranks
    split = _split()
    data = ((split.x_train, split.y_train), (split.x_test, split.y_test))
    ref, _ = ref_a
    ck = tmp_path / "A"  # a private copy: the shared run folder is never written by the tests
    shutil.copytree(tmp / "A", ck)
    resumed = Trainer(
        None, None, *data, TrainConfig.from_dict({**CFG_A, "checkpoint_dir": str(ck)})
    )
    hist = resumed.fit()
    assert [r["epoch"] for r in hist] == [1, 2, 3]
    _close_history(hist, ref.history)
    _close_params(resumed.model.state_dict(), ref.model.state_dict())
    assert torch.allclose(resumed.memory.embeddings, ref.memory.embeddings, atol=2e-5)
    # the single-process DistributedTrainer resumes the same checkpoint too
    again = DistributedTrainer(
        None, None, *data, TrainConfig.from_dict({**CFG_A, "checkpoint_dir": str(ck)})
    )
    assert again.env.world_size == 1
    again.resume_from(ck / "last.pt")
    _close_params(again.model.state_dict(), resumed.model.state_dict(), atol=0)


def test_multistage_composes_with_ddp_and_the_launcher(two_ranks):
    tmp, res = two_ranks
    split = _split()
    ref, _ = _ref_run(
        {**CFG_B, "multistage_chunk_size": None}, ((split.x_train, split.y_train), None)
    )
    for out in res:
        _close_history(out["B"]["history"], ref.history)
        _close_params(out["B"]["params"], ref.model.state_dict())
    log = json.loads((tmp / "B_log.json").read_text())
    assert log["config"]["multistage_chunk_size"] == 3 and len(log["history"]) == 2


def test_local_loss_mode_and_frozen_backbone_under_ddp(two_ranks):
    _, res = two_ranks
    split = _split()
    ref, _ = _ref_run({**CFG_C, "dist_loss": "full"}, (_hier_train(split), None))
    for out in res:
        _close_history(out["C"]["history"], ref.history)
        _close_params(out["C"]["params"], ref.model.state_dict())
        assert [r["backbone_frozen"] for r in out["C"]["history"]] == [True, False]


def test_rank_zero_writes_and_evaluation_gathers_the_shards(two_ranks):
    tmp, res = two_ranks
    assert (tmp / "explicit_0.pt").is_file() and not (tmp / "explicit_1.pt").exists()
    split = _split()
    for out in res:
        emb_dist, lab, emb_local = out["A"]["embed"]
        assert emb_dist.shape == (split.x_test.shape[0], 8) and torch.equal(lab, split.y_test)
        torch.testing.assert_close(emb_dist, emb_local, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(res[0]["A"]["embed"][0], res[1]["A"]["embed"][0], rtol=0, atol=0)


# ---------------------------------------------------------------------------- single process
@settings(max_examples=25, deadline=None)
@given(
    world=st.sampled_from([1, 2, 4]),
    m=st.sampled_from([2, 4]),
    groups=st.integers(1, 2),
    seed=st.integers(0, 10),
    epoch=st.integers(0, 3),
)
def test_distributed_sampler_invariants(world, m, groups, seed, epoch):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 12, (150,), generator=g)
    labels[:12] = torch.arange(12)  # 12 classes, some smaller than m
    batch = m * world * groups
    glob = MPerClassSampler(labels, m=m, batch_size=batch, seed=seed, epoch=epoch)
    ranks = [
        DistributedMPerClassSampler(
            labels, m=m, batch_size=batch, seed=seed, num_replicas=world, rank=r
        )
        for r in range(world)
    ]
    for s in ranks:
        s.set_epoch(epoch)
    ref = list(glob)
    draws = [list(s) for s in ranks]
    assert all(len(s) == len(ref) and len(d) == len(ref) for s, d in zip(ranks, draws, strict=True))
    for i, batch_ids in enumerate(ref):
        parts = [d[i] for d in draws]
        assert all(len(p) == batch // world for p in parts)
        assert sum(parts, []) == batch_ids  # rank order = the single-process batch
        classes = [set(labels[p].tolist()) for p in parts]
        for r in range(world):  # a class lives on one rank, with its m items
            for s in range(r + 1, world):
                assert not classes[r] & classes[s]
            counts = torch.bincount(labels[parts[r]], minlength=12)
            assert set(counts[counts > 0].tolist()) == {m}
    assert draws == [list(s) for s in ranks]  # deterministic per (seed, epoch)


def test_sampler_and_env_errors(monkeypatch):
    labels = torch.arange(8).repeat_interleave(4)
    with pytest.raises(ValueError, match="cannot be split over 3 ranks"):
        DistributedMPerClassSampler(labels, m=4, batch_size=16, num_replicas=3, rank=0)
    with pytest.raises(ValueError, match="rank must be"):
        DistributedMPerClassSampler(labels, m=4, batch_size=16, num_replicas=2, rank=2)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert init_distributed() == DistEnv()  # no torchrun: single-process fallback
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="RANK is not set"):
        init_distributed()
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ValueError, match=r"RANK=5 must lie in \[0, WORLD_SIZE=2\)"):
        init_distributed()
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="MASTER_ADDR is not set"):
        init_distributed()
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="not an integer"):
        init_distributed()
    x = torch.randn(3, 2, requires_grad=True)
    assert all_gather_with_grad(x) is x and all_gather_tensor(x) is x  # identity without a group
    with pytest.raises(ValueError, match="rows on dim 0"):
        all_gather_with_grad(torch.tensor(1.0))


def test_single_process_distributed_trainer_equals_trainer(tmp_path):
    split = _split()
    data = ((split.x_train, split.y_train), (split.x_test, split.y_test))
    cfg = TrainConfig.from_dict({**CFG_A, "epochs": 2})
    plain = Trainer(None, None, *data, cfg)
    plain.fit()
    dist_tr = DistributedTrainer(None, None, *data, cfg.replace(checkpoint_dir=str(tmp_path / "d")))
    assert dist_tr.env == DistEnv() and dist_tr.ddp_model is None
    dist_tr.fit()
    for k, v in plain.model.state_dict().items():
        assert torch.equal(v, dist_tr.model.state_dict()[k]), k
    for a, b in zip(plain.history, dist_tr.history, strict=True):
        assert a["loss"] == b["loss"]
        assert {k: v for k, v in a["metrics"].items() if k != "eval_time"} == {
            k: v for k, v in b["metrics"].items() if k != "eval_time"
        }
    assert load_checkpoint(tmp_path / "d" / "last.pt")["distributed"]["world_size"] == 1
    with pytest.raises(ValueError, match="does not support a cross-batch memory"):
        DistributedTrainer(None, None, *data, cfg.replace(dist_loss="local"))
    with pytest.raises(ValueError, match="eval_index"):
        DistributedTrainer(None, None, *data, cfg, eval_index="ring")


def test_multistage_in_the_single_process_trainer_matches_one_pass():
    split = _split()
    data = ((split.x_train, split.y_train), None)
    one, _ = _ref_run(CFG_B | {"multistage_chunk_size": None, "memory_size": 24}, data)
    ms, _ = _ref_run(CFG_B | {"multistage_chunk_size": 5, "memory_size": 24}, data)
    _close_history(ms.history, one.history)
    _close_params(ms.model.state_dict(), one.model.state_dict())
    with pytest.raises(ValueError, match="multistage_chunk_size must be >= 1"):
        TrainConfig.from_dict(_cfg(multistage_chunk_size=0))
    with pytest.raises(ValueError, match="dist_loss must be one of"):
        TrainConfig.from_dict(_cfg(dist_loss="ring"))


def test_launcher_config_and_data(tmp_path):
    from rank_lab.train.distributed.launch import build_data, load_config

    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**CFG_B, "dataset": "synthetic", "data": _DATA}))
    cfg, data = load_config(path, ["epochs=5", "lr=0.01", "loss=sup_ap"])
    assert (cfg.epochs, cfg.lr, cfg.loss, cfg.multistage_chunk_size) == (
        5,
        0.01,
        "sup_ap",
        3,
    ) and data == _DATA
    (xtr, ytr), (xte, yte) = build_data(cfg, data)
    split = _split()
    assert torch.equal(xtr, split.x_train) and torch.equal(yte, split.y_test)
    (_, ytr_d), _ = build_data(cfg.replace(dataset="digits"), {})
    assert int(ytr_d.max()) == 4
    with pytest.raises(ValueError, match="key=value"):
        load_config(path, ["epochs"])
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="dataset is not set"):
        build_data(cfg.replace(dataset=None))
    with pytest.raises(ValueError, match="unknown retrieval dataset"):
        build_data(cfg.replace(dataset="no_such_set", data_dir=str(tmp_path)))


# ---------------------------------------------------------------------------- sharded faiss
# evaluation
def _tied_set(n=240, d=8, n_protos=40, n_classes=10, seed=0):
    """Embeddings drawn from a few prototypes (exact duplicates: ties in every backend) + labels."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(n_protos, d, generator=g)
    return protos[torch.randint(0, n_protos, (n,), generator=g)], torch.randint(
        0, n_classes, (n,), generator=g
    )


@pytest.mark.parametrize(("cpu_shards", "mode"), [(1, "shard"), (3, "shard"), (4, "replicate")])
def test_sharded_metrics_equal_the_engine(cpu_shards, mode):
    pytest.importorskip("faiss")
    from rank_lab.metrics import retrieval_metrics
    from rank_lab.metrics.engine.distributed import build_index, sharded_retrieval_metrics

    x, y = _tied_set()
    names = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR")
    got = sharded_retrieval_metrics(
        x, y, ks=(1, 5, 10), metrics=names, n_gpus=0, cpu_shards=cpu_shards, mode=mode
    )
    for backend in ("torch", "faiss"):
        assert got == retrieval_metrics(x, y, ks=(1, 5, 10), metrics=names, backend=backend)
    q, ql = _tied_set(n=50, seed=1)  # separate queries, hierarchical labels (fine level first)
    hl, hql = torch.stack([y, y // 2], 1), torch.stack([ql, ql // 2], 1)
    got = sharded_retrieval_metrics(
        q, hql, x, hl, ks=(1, 5), metrics=names, n_gpus=0, cpu_shards=cpu_shards, mode=mode
    )
    assert got == retrieval_metrics(q, hql, x, hl, ks=(1, 5), metrics=names, backend="torch")
    full = sharded_retrieval_metrics(
        x, y, ks=(1,), metrics=("R@k", "mAP"), n_gpus=0, cpu_shards=cpu_shards
    )
    # counting route
    assert full == retrieval_metrics(x, y, ks=(1,), metrics=("R@k", "mAP"), backend="torch")
    placement = build_index(x, n_gpus=0, cpu_shards=cpu_shards, mode=mode).placement
    assert placement == (
        "cpu" if cpu_shards == 1 else f"cpu-{'shards' if mode == 'shard' else 'replicas'}"
    )


def test_sharded_knn_against_brute_force():
    pytest.importorskip("faiss")
    from rank_lab.metrics.engine.distributed import sharded_knn_search

    g = torch.Generator().manual_seed(0)
    x = torch.randn(97, 12, generator=g)
    q = torch.randn(13, 12, generator=g)
    s = x @ x.T
    s.fill_diagonal_(-torch.inf)
    ref_vals, ref_idx = torch.topk(s, 7, dim=1)
    for shards in (1, 3, 5):
        vals, idx = sharded_knn_search(
            x, x, 7, exclude_self=True, n_gpus=0, cpu_shards=shards, chunk_size=20
        )
        assert torch.equal(idx, ref_idx) and torch.allclose(vals, ref_vals, atol=1e-5)
        vals, idx = sharded_knn_search(q, x, 4, n_gpus=0, cpu_shards=shards)
        assert torch.equal(idx, torch.topk(q @ x.T, 4, dim=1).indices)


def test_sharded_index_errors_and_fallbacks():
    pytest.importorskip("faiss")
    from rank_lab.metrics.engine.distributed import build_index, faiss_gpu_count, sharded_knn_search

    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match="mode must be"):
        build_index(x, mode="ring")
    with pytest.raises(ValueError, match="n_gpus must be"):
        build_index(x, n_gpus=-1)
    with pytest.raises(ValueError, match="cpu_shards"):
        build_index(x, cpu_shards=0)
    with pytest.raises(ValueError, match="larger than the number of gallery items"):
        sharded_knn_search(x, x, 10, exclude_self=True)
    with pytest.raises(ValueError, match="same length"):
        sharded_knn_search(x[:3], x, 2, exclude_self=True)
    with pytest.raises(ValueError, match="NaN|finite"):
        sharded_knn_search(x, torch.full((10, 4), float("nan")), 2)
    # more GPUs than visible: clamped, clean fallback
    with pytest.warns(UserWarning, match="using"):
        idx = build_index(x, n_gpus=faiss_gpu_count() + 1)
    assert idx.index.ntotal == 10


@pytest.mark.cuda
def test_sharded_index_on_gpus():
    pytest.importorskip("faiss")
    from rank_lab.metrics.engine.distributed import build_index, faiss_gpu_count, sharded_knn_search

    n = faiss_gpu_count()
    if n == 0:
        pytest.skip("needs faiss with GPU support and a GPU")
    x = torch.randn(500, 16)
    ref = sharded_knn_search(x, x, 5, exclude_self=True, n_gpus=0)
    for mode in ("shard", "replicate"):
        index = build_index(x, n_gpus=n, mode=mode)
        assert index.placement == (
            "gpu" if n == 1 else f"gpu-{'shards' if mode == 'shard' else 'replicas'}"
        )
        vals, idx = sharded_knn_search(x, x, 5, exclude_self=True, index=index)
        assert torch.equal(idx, ref[1]) and torch.allclose(vals, ref[0], atol=1e-4)


# ----------------------------------------------------------------------------- local batches
def test_local_batch_loss_is_the_mean_of_the_slice_losses_and_differs_from_the_gathered_loss():
    from rank_lab.losses import SupAP
    from rank_lab.train.distributed import LocalBatchLoss

    gen = torch.Generator().manual_seed(5)
    emb = torch.randn(16, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    lab = torch.arange(16) // 4  # 4 classes x 4, contiguous class groups as the sampler gives them
    base = SupAP().double()
    local = LocalBatchLoss(base, 2)(emb, lab)
    by_hand = (base(emb[:8], lab[:8]) + base(emb[8:], lab[8:])) / 2
    assert local.item() == pytest.approx(by_hand.item(), abs=1e-12)
    (g_local,) = torch.autograd.grad(local, emb)
    (g_hand,) = torch.autograd.grad(by_hand, emb)
    assert torch.allclose(g_local, g_hand, atol=1e-12)
    # one slice is the wrapped loss itself; two slices are not the loss of the whole batch
    assert LocalBatchLoss(base, 1)(emb, lab).item() == pytest.approx(
        base(emb, lab).item(), abs=1e-12
    )
    assert abs(local.item() - base(emb, lab).item()) > 1e-3
    # references (a memory) reach every slice unchanged
    ref, ref_lab = emb.detach()[::2], lab[::2]  # 2 items of every class
    with_ref = LocalBatchLoss(base, 2)(emb, lab, ref, ref_lab)
    assert with_ref.item() == pytest.approx(
        ((base(emb[:8], lab[:8], ref, ref_lab) + base(emb[8:], lab[8:], ref, ref_lab)) / 2).item(),
        abs=1e-12,
    )
    with pytest.raises(ValueError, match="n_slices"):
        LocalBatchLoss(base, 3)(emb, lab)
    with pytest.raises(TypeError, match="loss"):
        LocalBatchLoss("supap", 2)
