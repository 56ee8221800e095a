"""Embedding networks ``h_Phi`` of the learned surrogates (Patel thesis, Sec. 3.3.2, 3.3.3, 4.3.1).

* :class:`CharCNN` embeds a sequence of per-position distributions (a recogniser's softmax or a
  one-hot ground truth) for LS-ED and FEDS;
* :class:`BoxMLP` embeds the 6-d code of a rotated box for LS-IoU.

The thesis gives the layer types and counts, not the widths; the defaults are documented choices.
Both are used through :class:`rank_lab.learned.surrogate_model.EmbeddingSurrogate`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rank_lab._validation import (
    check_float,
    check_input_batch,
    check_nonneg_int,
    check_positive_int,
)

__all__ = ["CharCNN", "BoxMLP"]


class CharCNN(nn.Module):
    """Char-CNN embedding of a ``(B, L, C)`` sequence of distributions (LS-ED / FEDS, Sec. 3.3.2).

    Five 1-D convolutions with LeakyReLU, then two fully-connected layers (as in the thesis,
    after Zhang et al.'s character CNN); widths and kernels are not given in the thesis, the
    defaults are a small choice of rank_lab, sized for CPU use.

    Args:
        n_classes: size ``C`` of each distribution (alphabet, with blank/pad).
        length: sequence length ``L``.
        channels: width of the convolutions.
        kernel_sizes: the five kernel sizes.
        pool_after: indices of the conv layers followed by a 2x max-pool (skipped when ``L`` is
            too short).
        hidden: width of the first fully-connected layer.
        out_dim: embedding dimension (1024 in the thesis).
        negative_slope: LeakyReLU slope.
        input_temperature: if set (a book addition, not in the thesis), every input distribution
            is first sharpened, ``softmax(log(x) / t)``: one-hot inputs are unchanged and a soft
            but correct prediction embeds close to its one-hot ground truth. A small CPU-trained
            surrogate otherwise spends most of its capacity learning that invariance (the
            thesis' converged attention models emit near one-hot distributions).
    """

    def __init__(
        self,
        n_classes: int,
        length: int,
        channels: int = 128,
        kernel_sizes: Sequence[int] = (7, 7, 3, 3, 3),
        pool_after: Sequence[int] = (0, 1),
        hidden: int = 256,
        out_dim: int = 256,
        negative_slope: float = 0.2,
        input_temperature: float | None = None,
    ) -> None:
        super().__init__()
        n_classes, length = (
            check_positive_int(n_classes, "n_classes"),
            check_positive_int(length, "length"),
        )
        channels, hidden = (
            check_positive_int(channels, "channels"),
            check_positive_int(hidden, "hidden"),
        )
        out_dim = check_positive_int(out_dim, "out_dim")
        if input_temperature is not None:
            input_temperature = check_float(
                input_temperature, "input_temperature", low=0, low_open=True
            )
        self.input_temperature = input_temperature
        if len(kernel_sizes) != 5:
            raise ValueError(f"kernel_sizes must hold five sizes, got {len(kernel_sizes)}")
        kernel_sizes = [check_positive_int(k, "kernel_sizes") for k in kernel_sizes]
        pool_after = [check_nonneg_int(i, "pool_after") for i in pool_after]
        negative_slope = check_float(negative_slope, "negative_slope")
        layers: list[nn.Module] = []
        c_in, cur = n_classes, length
        for i, k in enumerate(kernel_sizes):
            layers += [nn.Conv1d(c_in, channels, k, padding=k // 2), nn.LeakyReLU(negative_slope)]
            if i in pool_after and cur >= 2:
                layers.append(nn.MaxPool1d(2))
                cur //= 2
            c_in = channels
        self.conv = nn.Sequential(*layers)
        self.fc = nn.Sequential(
            nn.Linear(channels * cur, hidden),
            nn.LeakyReLU(negative_slope),
            nn.Linear(hidden, out_dim),
        )
        self.n_classes, self.length = n_classes, length

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed ``(B, L, C)`` -> ``(B, out_dim)``.

        Raises:
            ValueError, TypeError: ``x`` is not a finite floating ``(B, L, C)`` batch with
                ``B >= 1`` (float64 is cast to the weights' dtype; see
                :func:`rank_lab._validation.check_input_batch`).
        """
        x = check_input_batch(x, "x", ("B", self.length, self.n_classes), dtype=self)
        if self.input_temperature is not None:
            x = torch.softmax(torch.log(x.clamp_min(1e-6)) / self.input_temperature, -1)
        return self.fc(self.conv(x.transpose(1, 2)).flatten(1))


class BoxMLP(nn.Module):
    """The LS-IoU embedding: five fully-connected layers with ReLU, ``R^6 -> R^16`` (Sec. 3.3.3).

    Args:
        in_dim: box code size (6: centre, size, cos and sin of the angle).
        hidden: widths of the four hidden layers (not given in the thesis).
        out_dim: embedding size (16 in the thesis).
    """

    def __init__(
        self, in_dim: int = 6, hidden: Sequence[int] = (64, 128, 128, 64), out_dim: int = 16
    ) -> None:
        super().__init__()
        if len(hidden) != 4:
            raise ValueError(
                f"hidden must hold four widths (five layers in all), got {len(hidden)}"
            )
        self.in_dim = check_positive_int(in_dim, "in_dim")
        out_dim = check_positive_int(out_dim, "out_dim")
        dims = [self.in_dim, *(check_positive_int(h, "hidden") for h in hidden)]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed ``(B, in_dim)`` -> ``(B, out_dim)`` (``x`` checked as in
        :meth:`CharCNN.forward`)."""
        return self.net(check_input_batch(x, "x", ("B", self.in_dim), dtype=self))
