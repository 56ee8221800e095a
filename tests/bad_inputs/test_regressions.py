"""One regression test per defect listed in issue 16 (the resume and NaN-guard cases are in
``tests/train/test_train_resume_guard.py``, the k-vs-gallery rule of the trainer in
``tests/train/test_train.py``)."""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pytest
import torch

from rank_lab.data.datasets import DatasetFolderError
from rank_lab.fewshot import covariance
from rank_lab.learned import Alphabet, feds_filter, feds_loss, greedy_decode
from rank_lab.losses import (
    SmoothRecallAtK,
    dg_upper_bound,
    worst_case_dg_brute_force,
)
from rank_lab.metrics import retrieval_metrics
from rank_lab.metrics.calibration import fit_temperature
from rank_lab.ood import (
    KNN,
    ClassGaussianEnergy,
    HybridEnergy,
    compose_energies,
    kth_neighbour_distance,
)
from rank_lab.retrieval import l2n

NAN = float("nan")


def _with_nan(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[0] = NAN
    return x


# ------------------------------------------------------------------------------------ silent NaN
def test_l2n_refuses_nan():
    with pytest.raises(ValueError, match=r"x contains 1 NaN"):
        l2n(_with_nan(torch.randn(3, 4)))


def test_covariance_refuses_nan_and_a_single_vector():
    with pytest.raises(ValueError, match=r"x contains 1 NaN"):
        covariance(_with_nan(torch.randn(5, 3)))
    with pytest.raises(ValueError, match=r"x has n=1 row.*n >= 2"):
        covariance(torch.randn(1, 3))  # was a silent zero matrix


def test_kth_neighbour_distance_refuses_nan():
    with pytest.raises(ValueError, match="queries contains 1 NaN"):
        kth_neighbour_distance(_with_nan(torch.randn(3, 4)), torch.randn(8, 4), 2)
    with pytest.raises(ValueError, match="bank contains 1 NaN"):
        kth_neighbour_distance(torch.randn(3, 4), _with_nan(torch.randn(8, 4)), 2)


def test_feds_filter_and_loss_refuse_nan():
    e_true = torch.tensor([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="e_hat contains 1 NaN"):
        feds_filter(torch.tensor([NAN, 1.0, 2.0]), e_true)
    with pytest.raises(ValueError, match="e_true contains 1 NaN"):
        feds_loss(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, NAN, 2.0]))


def test_compose_energies_refuses_a_nan_energy():
    with pytest.raises(ValueError, match="energies contains 1 NaN"):
        compose_energies(torch.tensor([[NAN, 1.0], [0.5, 2.0]]), beta=-1.0)
    with pytest.raises(ValueError, match=r"std must have shape \(2,\)"):
        compose_energies(torch.ones(3, 2), std=torch.ones(3))


# ------------------------------------------------------------------------------------ obscure
# errors
def test_knn_score_with_another_feature_width_names_the_data():
    knn = KNN(k=2).fit(torch.randn(10, 4))
    with pytest.raises(ValueError, match=r"data\['features'\] has d=5 but KNN was fitted on d=4"):
        knn.score(torch.randn(3, 5))


def test_kth_neighbour_distance_with_another_width_names_both():
    with pytest.raises(ValueError, match="queries have d=5 but bank has d=4"):
        kth_neighbour_distance(torch.randn(3, 5), torch.randn(8, 4), 2)


def test_greedy_decode_refuses_bad_scores():
    a = Alphabet("abc")  # 4 classes with the blank
    with pytest.raises(ValueError, match="scores have C=6 classes but the alphabet has 4"):
        greedy_decode(torch.rand(2, 5, 6), a)  # was an IndexError
    with pytest.raises(ValueError, match=r"scores must have shape \(B, T, C\)"):
        greedy_decode(torch.rand(5, 4), a)  # was a list of empty strings
    with pytest.raises(ValueError, match="scores contains 1 NaN"):
        greedy_decode(_with_nan(torch.rand(2, 5, 4)), a)


def test_load_svhn_wraps_a_truncated_mat_file(tmp_path):
    import scipy.io

    from rank_lab.data.datasets.ood_sets import load_svhn

    buf = io.BytesIO()
    scipy.io.savemat(buf, {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.ones((2, 1), np.uint8)})
    (tmp_path / "test_32x32.mat").write_bytes(buf.getvalue()[:200])  # truncated
    with pytest.raises(
        DatasetFolderError, match=r"test_32x32.mat.*not a readable MATLAB file.*X \(32, 32, 3, N\)"
    ):
        load_svhn(tmp_path, "test")


def test_load_lmdb_words_wraps_lmdb_errors(tmp_path):
    pytest.importorskip("lmdb")
    from rank_lab.data.datasets.scene_text import load_lmdb_words

    (tmp_path / "data.mdb").write_bytes(b"not an lmdb environment" * 100)
    with pytest.raises(
        DatasetFolderError, match=r"data.mdb.*not a readable LMDB environment.*num-samples"
    ):
        load_lmdb_words(tmp_path)


