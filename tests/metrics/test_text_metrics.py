"""Tests of rank_lab.metrics.text: batched Levenshtein distance, NED, TED, word accuracy."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.learned.edit_task import PATEL_FIG_4_1
from rank_lab.metrics.text import (
    edit_distance,
    encode_strings,
    levenshtein_reference,
    ned_score,
    normalize_text,
    normalized_edit_distance,
    text_recognition_metrics,
    total_edit_distance,
    word_accuracy,
)


def brute_levenshtein(a: str, b: str) -> int:
    """Full-table dynamic programme, written independently of the package."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
    return d[len(a)][len(b)]


ALPHABETS = ["ab", "abcdefghij", "aé日ß\U0001f600"]  # includes non-ASCII and an astral-plane emoji


@pytest.mark.parametrize("alphabet", ALPHABETS)
def test_edit_distance_matches_dp_on_random_strings(alphabet: str) -> None:
    rng = random.Random(0)
    a = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(300)]
    b = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 15))) for _ in range(300)]
    a[:3] = ["", "", "abc"[: len(alphabet)]]
    b[:3] = ["", "xyz", ""]
    got = edit_distance(a, b)
    assert got.dtype == torch.long and got.shape == (300,)
    assert got.tolist() == [brute_levenshtein(x, y) for x, y in zip(a, b, strict=True)]
    assert [levenshtein_reference(x, y) for x, y in zip(a, b, strict=True)] == got.tolist()


def test_large_batches_are_processed_in_chunks_consistently() -> None:
    rng = random.Random(5)
    a = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 6))) for _ in range(2500)]
    b = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 6))) for _ in range(2500)]
    assert edit_distance(a, b).tolist() == [
        levenshtein_reference(x, y) for x, y in zip(a, b, strict=True)
    ]


def test_hand_worked_examples() -> None:
    assert edit_distance(
        ["kitten", "flaw", "", "abc", "日本語"], ["sitting", "lawn", "abc", "", "日本"]
    ).tolist() == [3, 2, 3, 3, 1]


def test_fig_4_1_pairs_and_the_printed_error() -> None:
    gt = [p[0] for p in PATEL_FIG_4_1]
    m1 = [p[1] for p in PATEL_FIG_4_1]
    m2 = [p[2] for p in PATEL_FIG_4_1]
    ed1, ed2 = edit_distance(m1, gt).tolist(), edit_distance(m2, gt).tolist()
    assert ed2 == [p[4] for p in PATEL_FIG_4_1]  # M2 as printed, total 10
    assert sum(ed2) == 10
    printed1 = [p[3] for p in PATEL_FIG_4_1]
    assert ed1[:5] == printed1[:5]
    assert ed1[5] == 2 and printed1[5] == 3  # "napasozin": r->z substitution + insertion of i
    assert sum(ed1) == 29  # the thesis prints 30
    assert word_accuracy(m1, gt) == 0.0 and word_accuracy(m2, gt) == 0.0


def test_code_tensor_input_with_lengths_and_padding() -> None:
    a, la = encode_strings(["abc", "", "ba"])
    b, lb = encode_strings(["abd", "x", "ab"])
    assert a.shape == (3, 3) and la.tolist() == [3, 0, 2]
    assert edit_distance(a, b).tolist() == [1, 1, 2]
    assert edit_distance(a, b, la, lb).tolist() == [1, 1, 2]
    # explicit lengths shorter than the rows truncate them
    assert edit_distance(a, b, torch.tensor([2, 0, 1]), lb).tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="padding"):
        edit_distance(torch.tensor([[-1, 3]]), torch.tensor([[3]]))


def test_all_empty_and_empty_batch() -> None:
    assert edit_distance(["", ""], ["", ""]).tolist() == [0, 0]
    assert edit_distance([], []).shape == (0,)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="rows"):
        edit_distance(["a"], ["a", "b"])
    with pytest.raises(TypeError):
        edit_distance("abc", "abd")
    with pytest.raises(TypeError, match="integer"):
        edit_distance(torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="empty"):
        total_edit_distance([], [])
    with pytest.raises(ValueError, match="mode"):
        normalize_text("a", "upper")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=10), st.text(max_size=10), st.text(max_size=10))
def test_metric_properties(a: str, b: str, c: str) -> None:
    d = edit_distance([a, b, a, a], [b, a, a, c]).tolist()
    assert d[0] == d[1]  # symmetry
    assert d[2] == 0  # identity
    assert (d[0] == 0) == (a == b)
    assert abs(len(a) - len(b)) <= d[0] <= max(len(a), len(b))
    d_bc = edit_distance([b], [c]).item()
    assert d[3] <= d[0] + d_bc  # triangle inequality


def test_ned_ted_accuracy_hand_example() -> None:
    preds = ["hello", "wrld", "", "abc"]
    gts = ["hello", "world", "", "xyz"]
    ned = normalized_edit_distance(preds, gts)
    assert torch.allclose(ned, torch.tensor([0.0, 1 / 5, 0.0, 1.0], dtype=torch.float64))
    assert ned_score(preds, gts) == pytest.approx(1 - (0.2 + 1.0) / 4)
    assert total_edit_distance(preds, gts) == 0 + 1 + 0 + 3
    assert word_accuracy(preds, gts) == 0.5
    m = text_recognition_metrics(preds, gts)
    assert m == {"accuracy": 0.5, "ned": pytest.approx(0.7), "ted": 4, "mean_ed": 1.0, "n": 4}


def test_case_insensitive_alphanumeric_protocol() -> None:
    assert normalize_text("Hello, World!", "alnum_lower") == "helloworld"
    assert normalize_text("ÉCOLE", "lower") == "école"
    m = text_recognition_metrics(["HeLLo!", "Wor-ld"], ["hello", "world"], normalize="alnum_lower")
    assert m["accuracy"] == 1.0 and m["ted"] == 0
    assert text_recognition_metrics(["HeLLo!"], ["hello"])["ted"] == 4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_edit_distance_cuda_matches_cpu() -> None:
    rng = random.Random(1)
    a = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 20))) for _ in range(500)]
    b = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 20))) for _ in range(500)]
    ca, la = encode_strings(a, device="cuda")
    cb, lb = encode_strings(b, device="cuda")
    got = edit_distance(ca, cb, la, lb)
    assert got.device.type == "cuda"
    assert got.cpu().tolist() == edit_distance(a, b).tolist()


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_text_inputs_are_named():
    from rank_lab.metrics.text import levenshtein_reference, ned_score, text_recognition_metrics

    with pytest.raises(ValueError, match="normalize must be one of"):
        ned_score(["a"], ["a"], normalize="bogus")  # was "mode must be ..."
    with pytest.raises(TypeError, match=r"preds\[1\] must be a str"):
        text_recognition_metrics(["a", 3], ["a", "b"])  # was "text must be a str"
    with pytest.raises(TypeError, match=r"a\[1\] must be a str"):
        edit_distance(["a", 3], ["a", "b"])  # was "strings[1] must be a str"
    with pytest.raises(TypeError, match="a must be a str"):
        levenshtein_reference(3, "b")
