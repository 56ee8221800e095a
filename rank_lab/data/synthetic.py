"""Synthetic open-set retrieval tasks: Gaussian classes behind a fixed random nonlinear map.

This is the offline stand-in for the **open-set protocol** of image retrieval (Ramzi thesis,
§2.3.1 / Fig. 2.13 and the evaluation protocol of §3.5.1): train
and test classes are *disjoint*, so a model is scored on classes it never saw and must learn an
embedding that generalises, not a classifier.

Generative model (a rank_lab stand-in; the thesis has no synthetic set):

* class centres in a latent space ``R^dim``: ``mu_c ~ N(0, class_sep^2 I)`` (flat) or, for a
  hierarchy, ``c_g ~ N(0, s_0^2 I)``, ``mu_f = c_g + N(0, s_1^2 I)`` (fine classes of one
  super-class are closer to each other than to other super-classes' classes);
* a sample of class ``c``: ``u = mu_c + N(0, noise^2 I)``;
* raw features ``x = g(u) + N(0, obs_noise^2 I) in R^input_dim`` where ``g`` is a *fixed* random
  2-layer MLP (:class:`RandomNonlinearMap`), so an embedding network has a nonlinear map to undo.

The ratio ``class_sep / noise`` sets the difficulty: large is easy, about 1 or less is hard.
Everything is drawn from a local :class:`torch.Generator`, so the same ``seed`` gives bitwise
identical tensors and the global random state is left untouched.

Class ids are **kept as generated** in both splits (no re-indexing): train and test hold disjoint
sets of ids, so ``y_test`` may start at, e.g., 10. Re-index with
``torch.unique(y, return_inverse=True)`` if a classifier head needs ``0..C-1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from rank_lab._validation import check_finite, check_positive_int
from rank_lab.data.splits import OpenSetSplit, check_number, check_seed
from rank_lab.utils import DeviceLike, get_device

__all__ = ["RandomNonlinearMap", "make_open_set", "make_hierarchical_open_set"]

_ACTIVATIONS = ("tanh", "leaky_relu")


def _n_train(n: int, train_fraction: float, what: str) -> int:
    """Number of the ``n`` groups that go to the train split (round half up); both sides
    non-empty."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    k = int(math.floor(train_fraction * n + 0.5))
    if k < 1 or k > n - 1:
        raise ValueError(
            f"train_fraction={train_fraction} of {n} {what} leaves an empty train or test split "
            f"({k} train, {n - k} test); use more {what} or another train_fraction"
        )
    return k


class RandomNonlinearMap:
    """A fixed, seeded random 2-layer MLP ``g: R^dim -> R^input_dim`` (the generator's observation
    map).

    ``g(u) = W_2 act(gain * W_1 (u / input_scale) + b_1) + b_2`` with ``W_1 ~ N(0, 1/dim)``,
    ``b_1 ~ N(0, 0.5^2)``, ``W_2 ~ N(0, 1/hidden_dim)``, ``b_2 ~ N(0, 0.1^2)``. ``input_scale``
    (the latent standard deviation) keeps the pre-activations at a standard deviation of about
    ``gain``: ``tanh`` then bends the clusters without saturating them flat.

    Args:
        dim: latent dimension.
        input_dim: output (raw feature) dimension.
        hidden_dim: width of the hidden layer.
        activation: ``"tanh"`` (default) or ``"leaky_relu"`` (slope 0.2).
        gain: pre-activation scale; larger is more nonlinear.
        input_scale: divides the input before the first layer.
        seed: seeds the weights (a local generator).
    """

    def __init__(
        self,
        dim: int,
        input_dim: int,
        hidden_dim: int = 64,
        activation: str = "tanh",
        gain: float = 1.5,
        input_scale: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.input_dim = check_positive_int(input_dim, "input_dim")
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}")
        self.activation = activation
        self.gain = check_number(gain, "gain", positive=True)
        self.input_scale = check_number(input_scale, "input_scale", positive=True)
        gen = torch.Generator().manual_seed(check_seed(seed))
        f64 = torch.float64
        self.w1 = torch.randn(self.hidden_dim, self.dim, generator=gen, dtype=f64) / math.sqrt(
            self.dim
        )
        self.b1 = 0.5 * torch.randn(self.hidden_dim, generator=gen, dtype=f64)
        self.w2 = torch.randn(
            self.input_dim, self.hidden_dim, generator=gen, dtype=f64
        ) / math.sqrt(self.hidden_dim)
        self.b2 = 0.1 * torch.randn(self.input_dim, generator=gen, dtype=f64)

    def __call__(self, u: torch.Tensor) -> torch.Tensor:
        """Map latent codes ``u (N, dim)`` to raw features ``(N, input_dim)`` (float64 inside)."""
        if not isinstance(u, torch.Tensor) or u.ndim != 2 or u.shape[1] != self.dim:
            shape = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
            raise ValueError(f"u must be a tensor of shape (N, {self.dim}), got {shape}")
        if u.shape[0] == 0:
            raise ValueError("u is empty (N = 0)")
        check_finite(u, "u")
        w1, b1, w2, b2 = (t.to(u.device) for t in (self.w1, self.b1, self.w2, self.b2))
        a = self.gain * (u.to(torch.float64) / self.input_scale) @ w1.T + b1
        h = torch.tanh(a) if self.activation == "tanh" else torch.nn.functional.leaky_relu(a, 0.2)
        return h @ w2.T + b2

    def __repr__(self) -> str:
        return (
            f"RandomNonlinearMap({self.dim} -> {self.hidden_dim} -> {self.input_dim}, "
            f"{self.activation}, gain={self.gain})"
        )


