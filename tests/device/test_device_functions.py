"""The public functions issue 27 found refusing CUDA input, called as a CUDA user would.

Each runs its bad-input registry entry's valid call with every tensor, module and ``device`` on
CUDA: on the fake device here (every ``make test``), on a real GPU in ``make gpu-check`` (the
``cuda``-marked parameter). The metrics engineer's three (calibration, trapezoid AP) are in
``known_mismatches.txt`` until fixed: they run on a real GPU only, where they fail until then.
"""

from __future__ import annotations

import pytest
import torch
from bad_inputs.registry import ENTRIES

from rank_lab.retrieval import learn_pca_whitening

from .fake_cuda import fake_cuda
from .registry_run import run_on_cuda

NAMES = [
    "rank_lab.retrieval.whitening.learn_lw_whitening",
    "rank_lab.retrieval.whitening.learn_pca_whitening",
    "rank_lab.ood.scorers.KLMatching",
    "rank_lab.ood.feature_scorers.ViM",
    "rank_lab.fewshot.episodes.fewshot_retrieval_scores",
    "rank_lab.fewshot.episodes.evaluate_fewshot_retrieval",
    "rank_lab.data.perturbations.noisy_labels",
    "rank_lab.learned.edit_task.random_ctc_path",
    "rank_lab.learned.box_images.render_box_images",
    "rank_lab.learned.boxes.perturb_boxes",
    "rank_lab.learned.boxes.RotatedBoxPairBank",
    "rank_lab.learned.boxes.evaluate_box_regressor",
    "rank_lab.learned.surrogate_trainer.SurrogateTrainer",
    "rank_lab.data.procedural.write_image_folder",
]
METRICS_OWNED = [
    "rank_lab.metrics.calibration.expected_calibration_error",
    "rank_lab.metrics.calibration.reliability_diagram",
    "rank_lab.retrieval.protocols.trapezoid_ap_from_positions",
]
BY_NAME = {e.name: e for e in ENTRIES}
CUDA = pytest.mark.cuda
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_the_named_functions_have_entries() -> None:
    missing = [n for n in NAMES + METRICS_OWNED if n not in BY_NAME]
    assert not missing, f"registry entries renamed or removed: {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_on_the_fake_device(name: str) -> None:
    with fake_cuda():
        run_on_cuda(BY_NAME[name])


def test_pca_whitening_shrinkage_on_the_fake_device() -> None:
    """``torch.eye`` of the shrinkage target made on the data's device (the registry's call has
    none)."""
    with fake_cuda():
        w = learn_pca_whitening(torch.randn(30, 5).cuda(), shrinkage=0.3)
        assert all(t.is_cuda for t in vars(w).values() if isinstance(t, torch.Tensor))


@CUDA
@NEEDS_CUDA
@pytest.mark.parametrize("name", NAMES + METRICS_OWNED)
def test_on_a_real_gpu(name: str) -> None:
    run_on_cuda(BY_NAME[name])


@CUDA
@NEEDS_CUDA
def test_pca_whitening_shrinkage_on_a_real_gpu() -> None:
    learn_pca_whitening(torch.randn(30, 5, device="cuda"), shrinkage=0.3)
