"""Text-recognition metrics: Levenshtein edit distance batched on tensors, NED, TED, word accuracy.

The scene-text chapters of the Patel thesis (Ch. 3 and 4, seed 003) evaluate a recogniser with

* the **edit distance** ED (Levenshtein): the least number of unit insertions, deletions and
  substitutions turning one string into the other (Sec. 3.3 / Fig. 4.1 of the thesis);
* the **total edit distance** TED = sum_i ED(pred_i, gt_i) over a test set (lower is better);
* the **normalised edit distance** NED, reported "higher is better" in Tables 3.1-4.2, i.e. the
  ICDAR-2019 / COCO-Text score ``1 - ED / max(|pred|, |gt|)`` averaged over the words;
* the **word accuracy**: the fraction of words predicted exactly.

:func:`edit_distance` computes a whole batch at once on any device. Strings are encoded as
Unicode code points (:func:`encode_strings`), so any alphabet works without a vocabulary. The
dynamic programme runs row by row; inside a row the left-to-right dependency
``D[i, j] = min(D[i, j-1] + 1, t[j])`` is resolved in one vectorised step with a running minimum,
``D[i, j] = j + cummin_k<=j (t[k] - k)``, so a batch of B pairs of lengths (La, Lb) costs
``min(La, Lb)`` tensor operations of size ``B x (max(La, Lb) + 1)``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import torch

from rank_lab._validation import as_tensor, check_choice

__all__ = [
    "encode_strings",
    "normalize_text",
    "edit_distance",
    "levenshtein_reference",
    "normalized_edit_distance",
    "ned_score",
    "total_edit_distance",
    "word_accuracy",
    "text_recognition_metrics",
]

PAD = -1
_CPU_CHUNK = 1024


def encode_strings(
    strings: Sequence[str], *, device: torch.device | str | None = None, pad: int = PAD
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode strings as padded Unicode code points.

    Args:
        strings: ``B`` Python strings (empty strings allowed).
        device: device of the returned tensors.
        pad: value written after the end of each string (must be negative).

    Returns:
        ``codes`` of shape ``(B, L)`` (``L`` = longest string, possibly 0) holding ``ord(c)``
        and ``pad`` beyond each string, and ``lengths`` of shape ``(B,)``.
    """
    if isinstance(strings, str):
        raise TypeError("strings must be a sequence of str, not a single str")
    strings = list(strings)
    for i, s in enumerate(strings):
        if not isinstance(s, str):
            raise TypeError(f"strings[{i}] must be a str, got {type(s).__name__}")
    if pad >= 0:
        raise ValueError(f"pad must be negative (code points are >= 0), got {pad}")
    lengths = torch.tensor([len(s) for s in strings], dtype=torch.long)
    width = int(lengths.max()) if len(strings) else 0
    codes = torch.full((len(strings), width), pad, dtype=torch.long)
    for i, s in enumerate(strings):
        if s:
            codes[i, : len(s)] = torch.tensor([ord(c) for c in s], dtype=torch.long)
    return codes.to(device), lengths.to(device)


