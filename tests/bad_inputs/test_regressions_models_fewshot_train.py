"""Regression tests of the bad-input fixes in models, fewshot, memory, train, cost and publish
(issue 16).

The matrix checks every variant; these tests pin the rules that are subtle or chosen (module inputs
cast or refused, NaN checks deferred to the trainer's numerical guard, legal results, one check per
defect class) with exact expectations.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

import rank_lab.fewshot as F
from rank_lab.book.publish import colab_links
from rank_lab.book.publish import main as publish_main
from rank_lab.cost import format_duration
from rank_lab.data import make_open_set
from rank_lab.engine.checkpoint import atomic_write_json, set_rng_state
from rank_lab.engine.guard import NonFiniteTrainingError
from rank_lab.memory import CrossBatchMemory, MemoryLoss
from rank_lab.models import EmbeddingHead, GeM, MLPBackbone, ModelConfig, TinyCNN, build_model
from rank_lab.train import TrainConfig, Trainer, embed_dataset
from rank_lab.train.distributed import all_gather_with_grad, init_distributed
from rank_lab.train.distributed.launch import launch_local
from rank_lab.train.multistage import embed_in_chunks


# ------------------------------------------------------------------------------ module inputs
def test_module_inputs_named_cast_or_refused():
    torch.manual_seed(0)
    head = EmbeddingHead(6, 4)
    x = torch.randn(3, 6)
    bad = x.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"^x contains 1 NaN or inf"):
        head(bad)
    with pytest.raises(TypeError, match=r"^x must be a floating tensor"):
        # integer pixels are refused, not silently cast (0..255 is not [0, 1])
        head(x.round().long())
    with pytest.raises(ValueError, match=r"^x must have shape \(B, 6\)"):
        head(x[None])
    # float64 is cast to the weights' dtype: the same embeddings as the float32 input
    assert torch.equal(head(x.double()), head(x)) and head(x.double()).dtype == torch.float32
    assert head(x[:0]).shape == (0, 4)  # an empty batch gives an empty batch
    mlp = MLPBackbone(6, (8,))
    assert mlp(x[:0]).shape == (0, 8)  # was "cannot reshape tensor of 0 elements"


def test_tiny_cnn_reads_a_3d_input_as_grey_images():
    net = TinyCNN(1, 2).eval()
    x = torch.rand(2, 8, 8)
    assert torch.equal(net(x), net(x[:, None]))
    with pytest.raises(ValueError, match=r"x must have shape \(B, 3, H, W\)"):
        TinyCNN(3, 2)(x)


def test_pooling_and_model_config_hyper_parameters():
    with pytest.raises(ValueError, match=r"^eps must be > 0"):
        GeM(eps=0.0)  # a clamp at 0 gives NaN gradients of 0^(p-1) for p < 1
    with pytest.raises(ValueError, match=r"^p must be finite"):
        GeM(p=math.inf)
    with pytest.raises(ValueError, match="unknown backbone 'resnet_bogus'"):
        ModelConfig(backbone="resnet_bogus")
    with pytest.raises(ValueError, match="unknown pooling 'median'"):
        ModelConfig(backbone="tiny_cnn", pooling="median")
    with pytest.raises(TypeError, match="^width must be a positive int"):
        TinyCNN(1, 1.5)


# ------------------------------------------------------------------------------ trainer
def _cfg(**kw) -> TrainConfig:
    base = dict(
        backbone="mlp",
        hidden_dims=(8,),
        embed_dim=4,
        batch_size=8,
        m_per_class=4,
        epochs=1,
        batches_per_epoch=2,
        eval_ks=(1,),
        progress=False,
        loss="smooth_ap",
    )
    base.update(kw)
    return TrainConfig.from_dict(base)


class _Lazy(Dataset):
    """A dataset read item by item (like image folders), one of whose items is NaN."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, bad: int) -> None:
        self.x, self.labels, self.bad = x, y, bad

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        xi = self.x[i].clone()
        if i == self.bad:
            xi[0] = float("nan")
        return xi, self.labels[i]


@pytest.fixture(scope="module")
def split():
    return make_open_set(n_classes=4, per_class=8, dim=4, input_dim=6, hidden_dim=8, seed=0)


