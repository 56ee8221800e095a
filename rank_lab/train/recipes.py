"""Training recipes: the papers' optimiser, schedule, sampler, loss and data settings, by name.

One module, one word: a *recipe* says how to train; a *preset* (:mod:`rank_lab.losses.presets`) is a
named loss.

:data:`RECIPES` holds every recipe in one schema, the flat keys of
:class:`~rank_lab.train.TrainConfig` (``TrainConfig.recipe(name, **overrides)`` starts a config from
one; :func:`list_recipes` lists them); a key starting with ``_`` documents the sources (the entry's
summary) and is not a config key:

* ``roadmap_*``, ``happier_sop``: the Ramzi thesis (§3.5.1, §4.4.1), the SupRank TPAMI paper
  (§VII-A/B) and the ROADMAP NeurIPS paper (§4), with the official code ([CODE]) where the texts
  are silent.
* ``recall_<dataset>_<arch>`` and ``recall_<dataset>_<arch>_simix``: the per-dataset RS@k recipes of
  Section 5.3.2 of the Patel thesis: Adam for ResNets, AdamW for ViTs; 4 samples per class; batch
  4,000 (Cars196: 392 = 4 x 98 classes); the loss ``smooth_recall`` with ``tau_star = 1``,
  ``tau = 0.01`` (the thesis' tau_1, tau_2) and ``K = {1, 2, 4, 8, 16}``, or with SiMix (the
  ``_simix`` recipe) ``K = {1, 2, 4, 8, 12, 16, 20, 24, 28, 32}`` (``{1, 2, 4}`` / ``{1, 2, 4, 8}``
  on GLDv1); d = 512 (2048 on GLDv1); GLDv1: batch 4,096, 500 batches. The thesis says the
  per-dataset learning rates and schedules "will be released with the implementation": the values
  (lr, epochs, the ``"step"`` scheduler's milestones, gamma 0.3, weight decay 4e-4, the multistage
  chunk ``bs_base``) are those of the official code ``yash0307/RecallatK_surrogate``
  (``src/main.py``); CUB200 is in the code and in Table 5.10 (batch 400).
"""

from __future__ import annotations

from typing import Any

from rank_lab.losses.recall import DEFAULT_KS, DEFAULT_KS_SIMIX
from rank_lab.registry import Registry

__all__ = ["RECIPES", "list_recipes"]


_R50 = {
    "backbone": "resnet50",
    "in_channels": 3,
    "layer_norm": True,
    "embed_dim": 512,
    "freeze_bn": True,
}

