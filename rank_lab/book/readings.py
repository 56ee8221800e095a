"""Readings tied to the numbers: the "What this run shows" box of a chapter, worded from its CIs.

A chapter states what its experiment shows with sentences chosen *from the numbers*, so the text
cannot drift from the output. For an effect "A minus B over the same seeds"
(:func:`rank_lab.stats.paired_difference`) :func:`effect_sentence` picks one of three wordings
from the sign of the difference and whether its confidence interval excludes zero:

* A is better and the CI excludes zero: ``"SupAP beats Smooth-AP by 1.20 points in mAP@R (95 % CI
  of SupAP − Smooth-AP: [0.40, 2.00], 5 seeds): the CI excludes zero"`` (and, given the source's
  claim, that it agrees with it);
* the CI holds zero: ``"No difference between SupAP and Smooth-AP in mAP@R that we can resolve
  with 5 seeds: ..."``, followed by the source's claim and the likely reasons;
* B is better and the CI excludes zero: ``"Smooth-AP beats SupAP by ..., against the source's
  claim that ...; likely reasons: ..."``.

:func:`reading_markdown` wraps sentences in a MyST admonition, :func:`show_reading` displays it
(Markdown output, rendered by the book with ``nb_render_markdown_format: myst``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rank_lab._validation import check_float, check_nonneg_int
from rank_lab.stats import ci_sign

from .recorded import RecordedRun, record_header, show_markdown

__all__ = ["effect_sentence", "reading_markdown", "show_reading"]


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def _reasons(reasons: str | Sequence[str]) -> str:
    if isinstance(reasons, str):
        items = [reasons.strip()] if reasons.strip() else []
    elif isinstance(reasons, Sequence) and all(isinstance(r, str) for r in reasons):
        items = [r.strip() for r in reasons if r.strip()]
    else:
        raise TypeError(f"reasons must be a string or a list of strings, got {reasons!r}")
    if not items:
        raise ValueError("reasons must name at least one likely reason (regime, scale, toy backbone ...)")
    return "; ".join(items)


def effect_sentence(
    difference: Mapping[str, Any],
    *,
    a: str,
    b: str,
    metric: str,
    claim: str | None,
    reasons: str | Sequence[str],
    higher_is_better: bool = True,
    digits: int = 2,
    scale: float = 1.0,
    unit: str = "",
) -> str:
    """The sentence that reads one effect "A minus B" from its confidence interval.

    Args:
        difference: :func:`rank_lab.stats.paired_difference` of A and B (``mean``, ``lo``, ``hi``,
            ``n``): the effect the chapter expects to be in A's favour.
        a: the name of A (the method the source expects to win), e.g. ``"SupAP"``.
        b: the name of B, e.g. ``"Smooth-AP"``.
        metric: what was measured, e.g. ``"mAP@R"``.
        claim: the source's claim, quoted or paraphrased with its reference (e.g. ``"Sup-AP beats
            Smooth-AP on SOP and iNaturalist (SupRank Tab. II)"``), or ``None`` when the source
            makes none.
        reasons: the likely reasons why this run may not show the effect (regime, scale, toy
            backbone); used when the CI holds zero or the effect is reversed. At least one.
        higher_is_better: ``False`` for a metric such as FPR95 (then A wins when A - B < 0).
        digits: decimals shown.
        scale: factor applied to the numbers shown (``100`` for fractions shown as points).
        unit: appended to the effect size, e.g. ``" points"``.

    Returns:
        One sentence (Markdown), worded by the sign of the effect and whether its CI excludes zero.

    Raises:
        TypeError: a missing name, ``difference`` without ``mean``/``lo``/``hi``/``n``.
        ValueError: no reason given; ``digits`` negative.
    """
    a, b, metric = _text(a, "a"), _text(b, "b"), _text(metric, "metric")
    if claim is not None:
        claim = _text(claim, "claim").rstrip(".")
    why = _reasons(reasons)
    if not isinstance(difference, Mapping) or not {"mean", "lo", "hi", "n"} <= set(difference):
        raise TypeError(f"difference must be a paired_difference mapping (mean, lo, hi, n), got {difference!r}")
    digits = check_nonneg_int(digits, "digits")
    if not isinstance(higher_is_better, bool):
        raise TypeError(f"higher_is_better must be a bool, got {higher_is_better!r}")
    scale = check_float(scale, "scale")
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a string, got {unit!r}")
    sign = ci_sign(difference) * (1 if higher_is_better else -1)
    n = int(difference["n"])
    mean, lo, hi = (scale * float(difference[k]) for k in ("mean", "lo", "hi"))

    def f(v: float) -> str:
        return f"{v:.{digits}f}"

    seeds = f"{n} seed{'s' if n != 1 else ''}"
    if sign == 0:
        text = (f"No difference between {a} and {b} in {metric} that we can resolve with {seeds}: "
                f"{a} − {b} = {f(mean)}{unit} (95 % CI [{f(lo)}, {f(hi)}]), and the CI holds zero.")
        if claim is not None:
            text += f" The source claims that {claim}; likely reasons why this run cannot show it: {why}."
        else:
            text += f" Likely reasons: {why}."
        return text
    winner, loser = (a, b) if sign > 0 else (b, a)
    # the interval of winner - loser in the metric's own direction: A - B, or B - A = -(A - B)
    w_mean, w_lo, w_hi = (mean, lo, hi) if winner == a else (-mean, -hi, -lo)
    lower = "" if higher_is_better else ", lower is better"
    text = (f"{winner} beats {loser} by {f(abs(w_mean))}{unit} in {metric}{lower} "
            f"(95 % CI of {winner} − {loser}: [{f(w_lo)}, {f(w_hi)}], {seeds}): the CI excludes zero")
    if sign > 0:
        return text + (f", as the source claims: {claim}." if claim is not None else ".")
    if claim is not None:
        return text + f", against the source's claim that {claim}; likely reasons: {why}."
    return text + f", against the expectation that {a} beats {b}; likely reasons: {why}."


def reading_markdown(sentences: Sequence[str], run: RecordedRun | None = None,
                     title: str = "What this run shows") -> str:
    """The MyST admonition of a chapter's reading: one bullet per sentence, then the run it reads.

    Args:
        sentences: the reading, e.g. :func:`effect_sentence` outputs and plain statements.
        run: the recorded run the sentences were computed from (its header closes the box); ``None``
            when they read the live run.
        title: the admonition's title.

    Raises:
        TypeError: ``sentences`` not a non-empty list of strings; ``run`` not a RecordedRun.
    """
    if isinstance(sentences, str) or not isinstance(sentences, Sequence) or not sentences or not all(
            isinstance(s, str) and s.strip() for s in sentences):
        raise TypeError(f"sentences must be a non-empty list of strings, got {sentences!r}")
    title = _text(title, "title")
    if run is not None and not isinstance(run, RecordedRun):
        raise TypeError(f"run must be a RecordedRun or None, got {type(run).__name__}")
    lines = [f"````{{admonition}} {title}", ":class: tip", ""]
    lines += [f"- {s.strip()}" for s in sentences]
    source = record_header(run) if run is not None else "the live smoke run above"
    lines += ["", f"*Read from {source}.*" if run is None or run else f"*{source}*", "````"]
    return "\n".join(lines)


def show_reading(sentences: Sequence[str], run: RecordedRun | None = None,
                 title: str = "What this run shows") -> None:
    """Display :func:`reading_markdown` as Markdown output; returns ``None``.

    Raises:
        TypeError: see :func:`reading_markdown`.
    """
    show_markdown(reading_markdown(sentences, run, title))
