"""Training classifiers with the chapter-6 objectives of the Patel thesis (Section 6.5.2).

:class:`ContrastiveClassifier` wraps an encoder and the classifier of one of the compared methods;
its :meth:`~ContrastiveClassifier.training_loss` is the method's objective on two augmented views,
and :meth:`~ContrastiveClassifier.logits` its classification logits (posterior = softmax):

=================== ===========================================================================
``"ce"``            cross-entropy on a bias-free linear layer (Eq. 6.6).
``"supcon+ce"``     stage 1: SupCon (Eq. 6.5) on a projection head (FC-ReLU-FC); stage 2: CE on a
                    linear classifier over the frozen encoder.
``"supcon+ce(n)"``  the same with CE(n): normalised features and weights.
``"supcon+tt"``     SupCon on the projection head + tightness (Eq. 6.9) for the prototypes, no
                    gradient from the tightness into the encoder; nearest-prototype classifier.
``"spce"``          SPCE (Eq. 6.7) on the encoder + tightness for the prototypes.
``"spce(m)"``       SPCE, prototypes set to the class means afterwards.
``"esupcon"``       ESupCon (Eq. 6.15): encoder and prototypes jointly, no projection head.
=================== ===========================================================================

Each method is a :class:`ClassificationMethod` registered in :data:`CLS_METHODS` (its classifier,
projection head, stages and objective): a new method is one registration.
:func:`fit_classifier` trains one on the training engine (two views per image from
:func:`rank_lab.data.perturbations.two_views`) and :func:`predict_logits` evaluates it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from rank_lab._validation import (
    check_choice,
    check_float,
    check_input,
    check_labels,
    check_module,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.data.perturbations import two_views
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, StepResult, loop_options
from rank_lab.losses.contrastive import cross_entropy_loss, spce_loss, tightness_loss
from rank_lab.losses.esupcon import esupcon_loss
from rank_lab.losses.supcon import supcon_loss
from rank_lab.models.heads import PrototypeClassifier, class_means
from rank_lab.registry import Registry
from rank_lab.utils import DeviceLike, get_device, seed_everything

__all__ = [
    "CLS_METHODS",
    "ClassificationMethod",
    "ContrastiveClassifier",
    "fit_classifier",
    "predict_logits",
]


@dataclass(frozen=True)
class ClassificationMethod:
    """One chapter-6 method of :class:`ContrastiveClassifier`: its layers, its stages, its
    objective.

    Attributes:
        description: one line (the registry's summary).
        classifier: ``"linear"`` (a bias-free linear layer, Eq. 6.6) or ``"prototypes"`` (a
            :class:`~rank_lab.models.heads.PrototypeClassifier`, cosine logits).
        loss: the (first-stage) objective ``loss(model, features (B, D), labels (B,)) -> scalar``.
        projection: a projection head (FC-ReLU-FC) that the objective reads (SupCon variants).
        stage2_loss: the classifier stage's objective on detached features (two-stage methods),
            or ``None`` (one stage).
        class_means: after training, set the prototypes to the class means (SPCE(M)).
    """

    description: str
    classifier: Literal["linear", "prototypes"]
    loss: Callable[[ContrastiveClassifier, torch.Tensor, torch.Tensor], torch.Tensor]
    projection: bool = False
    stage2_loss: (
        Callable[[ContrastiveClassifier, torch.Tensor, torch.Tensor], torch.Tensor] | None
    ) = None
    class_means: bool = False

    def __post_init__(self) -> None:
        """Check the fields (a bad one raises naming it)."""
        if not isinstance(self.description, str):
            raise TypeError(f"description must be a str, got {type(self.description).__name__}")
        check_choice(self.classifier, "classifier", ("linear", "prototypes"))
        if not callable(self.loss):
            raise TypeError(
                "loss must be a callable loss(model, features, labels), got "
                f"{type(self.loss).__name__}"
            )
        if self.stage2_loss is not None and not callable(self.stage2_loss):
            raise TypeError(
                f"stage2_loss must be a callable or None, got {type(self.stage2_loss).__name__}"
            )
        for name in ("projection", "class_means"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.class_means and self.classifier != "prototypes":
            raise ValueError(
                "class_means=True needs classifier='prototypes' (the class means become the "
                "prototypes)"
            )


#: The chapter-6 methods of :class:`ContrastiveClassifier` by name (``CLS_METHODS.list()``): a new
#: method is one :class:`ClassificationMethod` registered here.
CLS_METHODS: Registry[ClassificationMethod] = Registry("classification method")


def _register(name: str, method: ClassificationMethod) -> None:
    CLS_METHODS.register(name, method, summary=method.description)


def _linear_ce(model: ContrastiveClassifier, f: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    assert model.linear is not None
    return cross_entropy_loss(f, labels, model.linear.weight)


def _normalised_ce(
    model: ContrastiveClassifier, f: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    assert model.prototypes is not None
    return cross_entropy_loss(
        f, labels, model.prototypes.prototypes, normalize=True, temperature=model.temperature
    )


def _supcon(model: ContrastiveClassifier, f: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    assert model.projection is not None
    return supcon_loss(model.projection(f), labels, model.temperature)


def _tightness(model: ContrastiveClassifier, f: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    assert model.prototypes is not None
    return tightness_loss(f, labels, model.prototypes.prototypes, detach_features=True)


def _spce(model: ContrastiveClassifier, f: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return spce_loss(f, labels, model.n_classes, temperature=model.spce_temperature)


def _esupcon(model: ContrastiveClassifier, f: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    assert model.prototypes is not None
    return esupcon_loss(f, labels, model.prototypes.prototypes, model.temperature)


_register(
    "ce",
    ClassificationMethod(
        "cross-entropy on a bias-free linear layer (Eq. 6.6)", "linear", _linear_ce
    ),
)
_register(
    "supcon+ce",
    ClassificationMethod(
        "SupCon (Eq. 6.5) on a projection head, then CE on a linear classifier",
        "linear",
        _supcon,
        projection=True,
        stage2_loss=_linear_ce,
    ),
)
_register(
    "supcon+ce(n)",
    ClassificationMethod(
        "SupCon (Eq. 6.5), then CE(n): normalised features and weights",
        "prototypes",
        _supcon,
        projection=True,
        stage2_loss=_normalised_ce,
    ),
)
_register(
    "supcon+tt",
    ClassificationMethod(
        "SupCon + tightness (Eq. 6.9) for the prototypes, nearest prototype",
        "prototypes",
        lambda model, f, labels: _supcon(model, f, labels) + _tightness(model, f, labels),
        projection=True,
    ),
)
_register(
    "spce",
    ClassificationMethod(
        "SPCE (Eq. 6.7) on the encoder + tightness for the prototypes",
        "prototypes",
        lambda model, f, labels: _spce(model, f, labels) + _tightness(model, f, labels),
    ),
)
_register(
    "spce(m)",
    ClassificationMethod(
        "SPCE, prototypes set to the class means afterwards", "prototypes", _spce, class_means=True
    ),
)
_register(
    "esupcon",
    ClassificationMethod(
        "ESupCon (Eq. 6.15): encoder and prototypes jointly", "prototypes", _esupcon
    ),
)


class ContrastiveClassifier(nn.Module):
    """An encoder with the classifier of a chapter-6 method (see the module docstring).

    Args:
        encoder: maps inputs to ``(B, dim)`` features.
        n_classes: ``K`` (keyword).
        dim: feature size ``D`` of the encoder (keyword; the package's order is
            ``(n_classes, dim)``).
        method: one of :data:`CLS_METHODS` (keyword).
        temperature: of SupCon / ESupCon and of the prototype (cosine) logits.
        proj_dim: output size of the projection head (SupCon variants).
        spce_temperature: divides the SPCE logits (1 = Eq. 6.7 as written; with L2-normalised
            features those logits are at most ``N_k / N``, so a smaller value trains faster).

    Raises:
        TypeError, ValueError: ``n_classes`` or ``dim`` missing, ``encoder`` not a module, an
            unknown ``method``, ``dim``, ``n_classes`` or ``proj_dim`` not a positive int, a
            temperature that is not a finite positive number.
    """

    def __init__(
        self,
        encoder: nn.Module,
        *,
        n_classes: int | None = None,
        dim: int | None = None,
        method: str = "esupcon",
        temperature: float = 0.1,
        proj_dim: int = 64,
        spce_temperature: float = 1.0,
    ) -> None:
        super().__init__()
        if n_classes is None or dim is None:
            raise TypeError("ContrastiveClassifier needs n_classes= and dim= (keywords)")
        if method not in CLS_METHODS:
            raise ValueError(f"method must be one of {tuple(CLS_METHODS)}, got {method!r}")
        method = CLS_METHODS.key(method)
        spec = CLS_METHODS[method]
        feat_dim = check_positive_int(dim, "dim")
        self.n_classes = check_positive_int(n_classes, "n_classes")
        proj_dim = check_positive_int(proj_dim, "proj_dim")
        self.method, self.temperature = (
            method,
            check_float(temperature, "temperature", low=0.0, low_open=True),
        )
        self.spce_temperature = check_float(
            spce_temperature, "spce_temperature", low=0.0, low_open=True
        )
        self.encoder = check_module(encoder, "encoder")
        self.projection: nn.Module | None = (
            nn.Sequential(nn.Linear(feat_dim, feat_dim), nn.ReLU(), nn.Linear(feat_dim, proj_dim))
            if spec.projection
            else None
        )
        self.linear: nn.Linear | None = (
            nn.Linear(feat_dim, n_classes, bias=False) if spec.classifier == "linear" else None
        )
        self.prototypes: PrototypeClassifier | None = (
            None
            if self.linear is not None
            else PrototypeClassifier(n_classes=n_classes, dim=feat_dim, temperature=temperature)
        )
        self.stage = 1

    @property
    def two_stage(self) -> bool:
        """Whether the method trains its classifier in a second stage (SupCon+CE, SupCon+CE(n))."""
        return CLS_METHODS[self.method].stage2_loss is not None

    def start_stage2(self) -> None:
        """Freeze the encoder (and head): the second stage trains only the classifier."""
        if not self.two_stage:
            raise ValueError(f"method {self.method!r} has a single stage")
        for mod in (self.encoder, self.projection):
            if mod is not None:
                for p in mod.parameters():
                    p.requires_grad_(False)
        self.stage = 2

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder features ``(B, feat_dim)`` of a non-empty batch ``x`` (its shape is the encoder's
        business).

        Raises:
            TypeError, ValueError: ``x`` not a tensor, an empty batch, and the encoder's errors.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a tensor, got {type(x).__name__}")
        if x.ndim == 0 or x.shape[0] == 0:
            raise ValueError(f"x must be a non-empty batch, got shape {tuple(x.shape)}")
        return self.encoder(x)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Classification logits ``(B, K)``."""
        f = self.features(x)
        if self.linear is not None:
            return self.linear(f)
        assert self.prototypes is not None
        return self.prototypes(f)

    def training_loss(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The method's objective on a batch (views stacked along dim 0, labels repeated): its
        :attr:`ClassificationMethod.loss`, or in the second stage its ``stage2_loss`` on detached
        features."""
        f = self.features(x)
        spec = CLS_METHODS[self.method]
        if self.stage == 2 and spec.stage2_loss is not None:
            return spec.stage2_loss(self, f.detach(), labels)
        return spec.loss(self, f, labels)

    @torch.no_grad()
    def set_class_means(self, x: torch.Tensor, labels: torch.Tensor) -> None:
        """SPCE(M): set the prototypes to the class means of the (normalised) features."""
        if self.prototypes is None:
            raise ValueError(f"method {self.method!r} has no prototypes")
        self.prototypes.prototypes.copy_(class_means(self.features(x), labels, self.n_classes))


@torch.no_grad()
def predict_logits(
    model: ContrastiveClassifier,
    x: torch.Tensor,
    *,
    batch_size: int = 512,
    device: DeviceLike = None,
) -> torch.Tensor:
    """Logits ``(N, K)`` of ``x`` in eval mode (CPU float32).

    Raises:
        TypeError, ValueError: ``model`` not a :class:`ContrastiveClassifier`, ``x`` not a finite
            floating batch, ``batch_size`` not a positive int.
    """
    if not isinstance(model, ContrastiveClassifier):
        raise TypeError(f"model must be a ContrastiveClassifier, got {type(model).__name__}")
    x = check_input(x, "x", tuple(range(2, 9)), shape="(N, ...)", allow_empty=False)
    batch_size = check_positive_int(batch_size, "batch_size")
    dev = get_device(device) if device is not None else next(model.parameters()).device
    was = model.training
    model.eval()
    out = [
        model.logits(x[i : i + batch_size].to(dev)).float().cpu()
        for i in range(0, x.shape[0], batch_size)
    ]
    model.train(was)
    return torch.cat(out)


def fit_classifier(
    model: ContrastiveClassifier,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int = 20,
    stage2_epochs: int = 10,
    batch_size: int = 128,
    lr: float = 1e-3,
    stage2_lr: float | None = None,
    weight_decay: float = 0.0,
    noise_std: float = 0.1,
    max_shift: int = 1,
    seed: int = 0,
    device: DeviceLike = None,
    engine: EngineConfig | None = None,
) -> list[dict[str, Any]]:
    """Train ``model`` with its method's objective on two augmented views of every image (on the
    training engine, :mod:`rank_lab.engine.loop`).

    Args:
        model: a :class:`ContrastiveClassifier`.
        x: ``(N, ...)`` training inputs; y: ``(N,)`` labels in ``[0, K)``.
        epochs: epochs of the (first) stage.
        stage2_epochs: epochs of the classifier stage of two-stage methods.
        batch_size: images per batch (``2 x batch_size`` views).
        lr, weight_decay: Adam (one optimiser per stage).
        stage2_lr: Adam's learning rate in the classifier stage of two-stage methods (``None``:
            ``lr``). The second stage is a convex linear probe on frozen features whose norms the
            first stage does not control (SupCon normalises only the projection head's output):
            with small features the probe needs a larger step to converge in a few epochs, as the
            official SupCon linear stage trains with its own, larger rate.
        noise_std, max_shift: the view augmentation (:func:`two_views`).
        seed: shuffling and augmentation seed.
        device: compute device.
        engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`: a checkpoint
            file written every ``checkpoint_every`` epochs and resumed from; progress; mixed
            precision on CUDA; gradient clipping); its length is ``epochs + stage2_epochs``.

    Returns:
        One record per epoch: ``{"epoch", "stage", "loss"}``.

    Raises:
        TypeError, ValueError: ``model`` not a :class:`ContrastiveClassifier`; ``x`` not a finite
            floating batch; ``y`` not integer labels in ``[0, K)``, one per row of ``x``; an epoch
            count or ``batch_size`` not a positive int; ``lr`` or ``stage2_lr`` not a finite
            positive number; ``weight_decay`` or ``noise_std`` not a finite number >= 0;
            ``max_shift`` not an int >= 0.
        NonFiniteTrainingError: a NaN/inf loss or gradient (no update applied).
    """
    if not isinstance(model, ContrastiveClassifier):
        raise TypeError(f"model must be a ContrastiveClassifier, got {type(model).__name__}")
    x = check_input(x, "x", tuple(range(2, 9)), shape="(N, ...)", allow_empty=False)
    y = check_labels(y, None, "y")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"y must have one label per row of x: shape ({x.shape[0]},), got {tuple(y.shape)}"
        )
    if int(y.min()) < 0 or int(y.max()) >= model.n_classes:
        raise ValueError(
            f"y must hold labels in [0, {model.n_classes}), got [{int(y.min())}, {int(y.max())}]"
        )
    batch_size = check_positive_int(batch_size, "batch_size")
    lr, weight_decay = (
        check_float(lr, "lr", low=0.0, low_open=True),
        check_float(weight_decay, "weight_decay", low=0.0),
    )
    lr2 = lr if stage2_lr is None else check_float(stage2_lr, "stage2_lr", low=0.0, low_open=True)
    noise_std, max_shift = (
        check_float(noise_std, "noise_std", low=0.0),
        check_nonneg_int(max_shift, "max_shift"),
    )
    n1 = check_positive_int(epochs, "epochs")
    n2 = check_positive_int(stage2_epochs, "stage2_epochs") if model.two_stage else 0
    options = loop_options(engine, epochs=n1 + n2, desc=model.method)
    dev = get_device(device)
    model.to(dev)
    seed_everything(seed)
    g = torch.Generator().manual_seed(seed)
    optimizers = {
        "stage1": build_optimizer(
            [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay
        )
    }
    # the parameters that stage 2 leaves trainable (start_stage2 freezes the encoder and head)
    if model.two_stage:
        frozen = {
            id(p)
            for mod in (model.encoder, model.projection)
            if mod is not None
            for p in mod.parameters()
        }
        optimizers["stage2"] = build_optimizer(
            [p for p in model.parameters() if p.requires_grad and id(p) not in frozen],
            lr=lr2,
            weight_decay=weight_decay,
        )
    run = Engine(
        {"model": model},
        optimizers,
        options,
        device=dev,
        generators={"batches": g},
        run_key={
            "method": model.method,
            "stage1_epochs": n1,
            "batch_size": batch_size,
            "lr": lr,
            "stage2_lr": lr2,
            "weight_decay": weight_decay,
            "noise_std": noise_std,
            "max_shift": max_shift,
            "seed": seed,
            "n_items": int(x.shape[0]),
        },
        trained_on=(x, y),
    )

    def start(e: int) -> None:
        if e >= n1 and model.stage != 2:
            model.start_stage2()
        model.train()

    def batches(e: int) -> Iterator[Batch]:
        perm = torch.randperm(x.shape[0], generator=g)
        for i in range(0, x.shape[0], batch_size):
            idx = perm[i : i + batch_size]
            if idx.numel() >= 2:
                yield Batch(idx, indices=idx, optimizer="stage2" if e >= n1 else "stage1")

    def step(idx: torch.Tensor) -> torch.Tensor:
        views = two_views(x[idx], noise_std=noise_std, max_shift=max_shift, generator=g).to(dev)
        return model.training_loss(views, y[idx].repeat(2).to(dev))

    def end(e: int, results: list[StepResult]) -> None:
        losses = [r.loss for r in results]
        run.history.append(
            {
                "epoch": len(run.history) + 1,
                "stage": 2 if e >= n1 else 1,
                "loss": sum(losses) / max(len(losses), 1),
            }
        )

    run.run(step, batches, on_epoch_start=start, on_epoch_end=end)
    if CLS_METHODS[model.method].class_means:
        model.eval()
        model.set_class_means(x.to(dev), y.to(dev))
    return run.history
