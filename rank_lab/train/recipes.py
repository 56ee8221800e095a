"""Training recipes: the papers' optimiser, schedule, sampler and data settings, by name.

One module, one word: a *recipe* says how to train; a *preset* (:mod:`rank_lab.losses.presets`) is a
named loss.

* :data:`RECIPES` -- the :class:`~rank_lab.train.TrainConfig` recipes of the Ramzi thesis (§3.5.1,
  §4.4.1), the SupRank TPAMI paper (§VII-A/B) and the ROADMAP NeurIPS paper (§4), with the official
  code ([CODE]) where the texts are silent; each recipe's ``_sources`` entry says which is which.
  ``TrainConfig.recipe(name)`` starts a config from one; :func:`list_recipes` lists them.
* :class:`RecallRecipe`, :data:`RECALL_RECIPES` -- the per-dataset RS@k recipes of Section 5.3.2 of
  the Patel thesis: Adam for ResNets, AdamW for ViTs; 4 samples per class; batch 4,000 (Cars196:
  392 = 4 x 98 classes); ``tau_star = 1``, ``tau = 0.01`` (the thesis' tau_1, tau_2);
  ``K = {1, 2, 4, 8, 16}`` without SiMix and ``{1, 2, 4, 8, 12, 16, 20, 24, 28, 32}`` with it
  (``{1, 2, 4}`` / ``{1, 2, 4, 8}`` on GLDv1); d = 128 or 512 (2048 on R-Oxford/R-Paris); GLDv1:
  batch 4,096, 500 batches. The thesis says the per-dataset learning rates and schedules "will be
  released with the implementation": the values below (lr, epochs, MultiStepLR milestones, gamma
  0.3, weight decay 4e-4, chunk size ``bs_base``) are those of the official code
  ``yash0307/RecallatK_surrogate`` (``src/main.py``), marked ``source="code"``. CUB200 is in the
  code and in Table 5.10 (batch 400). :func:`get_recall_recipe`, :func:`list_recall_recipes`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch

from rank_lab._validation import check_choice, check_float, check_nonneg_int, check_positive_int
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.schedule import Schedule
from rank_lab.losses.recall import DEFAULT_KS, DEFAULT_KS_SIMIX, SmoothRecallAtK

__all__ = ["RECIPES", "list_recipes", "RecallRecipe", "RECALL_RECIPES", "get_recall_recipe", "list_recall_recipes"]


_R50 = {"backbone": "resnet50", "in_channels": 3, "layer_norm": True, "embed_dim": 512, "freeze_bn": True}

#: The papers' training recipes (flat :class:`~rank_lab.train.TrainConfig` keys). Keys starting with ``_``
#: document the sources and are not config keys.
RECIPES: dict[str, dict[str, Any]] = {
    "roadmap_sop": {
        **_R50, "pooling": "avg", "dataset": "sop", "image_size": 224,
        "batch_size": 256, "m_per_class": 4, "epochs": 100, "optimizer": "adam",
        "lr": 5e-5, "head_lr": 1e-4, "weight_decay": 1e-4, "scheduler": "cosine", "min_lr": 0.0,
        "amp": True, "loss": "roadmap_tpami", "loss_lr": 10.0, "eval_ks": (1, 10, 100),
        "_sources": "[T] §3.5.1 / [S] §VII-A: ResNet-50, avg pooling, LayerNorm w/o affine, 2048->512, "
        "batch 256 (4/class), Adam lr 5e-5, cosine, 100 epochs, 224px. [CODE] optimizer/sop.yaml: "
        "wd 1e-4, head lr 2x, eta_min 0; proxies (L*_DG) Adam lr 10; model/*.yaml: freeze_batch_norm, autocast. The papers use "
        "the hierarchical (super-class pairs) sampler on SOP; rank_lab uses m-per-class.",
    },
    "roadmap_inat": {
        **_R50, "pooling": "avg", "dataset": "inaturalist", "image_size": 224,
        "batch_size": 256, "m_per_class": 4, "epochs": 100, "optimizer": "adam",
        "lr": 1e-5, "head_lr": 2e-5, "weight_decay": 4e-4, "scheduler": "cosine", "min_lr": 1e-6,
        "amp": True, "loss": "roadmap_tpami", "loss_lr": 10.0, "eval_ks": (1, 4, 16, 32),
        "_sources": "[T] §3.5.1 / [S] §VII-A: Adam lr 1e-5, cosine, 100 epochs, batch 256 (4/class). "
        "[CODE] optimizer/inat.yaml: wd 4e-4, eta_min 1e-6, head lr 2x; proxies lr 10.",
    },
    "roadmap_cub": {
        **_R50, "pooling": "max", "dataset": "cub", "image_size": 256,
        "batch_size": 128, "m_per_class": 4, "epochs": 200, "optimizer": "adam",
        "lr": 1e-6, "head_lr": 2e-6, "weight_decay": 4e-4, "scheduler": "cosine", "min_lr": 0.0,
        "amp": True, "loss": "roadmap_neurips", "eval_ks": (1, 2, 4, 8),
        "_sources": "[R] §4.2: max pooling + layer norm for CUB, 256x256 images; official ROADMAP "
        "README: batch 128, 200 epochs. [CODE] SupRank optimizer/cub.yaml: Adam lr 1e-6, wd 4e-4, "
        "head lr 2x (the papers print no CUB learning rate).",
    },
    "roadmap_sop_sota": {
        **_R50, "pooling": "gem", "dataset": "sop", "image_size": 224,
        "batch_size": 256, "m_per_class": 4, "epochs": 100, "optimizer": "adam",
        "lr": 5e-5, "head_lr": 1e-4, "weight_decay": 1e-4, "scheduler": "cosine", "min_lr": 0.0,
        "amp": True, "loss": "roadmap_tpami", "loss_lr": 10.0, "eval_ks": (1, 10, 100),
        "memory_size": 59551, "memory_activate_epoch": 5, "memory_weight": 1.0,
        "_sources": "[S] §VII-B / [T] Tab. 3.4: ROADMAP with a memory, ResNet-50 + GeM + LayerNorm. "
        "[CODE] memory/full_memory.yaml: whole train set (59,551), activated at epoch 5, 1:1 weighting.",
    },
    "roadmap_inat_sota": {
        **_R50, "pooling": "gem", "dataset": "inaturalist", "image_size": 224,
        "batch_size": 256, "m_per_class": 4, "epochs": 100, "optimizer": "adam",
        "lr": 1e-5, "head_lr": 2e-5, "weight_decay": 4e-4, "scheduler": "cosine", "min_lr": 1e-6,
        "amp": True, "loss": "roadmap_tpami", "loss_lr": 10.0, "eval_ks": (1, 4, 16, 32),
        "memory_size": 60000, "memory_activate_epoch": 5, "memory_weight": 1.0,
        "_sources": "[S] §VII-B: ROADMAP + memory, GeM. [CODE] memory/inat_memory.yaml: 60,000 slots.",
    },
    "happier_sop": {
        **_R50, "pooling": "avg", "dataset": "sop", "image_size": 224,
        "batch_size": 256, "m_per_class": 4, "epochs": 75, "optimizer": "adam",
        "lr": 1e-5, "head_lr": 2e-5, "weight_decay": 1e-4, "scheduler": "cosine", "min_lr": 0.0,
        "freeze_backbone_epochs": 5, "amp": True, "loss": "happier", "eval_ks": (1, 10, 100),
        "sampler": "hierarchical", "super_classes_per_batch": 2,
        "_sources": "[T] §4.4.1: Adam lr 1e-5, wd 1e-4, cosine, 75 epochs, 5 warm-up epochs with the "
        "pre-trained weights frozen, batch 256. ([CODE] sop.yaml has lr 5e-5.) Loss: HAPPIER "
        "(rank_lab.losses.happier, chapter 4); train with hierarchical (product, category) labels.",
    },
    "smoke_synthetic": {
        "backbone": "mlp", "hidden_dims": (128, 128), "embed_dim": 32, "layer_norm": True,
        "batch_size": 32, "m_per_class": 4, "epochs": 5, "optimizer": "adam", "lr": 1e-3,
        "scheduler": "cosine", "eval_ks": (1, 10), "amp": False,
        "_sources": "rank_lab: CPU smoke run on rank_lab.data.make_open_set (a stand-in for the open-set protocol of the Ramzi thesis, §2.3.1).",
    },
    "smoke_digits": {
        "backbone": "tiny_cnn", "in_channels": 1, "width": 16, "pooling": "avg", "embed_dim": 32,
        "batch_size": 32, "m_per_class": 4, "epochs": 5, "optimizer": "adam", "lr": 1e-3,
        "scheduler": "cosine", "eval_ks": (1, 10), "amp": False,
        "_sources": "rank_lab: CPU smoke run on rank_lab.data.load_digits (8x8, 1 channel).",
    },
}


def list_recipes() -> dict[str, str]:
    """``{name: sources}`` of every :class:`~rank_lab.train.TrainConfig` recipe."""
    return {k: v.get("_sources", "") for k, v in RECIPES.items()}


@dataclass(frozen=True)
class RecallRecipe:
    """One training recipe for RS@k.

    Attributes:
        dataset: dataset name (``"inaturalist"``, ``"sop"``, ``"vehicleid"``, ``"cars196"``,
            ``"cub200"``, ``"gldv1"``).
        arch: backbone (``"resnet50"``, ``"vit_b32"``, ``"vit_b16"``, ``"resnet101"``).
        optimizer: ``"adam"`` or ``"adamw"``.
        lr: learning rate.
        epochs: training epochs (for GLDv1: ``None``, it trains for ``n_batches``).
        milestones: the epochs where the rate is multiplied by ``gamma`` (torch's MultiStepLR; the
            engine's ``"step"`` schedule, :meth:`schedule`).
        gamma: the factor at each milestone.
        weight_decay: optimiser weight decay.
        batch_size: images per batch ``M``.
        samples_per_class: ``m``.
        chunk_size: images per forward in multistage back-propagation (``bs_base`` of the code).
        embed_dim: ``d``.
        ks, ks_simix: the k sets without / with SiMix.
        tau_star, tau: the sigmoid temperatures on ranks and on score differences (the thesis'
            tau_1 = 1 and tau_2 = 0.01; :class:`~rank_lab.losses.SmoothRecallAtK`).
        layer_norm: LayerNorm in the head (not for R-Oxford/R-Paris).
        n_batches: number of training batches when ``epochs`` is ``None`` (GLDv1).
        source: ``"thesis"`` or ``"code"`` (where lr / epochs come from).
    """

    dataset: str
    arch: str
    optimizer: str
    lr: float
    epochs: int | None
    milestones: tuple[int, ...]
    gamma: float = 0.3
    weight_decay: float = 4e-4
    batch_size: int = 4000
    samples_per_class: int = 4
    chunk_size: int = 200
    embed_dim: int = 512
    ks: tuple[int, ...] = DEFAULT_KS
    ks_simix: tuple[int, ...] = DEFAULT_KS_SIMIX
    tau_star: float = 1.0
    tau: float = 0.01
    layer_norm: bool = True
    n_batches: int | None = None
    source: str = "code"
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        """Check every field (a bad value raises naming it; ``scaled`` and the recipes go through here)."""
        for name in ("dataset", "arch"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty str, got {getattr(self, name)!r}")
        check_choice(self.optimizer, "optimizer", ("adam", "adamw"))
        check_choice(self.source, "source", ("thesis", "code"))
        check_float(self.lr, "lr", low=0.0, low_open=True)
        check_float(self.gamma, "gamma", low=0.0, low_open=True)
        check_float(self.weight_decay, "weight_decay", low=0.0)
        check_float(self.tau_star, "tau_star", low=0.0, low_open=True)
        check_float(self.tau, "tau", low=0.0, low_open=True)
        for name in ("batch_size", "samples_per_class", "chunk_size", "embed_dim"):
            check_positive_int(getattr(self, name), name)
        for name in ("epochs", "n_batches"):
            if getattr(self, name) is not None:
                check_positive_int(getattr(self, name), name)
        if self.epochs is None and self.n_batches is None:
            raise ValueError("epochs and n_batches are both None: a recipe trains for epochs or for n_batches batches")
        for name in ("ks", "ks_simix"):
            v = getattr(self, name)
            if not isinstance(v, (tuple, list)) or not v:
                raise TypeError(f"{name} must be a non-empty tuple of positive ints, got {v!r}")
            for k in v:
                check_positive_int(k, name)
        if not isinstance(self.milestones, (tuple, list)):
            raise TypeError(f"milestones must be a tuple of epochs, got {self.milestones!r}")
        for m in self.milestones:
            check_nonneg_int(m, "milestones")

    def build_loss(self, simix: bool = False, **overrides: object) -> SmoothRecallAtK:
        """The RS@k loss of this recipe (``simix`` switches the k set as the thesis does)."""
        kw: dict[str, object] = {
            "ks": self.ks_simix if simix else self.ks,
            "tau_star": self.tau_star,
            "tau": self.tau,
            "simix": simix,
        }
        kw.update(overrides)
        return SmoothRecallAtK(**kw)  # type: ignore[arg-type]

    def schedule(self, steps_per_epoch: int = 1) -> Schedule:
        """This recipe's MultiStepLR as the engine's ``"step"`` schedule.

        The rate is multiplied by ``gamma`` at each of the ``milestones`` (epochs), as torch's
        ``MultiStepLR(milestones, gamma)`` stepped once per epoch; the engine counts optimiser steps,
        so an epoch is ``steps_per_epoch`` of them (``step_unit``).

        Args:
            steps_per_epoch: optimiser steps per epoch (a positive int; 1: the schedule counts epochs).

        Returns:
            A :class:`~rank_lab.engine.schedule.Schedule` of kind ``"step"`` over the recipe's length
            (``epochs`` epochs, or ``n_batches`` steps).
        """
        steps_per_epoch = check_positive_int(steps_per_epoch, "steps_per_epoch")
        total = self.epochs * steps_per_epoch if self.epochs is not None else int(self.n_batches)  # type: ignore[arg-type]
        return Schedule(kind="step", total_steps=total, step_unit=steps_per_epoch, milestones=tuple(self.milestones),
                        gamma=self.gamma)

    def build_optimizer(self, params: object, steps_per_epoch: int = 1) -> tuple[torch.optim.Optimizer, Schedule]:
        """Adam / AdamW with this recipe's lr and weight decay, and its schedule (:meth:`schedule`).

        Args:
            params: the trainable tensors or parameter groups (:func:`rank_lab.engine.optim.build_optimizer`).
            steps_per_epoch: optimiser steps per epoch, for the schedule.

        Returns:
            ``(optimizer, schedule)``: give both to :class:`rank_lab.engine.loop.Engine`, which sets
            every group's rate from the schedule before each step.
        """
        opt = build_optimizer(params, self.optimizer, lr=self.lr, weight_decay=self.weight_decay)  # type: ignore[arg-type]
        return opt, self.schedule(steps_per_epoch)

    def to_dict(self) -> dict[str, object]:
        """A plain dict (for configs and logs)."""
        return asdict(self)

    def scaled(self, **changes: object) -> RecallRecipe:
        """A copy with some fields changed (e.g. a smaller batch for a small GPU)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _r(dataset: str, arch: str, opt: str, lr: float, epochs: int | None, ms: tuple[int, ...], **kw: object) -> RecallRecipe:
    return RecallRecipe(dataset=dataset, arch=arch, optimizer=opt, lr=lr, epochs=epochs, milestones=ms, **kw)  # type: ignore[arg-type]


#: The RS@k recipes ``"<dataset>_<arch>"``.
RECALL_RECIPES: dict[str, RecallRecipe] = {
    "inaturalist_resnet50": _r("inaturalist", "resnet50", "adam", 1e-4, 90, (40, 70)),
    "inaturalist_vit_b32": _r("inaturalist", "vit_b32", "adamw", 5e-5, 90, (10, 40, 70)),
    "inaturalist_vit_b16": _r("inaturalist", "vit_b16", "adamw", 5e-5, 90, (10, 40, 70), chunk_size=100),
    "sop_resnet50": _r("sop", "resnet50", "adam", 2e-4, 55, (25, 50)),
    "sop_vit_b32": _r("sop", "vit_b32", "adamw", 5e-5, 55, (25, 50)),
    "sop_vit_b16": _r("sop", "vit_b16", "adamw", 5e-5, 55, (25, 50), chunk_size=100),
    "vehicleid_resnet50": _r("vehicleid", "resnet50", "adam", 1e-4, 90, (40, 70)),
    "vehicleid_vit_b32": _r("vehicleid", "vit_b32", "adamw", 1e-4, 90, (40, 70)),
    "vehicleid_vit_b16": _r("vehicleid", "vit_b16", "adamw", 5e-5, 90, (40, 70), chunk_size=100),
    "cars196_resnet50": _r("cars196", "resnet50", "adam", 1e-4, 170, (80, 140), batch_size=392, chunk_size=98),
    "cars196_vit_b32": _r("cars196", "vit_b32", "adamw", 3e-5, 50, (20, 30, 40), batch_size=392, chunk_size=98),
    "cars196_vit_b16": _r("cars196", "vit_b16", "adamw", 1e-5, 50, (20, 30, 40), batch_size=392, chunk_size=98),
    "cub200_resnet50": _r("cub200", "resnet50", "adam", 1e-4, 40, (10, 20, 30), batch_size=400, chunk_size=100),
    "cub200_vit_b32": _r("cub200", "vit_b32", "adamw", 3e-5, 40, (10, 20, 30), batch_size=400, chunk_size=100),
    "cub200_vit_b16": _r("cub200", "vit_b16", "adamw", 1e-5, 40, (10, 20, 30), batch_size=400, chunk_size=100),
    "gldv1_resnet101": _r(
        "gldv1",
        "resnet101",
        "adam",
        1e-6,
        None,
        (),
        batch_size=4096,
        weight_decay=1e-6,
        gamma=1.0,
        embed_dim=2048,
        ks=(1, 2, 4),
        ks_simix=(1, 2, 4, 8),
        layer_norm=False,
        n_batches=500,
        source="thesis",
        notes="the thesis sets the other hyper-parameters 'as in Radenovic et al.' (cnnimageretrieval-pytorch): "
        "lr 1e-6 and weight decay 1e-6 are that code's Adam defaults (its exponential lr decay is not "
        "modelled here), not numbers of the thesis; FC initialised with whitening; images <= 1024 px",
    ),
}


def list_recall_recipes() -> list[str]:
    """Names of the RS@k recipes (``"<dataset>_<arch>"``)."""
    return sorted(RECALL_RECIPES)


def get_recall_recipe(name: str, **changes: object) -> RecallRecipe:
    """An RS@k recipe by name (``"sop_resnet50"`` ...), optionally with fields changed.

    Raises:
        ValueError: unknown name (the message lists the known ones) or field.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.lower()
    if key not in RECALL_RECIPES:
        raise ValueError(f"unknown RS@k recipe name {name!r}; known: {list_recall_recipes()}")
    recipe = RECALL_RECIPES[key]
    unknown = sorted(set(changes) - {f.name for f in fields(RecallRecipe)})
    if unknown:
        raise ValueError(f"unknown RecallRecipe field(s) {unknown} in the changes to {name!r}")
    return recipe.scaled(**changes) if changes else recipe
