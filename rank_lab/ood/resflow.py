"""ResFlow: a residual normalizing flow on a frozen classifier's features (the baseline of Tab.
5.3).

Zisselman & Tamar (CVPR 2020, ref. [236] of the Ramzi thesis) learn the *residual* of a Gaussian
feature density with a normalizing flow and score OOD samples by their negative log-likelihood. The
thesis (Section 5.1, Tab. 5.3) uses it as the flow counterpart of HEAT: "NFs require invertible
mappings, which intrinsically limit their expressive power".

Model (invertible residual network of Behrmann et al. 2019 / Chen et al., NeurIPS 2019)::

    x_w = (x - m) Sigma^{-1/2}                 fixed whitening: the Gaussian that the flow corrects
    u   = F_K o ... o F_1 (x_w),  F_k(x) = x + g_k(x),   Lip(g_k) <= coeff < 1
    log p(x) = log p_base(u) + sum_k log|det(I + J_{g_k})| - 1/2 log|Sigma|

``g_k`` is an MLP whose linear layers are spectrally normalised and whose activation (LipSwish) is
1-Lipschitz, scaled by ``coeff``: each ``F_k`` is then invertible by the fixed-point iteration
``x <- y - g(x)`` (Banach). Its log-determinant is the power series
``log det(I + J) = sum_{k>=1} (-1)^{k+1} tr(J^k) / k`` with the Hutchinson estimator
``tr(A) = E_v[v^T A v]`` (Chen et al., Eq. 4-6), truncated at ``n_terms`` (the biased truncated
estimator of i-ResNet; Chen et al.'s Russian-roulette unbiased variant is not implemented), or
computed exactly from the Jacobian (``logdet="exact"``, for small ``d``).

Base distribution: a standard normal (``class_conditional=False``), or, as in Zisselman & Tamar,
one unit-covariance Gaussian per class in the latent space with learnable means (initialised to the
class means), trained on ``log p(x | y)``. **Departure**: Zisselman & Tamar train one flow per class
(and per layer, 30 layers each); here one flow is shared by the classes and only the latent means
are per class (cheaper, same scoring rule). The OOD score is ``-max_c log p(x | c)`` (the paper's
rule, ``reduction="max"``, default) or ``-log (1/C) sum_c p(x | c)`` (``reduction="logsumexp"``, the
marginal NLL). Sign convention: higher = more OOD.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

from rank_lab._validation import (
    check_choice,
    check_finite,
    check_float,
    check_input_batch,
    check_labels,
    check_positive_int,
    unit_rows,
)
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, StepResult, loop_options
from rank_lab.ood.scorers import Data, OODScorer
from rank_lab.utils import get_device

__all__ = ["LipSwish", "InvertibleResidualBlock", "ResidualFlow", "ResFlow"]

_LOG_2PI = math.log(2 * math.pi)


class LipSwish(nn.Module):
    """``x * sigmoid(x) / 1.1``: the 1-Lipschitz smooth activation of Chen et al. (2019), Sec. 4."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise on a floating tensor of any shape (an empty one included); NaN / inf
        raise."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(
                f"x must be a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}"
            )
        check_finite(x, "x")
        return x * torch.sigmoid(x) / 1.1


