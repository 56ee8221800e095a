"""Composition of hybrid energies (Eq. 5.7 of the Ramzi thesis) and the full HEAT detector.

``E_HEAT = (1/beta) log sum_k exp(beta E^h_k)`` composes the K corrected priors (HEAT-GMM,
HEAT-GMM_std, HEAT-EL). ``beta = 0`` returns the sum of the energies (a product of densities): the
``beta -> 0`` limit is their mean plus ``log K / beta`` (the thesis' Sec. 5.3.3: "equivalent to the
mean"), which ranks every sample as the sum does. ``-1`` gives a sum of densities, ``+inf``/``-inf``
the max/min. The official code standardises each energy with its mean and standard deviation on
training data before composing (``standardize=True`` here, the default, since the thesis' numbers
were produced that way; ``standardize=False`` is the literal Eq. 5.7).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from rank_lab._validation import as_tensor, check_finite
from rank_lab.engine.options import EngineConfig
from rank_lab.ood.energies import ClassGaussianEnergy, LogitEnergy
from rank_lab.ood.heat import HEATConfig, HybridEnergy
from rank_lab.utils import DeviceLike

__all__ = ["compose_energies", "HEAT"]


def _per_energy(v: object, name: str, e: torch.Tensor) -> torch.Tensor:
    """A finite ``(K,)`` statistic (or a scalar) matching the ``K`` columns of ``e``."""
    t = as_tensor(v, name).to(e.dtype).to(e.device)
    if t.ndim > 1 or (t.ndim == 1 and t.shape[0] != e.shape[1]):
        raise ValueError(f"{name} must have shape ({e.shape[1]},), got {tuple(t.shape)}")
    check_finite(t, name)
    return t


def _check_beta(beta: object) -> float:
    """``beta`` of Eq. 5.7: a real number or ``+-inf`` (the max / min), never NaN."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or math.isnan(beta):
        raise ValueError(f"beta must be a real number or +-inf, got {beta!r}")
    return float(beta)


def compose_energies(
    energies: torch.Tensor,
    beta: float = 0.0,
    *,
    mean: torch.Tensor | None = None,
    std: torch.Tensor | None = None,
) -> torch.Tensor:
    """Energy composition of Eq. 5.7: ``E = (1/beta) log sum_k exp(beta E_k)``.

    Args:
        energies: ``(N, K)``, one column per (hybrid) energy.
        beta: ``0`` gives the sum (the ``beta -> 0`` limit up to the constant ``log K / beta`` and a
            factor ``K``: a product of densities); ``-1`` gives ``-log sum_k exp(-E_k)`` (a sum of
            densities); ``+inf`` / ``-inf`` give the max / min.
        mean, std: ``(K,)`` per-energy standardisation ``(E_k - mean_k) / std_k`` applied first (the
            official code's ``CombineScorer``); ``None`` for none.

    Returns:
        ``(N,)`` composed energies (higher = more OOD).

    Raises:
        ValueError: ``energies`` not a finite ``(N, K)`` matrix, ``beta`` NaN, or ``mean`` / ``std``
            of another length, non-finite, or (``std``) not positive.
    """
    e = as_tensor(energies, "energies")
    if e.ndim != 2 or e.shape[0] == 0 or e.shape[1] == 0:
        raise ValueError(f"energies must have shape (N, K) with N, K >= 1, got {tuple(e.shape)}")
    if not e.is_floating_point():
        e = e.float()
    check_finite(e, "energies")
    beta = _check_beta(beta)
    if mean is not None:
        e = e - _per_energy(mean, "mean", e)
    if std is not None:
        s = _per_energy(std, "std", e)
        if bool((s <= 0).any()):
            raise ValueError("std must be > 0")
        e = e / s
    if beta == 0:
        return e.sum(1)
    if beta == math.inf:
        return e.max(1).values
    if beta == -math.inf:
        return e.min(1).values
    return torch.logsumexp(beta * e, dim=1) / beta


