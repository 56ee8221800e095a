"""HEAT: Hybrid Energy-based model in the feATure space (Chapter 5 of the Ramzi thesis; ICML 2023).

A prior density ``q_k(z) ∝ exp(-E_q(z))`` (EL, GMM, GMM_std, see :mod:`rank_lab.ood.energies`) is
corrected by a residual energy ``E_theta`` (a small MLP):

* hybrid energy (Eqs. 5.1-5.2): ``E^h(z) = E_q(z) + E_theta(z)``, ``p^h ∝ exp(-E^h)``;
* maximum likelihood (Eq. 5.3): ``L_MLE = E_{p_in}[E_theta(z)] - E_{p^h}[E_theta(z')]``, with the
  negatives ``z'`` drawn from the hybrid model by SGLD (Eq. 5.4) started at the prior
  (``z'_0 ~ q_k``, Algorithm 2);
* residual control (Eq. 5.5): ``L_C = E_{p_in, p^h}[(E^h - E_q)^2] = E[E_theta^2]``, computed as
  ``mean(E_theta(z)^2) + mean(E_theta(z')^2)`` (as the official code); total ``L_MLE + lambda L_C``
  (Eq. 5.6, ``lambda = 10``);
* composition (Eq. 5.7) of several hybrid energies: :mod:`rank_lab.ood.composition`.

Thesis defaults (Sec. 5.3): 6-layer MLP, hidden 1024, Adam lr 5e-6, 20 epochs, 20 SGLD steps, step
1e-4 -> 1e-5 and noise 5e-3 -> 5e-4 (linear decay), input noise 1e-4, lambda = 10, ``T_G = 1e3``.
The official code's differences are :meth:`HEATConfig.official`: 40 SGLD steps (GMM), lr 1e-5,
Adam betas (0, 0.999), a power-2 polynomial decay, the update ``z - eta grad E + sigma w`` (no 1/2),
ReLU and sphere projections of the iterates, the initial samples added to the negatives, and the
four hidden layers of the MLP sharing one Linear module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace

import torch
from torch import nn

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_float,
    check_input_batch,
    check_magnitude,
    check_nonneg_int,
    check_positive_int,
    unit_rows,
)
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, StepResult, loop_options
from rank_lab.ood.energies import ClassGaussianEnergy, ZeroEnergy, check_features
from rank_lab.ood.sgld import SCHEDULES, schedule_endpoints, sgld
from rank_lab.utils import DeviceLike, get_device

__all__ = ["HEATConfig", "ResidualMLP", "HybridEnergy"]


@dataclass(frozen=True)
class HEATConfig:
    """Hyper-parameters of one hybrid EBM (defaults: Sec. 5.3 of the Ramzi thesis).

    Attributes:
        hidden_dim, n_layers, negative_slope: the residual MLP (``n_layers`` Linear layers).
        share_hidden: reuse one hidden Linear for every hidden layer (the official code's
            ``[Linear, LeakyReLU] * 4`` list repeats the *same* module).
        epochs, batch_size, lr, betas: Adam training (thesis: 20 epochs, lr 5e-6; batch size
            unstated, the code uses 1024 for GMM priors and 256 for EL).
        lam: weight ``lambda`` of ``L_C`` (Eq. 5.6).
        input_noise: std of the Gaussian jitter added to every input of the residual.
        sgld_steps, step_size, noise, schedule, grad_scale: see :func:`rank_lab.ood.sgld.sgld`.
        proposal: ``"prior"`` (``z'_0 ~ q``, Algorithm 2), ``"normal"`` (``N(0, I)``, the code's EL
            model), ``"gaussian"`` (a diagonal Gaussian fitted to the training features: for priors
            that cannot be sampled, such as EL, whose ``q ∝ sum_c exp(f_c)`` is improper) or
            ``"data"`` (contrastive divergence: start at the real batch).
        negatives_include_init: also use ``z'_0`` as negatives (the code concatenates them).
        relu_projection: clamp SGLD iterates at 0 (post-ReLU features; code).
        normalize: L2-normalise the features (and project SGLD iterates on the sphere; code for
            the GMM priors).
    """

    hidden_dim: int = 1024
    n_layers: int = 6
    negative_slope: float = 0.2
    share_hidden: bool = False
    epochs: int = 20
    batch_size: int = 256
    lr: float = 5e-6
    betas: tuple[float, float] = (0.9, 0.999)
    lam: float = 10.0
    input_noise: float = 1e-4
    sgld_steps: int = 20
    step_size: float | tuple[float, float] = (1e-4, 1e-5)
    noise: float | tuple[float, float] | None = (5e-3, 5e-4)
    schedule: str = "linear"
    grad_scale: float = 0.5
    proposal: str = "prior"
    negatives_include_init: bool = False
    relu_projection: bool = False
    normalize: bool = False

    def __post_init__(self) -> None:
        """Check every field (ints positive, rates finite and in range); errors name the field."""
        for name in ("hidden_dim", "n_layers", "epochs", "batch_size"):
            check_positive_int(getattr(self, name), name)
        if self.n_layers < 2:
            raise ValueError(
                f"n_layers must be >= 2 (input and output layers), got {self.n_layers}"
            )
        check_float(self.lr, "lr", low=0, low_open=True)
        for name in ("lam", "input_noise", "grad_scale"):
            check_float(getattr(self, name), name, low=0)
        check_float(self.negative_slope, "negative_slope")
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise TypeError(f"betas must be a pair (beta1, beta2), got {self.betas!r}")
        for b in self.betas:
            check_float(b, "betas", low=0, high=1, high_open=True)
        check_nonneg_int(self.sgld_steps, "sgld_steps")
        schedule_endpoints(self.step_size, "step_size")
        if self.noise is not None:
            schedule_endpoints(self.noise, "noise")
        check_choice(self.proposal, "proposal", ("prior", "normal", "gaussian", "data"))
        check_choice(self.schedule, "schedule", SCHEDULES)

    @classmethod
    def official(cls, prior: str = "gmm", **overrides: object) -> HEATConfig:
        """The official code's settings (github.com/MarcLafon/heatood, ``scripts/cifar10.sh``).

        ``prior``: ``"gmm"`` (40 SGLD steps), ``"gmm_std"`` (1 step) or ``"el"`` (proposal
        ``N(0, I)``, 50 steps, step 0.1 -> 0.01, noise 0.1 -> 0.01, lambda 0.1, batch 256, no
        normalisation). All: lr 1e-5, Adam betas (0, 0.999), 20 epochs, polynomial decay, gradient
        factor 1, ReLU projection, shared hidden layers, negatives include ``z'_0``. The prior's
        temperature (``T_G = 1e3`` for GMMs, 1 for EL) is set on the prior itself.
        """
        base = dict(
            share_hidden=True,
            lr=1e-5,
            betas=(0.0, 0.999),
            epochs=20,
            schedule="polynomial",
            grad_scale=1.0,
            relu_projection=True,
            negatives_include_init=True,
        )
        if prior in ("gmm", "gmm_std"):
            base.update(
                sgld_steps=40 if prior == "gmm" else 1,
                step_size=(1e-4, 1e-5),
                noise=(5e-3, 5e-4),
                lam=10.0,
                batch_size=1024,
                normalize=True,
                proposal="prior",
            )
        elif prior == "el":
            base.update(
                sgld_steps=50,
                step_size=(1e-1, 1e-2),
                noise=(1e-1, 1e-2),
                lam=0.1,
                batch_size=256,
                normalize=False,
                proposal="normal",
            )
        else:
            raise ValueError(f"prior must be 'gmm', 'gmm_std' or 'el', got {prior!r}")
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]


def _resume_key(config: HEATConfig) -> dict[str, object]:
    """The config fields a checkpoint must match to be resumed (``epochs`` may grow)."""
    return {k: v for k, v in asdict(config).items() if k != "epochs"}


class ResidualMLP(nn.Module):
    """The residual energy ``E_theta``: an MLP ``R^d -> R`` with LeakyReLU(0.2) (a "6-layer MLP").

    Args:
        in_dim: feature dimension ``d``.
        hidden_dim: width (thesis 1024 on CIFAR, 2048 on ImageNet).
        n_layers: number of Linear layers (>= 2).
        negative_slope: LeakyReLU slope.
        share_hidden: one Linear module reused for every hidden layer (official code).

    Shapes: ``(N, d) -> (N,)``.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int = 1024,
        n_layers: int = 6,
        negative_slope: float = 0.2,
        share_hidden: bool = False,
    ) -> None:
        super().__init__()
        self.in_dim = in_dim = check_positive_int(in_dim, "in_dim")
        hidden_dim, n_layers = (
            check_positive_int(hidden_dim, "hidden_dim"),
            check_positive_int(n_layers, "n_layers"),
        )
        if n_layers < 2:
            raise ValueError(f"n_layers must be >= 2 (input and output layers), got {n_layers}")
        negative_slope = check_float(negative_slope, "negative_slope")
        self.inp = nn.Linear(in_dim, hidden_dim)
        n_hidden = n_layers - 2
        if share_hidden and n_hidden > 0:
            shared = nn.Linear(hidden_dim, hidden_dim)
            self.hidden = nn.ModuleList([shared] * n_hidden)
        else:
            self.hidden = nn.ModuleList(
                [nn.Linear(hidden_dim, hidden_dim) for _ in range(n_hidden)]
            )
        self.out = nn.Linear(hidden_dim, 1)
        self.act = nn.LeakyReLU(negative_slope)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """PyTorch's default Linear init, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, from
        ``generator``."""
        for lin in {id(m): m for m in self.modules() if isinstance(m, nn.Linear)}.values():
            bound = 1.0 / math.sqrt(lin.in_features)
            for p in (lin.weight, lin.bias):
                noise = torch.rand(
                    p.shape, generator=generator, device=generator.device if generator else p.device
                )
                p.copy_((2 * noise - 1).to(p) * bound)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``E_theta(z)``: ``(N, in_dim) -> (N,)``.

        Raises:
            ValueError, TypeError: ``z`` is not a finite floating ``(N, in_dim)`` batch with
                ``N >= 1`` (float64 is cast to the weights' dtype).
        """
        z = check_input_batch(z, "z", ("N", self.in_dim), dtype=self)
        h = self.act(self.inp(z))
        for lin in self.hidden:
            h = self.act(lin(h))
        return self.out(h).squeeze(1)


class HybridEnergy(nn.Module):
    """One hybrid EBM ``E^h = E_q + E_theta`` (Eq. 5.2) and its training (Algorithm 2).

    Args:
        prior: a prior energy module (``energy(z) -> (N,)``; ``sample(n, generator)`` for the
            ``"prior"`` proposal; ``fit(z, labels)`` when it must be fitted), or ``None`` for a
            plain EBM (:class:`~rank_lab.ood.energies.ZeroEnergy`).
        dim: feature dimension ``d``.
        config: :class:`HEATConfig`; keyword ``overrides`` replace its fields.

    Shapes: ``energy(z (N, d)) -> (N,)``, likewise ``prior_energy`` and ``residual_energy``.
    """

    def __init__(
        self,
        prior: nn.Module | None,
        dim: int,
        config: HEATConfig | None = None,
        **overrides: object,
    ) -> None:
        super().__init__()
        if config is not None and not isinstance(config, HEATConfig):
            raise TypeError(f"config must be a HEATConfig, got {type(config).__name__}")
        self.config = replace(config or HEATConfig(), **overrides)  # type: ignore[arg-type]
        self.dim = check_positive_int(dim, "dim")
        self.prior = prior if prior is not None else ZeroEnergy()
        c = self.config
        self.residual = ResidualMLP(dim, c.hidden_dim, c.n_layers, c.negative_slope, c.share_hidden)
        self.history: list[dict[str, float]] = []
        self.is_fitted = False
        self.register_buffer("data_mean", None)
        self.register_buffer("data_std", None)

    # -- energies ---------------------------------------------------------------------------------
    def preprocess(self, z: torch.Tensor) -> torch.Tensor:
        """L2-normalise ``z`` when ``config.normalize`` (the space the prior and residual live in).

        ``z`` is cast to the dtype of the residual network (float32 unless the module was converted,
        e.g. with ``.double()``), so float64 features are accepted.
        """
        z = check_features(z, self.dim).to(next(self.residual.parameters()).dtype)
        # unit rows at any magnitude (subnormal too)
        return unit_rows(z, dim=1) if self.config.normalize else z

    def _project(self, z: torch.Tensor) -> torch.Tensor:
        if self.config.relu_projection:
            z = torch.relu(z)
        if self.config.normalize:
            z = unit_rows(z, dim=1)
        return z

    def _energy_pre(self, z: torch.Tensor) -> torch.Tensor:
        return self.prior.energy(z) + self.residual(z)

    def prior_energy(self, z: torch.Tensor) -> torch.Tensor:
        """``E_q(z)``: ``(N, d) -> (N,)``."""
        return self.prior.energy(self.preprocess(z))

    def residual_energy(self, z: torch.Tensor) -> torch.Tensor:
        """``E_theta(z)``: ``(N, d) -> (N,)``."""
        return self.residual(self.preprocess(z))

    def energy(self, z: torch.Tensor) -> torch.Tensor:
        """Hybrid energy ``E^h(z) = E_q(z) + E_theta(z)`` (Eq. 5.2): ``(N, d) -> (N,)``."""
        return self._energy_pre(self.preprocess(z))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.energy(z)

    # -- training ---------------------------------------------------------------------------------
    def _proposal(self, n: int, z_real: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        c = self.config
        if c.proposal == "data":
            z0 = z_real.clone()
        elif c.proposal == "normal":
            z0 = torch.randn(n, self.dim, generator=gen, device=gen.device, dtype=z_real.dtype).to(
                z_real.device
            )
        elif c.proposal == "gaussian":
            if self.data_mean is None:
                raise RuntimeError(
                    "proposal='gaussian' needs the data statistics recorded by fit()"
                )
            eps = torch.randn(n, self.dim, generator=gen, device=gen.device, dtype=z_real.dtype).to(
                z_real.device
            )
            z0 = self.data_mean + eps * self.data_std
        else:
            if not hasattr(self.prior, "sample"):
                raise ValueError(
                    f"proposal='prior' needs a prior with sample(); {type(self.prior).__name__} "
                    "has none"
                )
            z0 = self.prior.sample(n, generator=gen).to(z_real)
        if c.relu_projection or c.normalize:
            z0 = self._project(z0)
        return z0

    def loss(
        self, z_real: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``L_MLE + lambda L_C`` (Eqs. 5.3, 5.5, 5.6) on a preprocessed batch ``z_real (B, d)``."""
        c = self.config
        z0 = self._proposal(z_real.shape[0], z_real, generator)
        proj: Callable[[torch.Tensor], torch.Tensor] | None = (
            self._project if (c.relu_projection or c.normalize) else None
        )
        z_gen = sgld(
            self._energy_pre,
            z0,
            steps=c.sgld_steps,
            step_size=c.step_size,
            noise=c.noise,
            schedule=c.schedule,
            grad_scale=c.grad_scale,
            projection=proj,
            generator=generator,
        )
        if c.negatives_include_init:
            z_gen = torch.cat([z_gen, z0])

        def jitter(x: torch.Tensor) -> torch.Tensor:
            w = torch.randn(
                x.shape, generator=generator, device=generator.device, dtype=x.dtype
            ).to(x.device)
            return x + c.input_noise * w

        e_real = self.residual(jitter(z_real))
        e_gen = self.residual(jitter(z_gen))
        l_mle = e_real.mean() - e_gen.mean()
        l_c = e_real.pow(2).mean() + e_gen.pow(2).mean()
        loss = l_mle + c.lam * l_c
        logs = {
            "loss": loss.item(),
            "l_mle": l_mle.item(),
            "l_c": l_c.item(),
            "e_real": e_real.mean().item(),
            "e_gen": e_gen.mean().item(),
        }
        return loss, logs

    def fit(
        self,
        z: torch.Tensor,
        labels: torch.Tensor | None = None,
        *,
        seed: int = 0,
        device: DeviceLike = None,
        fit_prior: bool = True,
        engine: EngineConfig | None = None,
    ) -> HybridEnergy:
        """Fit the prior (if it has ``fit``) and train the residual with Algorithm 2 on the training
        engine.

        Args:
            z: ``(N, d)`` ID training features.
            labels: ``(N,)`` class labels (needed by a :class:`ClassGaussianEnergy` prior).
            seed: seeds the residual's initialisation, the batch order, the proposals and the noise.
            device: where to train (``None``: CUDA when present).
            fit_prior: fit the prior on ``z`` first (set ``False`` for an already fitted prior).
            engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`: a
                ``checkpoint`` file saved every ``checkpoint_every`` epochs, an existing one is
                resumed (``resume``; its config and seed must match, except ``epochs``, which may be
                raised to train longer); progress, mixed precision on CUDA, gradient clipping); its
                length is ``config.epochs``.

        Returns:
            ``self`` (in eval mode); ``self.history`` holds per-epoch mean losses.

        Raises:
            NonFiniteTrainingError: a NaN/inf loss or gradient (no update applied; a diverging SGLD
                chain raises its own ``ValueError``).
        """
        c = self.config
        options = loop_options(engine, epochs=c.epochs, desc="HEAT")
        z = check_embeddings(z, "z")
        check_magnitude(z, "z", underflow=True)
        if z.shape[1] != self.dim:
            raise ValueError(
                f"z has {z.shape[1]} dimensions but the model was built for {self.dim}"
            )
        dev = get_device(device)
        self.to(dev)
        zp = self.preprocess(z.to(dev)).detach()
        self.data_mean, self.data_std = zp.mean(0), zp.std(0, unbiased=False).clamp_min(1e-6)
        if fit_prior and hasattr(self.prior, "fit"):
            if isinstance(self.prior, ClassGaussianEnergy) and labels is None:
                raise ValueError("labels are required to fit a ClassGaussianEnergy prior")
            self.prior.fit(zp, None if labels is None else torch.as_tensor(labels).to(dev))
        gen = torch.Generator(device=dev)
        gen.manual_seed(int(seed))
        self.residual.reset_parameters(gen)
        opt = build_optimizer(self.residual.parameters(), lr=c.lr, betas=c.betas)
        run = Engine(
            {"model": self.residual},
            opt,
            options,
            device=dev,
            generators={"generator": gen},
            run_key={**_resume_key(c), "seed": seed},
            trained_on=(zp, labels),
        )
        n = zp.shape[0]

        def batches(epoch: int) -> Iterator[Batch]:
            perm = torch.randperm(n, generator=gen, device=gen.device).to(dev)
            for i in range(0, n, c.batch_size):
                yield Batch(zp[perm[i : i + c.batch_size]], indices=perm[i : i + c.batch_size])

        def end(epoch: int, results: list[StepResult]) -> None:
            sums: dict[str, float] = {}
            for r in results:
                for k, v in r.stats.items():
                    sums[k] = sums.get(k, 0.0) + v
            run.history.append({"epoch": epoch, **{k: v / len(results) for k, v in sums.items()}})

        self.residual.train()
        run.run(lambda zb: self.loss(zb, gen), batches, on_epoch_end=end)
        self.history = run.history
        self.eval()
        self.is_fitted = True
        return self