def normalize_text(text: str, mode: str = "none") -> str:
    """Normalise a transcription before scoring.

    Args:
        text: the string.
        mode: ``"none"`` (unchanged), ``"lower"`` (case-insensitive), or ``"alnum_lower"``: lower
            case and keep only letters and digits, the case-insensitive alphanumeric protocol of
            Baek et al. that the thesis' STR tables follow (Sec. 3.3.2, 4.3).

    Returns:
        The normalised string (Unicode NFC).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text)
    if mode == "none":
        return text
    if mode == "lower":
        return text.lower()
    if mode == "alnum_lower":
        return "".join(c for c in text.lower() if c.isalnum())
    raise ValueError(f"mode must be 'none', 'lower' or 'alnum_lower', got {mode!r}")


def _as_codes(
    x: Sequence[str] | torch.Tensor,
    lengths: torch.Tensor | Sequence[int] | None,
    name: str,
    pad: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(x, torch.Tensor):
        codes = x
        if codes.ndim != 2:
            raise ValueError(f"{name} must have shape (B, L), got {tuple(codes.shape)}")
        if codes.is_floating_point() or codes.dtype == torch.bool or codes.is_complex():
            raise TypeError(f"{name} must hold integer codes, got dtype {codes.dtype}")
        codes = codes.long()
        if lengths is None:
            valid = codes != pad
            lengths = valid.sum(1)
            ar = torch.arange(codes.shape[1], device=codes.device)
            if bool((valid != (ar[None] < lengths[:, None])).any()):
                raise ValueError(f"{name}: padding ({pad}) must only appear at the end of a row")
        else:
            lengths = as_tensor(lengths, f"{name}_lengths").to(codes.device).long()
            if lengths.shape != (codes.shape[0],):
                raise ValueError(
                    f"{name}_lengths must have shape ({codes.shape[0]},), got "
                    f"{tuple(lengths.shape)}"
                )
            if bool((lengths < 0).any()) or bool((lengths > codes.shape[1]).any()):
                raise ValueError(f"{name}_lengths must lie in [0, {codes.shape[1]}]")
        return codes, lengths
    if lengths is not None:
        raise ValueError(f"{name}_lengths is only used with a code tensor, not with strings")
    return encode_strings(_str_list(x, name), pad=pad)


def _str_list(x: object, name: str) -> list[str]:
    """``x`` as a list of str, or raise a ``TypeError`` naming ``name`` (and the bad index)."""
    if isinstance(x, str) or not isinstance(x, Sequence):
        raise TypeError(
            f"{name} must be a sequence of str (or a code tensor), got {type(x).__name__}"
        )
    out = list(x)
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(v).__name__}")
    return out


@torch.no_grad()
def edit_distance(
    a: Sequence[str] | torch.Tensor,
    b: Sequence[str] | torch.Tensor,
    a_lengths: torch.Tensor | Sequence[int] | None = None,
    b_lengths: torch.Tensor | Sequence[int] | None = None,
    *,
    device: torch.device | str | None = None,
    pad: int = PAD,
) -> torch.Tensor:
    """Levenshtein edit distance of ``B`` pairs, batched and vectorised (CPU or GPU).

    The distance counts unit insertions, deletions and substitutions (the ED of Sec. 3.3 and
    Fig. 4.1 of the Patel thesis); it is symmetric and 0 only for equal strings.

    Args:
        a: ``B`` strings, or integer codes ``(B, La)`` (e.g. from :func:`encode_strings`, or
            class indices of a recogniser's alphabet).
        b: ``B`` strings or codes ``(B, Lb)``, paired with ``a`` row by row.
        a_lengths: ``(B,)`` lengths of the rows of a code tensor ``a``; default: the number of
            entries different from ``pad`` (padding must be trailing).
        b_lengths: same for ``b``.
        device: where to compute (default: the device of the code tensors, else CPU).
        pad: padding value of code tensors.

    Returns:
        ``(B,)`` long tensor of edit distances.
    """
    ca, la = _as_codes(a, a_lengths, "a", pad)
    cb, lb = _as_codes(b, b_lengths, "b", pad)
    if ca.shape[0] != cb.shape[0]:
        raise ValueError(f"a has {ca.shape[0]} rows but b has {cb.shape[0]}")
    dev = torch.device(device) if device is not None else ca.device
    ca, la, cb, lb = ca.to(dev), la.to(dev), cb.to(dev), lb.to(dev)
    n = ca.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=dev)
    # chunks keep the working set in cache (several x faster)
    if dev.type == "cpu" and n > _CPU_CHUNK:
        return torch.cat(
            [
                _levenshtein(
                    ca[i : i + _CPU_CHUNK],
                    la[i : i + _CPU_CHUNK],
                    cb[i : i + _CPU_CHUNK],
                    lb[i : i + _CPU_CHUNK],
                )
                for i in range(0, n, _CPU_CHUNK)
            ]
        )
    return _levenshtein(ca, la, cb, lb)


def _levenshtein(
    ca: torch.Tensor, la: torch.Tensor, cb: torch.Tensor, lb: torch.Tensor
) -> torch.Tensor:
    """Row-by-row Levenshtein DP of a batch of padded code rows (see :func:`edit_distance`)."""
    n, dev = ca.shape[0], ca.device
    # Loop over the shorter side (ED is symmetric); trim both to their longest real string.
    if int(la.max()) > int(lb.max()):
        ca, la, cb, lb = cb, lb, ca, la
    ma, mb = int(la.max()), int(lb.max())
    ca, cb = ca[:, :ma], cb[:, :mb]
    j = torch.arange(mb + 1, device=dev)
    prev = j.expand(n, mb + 1)  # D[0, j] = j
    out = torch.where(la == 0, lb, torch.zeros_like(lb))
    for i in range(1, ma + 1):
        cost = (ca[:, i - 1 : i] != cb).long()  # (n, mb) substitution cost
        t = torch.empty(n, mb + 1, dtype=torch.long, device=dev)
        t[:, 0] = i  # D[i, 0] = i
        t[:, 1:] = torch.minimum(prev[:, 1:] + 1, prev[:, :-1] + cost)
        cur = torch.cummin(t - j, dim=1).values + j  # insertions resolved by a running minimum
        done = la == i
        if bool(done.any()):
            out = torch.where(done, cur.gather(1, lb[:, None]).squeeze(1), out)
        prev = cur
    return out


def levenshtein_reference(a: str, b: str) -> int:
    """Plain-Python two-row dynamic programme (the reference of the benchmark): ``ED(a, b)``."""
    for v, name in ((a, "a"), (b, "b")):
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a str, got {type(v).__name__}")
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for k, cb in enumerate(b, 1):
            cur[k] = min(prev[k] + 1, cur[k - 1] + 1, prev[k - 1] + (ca != cb))
        prev = cur
    return prev[-1]


_MODES = ("none", "lower", "alnum_lower")


def _check_pairs(
    preds: Sequence[str], targets: Sequence[str], normalize: str = "none"
) -> tuple[list[str], list[str]]:
    check_choice(normalize, "normalize", _MODES)
    preds, targets = _str_list(preds, "preds"), _str_list(targets, "targets")
    if len(preds) != len(targets):
        raise ValueError(f"preds has {len(preds)} strings but targets has {len(targets)}")
    if not preds:
        raise ValueError("preds is empty (no words to score)")
    return preds, targets


def normalized_edit_distance(
    preds: Sequence[str], targets: Sequence[str], *, normalize: str = "none"
) -> torch.Tensor:
    """Per-word normalised edit distance ``ED / max(|pred|, |gt|)`` in ``[0, 1]`` (0 if both empty).

    Args:
        preds: predicted strings.
        targets: ground-truth strings.
        normalize: text normalisation mode of :func:`normalize_text`.

    Returns:
        ``(B,)`` float tensor, lower is better. The thesis' "NED, higher is better" column is
        ``1 - mean`` of this (see :func:`ned_score`).
    """
    preds, targets = _check_pairs(preds, targets, normalize)
    preds = [normalize_text(s, normalize) for s in preds]
    targets = [normalize_text(s, normalize) for s in targets]
    ed = edit_distance(preds, targets).double()
    denom = torch.tensor(
        [max(len(p), len(t)) for p, t in zip(preds, targets, strict=True)], dtype=torch.float64
    )
    return torch.where(denom > 0, ed / denom.clamp_min(1), torch.zeros_like(ed))


def ned_score(preds: Sequence[str], targets: Sequence[str], *, normalize: str = "none") -> float:
    """Mean of ``1 - ED / max(|pred|, |gt|)``: the NED column (higher is better) of Tables
    3.1-4.2."""
    return float(1.0 - normalized_edit_distance(preds, targets, normalize=normalize).mean())


def total_edit_distance(
    preds: Sequence[str], targets: Sequence[str], *, normalize: str = "none"
) -> int:
    """TED = sum of the edit distances over the set (lower is better; Tables 3.1-4.2)."""
    preds, targets = _check_pairs(preds, targets, normalize)
    preds = [normalize_text(s, normalize) for s in preds]
    targets = [normalize_text(s, normalize) for s in targets]
    return int(edit_distance(preds, targets).sum())


def word_accuracy(
    preds: Sequence[str], targets: Sequence[str], *, normalize: str = "none"
) -> float:
    """Fraction (in ``[0, 1]``) of words predicted exactly, after ``normalize``."""
    preds, targets = _check_pairs(preds, targets, normalize)
    hits = sum(
        normalize_text(p, normalize) == normalize_text(t, normalize)
        for p, t in zip(preds, targets, strict=True)
    )
    return hits / len(preds)


def text_recognition_metrics(
    preds: Sequence[str], targets: Sequence[str], *, normalize: str = "none"
) -> dict[str, float]:
    """The three columns of the thesis' STR tables in one call.

    Args:
        preds: predicted strings.
        targets: ground-truth strings.
        normalize: ``"none"``, ``"lower"`` or ``"alnum_lower"`` (the benchmark protocol).

    Returns:
        A dict with ``"accuracy"`` (fraction exact), ``"ned"`` (mean of ``1 - ED / max len``),
        ``"ted"`` (total ED), ``"mean_ed"`` (``TED / n``) and ``"n"`` (number of words).
    """
    preds, targets = _check_pairs(preds, targets, normalize)
    p = [normalize_text(s, normalize) for s in preds]
    t = [normalize_text(s, normalize) for s in targets]
    ed = edit_distance(p, t).double()
    denom = torch.tensor(
        [max(len(x), len(y)) for x, y in zip(p, t, strict=True)], dtype=torch.float64
    )
    ned = torch.where(denom > 0, ed / denom.clamp_min(1), torch.zeros_like(ed))
    return {
        "accuracy": float((ed == 0).double().mean()),
        "ned": float(1.0 - ned.mean()),
        "ted": int(ed.sum()),
        "mean_ed": float(ed.mean()),
        "n": len(p),
    }
