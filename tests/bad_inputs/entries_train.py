"""Matrix entries of :mod:`rank_lab.train`."""

from __future__ import annotations

from pathlib import Path

import torch

import rank_lab.engine as EG
import rank_lab.engine.checkpoint as CK
import rank_lab.engine.fingerprint as FP
import rank_lab.engine.guard as GU
import rank_lab.engine.loop as EN
import rank_lab.engine.optim as OP
import rank_lab.engine.options as EOPT
import rank_lab.engine.run_report as RR
import rank_lab.engine.schedule as SC
import rank_lab.engine.state as ST
import rank_lab.models.backbones as MBB
import rank_lab.train as T
import rank_lab.train.classification as CL
import rank_lab.train.data as DA
import rank_lab.train.distributed as TD
import rank_lab.train.distributed.collectives as DI
import rank_lab.train.distributed.env as DENV
import rank_lab.train.distributed.launch as LA
import rank_lab.train.multistage as MS
import rank_lab.train.recipes as TR
from rank_lab.engine.guard import NonFiniteTrainingError
from rank_lab.losses import SmoothAP
from rank_lab.models import MLPBackbone

from .factories import emb, labels
from .framework import cls, fn

CFG = dict(
    backbone="mlp",
    hidden_dims=(8,),
    embed_dim=4,
    batch_size=8,
    m_per_class=4,
    epochs=1,
    batches_per_epoch=1,
    eval_ks=(1, 2),
    progress=False,
    amp=False,
    loss="smooth_ap",
)


def _train():
    return dict(
        model=None,
        loss=None,
        train_data=(emb(16, 6), labels(16, 4)),
        test_data=(emb(8, 6, seed=3), labels(8, 2)),
        config=dict(CFG),
    )


def _nan_x():
    x = emb(16, 6)
    x[0, 0] = float("nan")
    return (x, labels(16, 4))


def _checkpoint_file() -> str:
    import tempfile

    path = tempfile.mkdtemp(prefix="rank_lab_matrix_") + "/last.pt"
    CK.save_checkpoint({"model": {}, "epoch": 0}, path)
    return path


def _garbage_file() -> str:
    path = _tmp("bad.pt")
    Path(path).write_bytes(b"not a checkpoint" * 8)
    return path


def _tmp(name: str) -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="rank_lab_matrix_") + "/" + name


def _classifier(method: str = "esupcon"):
    return CL.ContrastiveClassifier(MLPBackbone(6, (8,)), n_classes=3, dim=8, method=method)


#: a valid RS@k recipe (Patel thesis §5.3.2)
SYNTH = {"n_classes": 4, "per_class": 4, "dim": 4, "input_dim": 6, "hidden_dim": 8}
RUN_CFG = {**CFG, "dataset": "synthetic", "device": "cpu", "eval_ks": (1,)}
WHOLE_ROWS = "rows of any trailing shape (or none) are gathered unchanged, an empty set of rows too"
ONE_RANK = "one process: the mean over a single rank is the tensor itself (any shape, any dtype)"


