"""Readings tied to the numbers: the "What this run shows" box of a chapter, worded from its CIs.

A chapter states what its experiment shows with sentences chosen *from the numbers*, so the text
cannot drift from the output, and it weighs each comparison with a source by the run's power.

**Effects.** Every paired difference a run stores (:func:`rank_lab.stats.paired_difference`: a
mapping with ``mean``, ``lo``, ``hi``, ``n``, ``std``, ``mean_a``, ``mean_b``), wherever it sits in
the results, is an *effect*; its id is the path of keys to it joined by ``/``
(``"metric_agreement/supap_minus_suprk/mAP@R"``). :func:`effects` lists them; an effect is
*resolved* when its 95 % interval excludes zero.

**The box** (:class:`Reading`) reads the recorded run when there is one (else the live run) and
collects one sentence per effect it reads:

* :meth:`Reading.compare` weighs "A minus B" against a source's claim with one of four verdicts:
  **resolved (agrees)** (the interval excludes zero on the source's side and every arm is
  healthy); **cannot resolve** (the interval holds zero: "this run cannot resolve an effect of
  this size (MDE x)", the minimum detectable effect at 80 % power of
  :func:`rank_lab.stats.minimum_detectable_effect`, next to the source's effect
  size); **contradicted** (the interval excludes the source's sign and every arm is healthy),
  followed by why; **not comparable** (an arm is *collapsed*: not better than the declared trivial
  reference, e.g. plain cross-entropy, raw features, the untrained network, so the comparison never
  counts as agreeing or contradicting);
* :meth:`Reading.state` reads an effect without a source claim, from a template whose numbers
  and direction are filled in from the interval;
* :meth:`Reading.note` adds a plain sentence that reads no effect.

**Completeness.** The chapter's front matter declares which effects of its record the box reads
and which it leaves out, with a reason::

    rank_lab:
      reading:
        reads: [metric_agreement/supap_minus_suprk/*, metric_agreement/r1_minus_mapr_best]
        not_read:
          metric_agreement/other/*: "the same comparison on a metric no source reports"

(ids or ``fnmatch`` patterns). :func:`reading_problems` checks, from the record and the front
matter alone (no execution), that every resolved effect is declared read or not read and that no
pattern is stale; :meth:`Reading.show` checks, when the notebook runs, that the box wrote a
sentence for every declared effect and for no other. The older :func:`effect_sentence` /
:func:`show_reading` pair is kept for the chapters that have not moved to :class:`Reading` yet.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rank_lab._validation import check_float, check_nonneg_int
from rank_lab.stats import ci_sign, minimum_detectable_effect

from .notebooks import find_notebook, front_matter
from .recorded import RecordedRun, record_header, show_markdown

__all__ = [
    "EFFECT_KEYS",
    "ReadingError",
    "Claim",
    "Reference",
    "Reading",
    "ReadingSpec",
    "effects",
    "resolved_effects",
    "arm_status",
    "reading_spec",
    "reading_problems",
    "effect_sentence",
    "reading_markdown",
    "show_reading",
]

#: The keys that make a mapping of a run's results an effect (a paired difference).
EFFECT_KEYS = frozenset({"mean", "lo", "hi", "n", "std", "mean_a", "mean_b"})


class ReadingError(ValueError):
    """A reading that does not match its declaration, or a declaration that does not match the
    record."""


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
        raise ValueError(
            "reasons must name at least one likely reason (regime, scale, toy backbone ...)"
        )
    return "; ".join(items)


# ------------------------------------------------------------------------------- effects
def effects(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every paired difference inside ``results``, by id (the keys down to it joined by ``/``).

    A mapping holding all of :data:`EFFECT_KEYS` is an effect (its own contents are not searched
    further); list items are reached by their index (``"runs/0/gain"``).

    Args:
        results: a run's results (``rec.results`` of a record, or the live ``results``).

    Raises:
        TypeError: ``results`` is not a mapping.
        ReadingError: a key on the way to an effect holds ``/`` (the ids would be ambiguous).
    """
    if not isinstance(results, Mapping):
        raise TypeError(f"results must be a mapping, got {type(results).__name__}")
    out: dict[str, dict[str, Any]] = {}

    def walk(node: Any, path: list[str]) -> None:
        if isinstance(node, Mapping):
            if EFFECT_KEYS <= set(node):
                out["/".join(path)] = dict(node)
                return
            for k, v in node.items():
                if "/" in str(k):
                    raise ReadingError(
                        f"results key {k!r} at {'/'.join(path) or '(top)'} holds '/': "
                        "effect ids join keys with '/', rename the key"
                    )
                walk(v, [*path, str(k)])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*path, str(i)])

    walk(results, [])
    return out