#: The papers' training recipes (flat :class:`~rank_lab.train.TrainConfig` keys), by name. Keys
#: starting with ``_`` document the sources and are not config keys (the entry's summary is
#: ``_sources``).
RECIPES: Registry[dict[str, Any]] = Registry("recipe")
for _name, _recipe in {
    "roadmap_sop": {
        **_R50,
        "pooling": "avg",
        "dataset": "sop",
        "image_size": 224,
        "batch_size": 256,
        "m_per_class": 4,
        "epochs": 100,
        "optimizer": "adam",
        "lr": 5e-5,
        "head_lr": 1e-4,
        "weight_decay": 1e-4,
        "scheduler": "cosine",
        "min_lr": 0.0,
        "amp": True,
        "loss": "roadmap_tpami",
        "loss_lr": 10.0,
        "eval_ks": (1, 10, 100),
        "_sources": "[T] §3.5.1 / [S] §VII-A: ResNet-50, avg pooling, LayerNorm w/o affine, "
        "2048->512, batch 256 (4/class), Adam lr 5e-5, cosine, 100 epochs, 224px. [CODE] "
        "optimizer/sop.yaml: wd 1e-4, head lr 2x, eta_min 0; proxies (L*_DG) Adam lr 10; "
        "model/*.yaml: freeze_batch_norm, autocast. The papers use the hierarchical (super-class "
        "pairs) sampler on SOP; rank_lab uses m-per-class.",
    },
    "roadmap_inat": {
        **_R50,
        "pooling": "avg",
        "dataset": "inaturalist",
        "image_size": 224,
        "batch_size": 256,
        "m_per_class": 4,
        "epochs": 100,
        "optimizer": "adam",
        "lr": 1e-5,
        "head_lr": 2e-5,
        "weight_decay": 4e-4,
        "scheduler": "cosine",
        "min_lr": 1e-6,
        "amp": True,
        "loss": "roadmap_tpami",
        "loss_lr": 10.0,
        "eval_ks": (1, 4, 16, 32),
        "_sources": "[T] §3.5.1 / [S] §VII-A: Adam lr 1e-5, cosine, 100 epochs, batch 256 "
        "(4/class). [CODE] optimizer/inat.yaml: wd 4e-4, eta_min 1e-6, head lr 2x; proxies lr 10.",
    },
    "roadmap_cub": {
        **_R50,
        "pooling": "max",
        "dataset": "cub",
        "image_size": 256,
        "batch_size": 128,
        "m_per_class": 4,
        "epochs": 200,
        "optimizer": "adam",
        "lr": 1e-6,
        "head_lr": 2e-6,
        "weight_decay": 4e-4,
        "scheduler": "cosine",
        "min_lr": 0.0,
        "amp": True,
        "loss": "roadmap_neurips",
        "eval_ks": (1, 2, 4, 8),
        "_sources": "[R] §4.2: max pooling + layer norm for CUB, 256x256 images; official ROADMAP "
        "README: batch 128, 200 epochs. [CODE] SupRank optimizer/cub.yaml: Adam lr 1e-6, wd 4e-4, "
        "head lr 2x (the papers print no CUB learning rate).",
    },
    "roadmap_sop_sota": {
        **_R50,
        "pooling": "gem",
        "dataset": "sop",
        "image_size": 224,
        "batch_size": 256,
        "m_per_class": 4,
        "epochs": 100,
        "optimizer": "adam",
        "lr": 5e-5,
        "head_lr": 1e-4,
        "weight_decay": 1e-4,
        "scheduler": "cosine",
        "min_lr": 0.0,
        "amp": True,
        "loss": "roadmap_tpami",
        "loss_lr": 10.0,
        "eval_ks": (1, 10, 100),
        "memory_size": 59551,
        "memory_activate_epoch": 5,
        "memory_weight": 1.0,
        "_sources": "[S] §VII-B / [T] Tab. 3.4: ROADMAP with a memory, ResNet-50 + GeM + "
        "LayerNorm. [CODE] memory/full_memory.yaml: whole train set (59,551), activated at epoch "
        "5, 1:1 weighting.",
    },
    "roadmap_inat_sota": {
        **_R50,
        "pooling": "gem",
        "dataset": "inaturalist",
        "image_size": 224,
        "batch_size": 256,
        "m_per_class": 4,
        "epochs": 100,
        "optimizer": "adam",
        "lr": 1e-5,
        "head_lr": 2e-5,
        "weight_decay": 4e-4,
        "scheduler": "cosine",
        "min_lr": 1e-6,
        "amp": True,
        "loss": "roadmap_tpami",
        "loss_lr": 10.0,
        "eval_ks": (1, 4, 16, 32),
        "memory_size": 60000,
        "memory_activate_epoch": 5,
        "memory_weight": 1.0,
        "_sources": (
            "[S] §VII-B: ROADMAP + memory, GeM. [CODE] memory/inat_memory.yaml: 60,000 slots."
        ),
    },
    "happier_sop": {
        **_R50,
        "pooling": "avg",
        "dataset": "sop",
        "image_size": 224,
        "batch_size": 256,
        "m_per_class": 4,
        "epochs": 75,
        "optimizer": "adam",
        "lr": 1e-5,
        "head_lr": 2e-5,
        "weight_decay": 1e-4,
        "scheduler": "cosine",
        "min_lr": 0.0,
        "freeze_backbone_epochs": 5,
        "amp": True,
        "loss": "happier",
        "eval_ks": (1, 10, 100),
        "sampler": "hierarchical",
        "super_classes_per_batch": 2,
        "_sources": "[T] §4.4.1: Adam lr 1e-5, wd 1e-4, cosine, 75 epochs, 5 warm-up epochs with "
        "the pre-trained weights frozen, batch 256. ([CODE] sop.yaml has lr 5e-5.) Loss: HAPPIER "
        "(rank_lab.losses.happier, chapter 4); train with hierarchical (product, category) labels.",
    },
    "smoke_synthetic": {
        "backbone": "mlp",
        "hidden_dims": (128, 128),
        "embed_dim": 32,
        "layer_norm": True,
        "batch_size": 32,
        "m_per_class": 4,
        "epochs": 5,
        "optimizer": "adam",
        "lr": 1e-3,
        "scheduler": "cosine",
        "eval_ks": (1, 10),
        "amp": False,
        "_sources": (
            "rank_lab: CPU smoke run on rank_lab.data.make_open_set (a stand-in for the open-set "
            "protocol of the Ramzi thesis, §2.3.1)."
        ),
    },
    "smoke_digits": {
        "backbone": "tiny_cnn",
        "in_channels": 1,
        "width": 16,
        "pooling": "avg",
        "embed_dim": 32,
        "batch_size": 32,
        "m_per_class": 4,
        "epochs": 5,
        "optimizer": "adam",
        "lr": 1e-3,
        "scheduler": "cosine",
        "eval_ks": (1, 10),
        "amp": False,
        "_sources": "rank_lab: CPU smoke run on rank_lab.data.load_digits (8x8, 1 channel).",
    },
}.items():
    RECIPES.register(_name, _recipe, summary=_recipe["_sources"])
