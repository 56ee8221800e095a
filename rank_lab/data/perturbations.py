"""Training-set perturbations: class imbalance, label noise and two random views per input.

* :func:`imbalanced_indices` -- the class-imbalance protocol of Section 6.5.5 of the Patel thesis:
  half of the classes keep ``imbalance_rate`` of the images of the others.
* :func:`noisy_labels` -- the label-noise protocol of Section 6.5.6: a fraction ``noise_rate`` of
  the labels replaced by a different class drawn uniformly.
* :func:`two_views` -- two random views of each input (a pixel shift and Gaussian noise), the toy
  augmentation for the contrastive losses of chapter 6 (SimCLR / SupCon, Eqs. 6.1-6.5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    check_class_indices,
    check_finite,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)

__all__ = ["imbalanced_indices", "noisy_labels", "two_views"]


def imbalanced_indices(
    labels: torch.Tensor,
    imbalance_rate: float,
    *,
    minority_classes: torch.Tensor | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """Indices of an imbalanced training subset (Section 6.5.5 of the Patel thesis).

    Half of the classes (the odd-numbered ones unless ``minority_classes`` is given) keep
    ``imbalance_rate`` times as many samples as the others (at least one); the rest keep all.

    Returns:
        sorted ``(N',)`` long indices into ``labels``.
    """
    labels = _label_vector(labels)
    imbalance_rate = check_float(imbalance_rate, "imbalance_rate", low=0.0, high=1.0, low_open=True)
    seed = check_nonneg_int(seed, "seed")
    classes = labels.unique()
    minority = (
        classes[1::2]
        if minority_classes is None
        else check_labels(minority_classes, name="minority_classes").reshape(-1)
    )
    majority = [c for c in classes if c not in minority]
    if not majority:
        raise ValueError(
            "minority_classes holds every class: at least one majority class is needed"
        )
    majority_size = max(int((labels == c).sum()) for c in majority)
    g = torch.Generator().manual_seed(seed)
    keep = []
    for c in classes:
        idx = torch.nonzero(labels == c).flatten()
        if c in minority:
            n = max(1, round(imbalance_rate * majority_size))
            idx = idx[torch.randperm(idx.numel(), generator=g)[:n]]
        keep.append(idx)
    return torch.cat(keep).sort().values


def noisy_labels(
    labels: torch.Tensor, noise_rate: float, n_classes: int | None = None, *, seed: int = 0
) -> torch.Tensor:
    """Corrupt a fraction ``noise_rate`` of the labels with a wrong class (Section 6.5.6).

    Exactly ``round(noise_rate * N)`` samples get a label drawn uniformly among the *other*
    classes, so the noise rate is the fraction of wrong labels.
    """
    labels = _label_vector(labels)
    noise_rate = check_float(noise_rate, "noise_rate", low=0.0, high=1.0)
    seed = check_nonneg_int(seed, "seed")
    k = int(labels.max()) + 1 if n_classes is None else check_positive_int(n_classes, "n_classes")
    if k < 2:
        raise ValueError(f"noisy labels need at least 2 classes, got n_classes={k}")
    check_class_indices(labels, k)
    # drawn on the CPU: the same noisy labels on every device
    g = torch.Generator().manual_seed(seed)
    n_bad = round(noise_rate * labels.numel())
    idx = torch.randperm(labels.numel(), generator=g)[:n_bad].to(labels.device)
    out = labels.clone()
    shift = torch.randint(1, k, (n_bad,), generator=g).to(labels.device)
    out[idx] = (labels[idx] + shift) % k
    return out


def _label_vector(labels: object) -> torch.Tensor:
    """``(N,)`` integer class labels ``>= 0``, or raise naming ``labels``."""
    labels = check_labels(labels, name="labels")
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (N,), got {tuple(labels.shape)}")
    if bool((labels < 0).any()):
        raise ValueError(f"labels must be class indices >= 0, got {int(labels.min())}")
    return labels


def two_views(
    x: torch.Tensor,
    *,
    noise_std: float = 0.1,
    max_shift: int = 1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Two random views of each input for toy contrastive training: ``(2N, ...)``, views stacked.

    Images ``(N, C, H, W)`` are shifted by up to ``max_shift`` pixels (zero padding); every input
    (images or ``(N, D)`` vectors) gets Gaussian noise of standard deviation ``noise_std``.

    Args:
        x: ``(N, ...)`` finite floating inputs, ``N > 0``, at least 2 dims.
        noise_std: ``>= 0``; max_shift: pixels, ``>= 0``; generator: for the draws.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(
            f"x must have shape (N, ...) with N > 0 and at least 2 dims, got {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor, got dtype {x.dtype}")
    check_finite(x, "x")
    noise_std = check_float(noise_std, "noise_std", low=0.0)
    max_shift = check_nonneg_int(max_shift, "max_shift")
    views = []
    for _ in range(2):
        out = x
        if x.ndim == 4 and max_shift > 0:
            pad = F.pad(x, (max_shift,) * 4)
            h, w = x.shape[-2:]
            out = torch.empty_like(x)
            offs = torch.randint(0, 2 * max_shift + 1, (x.shape[0], 2), generator=generator).to(
                x.device
            )
            for dy in range(2 * max_shift + 1):  # one slice per offset, not per image
                for dx in range(2 * max_shift + 1):
                    sel = torch.nonzero((offs[:, 0] == dy) & (offs[:, 1] == dx)).flatten()
                    if sel.numel():
                        out[sel] = pad[sel, :, dy : dy + h, dx : dx + w]
        views.append(
            out + noise_std * torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        )
    return torch.cat(views)
