"""LS-ED / FEDS task: a CTC recogniser, its edit distance, and the random word-pair generator R.

:class:`EditDistanceTask` adapts a recogniser (:class:`rank_lab.learned.recognizer.CRNN`) to
:class:`rank_lab.learned.surrogate_trainer.SurrogateTrainer`:

* prediction ``z``: the per-frame softmax ``(B, T, C)`` (the thesis feeds the per-character
  softmax of an attention decoder to the Char-CNN, Fig. 3.4);
* ground truth ``y``: the one-hot best CTC path of the word under the current model
  (:func:`~rank_lab.learned.recognizer.ctc_best_path`), so that ``y`` lives in the same space;
* metric ``e(z, y)``: the edit distance between the greedy decoding of ``z`` and the word;
* generator R (:class:`CTCEditPairGenerator`): word pairs whose edit distance is uniform over
  ``{0, ..., b}`` (Sec. 3.3.2: "ensures uniform sampling in the range of the true error"), built
  by applying random substitutions, deletions and insertions to the frames of a random CTC
  path. Like the thesis' generator its outputs are one-hot, hence the domain gap with the
  model's softmax outputs that motivates the local-global source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._validation import (
    check_float,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.learned._checks import (
    check_generator,
    check_images,
    check_int_matrix,
    check_words,
    uniform,
)
from rank_lab.learned.recognizer import Alphabet, check_alphabet, ctc_best_path, ctc_collapse
from rank_lab.learned.surrogate_model import SurrogateTask
from rank_lab.metrics.text import edit_distance

__all__ = ["PATEL_FIG_4_1", "random_ctc_path", "CTCEditPairGenerator", "EditDistanceTask"]

#: Fig. 4.1 of the Patel thesis: (ground truth, M1 prediction, M2 prediction, printed ED of M1,
#: printed ED of M2). The printed total is 30 for M1 and 10 for M2. Levenshtein gives 2, not the
#: printed 3, for "napasorn" vs "napasozin" (one substitution r->z plus one insertion of i), so
#: M1's recomputed total is 29.
PATEL_FIG_4_1: tuple[tuple[str, str, str, int, int], ...] = (
    ("wwwshutterstockcom", "wonnishultersock", "wnwishuttersockcom", 9, 3),
    ("lilliput", "umlout", "lilidut", 5, 2),
    ("frikkie", "exikive", "erikkie", 4, 1),
    ("wwwvtrjtcom", "wwwitcom", "wwwvtritcom", 4, 1),
    ("guiucliinc", "guidglitus", "guiuclituc", 5, 2),
    ("napasorn", "napasozin", "napasozn", 3, 1),
)


def random_ctc_path(
    words: torch.Tensor, lengths: torch.Tensor, frames: int, gen: torch.Generator, blank: int = 0
) -> torch.Tensor:
    """Random CTC frame paths that collapse to the given words, vectorised over the batch.

    The ``frames`` are split into ``len(word)`` consecutive segments of random widths (each at
    least 2); in each segment the character occupies a run of 1-2 frames at a random offset and
    the segment's last frame is blank, so repeated characters never merge.

    Args:
        words: ``(N, U)`` class indices (>= 1; entries beyond ``lengths`` ignored).
        lengths: ``(N,)`` word lengths, ``2 * length <= frames``.
        frames: path length ``T``.
        gen: random generator.
        blank: blank index.

    Returns:
        ``(N, T)`` long frame labels.

    Raises:
        ValueError, TypeError: ``words`` not an integer ``(N, U)`` tensor, ``lengths`` not ``(N,)``
            integers in ``[0, U]``, used characters equal to ``blank``, ``frames`` not a positive
            int or too short.
    """
    words = check_int_matrix(words, "words")
    lengths = torch.as_tensor(lengths)
    if (
        lengths.shape != (words.shape[0],)
        or lengths.is_floating_point()
        or lengths.dtype == torch.bool
    ):
        raise ValueError(
            f"lengths must be ({words.shape[0]},) integers (one per row of words), "
            f"got shape {tuple(lengths.shape)} and dtype {lengths.dtype}"
        )
    if bool(((lengths < 0) | (lengths > words.shape[1])).any()):
        raise ValueError(f"lengths must be in [0, U = {words.shape[1]}], got {lengths.tolist()}")
    frames = check_positive_int(frames, "frames")
    check_generator(gen)
    dev = words.device
    lengths = lengths.to(dev)
    used = torch.arange(words.shape[1], device=dev)[None] < lengths[:, None]
    if bool((words[used] == blank).any()):
        raise ValueError(f"words must not hold the blank {blank} within lengths")
    n, u = words.shape
    if bool((2 * lengths > frames).any()):
        raise ValueError(f"frames={frames} is too short: a word needs 2 frames per character")
    path = torch.full((n, frames + 1), blank, dtype=torch.long, device=dev)
    if u == 0:
        return path[:, :frames]
    extra = (frames - 2 * lengths)[:, None]
    pos = torch.arange(u, device=dev)[None]
    cuts = torch.floor(uniform(gen, n, u, device=dev) * (extra + 1)).long().clamp(max=extra)
    cuts = torch.where(pos < lengths[:, None], cuts, extra).sort(1).values
    widths = 2 + torch.diff(cuts, dim=1, prepend=torch.zeros(n, 1, dtype=torch.long, device=dev))
    starts = torch.cumsum(widths, 1) - widths
    run = 1 + ((uniform(gen, n, u, device=dev) < 0.5) & (widths >= 3)).long()
    off = torch.floor(uniform(gen, n, u, device=dev) * (widths - run)).long()
    valid = pos < lengths[:, None]
    for k in range(2):
        idx = torch.where(valid & (run > k), starts + off + k, torch.full_like(starts, frames))
        path.scatter_(1, idx, torch.where(valid, words, torch.full_like(words, blank)))
    return path[:, :frames]


def _edit_paths(
    paths: torch.Tensor, n_ops: torch.Tensor, n_chars: int, gen: torch.Generator, blank: int = 0
) -> torch.Tensor:
    """Apply ``n_ops[i]`` random substitutions / deletions / insertions to the runs of path
    ``i``."""
    p = paths.clone()
    n, t = p.shape
    rows = torch.arange(n)
    for o in range(int(n_ops.max()) if n else 0):
        active = o < n_ops
        nonblank = p != blank
        op = torch.randint(3, (n,), generator=gen)
        op = torch.where(nonblank.any(1), op, torch.full_like(op, 2))
        # a random character frame (for substitution / deletion) and its whole run
        i = torch.where(nonblank, torch.rand(n, t, generator=gen), torch.full((n, t), -1.0)).argmax(
            1
        )
        run_id = torch.cumsum(
            torch.cat([torch.ones(n, 1, dtype=torch.long), (p[:, 1:] != p[:, :-1]).long()], 1), 1
        )
        in_run = run_id == run_id[rows, i][:, None]
        cur = p[rows, i]
        c = torch.randint(1, n_chars, (n,), generator=gen)
        new_label = c + (c >= cur).long()  # a character different from the current one
        sub = (active & (op == 0))[:, None] & in_run
        dele = (active & (op == 1))[:, None] & in_run
        p = torch.where(sub, new_label[:, None], p)
        p = torch.where(dele, torch.full_like(p, blank), p)
        # insertion on a random blank frame (any frame when there is no blank)
        blanks = p == blank
        score = torch.rand(n, t, generator=gen)
        j = torch.where(
            blanks.any(1)[:, None], torch.where(blanks, score, torch.full_like(score, -1.0)), score
        ).argmax(1)
        ins = active & (op == 2)
        p[rows[ins], j[ins]] = torch.randint(1, n_chars + 1, (n,), generator=gen)[ins]
    return p


class CTCEditPairGenerator:
    """The random generator R of LS-ED in the CTC frame space (Sec. 3.3.2), vectorised.

    For each pair a target distance ``d ~ U{0, ..., b}`` is drawn, a random word and a random
    CTC path of it are made (:func:`random_ctc_path`), and ``d`` random substitutions, deletions
    and insertions are applied to the path's frames; ``candidates`` such distortions are tried and
    the first whose true edit distance (computed exactly) equals ``d`` is kept (else the closest),
    which makes the distribution of the true distance close to uniform.

    Args:
        n_chars: alphabet size without the blank (classes ``1..n_chars``).
        frames: number of frames ``T`` of the recogniser.
        min_len: shortest ground-truth word.
        max_len: longest ground-truth word (``2 * max_len <= frames``).
        max_ed: ``b``, the largest edit distance drawn (default ``max_len``).
        soften: 0 gives one-hot predictions (the thesis); ``a > 0`` mixes each frame with a
            random distribution, weight ``U(0, a)`` (``a < 0.5`` keeps the argmax).
        candidates: distortions tried per pair to hit the drawn edit distance.
    """

    def __init__(
        self,
        n_chars: int,
        frames: int,
        min_len: int = 1,
        max_len: int = 8,
        max_ed: int | None = None,
        soften: float = 0.0,
        candidates: int = 8,
    ) -> None:
        self.n_chars = check_positive_int(n_chars, "n_chars")
        if self.n_chars < 2:
            raise ValueError("n_chars must be >= 2 (a substitution needs another character)")
        self.frames = check_positive_int(frames, "frames")
        min_len, max_len = (
            check_nonneg_int(min_len, "min_len"),
            check_positive_int(max_len, "max_len"),
        )
        if not min_len <= max_len or 2 * max_len > frames:
            raise ValueError(
                f"need min_len <= max_len and 2 * max_len <= frames, got {min_len}, {max_len}, "
                f"{frames}"
            )
        soften = check_float(soften, "soften", low=0, high=1, high_open=True)
        self.min_len, self.max_len = min_len, max_len
        self.max_ed = max_len if max_ed is None else check_nonneg_int(max_ed, "max_ed")
        self.soften = soften
        self.candidates = check_positive_int(candidates, "candidates")

    def sample_paths(
        self, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` pairs as frame paths: ``z (n, T)``, ``y (n, T)`` and true edit distances
        ``(n,)``."""
        n = check_positive_int(n, "n")
        k = self.candidates
        lengths = torch.randint(self.min_len, self.max_len + 1, (n,), generator=gen)
        words = torch.randint(1, self.n_chars + 1, (n, self.max_len), generator=gen)
        y = random_ctc_path(words, lengths, self.frames, gen)
        target = torch.randint(0, self.max_ed + 1, (n,), generator=gen)
        z = _edit_paths(y.repeat_interleave(k, 0), target.repeat_interleave(k), self.n_chars, gen)
        zc, zl = ctc_collapse(z)
        wk = torch.where(
            torch.arange(self.max_len)[None] < lengths[:, None], words, torch.full_like(words, -1)
        )
        ed = edit_distance(
            zc, wk.repeat_interleave(k, 0), zl, lengths.repeat_interleave(k)
        ).reshape(n, k)
        gap = (ed - target[:, None]).abs()
        pick = (gap * (k + 1) + torch.arange(k)[None]).argmin(1)  # exact hit first, else closest
        rows = torch.arange(n)
        return z.reshape(n, k, -1)[rows, pick], y, ed[rows, pick].float()

    def sample(
        self, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` pairs ``(z_r (n, T, C), y_r (n, T, C), e_r (n,))`` with ``C = n_chars + 1``."""
        zp, yp, e = self.sample_paths(n, gen)
        c = self.n_chars + 1
        z = F.one_hot(zp, c).float()
        y = F.one_hot(yp, c).float()
        if self.soften > 0:
            a = torch.rand(n, 1, 1, generator=gen) * self.soften
            noise = -torch.log(torch.rand(n, self.frames, c, generator=gen).clamp_min(1e-12))
            z = (1 - a) * z + a * noise / noise.sum(-1, keepdim=True)  # Dirichlet(1) mixing
        return z, y, e


class EditDistanceTask(SurrogateTask):
    """LS-ED / FEDS adapter of a CTC recogniser for
    :class:`~rank_lab.learned.surrogate_trainer.SurrogateTrainer`.

    Args:
        images: ``(N, 1, H, W)`` training images.
        words: their ``N`` transcriptions.
        alphabet: the recogniser's alphabet.
        batch_size: words per step (the thesis uses 192).
        generator: the random generator R (needed for the global / local-global sources).
        device: where batches are placed.

    Raises:
        ValueError, TypeError: ``images`` not a finite floating ``(N, C, H, W)`` batch with
            ``N = len(words)``, words outside the alphabet, a bad ``batch_size`` or ``generator``.
    """

    def __init__(
        self,
        images: torch.Tensor,
        words: Sequence[str],
        alphabet: Alphabet,
        batch_size: int = 64,
        generator: CTCEditPairGenerator | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(batch_size, device)
        images = check_images(images)
        words = check_words(words, images.shape[0])
        check_alphabet(alphabet)
        if generator is not None and not isinstance(generator, CTCEditPairGenerator):
            raise TypeError(
                f"generator must be a CTCEditPairGenerator or None, got {type(generator).__name__}"
            )
        self.images = images
        self.words = list(words)
        self.alphabet = alphabet
        self.targets, self.lengths = alphabet.encode(self.words)
        self.generator = generator

    def sample_batch(self, gen: torch.Generator) -> dict[str, Any]:
        """A random batch: images ``x``, padded ``targets`` and their ``lengths``."""
        idx = torch.randint(len(self.words), (self.batch_size,), generator=gen)
        return {
            "x": self.images[idx].to(self.device),
            "targets": self.targets[idx].to(self.device),
            "lengths": self.lengths[idx].to(self.device),
            "index": idx,
        }

    def predict(self, model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        """Frame posteriors ``softmax(f(x))`` of shape ``(B, T, C)``."""
        return model(batch["x"]).softmax(-1)

    def encode_target(self, z: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        """One-hot best CTC path of the ground truth under ``z`` (``(B, T, C)``)."""
        path = ctc_best_path(
            torch.log(z.detach().clamp_min(1e-12)), batch["targets"], batch["lengths"]
        )
        return F.one_hot(path, z.shape[-1]).to(z.dtype)

    def metric(self, z: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        """Edit distance between the greedy decoding of ``z`` and the ground truth, ``(B,)``."""
        codes, lens = ctc_collapse(z.detach().argmax(-1))
        return edit_distance(codes, batch["targets"], lens, batch["lengths"]).to(z.dtype)

    def sample_global(
        self, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` one-hot pairs from the generator R."""
        if self.generator is None:
            raise ValueError(
                "this EditDistanceTask has no generator: the global / local_global sources need one"
            )
        z, y, e = self.generator.sample(n, gen)
        return z.to(self.device), y.to(self.device), e.to(self.device)