def resolved_effects(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The effects of :func:`effects` whose interval excludes zero."""
    return {k: v for k, v in effects(results).items() if ci_sign(v) != 0}


@dataclass(frozen=True)
class ReadingSpec:
    """A chapter's ``rank_lab.reading`` declaration: the effect ids (or patterns) its box reads and
    those it leaves out, each with its reason."""

    reads: tuple[str, ...]
    not_read: dict[str, str]

    def expand(self, ids: Sequence[str]) -> tuple[set[str], set[str]]:
        """``(read, not_read)``: the ids of ``ids`` that the declaration's patterns match."""
        read = {i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in self.reads)}
        left = {i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in self.not_read)}
        return read, left


def reading_spec(name: Any) -> ReadingSpec | None:
    """The ``rank_lab.reading`` block of a notebook's front matter, or ``None`` when it has none.

    Raises:
        NotebookNotFoundError: no such notebook.
        ReadingError: a block that is not ``{reads: [ids], not_read: {id: reason}}``.
    """
    md = find_notebook(name)
    block = (front_matter(md).get("rank_lab") or {}).get("reading")
    if block is None:
        return None
    where = f"{md.name}: rank_lab.reading"
    if not isinstance(block, Mapping) or set(block) - {"reads", "not_read"}:
        raise ReadingError(
            f"{where} must be a mapping {{reads: [...], not_read: {{id: reason}}}}, got {block!r}"
        )
    reads = block.get("reads") or []
    if (
        isinstance(reads, str)
        or not isinstance(reads, list)
        or not all(isinstance(r, str) and r for r in reads)
    ):
        raise ReadingError(f"{where}.reads must be a list of effect ids or patterns, got {reads!r}")
    not_read = block.get("not_read") or {}
    if not isinstance(not_read, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in not_read.items()
    ):
        raise ReadingError(
            f"{where}.not_read must map effect ids or patterns to a reason (a sentence), "
            f"got {not_read!r}"
        )
    return ReadingSpec(tuple(reads), {k: v.strip() for k, v in not_read.items()})


def reading_problems(run: RecordedRun, spec: ReadingSpec | None = None) -> list[str]:
    """What keeps a chapter's declaration from covering its record (empty: complete); no execution.

    Every resolved effect of the record must be declared read or not read; an effect cannot be
    both; every pattern must match an effect of the record (no stale declaration).

    Args:
        run: the chapter's record (:func:`rank_lab.book.load_record`); a missing record has no
            problem.
        spec: the declaration (default: :func:`reading_spec` of the record's notebook).

    Raises:
        TypeError: ``run`` not a RecordedRun.
    """
    if not isinstance(run, RecordedRun):
        raise TypeError(f"run must be a RecordedRun, got {type(run).__name__}")
    if spec is not None and not isinstance(spec, ReadingSpec):
        raise TypeError(
            f"spec must be a ReadingSpec (reading_spec) or None, got {type(spec).__name__}"
        )
    if not run:
        return []
    spec = spec if spec is not None else reading_spec(run.notebook)
    found = effects(run.results)
    resolved = sorted(k for k, v in found.items() if ci_sign(v) != 0)
    if spec is None:
        return [
            f"{run.notebook}: no rank_lab.reading declaration, and the record has {len(resolved)} "
            f"resolved effects: {resolved}"
        ]
    read, left = spec.expand(sorted(found))
    problems = [
        f"{run.notebook}: resolved effect {k!r} is neither read by the box nor listed in not_read"
        for k in resolved
        if k not in read | left
    ]
    problems += [
        f"{run.notebook}: effect {k!r} is declared both read and not read"
        for k in sorted(read & left)
    ]
    for pattern in [*spec.reads, *spec.not_read]:
        if not any(fnmatch.fnmatchcase(k, pattern) for k in found):
            problems.append(
                f"{run.notebook}: {pattern!r} matches no effect of the record (stale declaration)"
            )
    return problems


