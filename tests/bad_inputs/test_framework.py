"""The verdicts of the bad-input framework on toy callables: the numerical kinds (overflow,
requires-grad, meta, complex, subnormal) and the time limit that turns a hang into a defect."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from rank_lab._validation import check_embeddings, check_real

from .framework import (
    NUMERICAL_KINDS,
    UNSTABLE,
    Hang,
    call_with_time_limit,
    fn,
    run,
    snapshot,
    stable_snapshot,
    variants,
    verdict,
)


def _verdicts(target, **kw) -> dict[str, str | None]:
    entry = fn(
        target,
        lambda: {"x": torch.randn(4, 3, generator=torch.Generator().manual_seed(0))},
        {"x": "x"},
        **kw,
    )
    ref = stable_snapshot(snapshot(run(entry)), snapshot(run(entry)))
    return {
        v.id: verdict(entry, v, ref, time_limit=30.0)
        for v in variants(entry)
        if v.id.split(":")[1] in NUMERICAL_KINDS
    }


def checked_norms(x):
    """A careful evaluation: checked input, detached, norms at any scale."""
    x = check_embeddings(x, "x").detach()
    m = x.abs().amax(1, keepdim=True)
    return (x / m).norm(dim=1) * m[:, 0]


def careless_norms(x):
    """Accepts anything: the imaginary part is dropped, meta passes, the norm overflows."""
    return x.real.norm(dim=1) if x.is_complex() else x.norm(dim=1)


def test_every_x_argument_gets_the_numerical_kinds():
    ids = {v.id for v in variants(fn(checked_norms, {"x": torch.ones(2, 2)}, {"x": "x"}))}
    assert {f"x:{k}" for k in NUMERICAL_KINDS} <= ids


def test_a_careful_evaluation_passes_every_numerical_kind():
    assert _verdicts(checked_norms) == dict.fromkeys([f"x:{k}" for k in NUMERICAL_KINDS])


def test_a_careless_one_fails_each_kind_for_its_own_reason():
    v = _verdicts(careless_norms)
    assert v["x:overflow"].startswith("silent inf")
    assert v["x:meta"].startswith("accepted silently") and v["x:complex"].startswith(
        "accepted silently"
    )
    assert v["x:subnormal"] is None  # subnormal norms are tiny, not wrong: legal
    assert v["x:grad"] is None  # the same values, and differentiable


def test_requires_grad_must_give_the_detached_result_and_differentiate():
    def refuses(x):
        if x.requires_grad:
            raise ValueError("x must not require grad")
        return x.sum(1)

    def shifts(x):
        return x.sum(1) + float(x.requires_grad)

    def nan_gradient(x):
        return torch.sqrt(x.abs() * 0.0).sum(1) + x.detach().sum(1)

    assert _verdicts(refuses)["x:grad"].startswith("requires-grad input refused")
    assert _verdicts(shifts)["x:grad"].startswith("requires-grad input changes the result")
    assert _verdicts(nan_gradient)["x:grad"] == "the gradient on the input holds NaN or inf"


def test_meta_and_complex_refused_with_the_argument_named_pass():
    def strict(x):
        return check_real(x, "x").sum()

    v = _verdicts(strict)
    assert v["x:meta"] is None and v["x:complex"] is None
    assert _verdicts(lambda x: check_real(x, "other").sum())["x:meta"].startswith(
        "ValueError that does not name 'x'"
    )


def test_unstable_numbers_of_the_valid_call_are_not_compared():
    a, b = snapshot({"t": 0.25, "y": torch.ones(2)}), snapshot({"t": 0.5, "y": torch.ones(2)})
    ref = stable_snapshot(a, b)
    assert ref[0] is UNSTABLE and torch.equal(ref[1], torch.ones(2))


def _spin() -> None:
    """A busy loop (no sleep: only the alarm can stop it in time), bounded so that it never outlives
    the test."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        pass


def test_a_hang_becomes_a_defect_in_the_main_thread():
    # pytest and its xdist workers run tests there
    assert threading.current_thread() is threading.main_thread()
    t = time.monotonic()
    with pytest.raises(Hang, match="time limit"):
        call_with_time_limit(_spin, 0.3)
    assert time.monotonic() - t < 5
    # and the alarm is disarmed after a normal return
    assert call_with_time_limit(lambda: 7, 1.0) == 7
    time.sleep(0.4)


def test_a_hang_becomes_a_defect_in_another_thread_too():
    out: dict[str, object] = {}

    def worker() -> None:
        try:
            call_with_time_limit(lambda: time.sleep(30), 0.3)
        except Hang as exc:
            out["hang"] = exc
        out["value"] = call_with_time_limit(lambda: 3, 1.0)

    th = threading.Thread(target=worker)
    th.start()
    th.join(10)
    assert isinstance(out.get("hang"), Hang) and out["value"] == 3


def test_the_verdict_of_a_hanging_variant_names_the_hang():
    def hangs_on_overflow(x):
        x = check_embeddings(x, "x")
        while not bool(torch.isfinite(x.norm(dim=1)).all()):  # a loop waiting for finite scores
            time.sleep(0.01)
        return x.sum()

    entry = fn(hangs_on_overflow, lambda: {"x": torch.randn(3, 2)}, {"x": "x"})
    (v,) = [v for v in variants(entry) if v.id == "x:overflow"]
    assert verdict(entry, v, snapshot(run(entry)), time_limit=0.5).startswith(
        "hang: the call ran past the 0.5 s time limit"
    )
