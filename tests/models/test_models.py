"""Tests of rank_lab.models backbones / heads / build_model (pooling layers have their own
tests)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rank_lab.models import (
    EmbeddingHead,
    EmbeddingModel,
    MLPBackbone,
    ModelConfig,
    TimmBackbone,
    TinyCNN,
    build_backbone,
    build_model,
    freeze_batchnorm,
    load_backbone_weights,
)

timm = pytest.importorskip("timm")


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is faster than two contending ones (restored after)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _unit_rows(z: torch.Tensor) -> None:
    torch.testing.assert_close(z.norm(dim=1), torch.ones(z.shape[0]), atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------- small backbones
@pytest.mark.parametrize(
    ("shape", "in_ch", "map_hw"),
    [
        ((5, 1, 8, 8), 1, (2, 2)),
        ((3, 1, 28, 28), 1, (7, 7)),
        ((2, 3, 32, 32), 3, (8, 8)),
        ((2, 3, 7, 5), 3, (2, 2)),
    ],
)
def test_tiny_cnn_map_shapes(shape, in_ch, map_hw):
    net = TinyCNN(in_channels=in_ch, width=8)
    out = net(torch.rand(shape))
    assert out.shape == (shape[0], 32, *map_hw)
    assert net.num_features == 32


@pytest.mark.parametrize(
    ("shape", "in_ch"), [((5, 1, 8, 8), 1), ((3, 1, 28, 28), 1), ((2, 3, 32, 32), 3)]
)
@pytest.mark.parametrize("pooling", ["avg", "max", "gem"])
def test_tiny_cnn_model_embeddings_are_unit_norm(shape, in_ch, pooling):
    model = build_model(
        {
            "backbone": "tiny_cnn",
            "in_channels": in_ch,
            "width": 8,
            "pooling": pooling,
            "embed_dim": 12,
        }
    )
    z = model(torch.rand(shape))
    assert z.shape == (shape[0], 12) and z.dtype == torch.float32
    _unit_rows(z)


def test_tiny_cnn_rejects_wrong_channels():
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        TinyCNN(in_channels=3)(torch.rand(2, 1, 8, 8))


def test_mlp_backbone_flattens_and_checks_width():
    net = MLPBackbone(64, (16, 8))
    assert net(torch.rand(4, 1, 8, 8)).shape == (4, 8)
    assert net(torch.rand(4, 64)).shape == (4, 8)
    with pytest.raises(ValueError, match="input_dim=64"):
        net(torch.rand(4, 32))
    with pytest.raises(ValueError, match="input_dim"):
        build_model({"backbone": "mlp"})


def test_mlp_model_matches_manual_composition():
    torch.manual_seed(0)
    model = build_model({"backbone": "mlp", "input_dim": 10, "hidden_dims": [6], "embed_dim": 4})
    x = torch.randn(7, 10)
    lin1 = model.backbone.net[0]
    h = torch.relu(x @ lin1.weight.T + lin1.bias)
    # LayerNorm, no affine
    h = (h - h.mean(1, keepdim=True)) / torch.sqrt(h.var(1, unbiased=False, keepdim=True) + 1e-5)
    z = h @ model.head.proj.weight.T + model.head.proj.bias
    z = z / z.norm(dim=1, keepdim=True)
    torch.testing.assert_close(model(x), z, atol=1e-5, rtol=1e-5)
    assert model.pooling is None
    assert sum(p.numel() for p in model.head.norm.parameters()) == 0  # LayerNorm without affine


def test_head_options():
    x = torch.randn(5, 6) * 3
    head = EmbeddingHead(6, embed_dim=None, layer_norm=False, normalize=False)
    torch.testing.assert_close(head(x), x)
    assert head.out_dim == 6
    head = EmbeddingHead(6, embed_dim=None, layer_norm=False, normalize=True)
    torch.testing.assert_close(head(x), x / x.norm(dim=1, keepdim=True))
    with pytest.raises(ValueError, match="embed_dim"):
        EmbeddingHead(6, embed_dim=0)


# ---------------------------------------------------------------------------- timm backbones
def test_timm_resnet18_gem_matches_independent_pooling():
    torch.manual_seed(0)
    model = build_model({"backbone": "resnet18", "pooling": "gem", "gem_p": 3.0, "embed_dim": 16})
    assert isinstance(model.backbone, TimmBackbone) and model.backbone.num_features == 512
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        fmap = model.backbone.model.forward_features(x)  # (2, 512, 1, 1) at 32 px
        assert fmap.shape == (2, 512, 1, 1)
        gem = fmap.clamp(min=1e-6).pow(3.0).mean(dim=(2, 3)).pow(1 / 3.0)
        torch.testing.assert_close(model.features(x), gem, atol=1e-5, rtol=1e-5)
        z = model(x)
    assert z.shape == (2, 16)
    _unit_rows(z)


def test_timm_features_only_gives_the_same_last_map():
    torch.manual_seed(0)
    a = TimmBackbone("resnet18")
    b = TimmBackbone("resnet18", features_only=True)
    b.model.load_state_dict(
        {k: v for k, v in a.model.state_dict().items() if k in b.model.state_dict()}
    )
    a.eval(), b.eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(a(x), b(x))
    assert a.num_features == b.num_features == 512


def test_timm_transformer_gives_vectors():
    model = build_model(
        {"backbone": "deit_tiny_patch16_224", "embed_dim": 8, "timm_kwargs": {"img_size": 32}}
    )
    z = model(torch.randn(2, 3, 32, 32))
    assert z.shape == (2, 8)
    _unit_rows(z)


def test_unknown_backbone_and_pooling():
    with pytest.raises(ValueError, match="unknown timm model"):
        build_backbone("no_such_net_123")
    with pytest.raises(ValueError, match="unknown pooling"):
        build_model({"backbone": "tiny_cnn", "pooling": "median"})
    with pytest.raises(ValueError, match="unknown model config key"):
        ModelConfig.from_dict({"backbon": "mlp"})
    with pytest.raises(ValueError, match="no pretrained weights"):
        build_backbone("tiny_cnn", weights="imagenet")


# ---------------------------------------------------------------------------- local weights
def test_load_weights_from_local_file_roundtrip(tmp_path):
    torch.manual_seed(1)
    src = timm.create_model("resnet18", pretrained=False)  # with its fc classifier
    path = tmp_path / "r18.pth"
    torch.save(src.state_dict(), path)
    torch.manual_seed(2)
    model = build_model({"backbone": "resnet18", "weights": str(path), "embed_dim": 8})
    rep = model.backbone.load_report
    assert rep["missing"] == [] and rep["mismatched"] == []
    assert not any(k.startswith("fc.") for k in rep["loaded"])
    for k, v in model.backbone.model.state_dict().items():
        torch.testing.assert_close(v, src.state_dict()[k])
    # wrapped checkpoint with DataParallel prefixes
    wrapped = {"epoch": 3, "state_dict": {f"module.{k}": v for k, v in src.state_dict().items()}}
    torch.save(wrapped, tmp_path / "wrapped.pt")
    other = TimmBackbone("resnet18")
    rep2 = load_backbone_weights(other.model, tmp_path / "wrapped.pt", strict=True)
    assert rep2["missing"] == []
    torch.testing.assert_close(other.model.conv1.weight, src.conv1.weight)


def test_torchvision_resnet_state_dict_loads_into_timm(tmp_path):
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(3)
    ref = tv.models.resnet18(weights=None).eval()
    torch.save(ref.state_dict(), tmp_path / "tv_r18.pth")
    bb = TimmBackbone("resnet18", weights=tmp_path / "tv_r18.pth").eval()
    assert bb.load_report["missing"] == []
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        h = ref.maxpool(ref.relu(ref.bn1(ref.conv1(x))))
        h = ref.layer4(ref.layer3(ref.layer2(ref.layer1(h))))
        torch.testing.assert_close(bb(x), h, atol=1e-5, rtol=1e-5)


def test_load_weights_errors(tmp_path):
    net = TinyCNN(1, 4)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_backbone_weights(net, tmp_path / "nope.pth")
    torch.save({"foo.weight": torch.zeros(3)}, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="no parameter"):
        load_backbone_weights(net, tmp_path / "bad.pth")
    sd = TinyCNN(1, 4).state_dict()
    sd.pop("features.0.weight")
    torch.save(sd, tmp_path / "partial.pth")
    with pytest.raises(ValueError, match="strict"):
        load_backbone_weights(net, tmp_path / "partial.pth", strict=True)
    rep = load_backbone_weights(net, tmp_path / "partial.pth")
    assert rep["missing"] == ["features.0.weight"]


def test_weight_file_for_tiny_cnn(tmp_path):
    torch.manual_seed(0)
    a = build_model({"backbone": "tiny_cnn", "in_channels": 1, "width": 4, "embed_dim": 4})
    torch.save(a.backbone.state_dict(), tmp_path / "tiny.pth")
    torch.manual_seed(1)
    b = build_model(
        {
            "backbone": "tiny_cnn",
            "in_channels": 1,
            "width": 4,
            "embed_dim": 4,
            "weights": str(tmp_path / "tiny.pth"),
        }
    )
    for (ka, va), (kb, vb) in zip(
        a.backbone.state_dict().items(), b.backbone.state_dict().items(), strict=True
    ):
        assert ka == kb and torch.equal(va, vb)


# ---------------------------------------------------------------------------- BatchNorm freezing,
# parameter groups
def test_freeze_bn_keeps_running_stats():
    torch.manual_seed(0)
    model = build_model(
        {"backbone": "tiny_cnn", "in_channels": 1, "width": 4, "embed_dim": 4, "freeze_bn": True}
    )
    model.train()
    bns = [m for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and all(not m.training for m in bns)
    assert model.head.training
    before = [m.running_mean.clone() for m in bns]
    model(torch.rand(8, 1, 8, 8) * 5)
    for m, b in zip(bns, before, strict=True):
        torch.testing.assert_close(m.running_mean, b)
    # affine parameters still receive gradients
    model(torch.rand(8, 1, 8, 8)).sum().backward()
    assert bns[0].weight.grad is not None
    # without the option the statistics move
    free = build_model(
        {"backbone": "tiny_cnn", "in_channels": 1, "width": 4, "embed_dim": 4}
    ).train()
    bn = next(m for m in free.backbone.modules() if isinstance(m, nn.BatchNorm2d))
    free(torch.rand(8, 1, 8, 8) * 5)
    assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
    assert freeze_batchnorm(free) == 3


def test_parameter_groups_cover_the_model_once():
    model = build_model(
        {"backbone": "tiny_cnn", "in_channels": 1, "width": 4, "pooling": "gem", "embed_dim": 4}
    )
    bb = {id(p) for p in model.backbone_parameters()}
    hd = {id(p) for p in model.head_parameters()}
    assert bb.isdisjoint(hd)
    assert bb | hd == {id(p) for p in model.parameters()}
    assert id(model.pooling.p) in hd  # GeM's exponent is a new layer
    assert model.embedding_dim == 4


def test_pooling_none_with_a_map_raises():
    model = EmbeddingModel(TinyCNN(1, 4), None, EmbeddingHead(16, 4))
    with pytest.raises(ValueError, match="pooling is None"):
        model(torch.rand(2, 1, 8, 8))


def test_model_config_validation_and_roundtrip():
    cfg = ModelConfig(backbone="tiny_cnn", hidden_dims=[4, 4], embed_dim=None)
    assert cfg.hidden_dims == (4, 4)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    for bad in ({"in_channels": 0}, {"embed_dim": -1}, {"gem_p": 0.0}, {"width": True}):
        with pytest.raises(ValueError):
            ModelConfig(**bad)