# ------------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class Claim:
    """A source's claim about "A minus B".

    Attributes:
        text: the claim in words, e.g.
            ``"Sup-AP is above Sup-R@k in mAP@R on SOP and iNaturalist"``.
        where: the source's place, e.g. ``"Ramzi thesis, Tab. 3.3"``.
        effect: the source's effect size, A minus B in the units the box shows (e.g. ``0.6`` points;
            its sign is the direction claimed; positive means A better when higher is better), or
            ``None`` when the source states only a direction (the sign is then taken as A better).
    """

    text: str
    where: str
    effect: float | None = None

    def __post_init__(self) -> None:
        _text(self.text, "Claim.text")
        _text(self.where, "Claim.where")
        if self.effect is not None:
            check_float(self.effect, "Claim.effect")


@dataclass(frozen=True)
class Reference:
    """The trivial reference arms are held against (plain cross-entropy, raw features, the untrained
    network, random init): its name and its value in the units of the compared arms."""

    name: str
    value: float

    def __post_init__(self) -> None:
        _text(self.name, "Reference.name")
        check_float(self.value, "Reference.value")


def arm_status(value: float, reference: Reference, higher_is_better: bool = True) -> str:
    """``"healthy"`` when an arm is better than the trivial reference, else ``"collapsed"``.

    An arm that is no better than plain cross-entropy, raw features or an untrained network has
    not learned what the comparison is about: no comparison against it counts for or against a
    source.

    Raises:
        TypeError: ``reference`` not a :class:`Reference`; ``value`` not a number.
    """
    if not isinstance(reference, Reference):
        raise TypeError(f"reference must be a Reference, got {type(reference).__name__}")
    v = check_float(value, "value")
    if not isinstance(higher_is_better, bool):
        raise TypeError(f"higher_is_better must be a bool, got {higher_is_better!r}")
    better = v > reference.value if higher_is_better else v < reference.value
    return "healthy" if better else "collapsed"


def _fmt(v: float, digits: int) -> str:
    return f"{v:.{digits}f}"


