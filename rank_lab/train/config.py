"""The typed training configuration and its validation; the papers' recipes are in
:mod:`rank_lab.train.recipes`.

A :class:`TrainConfig` is a flat dataclass (plus a nested :class:`~rank_lab.models.ModelConfig`)
so that a papermill ``parameters`` cell can fill it: :meth:`TrainConfig.from_dict` takes flat keys
(``{"lr": 1e-4, "backbone": "resnet50"}``: model keys are routed to ``model``), a nested
``{"model": {...}}`` dict, or dotted keys (``"model.embed_dim"``). Every field is checked in
``__post_init__`` and a bad value raises ``ValueError``/``TypeError`` naming the field.

:meth:`TrainConfig.recipe` starts from one of the training recipes of :mod:`rank_lab.train.recipes`
(:data:`~rank_lab.train.recipes.RECIPES`: the hyper-parameters of the Ramzi thesis §3.5.1 and
§4.4.1, the SupRank TPAMI paper §VII-A/B and the ROADMAP NeurIPS paper §4, with the official code
where the texts are silent).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rank_lab._validation import check_positive_int
from rank_lab.engine.options import EngineConfig
from rank_lab.engine.schedule import Schedule
from rank_lab.models.heads import ModelConfig
from rank_lab.train.recipes import RECIPES

__all__ = ["TrainConfig"]

_OPTIMIZERS = ("adam", "adamw", "sgd")
_SCHEDULERS = ("cosine", "constant", "step")
_AMP_DTYPES = ("float16", "bfloat16")
_DIST_LOSS = ("full", "local")
_SAMPLERS = ("m_per_class", "hierarchical")


@dataclass
class TrainConfig:
    """Everything a :class:`~rank_lab.train.Trainer` run needs, with defaults for a small CPU run.

    Fields, by group:

    * Run: ``seed``, ``device`` (``None``/"auto" = CUDA when present), ``deterministic``
      (deterministic algorithms, :func:`rank_lab.utils.seed_everything`: the condition of a
      bit-exact resume on CUDA; on the CPU runs are bit-exact either way).
    * Data: ``epochs``, ``batch_size``, ``m_per_class`` (images per class in a batch, the
      m-per-class sampler of the papers), ``sampler`` ("m_per_class", or "hierarchical": the
      HAPPIER papers' sampler drawing ``super_classes_per_batch`` super-classes (label column
      1) per batch, m per class, needs ``(N, L)`` labels), ``batches_per_epoch`` (``None``: the
      sampler's default length), ``num_workers`` (clamped to the machine's CPUs, with a warning),
      ``image_size`` (for dataset transforms), ``dataset`` / ``data_dir`` (for
      :func:`rank_lab.data.datasets.retrieval.load_retrieval_dataset`).
    * Optimiser: ``optimizer`` (adam / adamw / sgd), ``lr`` (backbone), ``head_lr`` (pooling +
      head; ``None`` = ``lr``), ``loss_lr`` (learnable loss parameters such as proxies;
      ``None`` = head lr), ``weight_decay``, ``momentum``/``nesterov`` (sgd).
    * Schedule: ``scheduler`` (cosine / constant, per step; or step: the rate times ``gamma`` at
      each of the ``milestones`` epochs, torch's ``MultiStepLR``, the RS@k recipes),
      ``warmup_epochs`` (linear LR warm-up), ``min_lr`` (cosine floor of the backbone group; other
      groups scale with their base lr),
      ``freeze_backbone_epochs`` (thesis §4.4.1: "warm up for 5 epochs, the pre-trained
      weights are not optimized"), ``grad_clip`` (max global norm), ``amp`` (mixed
      precision, CUDA only), ``amp_dtype``.
    * Loss: ``loss`` (a name for :func:`rank_lab.losses.build_loss`; ignored when a loss module is
      given to the trainer), ``loss_kwargs``.
    * Memory: ``memory_size`` (0 = none; cross-batch memory of XBM), ``memory_activate_epoch``,
      ``memory_weight`` (loss = (batch + w * memory) / (1 + w), as the official code),
      ``memory_unique`` (one slot per training image; the size is then the train-set size).
    * Labels: ``relabel_train`` re-indexes the training labels to ``0..C-1`` per column (proxy
      losses index their proxies with them; retrieval losses only compare labels).
    * Evaluation: ``eval_every`` (epochs; 0 = never), ``eval_at_start`` (also evaluate the
      untrained model, logged as epoch 0), ``eval_ks``, ``eval_metrics`` (default R@k and
      mAP@R, the papers' tables; add ``"mAP"`` for full AP, slower), ``eval_batch_size``.
    * Scale-out: ``multistage_chunk_size`` (``None``: one forward per batch; else the batch is
      embedded ``chunk`` items at a time by multistage back-propagation, Patel thesis
      §5.3.2, :mod:`rank_lab.train.multistage`), ``dist_loss`` (under
      :class:`~rank_lab.train.distributed.trainer.DistributedTrainer`: ``"full"`` = every rank
      computes the loss of the whole gathered batch, exact for every loss; ``"local"`` =
      each rank ranks its own queries against the gathered batch, for losses that are a
      mean over queries). ``batch_size`` is always the *global* batch (all ranks).
    * Output: ``checkpoint_dir`` (``None`` = no checkpoint), ``checkpoint_every``, ``resume``,
      ``log_path`` (``None`` = ``checkpoint_dir/log.json`` if any), ``progress`` (tqdm).
    * Model: ``model``, a :class:`~rank_lab.models.ModelConfig` (flat keys such as ``backbone`` and
      ``weights`` -- ``"imagenet"``, ``"none"`` or a weight file, :mod:`rank_lab.models.weights` --
      are routed there); ``recipe_name``, the recipe started from, if any (set by :meth:`recipe`
      or a ``"recipe"`` key of :meth:`from_dict`).
    """

    seed: int = 0
    device: str | None = None
    deterministic: bool = False
    epochs: int = 10
    batch_size: int = 64
    m_per_class: int = 4
    sampler: str = "m_per_class"
    super_classes_per_batch: int = 2
    batches_per_epoch: int | None = None
    num_workers: int = 0
    image_size: int = 224
    dataset: str | None = None
    data_dir: str | None = None
    optimizer: str = "adam"
    lr: float = 1e-3
    head_lr: float | None = None
    loss_lr: float | None = None
    weight_decay: float = 0.0
    momentum: float = 0.9
    nesterov: bool = False
    scheduler: str = "cosine"
    milestones: tuple[int, ...] = ()
    gamma: float = 0.1
    warmup_epochs: int = 0
    min_lr: float = 0.0
    freeze_backbone_epochs: int = 0
    grad_clip: float | None = None
    amp: bool = True
    amp_dtype: str = "float16"
    loss: str | None = None
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    memory_size: int = 0
    memory_activate_epoch: int = 0
    memory_weight: float = 1.0
    memory_unique: bool = False
    relabel_train: bool = True
    eval_every: int = 1
    eval_at_start: bool = False
    eval_ks: tuple[int, ...] = (1, 10, 100)
    eval_metrics: tuple[str, ...] = ("R@k", "mAP@R")
    eval_batch_size: int = 256
    checkpoint_dir: str | None = None
    checkpoint_every: int = 1
    resume: bool = True
    log_path: str | None = None
    progress: bool = True
    multistage_chunk_size: int | None = None
    dist_loss: str = "full"
    model: ModelConfig = field(default_factory=ModelConfig)
    recipe_name: str | None = None

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        if isinstance(self.model, Mapping):
            self.model = ModelConfig.from_dict(self.model)
        if not isinstance(self.model, ModelConfig):
            raise TypeError(
                f"model must be a ModelConfig or a dict, got {type(self.model).__name__}"
            )
        for name in ("checkpoint_dir", "log_path", "data_dir"):
            v = getattr(self, name)
            if isinstance(v, Path):
                setattr(self, name, str(v))
        _int(self, "seed", 0)
        _int(self, "epochs", 1)
        _int(self, "batch_size", 2)
        _int(self, "m_per_class", 1)
        _int(self, "batches_per_epoch", 1, optional=True)
        _int(self, "num_workers", 0)
        _int(self, "image_size", 1)
        _int(self, "warmup_epochs", 0)
        _int(self, "freeze_backbone_epochs", 0)
        _int(self, "memory_size", 0)
        _int(self, "memory_activate_epoch", 0)
        _int(self, "eval_every", 0)
        _int(self, "eval_batch_size", 1)
        _int(self, "checkpoint_every", 1)
        _int(self, "multistage_chunk_size", 1, optional=True)
        for name in (
            "deterministic",
            "nesterov",
            "amp",
            "eval_at_start",
            "resume",
            "progress",
            "memory_unique",
            "relabel_train",
        ):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        _float(self, "lr", positive=True)
        _float(self, "head_lr", positive=True, optional=True)
        _float(self, "loss_lr", positive=True, optional=True)
        _float(self, "weight_decay")
        _float(self, "momentum")
        _float(self, "min_lr")
        _float(self, "grad_clip", positive=True, optional=True)
        _float(self, "memory_weight")
        _float(self, "gamma", positive=True)
        if isinstance(self.milestones, int):
            self.milestones = (self.milestones,)
        if not isinstance(self.milestones, (tuple, list)):
            raise TypeError(f"milestones must be a sequence of epochs, got {self.milestones!r}")
        self.milestones = tuple(self.milestones)
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 0 for m in self.milestones):
            raise ValueError(f"milestones must be ints >= 0 (epochs), got {self.milestones!r}")
        _choice(self, "optimizer", _OPTIMIZERS)
        _choice(self, "scheduler", _SCHEDULERS)
        _choice(self, "amp_dtype", _AMP_DTYPES)
        _choice(self, "dist_loss", _DIST_LOSS)
        _choice(self, "sampler", _SAMPLERS)
        _int(self, "super_classes_per_batch", 1)
        if self.batch_size % self.m_per_class != 0:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of m_per_class "
                f"({self.m_per_class})"
            )
        if self.batch_size // self.m_per_class < 2:
            raise ValueError(
                f"batch_size // m_per_class = {self.batch_size // self.m_per_class}: a batch needs "
                "at least 2 classes (otherwise no query has a negative)"
            )
        if self.warmup_epochs >= self.epochs:
            raise ValueError(
                f"warmup_epochs ({self.warmup_epochs}) must be < epochs ({self.epochs})"
            )
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) must be <= lr ({self.lr})")
        if self.device is not None and not isinstance(self.device, str):
            self.device = str(self.device)
        for name in ("loss", "dataset", "recipe_name"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name} must be a str or None, got {v!r}")
        if not isinstance(self.loss_kwargs, Mapping):
            raise TypeError(f"loss_kwargs must be a dict, got {type(self.loss_kwargs).__name__}")
        self.loss_kwargs = dict(self.loss_kwargs)
        if isinstance(self.eval_ks, int):
            self.eval_ks = (self.eval_ks,)
        self.eval_ks = tuple(self.eval_ks)
        if not self.eval_ks or any(
            isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.eval_ks
        ):
            raise ValueError(
                f"eval_ks must be a non-empty sequence of positive ints, got {self.eval_ks!r}"
            )
        if isinstance(self.eval_metrics, str):
            self.eval_metrics = (self.eval_metrics,)
        self.eval_metrics = tuple(str(m) for m in self.eval_metrics)

    # ------------------------------------------------------------------ dict round trip
    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any] | None = None, *, ignore_unknown: bool = False, **kw: Any
    ) -> TrainConfig:
        """Build a config from flat, nested or dotted keys (plus keyword overrides).

        Args:
            d: e.g.
                ``{"lr": 1e-4, "backbone": "mlp", "model": {"embed_dim": 32}, "model.width": 8}``.
                A ``"recipe"`` key starts from that recipe.
            ignore_unknown: skip unknown keys instead of raising (handy to pass a notebook's
                whole parameter dict).
            **kw: more keys, applied after ``d``.

        Raises:
            ValueError: for an unknown key (with close matches) or an invalid value.
        """
        items = dict(d or {})
        items.update(kw)
        base: dict[str, Any] = {}
        recipe = items.pop("recipe", None)
        if recipe is not None:
            base = cls.recipe(recipe).to_dict()
        train_fields = {f.name for f in dataclasses.fields(cls)}
        model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
        model: dict[str, Any] = dict(base.pop("model", {}) or {})
        nested = items.pop("model", None)
        if nested is not None:
            if isinstance(nested, ModelConfig):
                nested = nested.to_dict()
            if not isinstance(nested, Mapping):
                raise TypeError(f"model must be a dict or a ModelConfig, got {nested!r}")
            model.update(nested)
        for key, value in items.items():
            if key.startswith("model."):
                sub = key[len("model.") :]
                if sub not in model_fields:
                    if ignore_unknown:
                        continue
                    raise ValueError(_unknown(key, {f"model.{m}" for m in model_fields}))
                model[sub] = value
            elif key in train_fields:
                base[key] = value
            elif key in model_fields:
                model[key] = value
            elif not ignore_unknown:
                raise ValueError(_unknown(key, train_fields | model_fields))
        if recipe is not None:
            base["recipe_name"] = recipe
        if "hidden_dims" in model:
            model["hidden_dims"] = tuple(model["hidden_dims"])
        base["model"] = ModelConfig.from_dict(model)
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly nested dict; ``TrainConfig.from_dict(c.to_dict()) == c``."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["model"] = self.model.to_dict()
        out["eval_ks"] = list(self.eval_ks)
        out["eval_metrics"] = list(self.eval_metrics)
        out["milestones"] = list(self.milestones)
        return out

    def to_json(self, path: str | Path | None = None) -> str:
        """Serialise to JSON (and write it to ``path`` if given)."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text)
        return text

    def replace(self, **changes: Any) -> TrainConfig:
        """A validated copy with some keys changed (flat model keys allowed)."""
        return _replace(self, changes)

    def engine_options(self, checkpoint: str | Path | None = None) -> EngineConfig:
        """The training engine's options of this run, the one place they are read from the config.

        ``epochs``, ``resume``, ``progress``, ``amp``, ``amp_dtype`` and ``grad_clip`` are the
        fields of :class:`~rank_lab.engine.options.EngineConfig`, kept flat here so that a
        notebook's parameters cell fills them; the :class:`~rank_lab.train.trainer.Trainer` writes
        its checkpoints itself (every ``checkpoint_every`` epochs, with its log), so the engine gets
        ``checkpoint_every=None``.

        Args:
            checkpoint: the checkpoint file (the trainer's ``checkpoint_dir/last.pt``) or ``None``.
        """
        return EngineConfig(
            epochs=self.epochs,
            checkpoint=checkpoint,
            checkpoint_every=None,
            resume=self.resume,
            progress=self.progress,
            amp=self.amp,
            amp_dtype=self.amp_dtype,
            grad_clip=self.grad_clip,
        )

    def schedule(self, steps_per_epoch: int) -> Schedule:
        """The learning-rate schedule of this run, the one place it is read from the config.

        ``scheduler`` over ``epochs * steps_per_epoch`` optimiser steps after ``warmup_epochs`` of
        warm-up; ``min_lr`` is the floor of the backbone group (``ref_lr = lr``, other groups keep
        their ratio); ``"step"`` multiplies the rate by ``gamma`` at each of the ``milestones``
        epochs (an epoch is ``steps_per_epoch`` steps).

        Args:
            steps_per_epoch: optimiser steps per epoch (a positive int).
        """
        steps_per_epoch = check_positive_int(steps_per_epoch, "steps_per_epoch")
        return Schedule(
            self.scheduler,
            self.epochs * steps_per_epoch,
            self.warmup_epochs * steps_per_epoch,
            self.min_lr,
            ref_lr=self.lr,
            step_unit=steps_per_epoch,
            milestones=self.milestones,
            gamma=self.gamma,
        )

    # ------------------------------------------------------------------ recipes
    @classmethod
    def recipe(cls, name: str, **overrides: Any) -> TrainConfig:
        """The papers' training recipes by name (:data:`rank_lab.train.recipes.RECIPES`,
        :func:`~rank_lab.train.recipes.list_recipes`).

        ``TrainConfig.recipe("roadmap_sop", epochs=5, weights="imagenet")`` starts from the
        recipe and applies validated overrides (``weights`` may also be ``"none"`` or a file path).
        A *recipe* is a training setting (optimiser, schedule, sampler, data); a *preset* is a named
        loss combination (:mod:`rank_lab.losses.presets`). ``recipe_name`` records the recipe.

        Raises:
            TypeError: ``name`` is not a str.
            ValueError: an unknown recipe name (with close matches) or a bad override.
        """
        RECIPES.key(name, "name")
        if name not in RECIPES:
            raise ValueError(_unknown(name, set(RECIPES), what="recipe"))
        d = {k: v for k, v in copy.deepcopy(RECIPES[name]).items() if not k.startswith("_")}
        d.update(overrides)
        cfg = cls.from_dict(d)
        cfg.recipe_name = name
        return cfg


def _replace(cfg: TrainConfig, changes: Mapping[str, Any]) -> TrainConfig:
    return TrainConfig.from_dict(cfg.to_dict(), **changes)


def _unknown(key: str, known: set[str], what: str = "config key") -> str:
    close = difflib.get_close_matches(key, sorted(known), n=3)
    hint = f" Did you mean {close}?" if close else ""
    return f"unknown {what} {key!r}.{hint} Known: {sorted(known)}"


def _int(cfg: Any, name: str, minimum: int, optional: bool = False) -> None:
    v = getattr(cfg, name)
    if v is None and optional:
        return
    if isinstance(v, float) and v.is_integer():
        v = int(v)
        setattr(cfg, name, v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, got {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")


def _float(cfg: Any, name: str, positive: bool = False, optional: bool = False) -> None:
    v = getattr(cfg, name)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number{' or None' if optional else ''}, got {v!r}")
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and v <= 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    if not positive and v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    setattr(cfg, name, v)


def _choice(cfg: Any, name: str, choices: tuple[str, ...]) -> None:
    v = getattr(cfg, name)
    if not isinstance(v, str) or v.lower() not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {v!r}")
    setattr(cfg, name, v.lower())