class HEAT(nn.Module):
    """Several hybrid EBMs composed by Eq. 5.7: the full HEAT detector.

    ``fit`` and ``score`` take the feature mapping used by every scorer of
    :mod:`rank_lab.ood.scorers`:
    ``{"features": (N, d), "std": (N, d'), "logits": ..., "labels": (N,)}``.

    Args:
        components: ``name -> HybridEnergy``.
        inputs: ``name -> key`` of the feature mapping each component reads (default
            ``"features"``).
        beta: composition parameter (thesis tables: 0); ``+-inf`` give the max / min (see
            :func:`compose_energies`), NaN is refused.
        standardize: standardise each energy with its training mean/std before composing (the
            official code, which uses one training batch; here the whole training set).
    """

    def __init__(
        self,
        components: Mapping[str, HybridEnergy],
        inputs: Mapping[str, str] | None = None,
        beta: float = 0.0,
        standardize: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(components, Mapping) or not components:
            raise ValueError("components must be a mapping holding at least one HybridEnergy")
        bad = [k for k, v in components.items() if not isinstance(v, HybridEnergy)]
        if bad:
            raise TypeError(f"components must map names to HybridEnergy modules; not for {bad}")
        beta = _check_beta(beta)
        self.components = nn.ModuleDict(dict(components))
        self.inputs = {k: (inputs or {}).get(k, "features") for k in components}
        self.beta = beta
        self.standardize = standardize
        self.register_buffer("mean", None)
        self.register_buffer("std", None)
        self.name = "HEAT"

    @classmethod
    def from_classifier(
        cls,
        head: nn.Linear,
        feature_dim: int,
        std_dim: int | None = None,
        *,
        priors: tuple[str, ...] = ("gmm", "gmm_std", "el"),
        config: HEATConfig | None = None,
        gmm_temperature: float = 1e3,
        normalize_gmm: bool = True,
        beta: float = 0.0,
        standardize: bool = True,
    ) -> HEAT:
        """HEAT-GMM (``"features"``), HEAT-GMM_std (``"std"``) and HEAT-EL (``"features"``) on a
        classifier.

        ``normalize_gmm`` L2-normalises the GMM features (official code and SSD+; the thesis is
        silent); the EL prior reads the raw features through ``head``. EL's density
        ``q ∝ sum_c exp(f_c(z))`` is improper and cannot be sampled, so its SGLD chains start from a
        diagonal Gaussian fitted to the features (``proposal="gaussian"``) unless ``config`` asks
        for another proposal (the official code uses ``"normal"``, ``N(0, I)``).
        """
        comps: dict[str, HybridEnergy] = {}
        inputs: dict[str, str] = {}
        cfg = config or HEATConfig()
        for p in priors:
            if p == "gmm":
                comps[p] = HybridEnergy(
                    ClassGaussianEnergy(gmm_temperature), feature_dim, cfg, normalize=normalize_gmm
                )
                inputs[p] = "features"
            elif p == "gmm_std":
                if std_dim is None:
                    raise ValueError("std_dim is required for the gmm_std prior")
                comps[p] = HybridEnergy(
                    ClassGaussianEnergy(gmm_temperature), std_dim, cfg, normalize=normalize_gmm
                )
                inputs[p] = "std"
            elif p == "el":
                el_cfg = replace(cfg, proposal="gaussian") if cfg.proposal == "prior" else cfg
                comps[p] = HybridEnergy(
                    LogitEnergy.from_linear(head), feature_dim, el_cfg, normalize=False
                )
                inputs[p] = "features"
            else:
                raise ValueError(f"unknown prior {p!r}; expected 'gmm', 'gmm_std' or 'el'")
        return cls(comps, inputs, beta, standardize)

    def _get(self, data: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
        key = self.inputs[name]
        if key not in data:
            raise ValueError(
                f"HEAT component {name!r} needs data[{key!r}]; got keys {sorted(data)}"
            )
        return torch.as_tensor(data[key])

    def fit(
        self,
        data: Mapping[str, torch.Tensor],
        *,
        seed: int = 0,
        device: DeviceLike = None,
        checkpoint_dir: str | Path | None = None,
        engine: EngineConfig | None = None,
    ) -> HEAT:
        """Fit every component on the ID training data, then the standardisation statistics.

        Args:
            data: the ID training data (``data[inputs[name]]`` per component, ``data["labels"]``).
            seed: component ``i`` is fitted with ``seed + i``.
            device: where to train (``None``: CUDA when present).
            checkpoint_dir: one checkpoint file per component (``<name>.pt``) in this folder.
            engine: the training runs' options (:class:`~rank_lab.engine.options.EngineConfig`;
                its ``checkpoint`` must be ``None``: the files are ``checkpoint_dir``'s).

        Raises:
            TypeError, ValueError: ``engine`` not an :class:`~rank_lab.engine.options.EngineConfig`,
                or with a ``checkpoint`` file.
        """
        engine = EngineConfig() if engine is None else engine
        if not isinstance(engine, EngineConfig):
            raise TypeError(f"engine must be an EngineConfig or None, got {type(engine).__name__}")
        if engine.checkpoint is not None:
            raise ValueError(
                "engine.checkpoint must be None: HEAT writes one file per component "
                "into checkpoint_dir"
            )
        labels = data.get("labels")
        for i, (name, comp) in enumerate(self.components.items()):
            ckpt = Path(checkpoint_dir) / f"{name}.pt" if checkpoint_dir is not None else None
            comp.fit(
                self._get(data, name),
                labels,
                seed=seed + i,
                device=device,
                engine=replace(engine, checkpoint=ckpt),
            )
        e = self.component_energies(data)
        self.mean, self.std = e.mean(0), e.std(0).clamp_min(1e-12)
        return self

    @torch.no_grad()
    def component_energies(
        self, data: Mapping[str, torch.Tensor], batch_size: int = 4096
    ) -> torch.Tensor:
        """``(N, K)`` hybrid energies ``E^h_k``, one column per component (in insertion order)."""
        cols = []
        for name, comp in self.components.items():
            z = self._get(data, name)
            dev = next(comp.residual.parameters()).device
            parts = [
                comp.energy(z[i : i + batch_size].to(dev)).cpu()
                for i in range(0, z.shape[0], batch_size)
            ]
            cols.append(torch.cat(parts))
        return torch.stack(cols, 1)

    def score(
        self,
        data: Mapping[str, torch.Tensor],
        beta: float | None = None,
        standardize: bool | None = None,
    ) -> torch.Tensor:
        """``(N,)`` HEAT energies (higher = more OOD); ``beta``/``standardize`` override the
        defaults."""
        e = self.component_energies(data)
        std_on = self.standardize if standardize is None else standardize
        if std_on and self.mean is None:
            raise RuntimeError("HEAT is not fitted: call fit(data) first")
        return compose_energies(
            e,
            self.beta if beta is None else beta,
            mean=self.mean if std_on else None,
            std=self.std if std_on else None,
        )

    def forward(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.score(data)