class Reading:
    """The "What this run shows" box: sentences read from a recorded run (else the live run).

    Args:
        run: the chapter's record (:func:`rank_lab.book.load_record`); when it is missing the box
            reads ``live``.
        live: the live run's results (the ``results`` dict of the notebook).
        title: the admonition's title.

    Raises:
        TypeError: ``run`` not a RecordedRun; ``live`` not a mapping.
    """

    def __init__(
        self,
        run: RecordedRun,
        live: Mapping[str, Any] | None = None,
        title: str = "What this run shows",
    ) -> None:
        if not isinstance(run, RecordedRun):
            raise TypeError(f"run must be a RecordedRun (load_record), got {type(run).__name__}")
        if live is not None and not isinstance(live, Mapping):
            raise TypeError(f"live must be the live results (a mapping), got {type(live).__name__}")
        self.run = run
        self.results: Mapping[str, Any] = run.results if run else (live or {})
        self.title = _text(title, "title")
        self.sentences: list[str] = []
        self.read: list[str] = []

    def effect(self, effect_id: str) -> dict[str, Any]:
        """The effect ``effect_id`` of the run the box reads.

        Raises:
            ReadingError: no such effect (the message lists the run's effects).
        """
        found = effects(self.results)
        if effect_id not in found:
            raise ReadingError(
                f"no effect {effect_id!r} in the run read; its effects: {sorted(found)}"
            )
        return found[effect_id]

    def _mark(self, effect_id: str) -> dict[str, Any]:
        d = self.effect(effect_id)
        if effect_id in self.read:
            raise ReadingError(f"effect {effect_id!r} is read twice by the box")
        self.read.append(effect_id)
        return d

    def compare(
        self,
        effect_id: str,
        *,
        a: str,
        b: str,
        metric: str,
        claim: Claim,
        reference: Reference,
        reasons: str | Sequence[str],
        higher_is_better: bool = True,
        digits: int = 2,
        scale: float = 1.0,
        unit: str = "",
    ) -> str:
        """Weigh the effect "A minus B" against a source's claim; add the sentence and return it.

        Args:
            effect_id: the id of the paired difference A minus B (:func:`effects`).
            a: the arm the source expects to win (A), e.g. ``"SupAP"``.
            b: the other arm (B).
            metric: what was measured, e.g. ``"unseen-class mAP@R"``.
            claim: the source's claim (:class:`Claim`).
            reference: the trivial reference both arms must beat (:class:`Reference`), in the
                units of ``mean_a`` / ``mean_b`` of the effect.
            reasons: why this run may not show the source's effect (regime, scale, toy backbone):
                said after "cannot resolve" and after "contradicted" (the "why"). At least one.
            higher_is_better: ``False`` for a metric such as FPR95.
            digits: decimals shown.
            scale: factor applied to the effect and the arms (``100`` for fractions in points);
                ``claim.effect`` and ``reference.value`` are given in the scaled units.
            unit: appended to effect sizes, e.g. ``" points"``.

        Returns:
            The sentence (Markdown), starting with the verdict in bold.

        Raises:
            ReadingError: unknown effect, or an effect read twice.
            TypeError, ValueError: a missing name, claim or reference; no reason.
        """
        d = self._mark(effect_id)
        a, b, metric = _text(a, "a"), _text(b, "b"), _text(metric, "metric")
        if not isinstance(claim, Claim):
            raise TypeError(
                f"claim must be a Claim (text, where, effect), got {type(claim).__name__}"
            )
        if not isinstance(reference, Reference):
            raise TypeError(
                f"reference must be a Reference (name, value), got {type(reference).__name__}"
            )
        why = _reasons(reasons)
        digits = check_nonneg_int(digits, "digits")
        scale = check_float(scale, "scale")
        if not isinstance(higher_is_better, bool):
            raise TypeError(f"higher_is_better must be a bool, got {higher_is_better!r}")
        if not isinstance(unit, str):
            raise TypeError(f"unit must be a string, got {unit!r}")
        mean, lo, hi = (scale * float(d[k]) for k in ("mean", "lo", "hi"))
        mde = scale * minimum_detectable_effect(float(d["std"]), int(d["n"]))
        arms = {a: scale * float(d["mean_a"]), b: scale * float(d["mean_b"])}
        status = {name: arm_status(v, reference, higher_is_better) for name, v in arms.items()}
        collapsed = [name for name, st in status.items() if st == "collapsed"]
        # the sign of A - B the source claims: its effect's sign, else "A better" (A - B < 0 when
        # lower is better)
        if claim.effect is None:
            claimed = 1 if higher_is_better else -1
        else:
            claimed = 1 if claim.effect >= 0 else -1
        side = ci_sign(d)  # the sign of A - B the interval resolves (0: holds zero)
        n = int(d["n"])
        f = lambda v: _fmt(v, digits)  # noqa: E731 - a local formatter
        effect = (
            f"{a} − {b} in {metric}: {'+' if mean >= 0 else ''}{f(mean)}{unit} "
            f"(95 % CI [{f(lo)}, {f(hi)}], {n} seeds; MDE {f(mde)}{unit} at 80 % power)"
        )
        source = f"the source: {claim.text.rstrip('.')}" + (
            f" ({'+' if claim.effect >= 0 else ''}{f(claim.effect)}{unit}; {claim.where})"
            if claim.effect is not None
            else f" ({claim.where})"
        )
        lower = "" if higher_is_better else ", lower is better"
        arms_text = (
            f"Arms: {a} {f(arms[a])}, {b} {f(arms[b])}{lower}; trivial reference "
            f"({reference.name}) {f(reference.value)}"
        )
        if collapsed:
            verdict = "Not comparable (collapsed arm)"
            tail = (
                f"{' and '.join(collapsed)} {'is' if len(collapsed) == 1 else 'are'} not better "
                f"than {reference.name}, so this comparison counts neither for nor against "
                f"{source}."
            )
        elif side == 0:
            size = abs(claim.effect) if claim.effect is not None else None
            if size is None or size < mde:
                verdict = f"Cannot resolve (MDE {f(mde)}{unit})"
                tail = (
                    f"the interval holds zero, and this run cannot resolve an effect of this size "
                    f"(MDE {f(mde)}{unit}); {source}. Why this run cannot show it: {why}."
                )
            else:
                verdict = "Not resolved"
                tail = (
                    f"the interval holds zero although the source's effect ({f(size)}{unit}) is "
                    f"above this run's MDE ({f(mde)}{unit}); {source}. Likely reasons: {why}."
                )
        elif side == claimed:
            verdict = "Resolved (agrees)"
            tail = f"the interval excludes zero on the side of {source}."
        else:
            verdict = "Contradicted"
            tail = (
                f"the interval excludes the sign of {source}, and both arms are healthy. Why: "
                f"{why}."
            )
        sentence = f"**{verdict}.** {effect}: {tail} {arms_text}."
        self.sentences.append(sentence)
        return sentence

    def state(
        self, effect_id: str, template: str, *, digits: int = 2, scale: float = 1.0, unit: str = ""
    ) -> str:
        """Read an effect that bears on no source claim, from a template; add the sentence, return
        it.

        The template's fields are filled from the effect: ``{ci}`` (``"+25.39 [23.95, 26.84]"``
        with ``unit``), ``{mean}``, ``{lo}``, ``{hi}``, ``{n}`` (seeds), ``{direction}``
        (``"above"``, ``"below"`` or ``"not resolved from"``: the sign of A minus B as the interval
        resolves it), ``{mde}``. Write no direction or number by hand.

        Raises:
            ReadingError: unknown effect, an effect read twice, or a template that names a field
                other than those.
        """
        d = self._mark(effect_id)
        template = _text(template, "template")
        digits = check_nonneg_int(digits, "digits")
        scale = check_float(scale, "scale")
        mean, lo, hi = (scale * float(d[k]) for k in ("mean", "lo", "hi"))
        mde = scale * minimum_detectable_effect(float(d["std"]), int(d["n"]))
        fields = {
            "mean": _fmt(mean, digits),
            "lo": _fmt(lo, digits),
            "hi": _fmt(hi, digits),
            "n": int(d["n"]),
            "ci": f"{'+' if mean >= 0 else ''}{_fmt(mean, digits)}{unit} [{_fmt(lo, digits)}, "
            f"{_fmt(hi, digits)}]",
            "direction": {1: "above", 0: "not resolved from", -1: "below"}[ci_sign(d)],
            "mde": f"{_fmt(mde, digits)}{unit}",
        }
        try:
            sentence = template.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise ReadingError(
                f"template {template!r} names a field other than {sorted(fields)} "
                f"or is malformed: {exc!r}"
            ) from exc
        self.sentences.append(sentence)
        return sentence

    def note(self, sentence: str) -> str:
        """Add a plain sentence that reads no effect (a count, a number with its context); return
        it."""
        sentence = _text(sentence, "sentence")
        self.sentences.append(sentence)
        return sentence

    def markdown(self) -> str:
        """The box as a MyST admonition, closed by the header of the run it reads."""
        if not self.sentences:
            raise ReadingError("the box has no sentence")
        lines = [f"````{{admonition}} {self.title}", ":class: tip", ""]
        lines += [f"- {s}" for s in self.sentences]
        source = record_header(self.run) if self.run else "Read from the live smoke run above."
        lines += ["", f"*{source}*", "````"]
        return "\n".join(lines)

    def check(self) -> None:
        """Raise when the box does not read exactly the effects the front matter declares read.

        Only a recorded run is checked (the live smoke run has other seeds and fewer resolved
        effects); a notebook without the book's folder (a Colab twin) has no record to check.

        Raises:
            ReadingError: a declared effect without a sentence, an effect read but not declared, or
                a record whose resolved effects the declaration does not cover.
        """
        if not self.run:
            return
        spec = reading_spec(self.run.notebook)
        problems = reading_problems(self.run, spec)
        if spec is not None:
            declared, _ = spec.expand(sorted(effects(self.run.results)))
            problems += [
                f"{self.run.notebook}: declared effect {k!r} has no sentence in the box"
                for k in sorted(declared - set(self.read))
            ]
            problems += [
                f"{self.run.notebook}: the box reads {k!r}, which rank_lab.reading.reads does not "
                "declare"
                for k in self.read
                if k not in declared
            ]
        if problems:
            raise ReadingError(
                "the reading does not match its declaration:\n  " + "\n  ".join(problems)
            )

    def show(self) -> None:
        """Check the box (:meth:`check`) and display it as Markdown; returns ``None``."""
        self.check()
        show_markdown(self.markdown())