def test_trainer_checks_tensor_data_when_built(split):
    x = split.x_train.clone()
    x[3, 0] = float("nan")
    with pytest.raises(ValueError, match=r"train_data \(x\) contains 1 NaN"):
        Trainer(None, None, (x, split.y_train), None, _cfg())
    with pytest.raises(TypeError, match="train_data labels must hold integers"):
        # 1.5 is no class
        Trainer(None, None, (split.x_train, split.y_train.double() + 0.5), None, _cfg())
    with pytest.raises(ValueError, match=r"test_data \(x\) contains"):
        Trainer(None, None, (split.x_train, split.y_train), (x, split.y_train), _cfg())


def test_a_nan_inside_the_model_reaches_the_numerical_guard(split):
    """A lazily read NaN item is not a model's ValueError: the guard names the step and its
    batch."""
    bad = 5
    tr = Trainer(
        None,
        None,
        _Lazy(split.x_train, split.y_train, bad),
        None,
        _cfg(epochs=2, batches_per_epoch=4),
    )
    with pytest.raises(
        NonFiniteTrainingError, match="the model's embeddings hold NaN or inf at epoch"
    ) as info:
        tr.fit()
    assert bad in info.value.batch_indices


def test_embed_dataset_checks_its_embeddings_and_batch_size(split):
    model = MLPBackbone(6, (4,))
    with pytest.raises(ValueError, match=r"embeddings of data items \[4, 8\) hold NaN"):
        embed_dataset(model, _Lazy(split.x_train, split.y_train, bad=5), batch_size=4)
    assert model.training  # the mode is restored after a failure
    with pytest.raises(ValueError, match="^batch_size must be >= 1"):
        embed_dataset(model, (split.x_train, split.y_train), batch_size=0)


