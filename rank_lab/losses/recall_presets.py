"""Per-dataset RS@k training recipes as named presets (Section 5.3.2 of the Patel thesis).

What the thesis states: Adam for ResNets, AdamW for ViTs; 4 samples per class; batch 4,000 (Cars196:
392 = 4 x 98 classes); ``tau1 = 1``, ``tau2 = 0.01``; ``K = {1, 2, 4, 8, 16}`` without SiMix and
``{1, 2, 4, 8, 12, 16, 20, 24, 28, 32}`` with it ( ``{1, 2, 4}`` / ``{1, 2, 4, 8}`` on GLDv1);
d = 128 or 512 (2048 on R-Oxford/R-Paris); GLDv1: batch 4,096, 500 batches.
The thesis says the per-dataset learning rates and schedules "will be released with the
implementation": the values below (lr, epochs, MultiStepLR milestones, gamma 0.3, weight decay
4e-4, chunk size ``bs_base``) are those of the official code ``yash0307/RecallatK_surrogate``
(``src/main.py``), marked ``source="code"``. CUB200 is in the code and in Table 5.10 (batch 400).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from rank_lab._validation import check_choice, check_float, check_nonneg_int, check_positive_int
from rank_lab.losses.recall import DEFAULT_KS, DEFAULT_KS_SIMIX, SmoothRecallAtK

__all__ = ["RecallRecipe", "RECALL_PRESETS", "get_recall_preset", "list_recall_presets"]


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
        milestones: MultiStepLR milestones (epochs).
        gamma: MultiStepLR factor.
        weight_decay: optimiser weight decay.
        batch_size: images per batch ``M``.
        samples_per_class: ``m``.
        chunk_size: images per forward in multistage back-propagation (``bs_base`` of the code).
        embed_dim: ``d``.
        ks, ks_simix: the k sets without / with SiMix.
        tau1, tau2: sigmoid temperatures.
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
    tau1: float = 1.0
    tau2: float = 0.01
    layer_norm: bool = True
    n_batches: int | None = None
    source: str = "code"
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        """Check every field (a bad value raises naming it; ``scaled`` and the presets go through here)."""
        for name in ("dataset", "arch"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty str, got {getattr(self, name)!r}")
        check_choice(self.optimizer, "optimizer", ("adam", "adamw"))
        check_choice(self.source, "source", ("thesis", "code"))
        check_float(self.lr, "lr", low=0.0, low_open=True)
        check_float(self.gamma, "gamma", low=0.0, low_open=True)
        check_float(self.weight_decay, "weight_decay", low=0.0)
        check_float(self.tau1, "tau1", low=0.0, low_open=True)
        check_float(self.tau2, "tau2", low=0.0, low_open=True)
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
            "tau_star": self.tau1,
            "tau": self.tau2,
            "simix": simix,
        }
        kw.update(overrides)
        return SmoothRecallAtK(**kw)  # type: ignore[arg-type]

    def build_optimizer(self, params: object) -> object:
        """Adam / AdamW with this recipe's lr and weight decay, and its MultiStepLR scheduler.

        Returns:
            ``(optimizer, scheduler)``.
        """
        import torch

        cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[self.optimizer]
        opt = cls(params, lr=self.lr, weight_decay=self.weight_decay)  # type: ignore[arg-type]
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(self.milestones), gamma=self.gamma)
        return opt, sched

    def to_dict(self) -> dict[str, object]:
        """A plain dict (for configs and logs)."""
        return asdict(self)

    def scaled(self, **changes: object) -> RecallRecipe:
        """A copy with some fields changed (e.g. a smaller batch for a small GPU)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _r(dataset: str, arch: str, opt: str, lr: float, epochs: int | None, ms: tuple[int, ...], **kw: object) -> RecallRecipe:
    return RecallRecipe(dataset=dataset, arch=arch, optimizer=opt, lr=lr, epochs=epochs, milestones=ms, **kw)  # type: ignore[arg-type]


#: Named presets ``"<dataset>_<arch>"``.
RECALL_PRESETS: dict[str, RecallRecipe] = {
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


def list_recall_presets() -> list[str]:
    """Names of the available presets."""
    return sorted(RECALL_PRESETS)


def get_recall_preset(name: str, **changes: object) -> RecallRecipe:
    """A preset by name (``"sop_resnet50"`` ...), optionally with fields changed.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.lower()
    if key not in RECALL_PRESETS:
        raise ValueError(f"unknown RS@k preset name {name!r}; known: {list_recall_presets()}")
    recipe = RECALL_PRESETS[key]
    unknown = sorted(set(changes) - {f.name for f in fields(RecallRecipe)})
    if unknown:
        raise ValueError(f"unknown RecallRecipe field(s) {unknown} in the changes to {name!r}")
    return recipe.scaled(**changes) if changes else recipe