del _name, _recipe


def list_recipes(filter: str = "") -> list[str]:
    """Sorted names of the :class:`~rank_lab.train.TrainConfig` recipes matching ``filter``
    (``fnmatch``; ``""``: all); ``RECIPES.entry(name).summary`` gives a recipe's sources."""
    return RECIPES.list(filter)


#: The RS@k recipes of the official code (Patel thesis §5.3.2; see the module docstring):
#: ``(dataset, arch) -> (optimizer, lr, epochs, milestones, other keys)``.
_RS_AT_K: dict[tuple[str, str], tuple[str, float, int, tuple[int, ...], dict[str, Any]]] = {
    ("inaturalist", "resnet50"): ("adam", 1e-4, 90, (40, 70), {}),
    ("inaturalist", "vit_b32"): ("adamw", 5e-5, 90, (10, 40, 70), {}),
    ("inaturalist", "vit_b16"): ("adamw", 5e-5, 90, (10, 40, 70), {"multistage_chunk_size": 100}),
    ("sop", "resnet50"): ("adam", 2e-4, 55, (25, 50), {}),
    ("sop", "vit_b32"): ("adamw", 5e-5, 55, (25, 50), {}),
    ("sop", "vit_b16"): ("adamw", 5e-5, 55, (25, 50), {"multistage_chunk_size": 100}),
    ("vehicleid", "resnet50"): ("adam", 1e-4, 90, (40, 70), {}),
    ("vehicleid", "vit_b32"): ("adamw", 1e-4, 90, (40, 70), {}),
    ("vehicleid", "vit_b16"): ("adamw", 5e-5, 90, (40, 70), {"multistage_chunk_size": 100}),
    ("cars196", "resnet50"): (
        "adam",
        1e-4,
        170,
        (80, 140),
        {"batch_size": 392, "multistage_chunk_size": 98},
    ),
    ("cars196", "vit_b32"): (
        "adamw",
        3e-5,
        50,
        (20, 30, 40),
        {"batch_size": 392, "multistage_chunk_size": 98},
    ),
    ("cars196", "vit_b16"): (
        "adamw",
        1e-5,
        50,
        (20, 30, 40),
        {"batch_size": 392, "multistage_chunk_size": 98},
    ),
    ("cub", "resnet50"): (
        "adam",
        1e-4,
        40,
        (10, 20, 30),
        {"batch_size": 400, "multistage_chunk_size": 100},
    ),
    ("cub", "vit_b32"): (
        "adamw",
        3e-5,
        40,
        (10, 20, 30),
        {"batch_size": 400, "multistage_chunk_size": 100},
    ),
    ("cub", "vit_b16"): (
        "adamw",
        1e-5,
        40,
        (10, 20, 30),
        {"batch_size": 400, "multistage_chunk_size": 100},
    ),
}
#: The thesis' architecture names -> timm names.
_ARCHS = {
    "resnet50": "resnet50",
    "vit_b32": "vit_base_patch32_224",
    "vit_b16": "vit_base_patch16_224",
    "resnet101": "resnet101",
}
_RS_SOURCES = (
    "[P] §5.3.2: {opt} for {arch}, 4 samples per class, batch {batch}, RS@k with tau_1 = 1, "
    "tau_2 = 0.01, K = {ks}{simix}. [CODE] yash0307/RecallatK_surrogate src/main.py: lr {lr}, "
    "{epochs} epochs, MultiStepLR milestones {ms} gamma 0.3, weight decay 4e-4, bs_base {chunk}."
)