# ------------------------------------------------------------------------------ collectives,
# checkpoints, launcher
def test_collectives_check_their_input_in_a_single_process():
    with pytest.raises(ValueError, match="x contains 1 NaN"):
        all_gather_with_grad(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(TypeError, match="x must be a floating tensor"):
        all_gather_with_grad(torch.tensor([[1, 2]]))  # the same answer as on several ranks
    with pytest.raises(ValueError, match="backend must be one of"):
        init_distributed("bogus", device="cpu")


def test_a_json_write_that_fails_keeps_the_previous_file(tmp_path):
    path = tmp_path / "results.json"
    atomic_write_json({"ok": 1}, path)
    with pytest.raises(TypeError, match="obj holds a value that is not JSON serialisable"):
        atomic_write_json({"bad": object()}, path)
    assert json.loads(path.read_text()) == {"ok": 1} and [p.name for p in tmp_path.iterdir()] == [
        "results.json"
    ]
    with pytest.raises(ValueError, match=r"state lacks \['python', 'numpy', 'torch'\]"):
        set_rng_state({})


def test_multistage_names_the_chunk_of_inputs_a_model_refuses():
    with pytest.raises(
        TypeError, match=r"model\(inputs\[0:3\]\) raised: x must be a floating tensor"
    ):
        embed_in_chunks(MLPBackbone(6, (4,)), torch.zeros(5, 6, dtype=torch.long), chunk_size=3)


def test_launch_local_dry_run_writes_the_config_and_starts_nothing(tmp_path):
    cfg = dict(dataset="synthetic", backbone="mlp", epochs=1, device="cpu")
    out = launch_local(cfg, 2, workdir=tmp_path, dry_run=True, threads_per_proc=1)
    assert (
        out["command"][1:4] == ["-m", "torch.distributed.run", "--standalone"]
        and "--nproc_per_node=2" in out["command"]
    )
    assert json.loads((tmp_path / "config.json").read_text())["dataset"] == "synthetic"
    assert out["env"]["OMP_NUM_THREADS"] == "1" and not (tmp_path / "log.json").exists()
    with pytest.raises(ValueError, match="^nproc must be >= 1"):
        launch_local(cfg, 0, workdir=tmp_path, dry_run=True)


# ------------------------------------------------------------------------------ memory
def test_memory_hyper_parameters_are_named():
    mem = CrossBatchMemory(8, 4)
    with pytest.raises(ValueError, match="^memory_weight must be finite"):
        MemoryLoss(nn.Identity(), mem, memory_weight=float("nan"))
    with pytest.raises(TypeError, match="^activate_after must be an int >= 0"):
        MemoryLoss(nn.Identity(), mem, activate_after=1.5)
    with pytest.raises(ValueError, match="^n_levels must be >= 0"):
        CrossBatchMemory(8, 4, n_levels=-1)


# ------------------------------------------------------------------------------ fewshot
def test_film_checks_every_argument_and_maps_an_empty_batch_to_an_empty_batch():
    x = torch.rand(2, 3, 4, 4)
    gamma, beta = torch.ones(3), torch.zeros(3)
    with pytest.raises(ValueError, match="^gamma contains 1 NaN"):
        F.film(x, torch.tensor([1.0, float("nan"), 1.0]), beta)
    with pytest.raises(TypeError, match="^beta must be a floating tensor"):
        F.film(x, gamma, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^x must have shape \(B, C, H, W\)"):
        F.film(x[0], gamma, beta)
    assert F.film(x[:0], gamma, beta).shape == (0, 3, 4, 4)
    net = F.film_tiny_resnet(widths=(4,))
    params = F.identity_film_params(net.channels, net.blocks)
    params[0][0]["beta2"] = torch.full((4,), float("nan"))
    with pytest.raises(ValueError, match="^params contains 4 NaN"):
        net(torch.rand(1, 3, 8, 8), params)


def test_set_encoder_refuses_an_empty_support_and_reads_5d_as_tasks():
    enc = F.SetEncoder(3, 4, 2).eval()
    s = torch.rand(3, 3, 8, 8)
    with pytest.raises(ValueError, match=r"support must have shape .* with k >= 1"):
        enc(s[:0][None])  # was the mean of no code: NaN
    with pytest.raises(ValueError, match=r"with k >= 1, got \(0, 3, 8, 8\)"):
        enc(s[:0])
    assert torch.allclose(enc(s[None]), enc(s)[None])  # (1, k, C, H, W): one task


def test_rcnaps_hyper_parameters_are_named_as_written():
    ext = F.film_tiny_resnet(widths=(4,))
    with pytest.raises(ValueError, match="^encoder_width must be >= 1"):
        F.RCNAPS(ext, encoder_width=0)
    with pytest.raises(ValueError, match="^gem_p must be finite"):
        F.RCNAPS(ext, gem_p=math.inf)
    with pytest.raises(ValueError, match="^init_std must be finite"):
        F.FiLMLayerNetwork(4, 1, 4, init_std=float("nan"))  # was NaN weights


def test_fewshot_selection_arguments():
    emb, lab = torch.randn(6, 4), torch.tensor([0, 0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match="^knn_k=7 exceeds the 6 support vectors"):
        F.classify_by_retrieval(emb, emb, lab, knn_k=7, aqe=None)
    with pytest.raises(ValueError, match="^vote must be one of"):
        F.classify_by_retrieval(emb, emb, lab, vote="bogus", aqe=None)
    with pytest.raises(ValueError, match="^no class has k=3 items"):
        F.sample_supports(lab, 3)  # was an empty dict: nothing evaluated
    with pytest.raises(ValueError, match=r"^index holds positions \[9\] outside \[0, 6\)"):
        F.gather_images(torch.rand(6, 3, 4, 4), [0, 9])
    with pytest.raises(ValueError, match=r"^labels has 2 rows"):
        F.MahalanobisClassifier().fit(emb, lab[:2])


# ------------------------------------------------------------------------------ cost, publish
def test_format_duration_refuses_nan_and_writes_inf_as_forever():
    assert format_duration(math.inf) == "forever" and format_duration(42.0) == "42 s"
    with pytest.raises(ValueError, match="^seconds must be >= 0"):
        format_duration(math.nan)  # was "forever"
    with pytest.raises(ValueError, match="^seconds must be >= 0"):
        format_duration(-5.0)


def test_publish_names_a_missing_folder(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="html_dir .* is not an existing folder"):
        colab_links(tmp_path / "not_built")  # was {}: "no link" instead of "no site"
    assert publish_main(["check", "--root", str(tmp_path / "missing")]) == 1
    assert "root" in capsys.readouterr().err


def test_build_model_still_builds_the_valid_configs():
    model = build_model(
        {
            "backbone": "tiny_cnn",
            "in_channels": 1,
            "width": 2,
            "pooling": "gem",
            "gem_p": 3,
            "embed_dim": 4,
        }
    )
    assert model(torch.rand(2, 1, 8, 8)).shape == (2, 4)
