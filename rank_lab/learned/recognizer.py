"""A small scene-text recogniser (CNN + BiLSTM + CTC) with greedy decoding and CTC alignment.

The thesis post-tunes attention-based STR models (Baek et al.'s TPS-ResNet-BiLSTM-Attn, Sec. 3.3.2
and 4.3.2). The book uses the CTC flavour of the same four-module family (no rectification,
a small VGG-like CNN, a BiLSTM, a per-frame softmax over the alphabet plus a *blank*) because it
trains in seconds on a CPU. The model maps a ``(B, 1, H, W)`` image to ``(B, T, C)`` frame logits,
``T = W // 4`` and ``C = 1 + |alphabet|`` (class 0 is the CTC blank).

For the learned edit-distance surrogate the ground truth must live in the prediction's space
(a ``T x C`` matrix). The thesis' attention models emit one distribution per character position,
so the one-hot word is that space. A CTC model emits one per *frame*; the book represents the
ground truth by its best CTC alignment under the current model (:func:`ctc_best_path`, Viterbi),
which is a one-hot ``T x C`` path that collapses to the ground-truth word.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._validation import (
    as_tensor,
    check_finite,
    check_input_batch,
    check_positive_int,
)
from rank_lab.engine.options import EngineConfig
from rank_lab.learned._checks import (
    check_images,
    check_int_matrix,
    check_module,
    check_targets,
    check_words,
)
from rank_lab.learned.proxy_training import fit_proxy
from rank_lab.metrics.text import text_recognition_metrics

__all__ = [
    "Alphabet",
    "CRNN",
    "ctc_loss",
    "ctc_collapse",
    "greedy_decode",
    "ctc_best_path",
    "fit_ctc",
    "recognize",
    "evaluate_recognizer",
]


class Alphabet:
    """Characters of a recogniser; index 0 is the CTC blank, characters are ``1..len(chars)``.

    Args:
        chars: the distinct characters (default lower-case a-z).
    """

    def __init__(self, chars: str = string.ascii_lowercase) -> None:
        if not chars:
            raise ValueError("chars is empty")
        if len(set(chars)) != len(chars):
            raise ValueError("chars must not repeat a character")
        self.chars = chars
        self.index = {c: i + 1 for i, c in enumerate(chars)}

    @property
    def n_classes(self) -> int:
        """``1 + len(chars)`` (blank included)."""
        return len(self.chars) + 1

    def encode(
        self, words: Sequence[str], device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Words -> padded class indices ``(B, U)`` (pad -1) and lengths ``(B,)``."""
        if isinstance(words, str):
            raise TypeError("words must be a sequence of str, not a single str")
        bad = {c for w in words for c in w if c not in self.index}
        if bad:
            raise ValueError(f"words contain characters outside the alphabet: {sorted(bad)[:10]}")
        lengths = torch.tensor([len(w) for w in words], dtype=torch.long)
        u = int(lengths.max()) if len(words) else 0
        codes = torch.full((len(words), u), -1, dtype=torch.long)
        for i, w in enumerate(words):
            if w:
                codes[i, : len(w)] = torch.tensor([self.index[c] for c in w])
        return codes.to(device), lengths.to(device)

    def decode(self, codes: torch.Tensor, lengths: torch.Tensor | None = None) -> list[str]:
        """Class indices ``(B, U)`` (pad < 1 ignored) -> strings."""
        out = []
        for i, row in enumerate(codes.tolist()):
            row = row if lengths is None else row[: int(lengths[i])]
            out.append("".join(self.chars[c - 1] for c in row if c >= 1))
        return out


def check_alphabet(alphabet: object) -> Alphabet:
    if not isinstance(alphabet, Alphabet):
        raise TypeError(f"alphabet must be an Alphabet, got {type(alphabet).__name__}")
    return alphabet