class _Linear(torch.nn.Module):
    """A chunk-independent embedding model (no BatchNorm) for the multistage entries."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        if not x.is_floating_point():
            raise TypeError(f"x must be floating, got {x.dtype}")
        if x.ndim != 2 or x.shape[1] != 6:
            raise ValueError(f"x must have shape (c, 6), got {tuple(x.shape)}")
        return self.fc(x.to(self.fc.weight.dtype))


def _ms():
    return dict(
        model=_Linear(), inputs=emb(8, 6), labels=labels(8, 2), loss_fn=SmoothAP(), chunk_size=3
    )


def _ms_step():
    model = _Linear()
    return {**_ms(), "model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}


MS_ROLES = {"inputs": "x", "labels": "labels", "chunk_size": "posint"}


def _engine():
    model = torch.nn.Linear(3, 1)
    return {
        "modules": model,
        "optimizers": torch.optim.SGD(model.parameters(), lr=0.1),
        "config": EOPT.EngineConfig(),
        "device": "cpu",
    }


def _engine_step():
    return {
        "step_fn": lambda x: x.sum() * 0.0,
        "batch": EOPT.Batch(torch.ones(2, 3, requires_grad=True), indices=[0, 1]),
    }


def _fit():
    model = torch.nn.Linear(3, 1)
    x = emb(6, 3)
    return {
        "model": model,
        "step_fn": lambda i: model(x[i]).pow(2).mean(),
        "data": lambda e: [torch.arange(3), torch.arange(3, 6)],
        "config": EOPT.EngineConfig(epochs=2),
        "device": "cpu",
    }


#: the (x, y) tensors of the trainers: their x gets the data variants (issue 26: integer and complex
#: data refused when the trainer is built, naming the argument)
DATA_ROLES = {"train_data": "x", "test_data": "x"}
TRAIN_EXTRA = {
    "nan": ("train_data", _nan_x, ("train_data", "embeddings")),
    "float_labels": (
        "train_data",
        lambda: (emb(16, 6), labels(16, 4).double()),
        ("train_data", "labels"),
    ),
    "rows": ("train_data", lambda: (emb(16, 6), labels(15, 4)), ("train_data",)),
    "eval_ks_big": ("test_data", lambda: (emb(2, 6), labels(2, 1)), ("eval_ks",)),
    "bad_config": ("config", lambda: {**CFG, "lr": -1.0}, ("lr",)),
    "unknown_key": ("config", lambda: {**CFG, "lrr": 1.0}, ("lrr",)),
}

ENTRIES = [
    fn(
        T.TrainConfig,
        {"milestones": (1,)},
        {
            "epochs": "posint",
            "batch_size": "posint",
            "lr": "pos",
            "optimizer": "choice",
            "scheduler": "choice",
            "warmup_epochs": "nonnegint",
            "eval_every": "nonnegint",
            "grad_clip": "pos",
            "gamma": "pos",
        },
        extra={"milestone": ("milestones", lambda: (-1,), ("milestones",))},
    ),
    fn(TR.list_recipes),
    cls(T.Trainer, _train, DATA_ROLES, calls=[("fit", None, None)], extra=TRAIN_EXTRA),
    cls(
        TD.LocalBatchLoss,
        lambda: {"loss": SmoothAP(), "n_slices": 2},
        {"n_slices": "posint"},
        calls=[
            (
                "forward",
                lambda: {"embeddings": torch.randn(8, 4), "labels": torch.arange(8) // 2},
                {"embeddings": "x", "labels": "labels"},
            )
        ],
        rows=(("embeddings", "labels"),),
        legal={"forward.embeddings:int": "integer embeddings are cast to float"},
        extra={
            "not_module": ("loss", lambda: 3, ("loss",)),
            "indivisible": ("embeddings", lambda: torch.randn(7, 4), ("embeddings",)),
        },
    ),
    cls(
        TD.DistributedTrainer,
        lambda: {**_train(), "config": {**CFG, "device": "cpu"}},
        {"eval_index": "choice", **DATA_ROLES},
        calls=[("fit", None, None)],
        extra={k: v for k, v in TRAIN_EXTRA.items() if k not in ("bad_config", "unknown_key")},
    ),
    cls(
        TD.DistributedMPerClassSampler,
        lambda: dict(labels=labels(24, 6), m=2, batch_size=4, num_replicas=1, rank=0),
        {"labels": "labels", "m": "posint", "batch_size": "posint"},
        calls=[("__iter__", None, None)],
    ),
    fn(
        TD.all_gather_with_grad,
        lambda: {"x": emb(3)},
        {"x": "x"},
        legal={
            f"x:{k}": (
                "rows of any trailing shape (or none) are gathered unchanged, an empty set of rows "
                "too"
            )
            for k in ("ndim+", "ndim-", "empty")
        },
    ),
    fn(TD.init_distributed, {"device": "cpu"}, {"backend": "choice"}),
    fn(
        T.as_dataset,
        lambda: {"data": (emb(4), labels(4))},
        extra={
            "rows": ("data", lambda: (emb(4), labels(3)), ("data",)),
            "not_data": ("data", lambda: [1, 2, 3], ("data",)),
        },
    ),
    fn(
        T.embed_dataset,
        lambda: {"model": MLPBackbone(4, (4,)), "data": (emb(4), labels(4))},
        {"batch_size": "posint"},
        extra={
            "nan": (
                "data",
                lambda: (torch.full((4, 4), float("nan")), labels(4)),
                ("data", "embeddings"),
            )
        },
    ),
    fn(T.relabel, lambda: {"labels": labels(6) * 5}, {"labels": "labels"}),
    fn(EG.load_checkpoint, lambda: {"path": _checkpoint_file()}, {"path": "path"}),
    fn(
        EG.lr_at,
        {"step": 3, "base_lr": 0.1, "total_steps": 10, "warmup_steps": 2},
        {
            "step": "nonnegint",
            "base_lr": "pos",
            "total_steps": "posint",
            "warmup_steps": "nonnegint",
            "schedule": "choice",
            "min_lr": "nonneg",
        },
    ),
    fn(
        NonFiniteTrainingError,
        {
            "message": "the loss is nan",
            "epoch": 1,
            "step": 0,
            "batch_indices": None,
            "checkpoint": None,
        },
    ),
    # rank_lab.engine.checkpoint
    fn(
        CK.save_checkpoint,
        lambda: {"obj": {"a": 1}, "path": _tmp("x.pt")},
        extra={
            "folder": ("path", lambda: _tmp(""), ("path",)),
            "int": ("path", lambda: 3, ("path",)),
            "unpicklable": ("obj", lambda: {"f": lambda: 1}, ("obj",)),
        },
    ),
    fn(
        CK.verify_checkpoint,
        lambda: {"path": _checkpoint_file()},
        {"path": "path"},
        extra={
            "garbage": ("path", _garbage_file, ("checkpoint",)),
            "int": ("path", lambda: 3, ("path",)),
        },
    ),
    fn(
        CK.read_checkpoint,
        lambda: {"path": _checkpoint_file()},
        {"path": "path"},
        extra={
            "garbage": ("path", _garbage_file, ("checkpoint", "fresh")),
            "int": ("path", lambda: 3, ("path",)),
        },
    ),
    fn(CK.previous_path, {"path": "last.pt"}, extra={"int": ("path", lambda: 3, ("path",))}),
    cls(CK.CheckpointError),
    cls(CK.CheckpointCorruptError),
    cls(CK.CheckpointMismatchError),
    cls(CK.CheckpointWarning),
    cls(
        CK.CheckpointRead,
        lambda: {
            "state": {"model": {}, "epoch": 0},
            "path": Path("last.pt"),
            "fallback_reason": None,
        },
    ),
    # rank_lab.engine.fingerprint, run_report, state
    fn(FP.data_fingerprint, lambda: {"data": (emb(4), labels(4), [Path("x.pt"), "a"])}),
    fn(FP.code_fingerprint),
    fn(
        FP.set_code_context,
        {"name": None, "source": None},
        extra={
            "name": ("name", lambda: 3, ("name",)),
            "source": ("source", lambda: b"x", ("source",)),
        },
    ),
    fn(FP.short, {"fingerprint": "0123456789abcdef"}),
    cls(RR.LoopReport, {"desc": "train", "unit": "epoch"}, calls=[("register", None, None)]),
    fn(RR.training_report),
    fn(RR.reset_training_report),
    fn(RR.start_fresh, {"fresh": False}, extra={"str": ("fresh", lambda: "yes", ("fresh",))}),
    fn(RR.is_fresh),
    fn(
        RR.note_written,
        lambda: {"path": _tmp("n.pt")},
        extra={"int": ("path", lambda: 3, ("path",))},
    ),
    fn(
        RR.written_here,
        lambda: {"path": _tmp("n.pt")},
        extra={"int": ("path", lambda: 3, ("path",))},
    ),
    cls(ST.EngineState),
    fn(
        CK.atomic_write_json,
        lambda: {"obj": {"a": (1, 2)}, "path": _tmp("x.json")},
        extra={"not_json": ("obj", lambda: {"a": object()}, ("obj",))},
    ),
    fn(CK.get_rng_state),
    fn(
        CK.set_rng_state,
        lambda: {"state": CK.get_rng_state()},
        extra={
            "missing_keys": ("state", dict, ("state",)),
            "not_dict": ("state", lambda: [1, 2], ("state",)),
        },
    ),
    # rank_lab.train.classification
    fn(
        CL.ClassificationMethod,
        lambda: {"description": "CE", "classifier": "linear", "loss": lambda model, f, y: f.sum()},
        {"classifier": "choice"},
        extra={"not_callable": ("loss", lambda: 3, ("loss",))},
    ),
    cls(
        CL.ContrastiveClassifier,
        lambda: {"encoder": MLPBackbone(6, (8,)), "dim": 8, "n_classes": 3},
        {
            "dim": "posint",
            "n_classes": "posint",
            "method": "choice",
            "temperature": "pos",
            "proj_dim": "posint",
            "spce_temperature": "pos",
        },
        calls=[("logits", lambda: {"x": emb(4, 6)}, {"x": "x"})],
        extra={"not_module": ("encoder", lambda: 3, ("encoder",))},
    ),
    fn(
        CL.fit_classifier,
        lambda: {
            "model": _classifier(),
            "x": emb(12, 6),
            "y": labels(12, 3),
            "epochs": 1,
            "batch_size": 6,
        },
        {
            "x": "x",
            "y": "labels",
            "epochs": "posint",
            "batch_size": "posint",
            "lr": "pos",
            "weight_decay": "nonneg",
            "noise_std": "nonneg",
            "max_shift": "nonnegint",
        },
        rows=(("x", "y"),),
        extra={"label_range": ("y", lambda: labels(12, 3) + 5, ("y",))},
    ),
    fn(
        CL.predict_logits,
        lambda: {"model": _classifier(), "x": emb(5, 6), "batch_size": 2},
        {"x": "x", "batch_size": "posint"},
        extra={"not_classifier": ("model", lambda: MLPBackbone(6, (8,)), ("model",))},
    ),
    # rank_lab.train.distributed.collectives
    fn(
        DENV.DistEnv,
        {"rank": 0, "world_size": 1, "local_rank": 0},
        {"rank": "nonnegint", "world_size": "posint", "local_rank": "nonnegint"},
        extra={"rank_too_big": ("rank", lambda: 1, ("rank",))},
    ),
    fn(DENV.current_env),
    fn(DI.cleanup_distributed, {"env": None}, extra={"not_env": ("env", lambda: 3, ("env",))}),
    fn(DI.barrier),
    fn(
        DI.broadcast_object,
        {"obj": {"a": 1}, "src": 0},
        {"src": "nonnegint"},
        extra={"not_a_rank": ("src", lambda: 1, ("src",))},
    ),
    fn(
        DI.broadcast_module_state,
        lambda: {"module": MLPBackbone(4, (4,))},
        {"src": "nonnegint"},
        extra={"not_module": ("module", lambda: 3, ("module",))},
    ),
    fn(
        DI.all_gather_tensor,
        lambda: {"x": emb(3)},
        {"x": "x"},
        legal={
            **{f"x:{k}": WHOLE_ROWS for k in ("ndim+", "ndim-", "empty")},
            "x:int": "labels and indices are gathered too",
        },
    ),
    fn(
        DI.all_reduce_mean,
        lambda: {"x": emb(3)},
        {"x": "x"},
        legal={f"x:{k}": ONE_RANK for k in ("ndim+", "ndim-", "empty", "int")},
    ),
    # rank_lab.train.distributed.launch
    fn(
        LA.build_data,
        lambda: {"cfg": T.TrainConfig.from_dict(RUN_CFG), "data": dict(SYNTH)},
        extra={
            "no_dataset": ("cfg", lambda: T.TrainConfig.from_dict(CFG), ("cfg",)),
            "not_config": ("cfg", lambda: 3, ("cfg",)),
            "not_mapping": ("data", lambda: [1], ("data",)),
        },
    ),
    fn(
        LA.load_config,
        {"path": None, "overrides": ["lr=0.01", "backbone=mlp"]},
        {"path": "path"},
        extra={
            "no_equals": ("overrides", lambda: ["lr"], ("overrides",)),
            "unknown_key": ("overrides", lambda: ["lrr=1"], ("lrr",)),
        },
    ),
    fn(
        LA.run,
        lambda: {"config": dict(RUN_CFG), "data": dict(SYNTH)},
        extra={
            "not_config": ("config", lambda: 3, ("config",)),
            "bad_lr": ("config", lambda: {**RUN_CFG, "lr": -1.0}, ("lr",)),
        },
    ),
    fn(
        LA.main,
        lambda: {
            "argv": [
                "--set",
                "dataset=synthetic",
                "--set",
                "backbone=mlp",
                "--set",
                "hidden_dims=[8]",
                "--set",
                "embed_dim=4",
                "--set",
                "batch_size=8",
                "--set",
                "m_per_class=4",
                "--set",
                "epochs=1",
                "--set",
                "batches_per_epoch=1",
                "--set",
                "eval_every=0",
                "--set",
                "progress=false",
                "--set",
                "loss=smooth_ap",
                "--set",
                "device=cpu",
            ]
        },
    ),
    fn(
        LA.launch_local,
        lambda: {
            "config": dict(RUN_CFG),
            "nproc": 1,
            "workdir": _tmp("launch"),
            "data": dict(SYNTH),
            "dry_run": True,
        },
        {"nproc": "posint", "threads_per_proc": "posint", "timeout": "pos"},
        extra={"not_config": ("config", lambda: 3, ("config",))},
    ),
    # rank_lab.train.multistage
    fn(
        MS.MultistageOutput,
        lambda: {"loss": torch.tensor(0.5), "embeddings": emb(3), "embedding_grad": emb(3)},
    ),
    fn(
        MBB.lock_batchnorm,
        lambda: {"model": MLPBackbone(4, (4,))},
        extra={"not_module": ("model", lambda: 3, ("model",))},
    ),
    fn(
        MS.embed_in_chunks,
        lambda: {"model": _Linear(), "inputs": emb(8, 6), "chunk_size": 3},
        {"inputs": "x", "chunk_size": "posint"},
        extra={"not_module": ("model", lambda: 3, ("model",))},
    ),
    fn(MS.multistage_backward, _ms, {**MS_ROLES, "atol": "nonneg"}, rows=(("inputs", "labels"),)),
    fn(MS.multistage_step, _ms_step, MS_ROLES, rows=(("inputs", "labels"),)),
    fn(
        MS.fit_multistage,
        lambda: {**_ms(), "batch_size": 4, "m_per_class": 2, "steps": 2},
        {
            **MS_ROLES,
            "batch_size": "posint",
            "m_per_class": "posint",
            "steps": "posint",
            "lr": "pos",
        },
        rows=(("inputs", "labels"),),
    ),
    # rank_lab.engine.loop, .options, .guard, .schedule, .optim, .data (the one training engine)
    fn(
        EOPT.EngineConfig,
        {"epochs": 2, "checkpoint_every": 1, "checkpoint": None, "resume": True},
        {
            "epochs": "posint",
            "checkpoint_every": "posint",
            "amp_dtype": "choice",
            "unit": "choice",
            "grad_clip": "pos",
        },
        extra={
            "not_path": ("checkpoint", lambda: 3, ("checkpoint",)),
            "not_bool": ("resume", lambda: "yes", ("resume",)),
        },
    ),
    fn(
        EOPT.loop_options,
        {"engine": None, "epochs": 3, "desc": "loop"},
        {"epochs": "posint", "unit": "choice"},
        extra={
            "not_engine": ("engine", lambda: 3, ("engine",)),
            "engine_epochs": ("engine", lambda: EOPT.EngineConfig(epochs=2), ("engine",)),
        },
    ),
    fn(EOPT.Batch, lambda: {"data": emb(3), "indices": [0, 1, 2]}),
    fn(EOPT.StepResult, {"loss": 0.5}),
    cls(
        EN.Engine,
        _engine,
        calls=[("train_step", _engine_step, None)],
        extra={
            "not_module": ("modules", lambda: {"model": 3}, ("model",)),
            "reserved": ("modules", lambda: {"history": torch.nn.Linear(2, 1)}, ("history",)),
            "not_config": ("config", lambda: {"epochs": 1}, ("config",)),
        },
    ),
    fn(EN.fit, _fit, {"lr": "pos"}, extra={"not_config": ("config", lambda: 3, ("config",))}),
    fn(
        GU.check_resume,
        lambda: {
            "state": {"config": {"lr": 0.1}, "epoch": 1, "step": 3},
            "run_key": {"lr": 0.1},
            "record": {"epochs": 2, "total_steps": 6},
        },
        extra={"other_config": ("run_key", lambda: {"lr": 0.2}, ("lr",))},
    ),
    fn(GU.describe_batch, {"indices": [3, 1, 2]}),
    cls(
        SC.Schedule,
        {"kind": "cosine", "total_steps": 10, "warmup_steps": 2},
        {
            "kind": "choice",
            "total_steps": "posint",
            "warmup_steps": "nonnegint",
            "min_lr": "nonneg",
            "ref_lr": "pos",
            "step_unit": "posint",
        },
        calls=[("lr", {"step": 3, "base_lr": 0.1}, {"step": "nonnegint", "base_lr": "pos"})],
        extra={"linear_without_hold": ("kind", lambda: "linear", ("linear", "hold_steps"))},
    ),
    fn(
        OP.build_optimizer,
        lambda: {"params": list(torch.nn.Linear(2, 1).parameters())},
        {"kind": "choice", "lr": "pos", "weight_decay": "nonneg"},
        extra={"no_params": ("params", list, ("params",))},
    ),
    fn(
        OP.param_groups,
        lambda: {"model": MLPBackbone(4, (4,)), "lr": 0.1},
        extra={"no_parameter": ("model", torch.nn.Identity, ("model", "trainable"))},
    ),
    cls(
        DA.SamplerStream,
        lambda: {
            "sampler": TD.DistributedMPerClassSampler(
                labels(24, 6), m=2, batch_size=4, num_replicas=1, rank=0
            )
        },
        calls=[("__call__", {"s": 3}, None)],
    ),
]