def _rs_at_k(dataset: str, arch: str, simix: bool) -> dict[str, Any]:
    opt, lr, epochs, milestones, other = _RS_AT_K[(dataset, arch)]
    ks = DEFAULT_KS_SIMIX if simix else DEFAULT_KS
    recipe: dict[str, Any] = {
        "backbone": _ARCHS[arch],
        "embed_dim": 512,
        "layer_norm": True,
        "dataset": dataset,
        "batch_size": 4000,
        "m_per_class": 4,
        "multistage_chunk_size": 200,
        "epochs": epochs,
        "optimizer": opt,
        "lr": lr,
        "weight_decay": 4e-4,
        "scheduler": "step",
        "milestones": milestones,
        "gamma": 0.3,
        "loss": "smooth_recall",
        "loss_kwargs": {
            "ks": ks,
            "tau_star": 1.0,
            "tau": 0.01,
            **({"simix": True} if simix else {}),
        },
        **other,
    }
    recipe["_sources"] = _RS_SOURCES.format(
        opt="AdamW" if opt == "adamw" else "Adam",
        arch=arch,
        batch=recipe["batch_size"],
        ks=set(ks),
        simix=" (with SiMix)" if simix else "",
        lr=lr,
        epochs=epochs,
        ms=list(milestones),
        chunk=recipe["multistage_chunk_size"],
    )
    return recipe


def _gldv1(simix: bool) -> dict[str, Any]:
    ks = (1, 2, 4, 8) if simix else (1, 2, 4)
    return {
        "backbone": _ARCHS["resnet101"],
        "embed_dim": 2048,
        "layer_norm": False,
        "dataset": "gldv1",
        "batch_size": 4096,
        "m_per_class": 4,
        "multistage_chunk_size": 200,
        "epochs": 1,
        "batches_per_epoch": 500,
        "optimizer": "adam",
        "lr": 1e-6,
        "weight_decay": 1e-6,
        "scheduler": "constant",
        "loss": "smooth_recall",
        "loss_kwargs": {
            "ks": ks,
            "tau_star": 1.0,
            "tau": 0.01,
            **({"simix": True} if simix else {}),
        },
        "_sources": "[P] §5.3.2: GLDv1, ResNet-101, d = 2048, batch 4,096, 500 batches, K = "
        f"{set(ks)}{' (with SiMix)' if simix else ''}; the other hyper-parameters 'as in Radenovic "
        "et al.' (cnnimageretrieval-pytorch): lr 1e-6 and weight decay 1e-6 are that code's Adam "
        "defaults (its exponential lr decay is not modelled here), not numbers of the thesis; FC "
        "initialised with whitening; images <= 1024 px. rank_lab has no GLDv1 loader.",
    }


for _dataset, _arch in _RS_AT_K:
    for _simix in (False, True):
        _recipe = _rs_at_k(_dataset, _arch, _simix)
        RECIPES.register(
            f"recall_{_dataset}_{_arch}{'_simix' if _simix else ''}",
            _recipe,
            summary=_recipe["_sources"],
        )
for _simix in (False, True):
    _recipe = _gldv1(_simix)
    RECIPES.register(
        f"recall_gldv1_resnet101{'_simix' if _simix else ''}", _recipe, summary=_recipe["_sources"]
    )
del _dataset, _arch, _simix, _recipe