class CRNN(nn.Module):
    """CNN + BiLSTM + linear CTC head: ``(B, in_channels, H, W) -> (B, W // 4, n_classes)`` logits.

    Args:
        n_classes: ``1 + |alphabet|`` (class 0 = blank).
        in_channels: image channels.
        channels: widths of the three conv stages (2x2 pooling after the first two, then the
            height is averaged away).
        hidden: BiLSTM hidden size per direction.
    """

    def __init__(
        self,
        n_classes: int,
        in_channels: int = 1,
        channels: Sequence[int] = (32, 64, 96),
        hidden: int = 64,
    ) -> None:
        super().__init__()
        self.n_classes = check_positive_int(n_classes, "n_classes")
        self.in_channels = check_positive_int(in_channels, "in_channels")
        hidden = check_positive_int(hidden, "hidden")
        if len(channels) != 3:
            raise ValueError(f"channels must hold three widths, got {len(channels)}")
        c1, c2, c3 = (check_positive_int(c, "channels") for c in channels)

        def block(i: int, o: int) -> list[nn.Module]:
            return [
                nn.Conv2d(i, o, 3, padding=1, bias=False),
                nn.BatchNorm2d(o),
                nn.ReLU(inplace=True),
            ]

        self.cnn = nn.Sequential(
            *block(in_channels, c1),
            nn.MaxPool2d(2),
            *block(c1, c2),
            nn.MaxPool2d(2),
            *block(c2, c3),
            *block(c3, c3),
        )
        self.rnn = nn.LSTM(c3, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Frame logits ``(B, T, C)`` of images ``x`` ``(B, in_channels, H, W)``, ``H, W >= 4``.

        Raises:
            ValueError, TypeError: ``x`` is not a finite floating batch of that shape with
                ``B >= 1`` (float64 is cast to the weights' dtype).
        """
        x = check_input_batch(x, "x", ("B", self.in_channels, "H", "W"), dtype=self)
        if x.shape[2] < 4 or x.shape[3] < 4:
            raise ValueError(
                f"x must be at least 4 x 4 pixels (two 2x poolings), got {tuple(x.shape)}"
            )
        f = self.cnn(x).mean(2).transpose(1, 2)  # (B, T, c3)
        return self.head(self.rnn(f)[0])


def ctc_loss(
    logits: torch.Tensor, targets: torch.Tensor, target_lengths: torch.Tensor
) -> torch.Tensor:
    """Mean CTC loss (the proxy loss of a CTC recogniser) of ``(B, T, C)`` logits.

    Args:
        logits: frame logits ``(B, T, C)``; class 0 is the blank.
        targets: padded class indices ``(B, U)`` (values ``1..C-1``; padding ignored).
        target_lengths: ``(B,)``.

    Raises:
        ValueError, TypeError: see :func:`ctc_best_path` (same checks).
    """
    logits = check_input_batch(logits, "logits", ("B", "T", "C"))
    targets, target_lengths = check_targets(
        targets, target_lengths, logits.shape[0], logits.shape[2], 0
    )
    b, t, _ = logits.shape
    logp = logits.log_softmax(-1).transpose(0, 1)
    flat = (
        torch.cat([targets[i, : int(target_lengths[i])] for i in range(b)])
        if b
        else targets.new_zeros(0)
    )
    input_lengths = torch.full((b,), t, dtype=torch.long)
    return F.ctc_loss(
        logp,
        flat,
        input_lengths,
        target_lengths.cpu(),
        blank=0,
        reduction="mean",
        zero_infinity=True,
    )


def ctc_collapse(paths: torch.Tensor, blank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Collapse CTC frame labels: merge repeats, drop blanks. Vectorised over the batch.

    Args:
        paths: ``(B, T)`` frame labels (e.g. the argmax of the frame posteriors).
        blank: blank index.

    Returns:
        ``codes (B, T)`` left-aligned labels padded with -1, and ``lengths (B,)``.

    Raises:
        ValueError, TypeError: ``paths`` is not an integer ``(B, T)`` tensor with ``B, T >= 1``.
    """
    paths = check_int_matrix(paths, "paths")
    if isinstance(blank, bool) or not isinstance(blank, int):
        raise TypeError(f"blank must be an int, got {type(blank).__name__}")
    prev = torch.cat([torch.full_like(paths[:, :1], -1), paths[:, :-1]], 1)
    keep = (paths != blank) & (paths != prev)
    lengths = keep.sum(1)
    pos = torch.where(keep, torch.cumsum(keep, 1) - 1, torch.full_like(paths, paths.shape[1]))
    out = torch.full(
        (paths.shape[0], paths.shape[1] + 1), -1, dtype=torch.long, device=paths.device
    )
    out.scatter_(1, pos, torch.where(keep, paths, torch.full_like(paths, -1)))
    return out[:, :-1], lengths


def greedy_decode(scores: torch.Tensor, alphabet: Alphabet) -> list[str]:
    """Best-path (greedy) CTC decoding of ``(B, T, C)`` logits or probabilities into strings.

    Args:
        scores: ``(B, T, C)`` frame scores with ``C = alphabet.n_classes`` (class 0 = blank).
        alphabet: the recogniser's :class:`Alphabet`.

    Raises:
        ValueError: ``scores`` is not 3-D, holds NaN/inf, or its ``C`` differs from
            ``alphabet.n_classes`` (a class without a character, or a character never scored).
    """
    check_alphabet(alphabet)
    scores = as_tensor(scores, "scores")
    if scores.ndim != 3:
        raise ValueError(f"scores must have shape (B, T, C), got {tuple(scores.shape)}")
    if scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"scores is empty (shape {tuple(scores.shape)})")
    if scores.shape[2] != alphabet.n_classes:
        raise ValueError(
            f"scores have C={scores.shape[2]} classes but the alphabet has "
            f"{alphabet.n_classes} (blank + {len(alphabet.chars)} characters)"
        )
    if not scores.is_floating_point():
        raise TypeError(
            f"scores must be floating logits or probabilities, got dtype {scores.dtype}"
        )
    check_finite(scores, "scores")
    codes, lengths = ctc_collapse(scores.argmax(-1))
    return alphabet.decode(codes.cpu(), lengths.cpu())


@torch.no_grad()
def ctc_best_path(
    log_probs: torch.Tensor, targets: torch.Tensor, target_lengths: torch.Tensor, blank: int = 0
) -> torch.Tensor:
    """Forced alignment: the most probable CTC path of each target (Viterbi), batched.

    Args:
        log_probs: ``(B, T, C)`` frame log-probabilities.
        targets: ``(B, U)`` padded class indices.
        target_lengths: ``(B,)``.
        blank: blank index.

    Returns:
        ``(B, T)`` frame labels; each row collapses (:func:`ctc_collapse`) to its target.

    Raises:
        ValueError: if a target cannot be aligned in ``T`` frames (too long / too many repeats);
            ``log_probs`` not a finite floating ``(B, T, C)`` batch (clamp probabilities away from 0
            before the log), ``targets`` / ``target_lengths`` of another batch size or out of range.
    """
    log_probs = check_input_batch(log_probs, "log_probs", ("B", "T", "C"))
    if isinstance(blank, bool) or not isinstance(blank, int) or not 0 <= blank < log_probs.shape[2]:
        raise ValueError(
            f"blank must be a class index in 0..{log_probs.shape[2] - 1}, got {blank!r}"
        )
    targets, target_lengths = check_targets(
        targets, target_lengths, log_probs.shape[0], log_probs.shape[2], blank
    )
    b, t, _ = log_probs.shape
    dev = log_probs.device
    u = targets.shape[1]
    s = 2 * u + 1
    ext = torch.full((b, s), blank, dtype=torch.long, device=dev)
    if u:
        ext[:, 1::2] = targets.clamp_min(0)
    tl = target_lengths.to(dev).long()
    need = tl.clone()
    if u > 1:  # a repeated character needs a blank frame in between
        rep = (targets[:, 1:] == targets[:, :-1]) & (
            torch.arange(1, u, device=dev)[None] < tl[:, None]
        )
        need = need + rep.sum(1)
    if bool((need > t).any()):
        raise ValueError(f"a target needs more than T={t} frames to be aligned (length + repeats)")
    s_len = 2 * tl + 1
    ninf = torch.tensor(float("-inf"), dtype=log_probs.dtype, device=dev)
    sidx = torch.arange(s, device=dev)[None]
    valid_s = sidx < s_len[:, None]
    skip_ok = torch.zeros(b, s, dtype=torch.bool, device=dev)
    if s > 2:
        skip_ok[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    emit = log_probs.gather(2, ext[:, None, :].expand(b, t, s))  # (B, T, S)
    delta = torch.full((b, s), float("-inf"), dtype=log_probs.dtype, device=dev)
    delta[:, 0] = emit[:, 0, 0]
    if s > 1:
        delta[:, 1] = torch.where(tl > 0, emit[:, 0, 1], ninf)
    back = torch.zeros(b, t, s, dtype=torch.long, device=dev)
    for k in range(1, t):
        stay = delta
        step = torch.cat([torch.full_like(delta[:, :1], float("-inf")), delta[:, :-1]], 1)
        jump = torch.cat([torch.full_like(delta[:, :2], float("-inf")), delta[:, :-2]], 1)
        jump = torch.where(skip_ok, jump, ninf)
        cand = torch.stack([stay, step, jump], 2)
        best, arg = cand.max(2)
        delta = torch.where(valid_s, best + emit[:, k], ninf)
        back[:, k] = arg
    last = s_len - 1
    end_a = delta.gather(1, last[:, None]).squeeze(1)
    end_b = delta.gather(1, (last - 1).clamp_min(0)[:, None]).squeeze(1)
    state = torch.where((end_b > end_a) & (tl > 0), last - 1, last)
    path = torch.empty(b, t, dtype=torch.long, device=dev)
    for k in range(t - 1, -1, -1):
        path[:, k] = ext.gather(1, state[:, None]).squeeze(1)
        if k:
            state = state - back[:, k].gather(1, state[:, None]).squeeze(1)
    return path


def fit_ctc(
    model: nn.Module,
    images: torch.Tensor,
    words: Sequence[str],
    alphabet: Alphabet,
    steps: int = 500,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    device: torch.device | str | None = None,
    schedule: str = "tail_cosine",
    engine: EngineConfig | None = None,
) -> list[float]:
    """Train ``model`` with the CTC proxy loss (Adam) on the training engine.

    Args:
        model: a :class:`CRNN` (or any ``(B, 1, H, W) -> (B, T, C)`` model).
        images: ``(N, 1, H, W)`` training images.
        words: the ``N`` transcriptions.
        alphabet: the model's alphabet.
        steps: optimisation steps (mini-batches drawn with replacement).
        batch_size: words per step.
        lr: Adam learning rate.
        seed: seeds the batch order.
        device: device to train on (default: CUDA when present).
        schedule: ``"tail_cosine"`` (constant, then a cosine decay to 0 over the last 30% of the
            steps: the proxy model ends converged for its budget, as in the thesis' post-tuning
            setup, without decaying before CTC leaves its initial all-blank plateau),
            ``"cosine"`` (over all steps) or ``"constant"``. See :func:`lr_schedule`.
        engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`: checkpoint
            file and period, resume, progress, mixed precision, gradient clipping; see
            :func:`~rank_lab.learned.proxy_training.fit_proxy`). The thesis code clips the gradient
            norm at 5: ``EngineConfig(grad_clip=5.0)``, as the book does.

    Returns:
        The loss of every step.

    Raises:
        ValueError, TypeError: ``images`` not a finite floating ``(N, C, H, W)`` batch (float64 is
            cast to the model's dtype), ``words`` not ``N`` strings of the alphabet, or a bad
            optimisation argument (see :func:`fit_proxy`).
    """
    images, words = _check_images_words(images, words, alphabet, check_module(model))
    targets, lengths = alphabet.encode(words)

    def batch_loss(idx: torch.Tensor, dev: torch.device) -> torch.Tensor:
        return ctc_loss(model(images[idx].to(dev)), targets[idx].to(dev), lengths[idx].to(dev))

    return fit_proxy(
        model,
        len(words),
        batch_loss,
        steps,
        batch_size,
        lr,
        seed,
        device,
        schedule,
        desc="CTC",
        engine=engine,
    )


def _check_images_words(
    images: object, words: object, alphabet: object, model: nn.Module
) -> tuple[torch.Tensor, list[str]]:
    """The data check of the recogniser's entry points: images ``(N, C, H, W)``, ``N`` words, an
    alphabet."""
    images = check_images(images, model=model)
    check_alphabet(alphabet)
    return images, check_words(words, images.shape[0])


@torch.no_grad()
def recognize(
    model: nn.Module, images: torch.Tensor, alphabet: Alphabet, batch_size: int = 256
) -> list[str]:
    """Greedy transcriptions of ``(N, C, H, W)`` images (model switched to eval mode).

    Args:
        model: the recogniser, ``(B, C, H, W) -> (B, T, alphabet.n_classes)``.
        images: finite floating ``(N, C, H, W)`` images (float64 is cast to the model's dtype).
        alphabet: the model's alphabet.
        batch_size: images per forward pass.

    Returns:
        ``N`` strings.
    """
    images = check_images(images, model=check_module(model))
    check_alphabet(alphabet)
    batch_size = check_positive_int(batch_size, "batch_size")
    model.eval()
    dev = next(model.parameters()).device
    out: list[str] = []
    for i in range(0, images.shape[0], batch_size):
        out += greedy_decode(model(images[i : i + batch_size].to(dev)), alphabet)
    return out


def evaluate_recognizer(
    model: nn.Module, images: torch.Tensor, words: Sequence[str], alphabet: Alphabet
) -> dict[str, float]:
    """Accuracy, NED (higher is better) and TED of ``model`` on a labelled set (Tables 3.1-4.2).

    Args:
        model: the recogniser.
        images: ``(N, C, H, W)`` images (checked as in :func:`recognize`).
        words: their ``N`` transcriptions.
        alphabet: the model's alphabet.
    """
    images, words = _check_images_words(images, words, alphabet, check_module(model))
    return text_recognition_metrics(recognize(model, images, alphabet), words)