def _sample_split(
    centres: torch.Tensor,
    labels: torch.Tensor,
    train_mask: torch.Tensor,
    per_class: int,
    noise: float,
    obs_noise: float,
    fmap: RandomNonlinearMap,
    gen: torch.Generator,
    dtype: torch.dtype,
    device: DeviceLike,
    name: str,
    extras: dict[str, Any],
    flat: bool,
) -> OpenSetSplit:
    """Draw ``per_class`` samples per class, map them, split by class and shuffle each side.

    ``centres (C, dim)``; ``labels (C, L)`` (one row per fine class, fine id first); ``train_mask
    (C,)`` bool; ``flat`` returns ``(N,)`` labels (column 0) instead of ``(N, L)``.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch dtype, got {dtype!r}")
    n_cls, dim = centres.shape
    cls = torch.arange(n_cls).repeat_interleave(per_class)
    u = centres[cls] + noise * torch.randn(cls.numel(), dim, generator=gen, dtype=torch.float64)
    x = fmap(u) + obs_noise * torch.randn(
        cls.numel(), fmap.input_dim, generator=gen, dtype=torch.float64
    )
    parts = []
    for mask in (train_mask[cls], ~train_mask[cls]):
        idx = torch.nonzero(mask).squeeze(1)
        idx = idx[torch.randperm(idx.numel(), generator=gen)]
        y = labels[cls[idx]]
        parts.append((x[idx].to(dtype), y[:, 0] if flat else y, u[idx].to(dtype)))
    (x_tr, y_tr, u_tr), (x_te, y_te, u_te) = parts
    extras = {
        **extras,
        "latent_train": u_tr,
        "latent_test": u_te,
        "centres": centres.to(dtype),
        "feature_map": fmap,
    }
    split = OpenSetSplit(x_tr, y_tr, x_te, y_te, open_set=True, name=name, extras=extras)
    return split.to(get_device(device)) if device is not None else split


def make_open_set(
    n_classes: int = 20,
    per_class: int = 30,
    dim: int = 16,
    input_dim: int = 32,
    noise: float = 1.0,
    train_fraction: float = 0.5,
    seed: int = 0,
    *,
    class_sep: float = 1.25,
    obs_noise: float = 0.05,
    hidden_dim: int = 64,
    activation: str = "tanh",
    gain: float = 1.5,
    map_seed: int | None = None,
    device: DeviceLike = None,
    dtype: torch.dtype = torch.float32,
) -> OpenSetSplit:
    """Flat open-set task: Gaussian classes in ``R^dim`` through a fixed random nonlinear map.

    Offline stand-in for the open-set retrieval protocol of the Ramzi thesis (§2.3.1, Fig. 2.13;
    §3.5.1). Classes ``0 .. n_train - 1`` (with
    ``n_train = round(train_fraction * n_classes)``) form the train split and the others the test
    split (as CUB-200: first 100 classes train, last 100 test, §3.5.1); the centres are i.i.d., so
    which ids go where does not matter. Labels keep their original ids (the two sets are
    disjoint). Rows are shuffled within each split.

    Args:
        n_classes: number of classes ``C`` (>= 2).
        per_class: samples per class.
        dim: latent dimension.
        input_dim: raw feature dimension ``D``.
        noise: within-class latent standard deviation ``sigma_x``.
        train_fraction: fraction of the classes used for training, in (0, 1).
        seed: seeds everything (a local generator; the global RNG is untouched).
        class_sep: standard deviation of the class centres ``sigma_c``; the task gets easier as
            ``class_sep / noise`` grows. With the defaults (ratio 1.25, 10 test classes) raw-feature
            nearest-neighbour retrieval gives R@1 about 0.88 and mAP@R about 0.5 versus about
            0.93 / 0.68 in the latent space; ratio 1.0 is harder (about 0.73 / 0.33), 2.0 is easy.
        obs_noise: standard deviation of the noise added after the map.
        hidden_dim, activation, gain: of the :class:`RandomNonlinearMap`.
        map_seed: seed of the map (default: ``seed``); fix it to vary only the samples.
        device: device of the returned tensors (default CPU; ``"auto"`` picks CUDA when present).
        dtype: floating dtype of the returned features.

    Returns:
        :class:`OpenSetSplit` with ``x_* (N, input_dim)`` and ``y_* (N,)`` long, ``N = per_class *``
        (number of classes of the split). ``extras`` holds ``latent_train/latent_test (N, dim)``,
        ``centres (C, dim)`` and the ``feature_map``.

    Raises:
        ValueError / TypeError: on a non-positive size, a bad ``train_fraction`` or a negative
        scale.
    """
    n_classes = check_positive_int(n_classes, "n_classes")
    per_class = check_positive_int(per_class, "per_class")
    dim = check_positive_int(dim, "dim")
    input_dim = check_positive_int(input_dim, "input_dim")
    noise = check_number(noise, "noise", nonneg=True)
    class_sep = check_number(class_sep, "class_sep", nonneg=True)
    obs_noise = check_number(obs_noise, "obs_noise", nonneg=True)
    train_fraction = check_number(train_fraction, "train_fraction")
    seed = check_seed(seed)
    map_seed = seed if map_seed is None else check_seed(map_seed, "map_seed")
    if n_classes < 2:
        raise ValueError(f"n_classes must be >= 2 for an open-set split, got {n_classes}")
    n_train = _n_train(n_classes, train_fraction, "classes")
    if class_sep == 0 and noise == 0:
        raise ValueError("class_sep and noise are both 0: every sample would be identical")

    gen = torch.Generator().manual_seed(seed)
    centres = class_sep * torch.randn(n_classes, dim, generator=gen, dtype=torch.float64)
    scale = math.sqrt(class_sep**2 + noise**2)
    fmap = RandomNonlinearMap(dim, input_dim, hidden_dim, activation, gain, scale, seed=map_seed)
    labels = torch.arange(n_classes)[:, None]
    train_mask = torch.arange(n_classes) < n_train
    return _sample_split(
        centres,
        labels,
        train_mask,
        per_class,
        noise,
        obs_noise,
        fmap,
        gen,
        dtype,
        device,
        "synthetic",
        {"class_sep": class_sep, "noise": noise},
        flat=True,
    )


def make_hierarchical_open_set(
    n_coarse: int = 5,
    fine_per_coarse: int = 4,
    per_class: int = 20,
    dim: int = 16,
    input_dim: int = 32,
    noise: float = 1.0,
    train_fraction: float = 0.5,
    seed: int = 0,
    *,
    branching: Sequence[int] | None = None,
    level_std: Sequence[float] | None = None,
    split: str = "fine",
    obs_noise: float = 0.05,
    hidden_dim: int = 64,
    activation: str = "tanh",
    gain: float = 1.5,
    map_seed: int | None = None,
    device: DeviceLike = None,
    dtype: torch.dtype = torch.float32,
) -> OpenSetSplit:
    """Hierarchical open-set task: a class tree with hierarchically drawn latent centres.

    The stand-in for the hierarchical datasets of Ramzi thesis ch. 4 (SOP/iNat with super-classes,
    §4.4.1). With ``branching = (b_0, ..., b_{L-1})`` (top level first) there
    are ``b_0`` root groups, each with ``b_1`` children, ... and ``prod(b)`` fine classes. Centres
    are drawn top-down: ``c_root ~ N(0, s_0^2 I)``, ``c_child = c_parent + N(0, s_l^2 I)``, so the
    fine classes of one super-class are closer on average than classes of different super-classes.

    Labels are ``(N, L)``, **column 0 = fine**, last column = root. Ids are global per level and
    laid out so that ``label[:, l] = fine // prod(b[L-l:])``: the fine id determines every coarser
    id. Ids are kept as generated (not re-indexed) in both splits.

    Open-set split (``split``):

    * ``"fine"`` (default, as SOP/iNat): inside every parent, the first
      ``round(train_fraction * b_{L-1})`` children are train classes and the others test classes;
      super-classes are shared by both splits.
    * ``"coarse"``: whole root groups are split (the first ``round(train_fraction * b_0)`` train).

    Args:
        n_coarse: number of super-classes (used when ``branching`` is None).
        fine_per_coarse: fine classes per super-class (used when ``branching`` is None).
        per_class: samples per fine class.
        dim, input_dim: latent and raw dimensions.
        noise: within-class latent standard deviation.
        train_fraction: fraction of fine classes per parent (or of root groups) used for training.
        seed: seeds everything (a local generator).
        branching: branching factors top-down, e.g. ``(4, 3, 5)`` for L = 3; replaces
            ``(n_coarse, fine_per_coarse)``.
        level_std: latent standard deviation of each level's offset, top-down (length L); default
            ``2^(L-1-l)``: ``(2.0, 1.0)`` for L = 2, ``(4.0, 2.0, 1.0)`` for L = 3 (the finest
            offset equals the default ``noise``).
        split: ``"fine"`` or ``"coarse"``.
        obs_noise, hidden_dim, activation, gain, map_seed, device, dtype: as in
            :func:`make_open_set`.

    Returns:
        :class:`OpenSetSplit` with ``x_* (N, input_dim)``, ``y_* (N, L)`` long, ``extras`` with
        ``latent_train/latent_test``, ``centres (n_fine, dim)``, ``branching``, ``level_std``,
        ``fine_to_parents (n_fine, L)`` (the label row of every fine class) and the map.
    """
    if branching is None:
        branching = (
            check_positive_int(n_coarse, "n_coarse"),
            check_positive_int(fine_per_coarse, "fine_per_coarse"),
        )
    if (
        isinstance(branching, (str, bytes))
        or not isinstance(branching, Sequence)
        or len(branching) < 1
    ):
        raise TypeError(f"branching must be a non-empty sequence of ints, got {branching!r}")
    branching = tuple(check_positive_int(b, f"branching[{i}]") for i, b in enumerate(branching))
    n_levels = len(branching)
    if level_std is None:
        level_std = tuple(2.0 ** (n_levels - 1 - i) for i in range(n_levels))
    if isinstance(level_std, (str, bytes)) or not isinstance(level_std, Sequence):
        raise TypeError(f"level_std must be a sequence of floats, got {level_std!r}")
    if len(level_std) != n_levels:
        raise ValueError(
            f"level_std has {len(level_std)} entries but branching has {n_levels} levels"
        )
    level_std = tuple(
        check_number(s, f"level_std[{i}]", nonneg=True) for i, s in enumerate(level_std)
    )
    per_class = check_positive_int(per_class, "per_class")
    dim = check_positive_int(dim, "dim")
    input_dim = check_positive_int(input_dim, "input_dim")
    noise = check_number(noise, "noise", nonneg=True)
    obs_noise = check_number(obs_noise, "obs_noise", nonneg=True)
    train_fraction = check_number(train_fraction, "train_fraction")
    seed = check_seed(seed)
    map_seed = seed if map_seed is None else check_seed(map_seed, "map_seed")
    if split == "fine":
        k = _n_train(branching[-1], train_fraction, "fine classes per parent (branching[-1])")
    elif split == "coarse":
        k = _n_train(branching[0], train_fraction, "root groups (branching[0])")
    else:
        raise ValueError(f"split must be 'fine' or 'coarse', got {split!r}")

    gen = torch.Generator().manual_seed(seed)
    centres = torch.zeros(1, dim, dtype=torch.float64)
    for b, s in zip(branching, level_std, strict=True):  # top-down: each node gets b children
        centres = centres.repeat_interleave(b, dim=0)
        centres = centres + s * torch.randn(
            centres.shape[0], dim, generator=gen, dtype=torch.float64
        )
    n_fine = centres.shape[0]
    fine = torch.arange(n_fine)
    # column l (0 = fine) = fine // (product of the l finest branching factors)
    divisors = [math.prod(branching[n_levels - lvl :]) for lvl in range(n_levels)]
    labels = torch.stack([fine // d for d in divisors], dim=1)
    if split == "fine":
        train_mask = fine % branching[-1] < k
    else:
        train_mask = labels[:, -1] < k
    scale = math.sqrt(sum(s**2 for s in level_std) + noise**2)
    fmap = RandomNonlinearMap(dim, input_dim, hidden_dim, activation, gain, scale, seed=map_seed)
    extras = {
        "branching": branching,
        "level_std": level_std,
        "noise": noise,
        "split": split,
        "fine_to_parents": labels.clone(),
    }
    return _sample_split(
        centres,
        labels,
        train_mask,
        per_class,
        noise,
        obs_noise,
        fmap,
        gen,
        dtype,
        device,
        f"hierarchical-L{n_levels}",
        extras,
        flat=False,
    )