def test_load_tiny_imagenet_names_a_malformed_annotation_line(tmp_path):
    from rank_lab.data.datasets.ood_sets import load_tiny_imagenet

    base = tmp_path / "tiny-imagenet-200"
    (base / "val").mkdir(parents=True)
    (base / "wnids.txt").write_text("n01443537\n")
    (base / "val" / "val_annotations.txt").write_text("val_0.JPEG n01443537 0 0 9 9\nval_1.JPEG\n")
    with pytest.raises(
        DatasetFolderError, match=r"line 2 of .*val_annotations.txt.*every line should be"
    ):
        load_tiny_imagenet(tmp_path)
    (base / "val" / "val_annotations.txt").write_text("\n")
    with pytest.raises(DatasetFolderError, match="lists no image"):
        load_tiny_imagenet(tmp_path)


# ------------------------------------------------------------------------------------ silent wrong
# output
@pytest.mark.parametrize("loss_cls", [SmoothRecallAtK])
def test_recall_surrogate_clips_a_k_the_batch_cannot_reach(loss_cls):
    torch.manual_seed(0)
    emb = torch.randn(12, 4, requires_grad=True)
    labels = torch.arange(12) % 3
    with pytest.warns(
        UserWarning, match=r"ks holds k=\[50\] but a query is ranked against only 11 item\(s\)"
    ):
        loss = loss_cls(ks=(50,))(emb, labels)
    assert float(loss) > 0  # was a constant 0
    loss.backward()
    assert float(emb.grad.abs().sum()) > 0  # and now has a gradient
    # k clipped to 11
    assert float(loss) == pytest.approx(float(loss_cls(ks=(11,))(emb, labels)), abs=1e-12)


# ------------------------------------------------------------------------------------ inconsistent
def test_retrieval_metrics_and_trainer_refuse_k_beyond_the_gallery():
    emb, labels = torch.randn(20, 4), torch.arange(20) % 4
    with pytest.raises(
        ValueError,
        match=r"ks holds k=\[100\], larger than the number of gallery items available \(19\)",
    ):
        retrieval_metrics(emb, labels)  # default ks (1, 10, 100)
    assert "R@10" in retrieval_metrics(emb, labels, ks=(1, 10))  # the message's remedy works
    # the trainer follows the same rule (and checks before training):
    # tests/train/test_train.py::test_input_checks


# ------------------------------------------------------------------------------------ not what it
# says
def test_dg_upper_bound_is_the_worst_case_for_equal_batches_and_refuses_unequal_ones():
    # brute force of the decomposability gap's worst case (every interleaving of perfectly ranked
    # batches)
    for p, n, k in itertools.product((1, 2), (1, 2, 3), (2, 3)):
        if (p + n) * k > 9:
            continue
        brute, _ = worst_case_dg_brute_force([p] * k, [n] * k)
        assert dg_upper_bound([p] * k, [n] * k) == pytest.approx(brute, abs=1e-12)
    brute, _ = worst_case_dg_brute_force([3, 1], [1, 3])
    # the case: the old value 0.05 was no bound
    assert brute == pytest.approx(0.382, abs=1e-3)
    with pytest.raises(
        ValueError, match=r"pos_per_batch / neg_per_batch giving positives \[3, 1\].*not a bound"
    ):
        dg_upper_bound([3, 1], [1, 3])


def test_hybrid_energy_fits_float64_features():
    torch.manual_seed(0)
    h = HybridEnergy(
        ClassGaussianEnergy(), 4, epochs=1, hidden_dim=8, n_layers=2, batch_size=8, sgld_steps=2
    )
    z = torch.randn(16, 4, dtype=torch.float64)
    h.fit(z, torch.arange(16) % 2, device="cpu")
    e = h.energy(z)
    assert e.shape == (16,) and bool(torch.isfinite(e).all())
    assert torch.equal(e, h.energy(z.float()))  # float64 features are cast to the network's float32


def test_fit_temperature_on_all_correct_logits_returns_the_bound_with_a_warning():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 5, generator=g)
    with pytest.warns(UserWarning, match="no finite temperature minimises it"):
        t = fit_temperature(logits, logits.argmax(1))
    assert t == 0.01  # the documented lower bound, not T ~ 9e-4
    # an interior optimum: the derivative of the NLL in beta = 1 / T vanishes there
    y = torch.randint(0, 5, (200,), generator=g)
    noisy = torch.randn(200, 5, generator=g) + 3 * torch.nn.functional.one_hot(y, 5)
    t = fit_temperature(noisy, y)
    beta = torch.tensor(1 / t, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.cross_entropy(noisy.double() * beta, y).backward()
    assert 0.01 < t < 100 and abs(float(beta.grad)) < 1e-6 and math.isfinite(t)