# ------------------------------------------------------------------------------- first-generation
# wording
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
    """The sentence that reads one effect "A minus B" from its confidence interval (before
    :class:`Reading`).

    Superseded by :meth:`Reading.compare` (MDE, arm health, completeness); chapters not yet
    converted still call it.

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
        raise TypeError(
            f"difference must be a paired_difference mapping (mean, lo, hi, n), got {difference!r}"
        )
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
        text = (
            f"No difference between {a} and {b} in {metric} that we can resolve with {seeds}: "
            f"{a} − {b} = {f(mean)}{unit} (95 % CI [{f(lo)}, {f(hi)}]), and the CI holds zero."
        )
        if claim is not None:
            text += (
                f" The source claims that {claim}; likely reasons why this run cannot show it: "
                f"{why}."
            )
        else:
            text += f" Likely reasons: {why}."
        return text
    winner, loser = (a, b) if sign > 0 else (b, a)
    # the interval of winner - loser in the metric's own direction: A - B, or B - A = -(A - B)
    w_mean, w_lo, w_hi = (mean, lo, hi) if winner == a else (-mean, -hi, -lo)
    lower = "" if higher_is_better else ", lower is better"
    text = (
        f"{winner} beats {loser} by {f(abs(w_mean))}{unit} in {metric}{lower} "
        f"(95 % CI of {winner} − {loser}: [{f(w_lo)}, {f(w_hi)}], {seeds}): the CI excludes zero"
    )
    if sign > 0:
        return text + (f", as the source claims: {claim}." if claim is not None else ".")
    if claim is not None:
        return text + f", against the source's claim that {claim}; likely reasons: {why}."
    return text + f", against the expectation that {a} beats {b}; likely reasons: {why}."


def reading_markdown(
    sentences: Sequence[str], run: RecordedRun | None = None, title: str = "What this run shows"
) -> str:
    """The MyST admonition of a chapter's reading: one bullet per sentence, then the run it reads.

    Args:
        sentences: the reading, e.g. :func:`effect_sentence` outputs and plain statements.
        run: the recorded run the sentences were computed from (its header closes the box); ``None``
            when they read the live run.
        title: the admonition's title.

    Raises:
        TypeError: ``sentences`` not a non-empty list of strings; ``run`` not a RecordedRun.
    """
    if (
        isinstance(sentences, str)
        or not isinstance(sentences, Sequence)
        or not sentences
        or not all(isinstance(s, str) and s.strip() for s in sentences)
    ):
        raise TypeError(f"sentences must be a non-empty list of strings, got {sentences!r}")
    title = _text(title, "title")
    if run is not None and not isinstance(run, RecordedRun):
        raise TypeError(f"run must be a RecordedRun or None, got {type(run).__name__}")
    lines = [f"````{{admonition}} {title}", ":class: tip", ""]
    lines += [f"- {s.strip()}" for s in sentences]
    footer = record_header(run) if run is not None else "Read from the live smoke run above."
    lines += ["", f"*{footer}*", "````"]
    return "\n".join(lines)


def show_reading(
    sentences: Sequence[str], run: RecordedRun | None = None, title: str = "What this run shows"
) -> None:
    """Display :func:`reading_markdown` as Markdown output; returns ``None``.

    Raises:
        TypeError: see :func:`reading_markdown`.
    """
    show_markdown(reading_markdown(sentences, run, title))