class InvertibleResidualBlock(nn.Module):
    """``F(x) = x + g(x)`` with ``g`` a spectrally normalised MLP scaled by ``coeff`` (Lip(g) < 1).

    Args:
        dim: feature dimension ``d``.
        hidden_dim: width of ``g``'s hidden layers.
        n_layers: number of linear layers of ``g`` (>= 1).
        coeff: Lipschitz bound of ``g``, in ``(0, 1)``.
    """

    def __init__(
        self, dim: int, hidden_dim: int = 64, n_layers: int = 2, coeff: float = 0.9
    ) -> None:
        super().__init__()
        dim, hidden_dim, n_layers = (
            check_positive_int(v, n)
            for v, n in ((dim, "dim"), (hidden_dim, "hidden_dim"), (n_layers, "n_layers"))
        )
        self.coeff = check_float(coeff, "coeff", low=0, high=1, low_open=True, high_open=True)
        self.dim = dim
        widths = [dim] + [hidden_dim] * (n_layers - 1) + [dim]
        layers: list[nn.Module] = []
        for i in range(n_layers):
            layers.append(spectral_norm(nn.Linear(widths[i], widths[i + 1])))
            if i < n_layers - 1:
                layers.append(LipSwish())
        self.net = nn.Sequential(*layers)

    def g(self, x: torch.Tensor) -> torch.Tensor:
        """The contractive residual ``g(x)``: ``(N, d) -> (N, d)``."""
        return self.coeff * self.net(x)

    def inverse(self, y: torch.Tensor, n_iter: int = 100, tol: float = 1e-6) -> torch.Tensor:
        """Fixed-point inverse ``x <- y - g(x)`` from ``x = y`` (converges since Lip(g) < 1)."""
        y = check_input_batch(y, "y", ("N", self.dim), dtype=self)
        n_iter, tol = (
            check_positive_int(n_iter, "n_iter"),
            check_float(tol, "tol", low=0, low_open=True),
        )
        x = y.clone()
        with torch.no_grad():
            for _ in range(n_iter):
                x_new = y - self.g(x)
                done = (x_new - x).abs().max() < tol
                x = x_new
                if done:
                    break
        return x

    def forward(
        self,
        x: torch.Tensor,
        logdet: str = "series",
        n_terms: int = 8,
        n_samples: int = 1,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(F(x) (N, d), log|det dF/dx| (N,))``.

        Args:
            x: ``(N, d)``.
            logdet: ``"series"`` (power series + Hutchinson, Chen et al. Eq. 4-6) or ``"exact"``
                (``slogdet(I + J_g)`` from the full Jacobian; ``O(N d^3)``).
            n_terms: terms of the power series.
            n_samples: Hutchinson probe vectors (Gaussian) per sample.
            generator: seeds the probe vectors.

        Raises:
            ValueError, TypeError: ``x`` not a finite floating ``(N, d)`` batch with ``N >= 1``
                (float64 is cast to the weights' dtype), or a bad ``logdet`` / ``n_terms`` /
                ``n_samples``.
        """
        x = check_input_batch(x, "x", ("N", self.dim), dtype=self)
        check_choice(logdet, "logdet", ("series", "exact"))
        n_terms, n_samples = (
            check_positive_int(n_terms, "n_terms"),
            check_positive_int(n_samples, "n_samples"),
        )
        create_graph = torch.is_grad_enabled()
        if logdet == "exact":
            x = x if x.requires_grad else x.detach().requires_grad_(True)
            gx = self.g(x)
            jac = torch.autograd.functional.jacobian(
                lambda t: self.g(t).sum(0), x, create_graph=create_graph
            )
            jac = jac.permute(1, 0, 2)  # (N, d_out, d_in)
            eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
            return x + gx, torch.linalg.slogdet(eye + jac).logabsdet
        with torch.enable_grad():
            xg = x if x.requires_grad else x.detach().requires_grad_(True)
            gx = self.g(xg)
            total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
            for _ in range(n_samples):
                v = (
                    torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
                    if generator is not None
                    else torch.randn_like(x)
                )
                w = v
                for k in range(1, n_terms + 1):
                    # w <- w^T J  (vector-Jacobian product); v^T J^k v = <(J^T)^k v, v>
                    (w,) = torch.autograd.grad(
                        gx, xg, w, create_graph=create_graph, retain_graph=True
                    )
                    total = total + ((-1) ** (k + 1) / k) * (w * v).sum(1)
            out = x + gx
        if not create_graph:
            out, total = out.detach(), total.detach()
        return out, total / n_samples


class ResidualFlow(nn.Module):
    """Whitening + ``n_blocks`` invertible residual blocks + a (class-conditional) Gaussian base.

    Args:
        dim: feature dimension ``d``.
        n_classes: ``None`` for a standard-normal base, else the number of latent class Gaussians.
        n_blocks, hidden_dim, n_layers, coeff: see :class:`InvertibleResidualBlock`.
    """

    def __init__(
        self,
        dim: int,
        n_classes: int | None = None,
        n_blocks: int = 4,
        hidden_dim: int = 64,
        n_layers: int = 2,
        coeff: float = 0.9,
    ) -> None:
        super().__init__()
        n_blocks = check_positive_int(n_blocks, "n_blocks")
        self.dim = check_positive_int(dim, "dim")
        self.blocks = nn.ModuleList(
            InvertibleResidualBlock(dim, hidden_dim, n_layers, coeff) for _ in range(n_blocks)
        )
        self.n_classes = None if n_classes is None else check_positive_int(n_classes, "n_classes")
        self.means = nn.Parameter(
            torch.zeros(n_classes or 1, dim), requires_grad=n_classes is not None
        )
        self.register_buffer("shift", torch.zeros(dim))
        self.register_buffer("whiten", torch.eye(dim))
        self.register_buffer("whiten_logdet", torch.zeros(()))

    def set_whitening(self, x: torch.Tensor, reg: float = 1e-6) -> None:
        """Fix ``m`` and ``Sigma^{-1/2}`` from ``x`` ``(N, d)`` (ridge
        ``reg * mean eigenvalue``)."""
        x = check_input_batch(x, "x", ("N", self.dim), dtype=self.shift.dtype)
        reg = check_float(reg, "reg", low=0)
        m = x.mean(0)
        cov = torch.cov((x - m).T.double()).reshape(self.dim, self.dim)
        cov = cov + reg * cov.diagonal().mean().clamp_min(1e-12) * torch.eye(
            self.dim, dtype=cov.dtype, device=cov.device
        )
        evals, evecs = torch.linalg.eigh(cov)
        evals = evals.clamp_min(1e-12)
        self.shift.copy_(m)
        self.whiten.copy_((evecs @ torch.diag(evals.rsqrt()) @ evecs.T).to(self.whiten))
        self.whiten_logdet.copy_(-0.5 * evals.log().sum())

    def forward(
        self, x: torch.Tensor, **logdet_kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Latent ``u`` ``(N, d)`` and ``log|det du/dx|`` ``(N,)`` (whitening included).

        ``x`` must be a finite floating ``(N, d)`` batch, ``N >= 1`` (float64 is cast to the
        weights' dtype); ``logdet_kwargs`` go to :meth:`InvertibleResidualBlock.forward`.
        """
        x = check_input_batch(x, "x", ("N", self.dim), dtype=self.shift.dtype)
        u = (x - self.shift) @ self.whiten
        total = self.whiten_logdet.expand(x.shape[0]).clone()
        for block in self.blocks:
            u, ld = block(u, **logdet_kwargs)
            total = total + ld
        return u, total

    def inverse(self, u: torch.Tensor, n_iter: int = 100, tol: float = 1e-6) -> torch.Tensor:
        """``x`` ``(N, d)`` from the latent ``u`` (fixed-point inverse of each block, then
        un-whitening)."""
        u = check_input_batch(u, "u", ("N", self.dim), dtype=self.shift.dtype)
        for block in reversed(self.blocks):
            u = block.inverse(u, n_iter, tol)
        return u @ torch.linalg.inv(self.whiten) + self.shift

    def class_log_likelihood(self, x: torch.Tensor, **logdet_kwargs: object) -> torch.Tensor:
        """``log p(x | c)`` ``(N, C)`` (``C = 1`` for the standard-normal base): change of
        variables."""
        u, logdet = self(x, **logdet_kwargs)
        d2 = torch.cdist(u, self.means).pow(2)
        return -0.5 * d2 - 0.5 * self.dim * _LOG_2PI + logdet[:, None]


class ResFlow(OODScorer):
    """ResFlow OOD scorer (Zisselman & Tamar, CVPR 2020): negative log-likelihood of a residual
    flow.

    ``fit(data)`` whitens ``data["features"]`` and trains :class:`ResidualFlow` by maximum
    likelihood (Adam, mini-batches, Hutchinson log-det); ``score(data) -> (N,)`` is
    ``-max_c log p(z | c)`` (``reduction="max"``) or ``-log mean_c p(z | c)`` (``"logsumexp"``);
    with ``class_conditional=False``, ``-log p(z)`` under a standard-normal base. Higher = more OOD.

    Args:
        n_blocks, hidden_dim, n_layers, coeff: the flow (see :class:`ResidualFlow`).
        class_conditional: one latent Gaussian per class (needs ``data["labels"]``).
        reduction: ``"max"`` or ``"logsumexp"`` over classes.
        epochs, batch_size, lr, weight_decay: training.
        logdet: ``"series"`` or ``"exact"`` (both for training and scoring).
        n_terms, n_samples: power-series terms and Hutchinson probes (training); scoring uses
            ``score_samples`` probes drawn from a generator seeded with ``seed`` (deterministic
            scores).
        normalize: L2-normalise the features first.
        seed: seeds the initialisation, the batch order and the probes.
        device: ``None`` = CUDA when present.
        engine: the training run's options (:class:`~rank_lab.engine.options.EngineConfig`: a
            ``checkpoint`` file written every ``checkpoint_every`` epochs and resumed from
            (``resume``; its config, seed and data must match, except ``epochs``); progress,
            mixed precision, gradient clipping).
    """

    name, key = "ResFlow", "features"

    def __init__(
        self,
        n_blocks: int = 4,
        hidden_dim: int = 64,
        n_layers: int = 2,
        coeff: float = 0.9,
        class_conditional: bool = True,
        reduction: str = "max",
        epochs: int = 20,
        batch_size: int = 128,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        logdet: str = "series",
        n_terms: int = 8,
        n_samples: int = 1,
        score_samples: int = 4,
        normalize: bool = False,
        seed: int = 0,
        device: str | torch.device | None = None,
        engine: EngineConfig | None = None,
    ) -> None:
        super().__init__()
        check_choice(reduction, "reduction", ("max", "logsumexp"))
        check_choice(logdet, "logdet", ("series", "exact"))
        coeff = check_float(coeff, "coeff", low=0, high=1, low_open=True, high_open=True)
        lr = check_float(lr, "lr", low=0, low_open=True)
        weight_decay = check_float(weight_decay, "weight_decay", low=0)
        self.engine_options = loop_options(engine, epochs=epochs, desc="ResFlow")
        for v, n in (
            (n_blocks, "n_blocks"),
            (hidden_dim, "hidden_dim"),
            (n_layers, "n_layers"),
            (batch_size, "batch_size"),
            (n_terms, "n_terms"),
            (n_samples, "n_samples"),
            (score_samples, "score_samples"),
        ):
            check_positive_int(v, n)
        self.flow_kwargs = dict(
            n_blocks=n_blocks, hidden_dim=hidden_dim, n_layers=n_layers, coeff=coeff
        )
        self.class_conditional, self.reduction, self.normalize = (
            class_conditional,
            reduction,
            normalize,
        )
        self.epochs, self.batch_size, self.lr, self.weight_decay = (
            epochs,
            batch_size,
            float(lr),
            float(weight_decay),
        )
        self.logdet, self.n_terms, self.n_samples, self.score_samples = (
            logdet,
            n_terms,
            n_samples,
            score_samples,
        )
        self.seed, self.device = int(seed), device

    def _features(self, data: Data) -> torch.Tensor:
        z = self._get(data)
        return unit_rows(z, dim=1) if self.normalize else z  # unit rows at any magnitude

    def fit(self, data: Data) -> ResFlow:
        """Train the flow on ID features by maximum likelihood. Returns ``self`` (``history``:
        per-epoch NLL)."""
        dev = get_device(self.device)
        z = self._features(data).to(dev, torch.float32)  # the flow's dtype
        if self.class_conditional:
            y = check_labels(self._get(data, "labels"), z.shape[0], "data['labels']").to(dev)
            if y.ndim != 1:
                raise ValueError(f"data['labels'] must have shape (N,), got {tuple(y.shape)}")
            self.classes = torch.unique(y)
            y_idx = torch.searchsorted(self.classes, y)
        else:
            y_idx = torch.zeros(z.shape[0], dtype=torch.long, device=dev)
        n_cls = len(self.classes) if self.class_conditional else None
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            # spectral-norm vectors and Linear weights use the global RNG
            torch.manual_seed(self.seed)
            self.flow = ResidualFlow(z.shape[1], n_cls, **self.flow_kwargs).to(dev)
        self.flow.set_whitening(z)
        gen = torch.Generator(device=dev)
        gen.manual_seed(self.seed)
        kw = dict(logdet=self.logdet, n_terms=self.n_terms, n_samples=self.n_samples, generator=gen)
        if self.class_conditional:  # latent class means at initialisation
            with torch.no_grad():
                self.flow.eval()
                u = torch.cat(
                    [self.flow(z[i : i + 1024], **kw)[0] for i in range(0, z.shape[0], 1024)]
                )
                self.flow.means.copy_(torch.stack([u[y_idx == c].mean(0) for c in range(n_cls)]))
        key = {
            "flow": self.flow_kwargs,
            "seed": self.seed,
            "n": z.shape[0],
            "d": z.shape[1],
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "batch_size": self.batch_size,
            "class_conditional": self.class_conditional,
            "logdet": self.logdet,
            "n_terms": self.n_terms,
            "n_samples": self.n_samples,
            "normalize": self.normalize,
        }
        engine = Engine(
            {"model": self.flow},
            build_optimizer(self.flow.parameters(), lr=self.lr, weight_decay=self.weight_decay),
            self.engine_options,
            device=dev,
            generators={"generator": gen},
            run_key=key,
            trained_on=(z, y_idx if self.class_conditional else None),
        )
        n = z.shape[0]

        def batches(epoch: int) -> Iterator[Batch]:
            perm = torch.randperm(n, generator=gen, device=dev)
            for i in range(0, n, self.batch_size):
                yield Batch(perm[i : i + self.batch_size], indices=perm[i : i + self.batch_size])

        def step(idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            ll = self.flow.class_log_likelihood(z[idx], **kw)
            # NLL per dimension
            return -ll.gather(1, y_idx[idx, None]).mean() / z.shape[1], {"n": len(idx)}

        def end(epoch: int, results: list[StepResult]) -> None:
            total = 0.0
            for r in results:
                total += r.loss * r.stats["n"]
            engine.history.append(total / n)

        self.flow.train()
        engine.run(step, batches, on_epoch_end=end)
        self.history = engine.history
        self.flow.eval()
        return self

    def log_likelihood(self, data: Data, batch_size: int = 1024) -> torch.Tensor:
        """``log p(z | c)`` ``(N, C)`` under the fitted flow (deterministic: probes seeded by
        ``seed``)."""
        if not hasattr(self, "flow"):
            raise RuntimeError(f"{self.name} is not fitted: call fit(train_data) first")
        z = self._features(data)
        if z.shape[1] != self.flow.dim:
            raise ValueError(
                f"data['features'] has {z.shape[1]} dimensions but {self.name} was fitted on "
                f"{self.flow.dim}"
            )
        dev = self.flow.shift.device
        z = z.to(dev, self.flow.shift.dtype)  # float64 features are accepted
        gen = torch.Generator(device=dev)
        gen.manual_seed(self.seed + 1)
        self.flow.eval()
        out = []
        with torch.no_grad():
            for i in range(0, z.shape[0], batch_size):
                out.append(
                    self.flow.class_log_likelihood(
                        z[i : i + batch_size],
                        logdet=self.logdet,
                        n_terms=self.n_terms,
                        n_samples=self.score_samples,
                        generator=gen,
                    )
                )
        return torch.cat(out)

    def _score(self, data: Data) -> torch.Tensor:
        ll = self.log_likelihood(data)
        if self.reduction == "max":
            return -ll.max(1).values.cpu()
        return -(torch.logsumexp(ll, 1) - math.log(ll.shape[1])).cpu()
