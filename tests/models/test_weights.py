"""``weights`` = "imagenet" | "none" | a file, with timm's Hugging Face download monkeypatched (no
network)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import safetensors.torch
import timm
import timm.models._hub as timm_hub
import torch
from huggingface_hub.errors import LocalEntryNotFoundError

from rank_lab.fewshot import build_rcnaps, film_resnet18
from rank_lab.models import ModelConfig, build_backbone, build_model
from rank_lab.models.weights import (
    WeightsUnavailableError,
    check_weights,
    create_timm_model,
    file_sha256,
    find_weights_record,
    parse_weights,
    timm_pretrained_name,
)
from rank_lab.retrieval import build_descriptor_net
from rank_lab.train import TrainConfig, Trainer


class FakeHub:
    """Stands in for ``huggingface_hub.hf_hub_download`` as timm calls it: serves a known state
    dict."""

    def __init__(self, tmp: Path, error: Exception | None = None) -> None:
        self.tmp, self.error, self.calls = tmp, error, []
        self.state: dict[str, dict[str, torch.Tensor]] = {}

    def weights_of(self, arch: str) -> dict[str, torch.Tensor]:
        if arch not in self.state:
            torch.manual_seed(123)
            self.state[arch] = {
                k: v.clone() for k, v in timm.create_model(arch).state_dict().items()
            }
        return self.state[arch]

    def __call__(
        self,
        repo_id: str,
        filename: str,
        revision: str | None = None,
        cache_dir: object = None,
        **kw: object,
    ) -> str:
        self.calls.append((repo_id, filename))
        if self.error is not None:
            raise self.error
        arch = repo_id.split("/", 1)[1].split(".", 1)[0]
        path = self.tmp / f"{repo_id.replace('/', '_')}.safetensors"
        safetensors.torch.save_file(
            {k: v.contiguous() for k, v in self.weights_of(arch).items()}, str(path)
        )
        return str(path)


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    fake = FakeHub(tmp_path)
    monkeypatch.setattr(timm_hub, "hf_hub_download", fake)
    return fake


@pytest.fixture()
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    err = LocalEntryNotFoundError("cannot reach huggingface.co: Name or service not known")
    fake = FakeHub(tmp_path, error=err)
    monkeypatch.setattr(timm_hub, "hf_hub_download", fake)
    return fake


def _assert_same(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    own = module.state_dict()
    shared = [k for k in own if k in state]
    assert len(shared) == len(own) > 10
    for k in shared:
        assert torch.equal(own[k], state[k]), k


def test_parse_weights_names_paths_and_errors(tmp_path: Path) -> None:
    assert parse_weights("ImageNet") == "imagenet" and parse_weights(" none ") == "none"
    assert parse_weights(None) == "none"
    f = tmp_path / "w.pth"
    f.write_bytes(b"x")
    assert parse_weights(str(f)) == f and parse_weights(f) == f
    with pytest.raises(FileNotFoundError, match=r"'imagnet' is neither 'imagenet', 'none'"):
        parse_weights("imagnet")
    with pytest.raises(TypeError, match="weights must be"):
        parse_weights(3)  # type: ignore[arg-type]


def test_pretrained_names_follow_the_papers() -> None:
    assert timm_pretrained_name("resnet50") == "resnet50.tv_in1k"
    assert timm_pretrained_name("resnet18") == "resnet18.tv_in1k"
    assert timm_pretrained_name("resnet50.a1_in1k") == "resnet50.a1_in1k"
    assert (
        timm_pretrained_name("resnet10t")
        == f"resnet10t.{timm.models.get_pretrained_cfg('resnet10t').tag}"
    )
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm_pretrained_name("resnet50.no_such_tag")


def test_imagenet_goes_through_timm_and_is_recorded(hub: FakeHub) -> None:
    bb = build_backbone("resnet18", weights="imagenet")
    assert bb.weights_record == {"weights": "imagenet", "source": "timm:resnet18.tv_in1k"}
    assert hub.calls[0] == ("timm/resnet18.tv_in1k", "model.safetensors")
    _assert_same(bb.model, hub.weights_of("resnet18"))
    # the same through ModelConfig / TrainConfig (flat key routed to the model)
    cfg = TrainConfig.from_dict({"backbone": "resnet18", "weights": "imagenet", "embed_dim": 8})
    assert cfg.model.weights == "imagenet"
    model = build_model(cfg)
    assert find_weights_record(model) == {"weights": "imagenet", "source": "timm:resnet18.tv_in1k"}
    _assert_same(model.backbone.model, hub.weights_of("resnet18"))


def test_imagenet_for_fewshot_and_descriptor_backbones(hub: FakeHub) -> None:
    for source in ("torchvision", "timm"):
        m = film_resnet18(source, weights="imagenet")
        assert m.weights_record["source"] == "timm:resnet18.tv_in1k"
        ref = {k: v for k, v in hub.weights_of("resnet18").items() if not k.startswith("fc.")}
        _assert_same(m.body, ref)
    rc = build_rcnaps("resnet18", source="timm", weights="imagenet")
    assert find_weights_record(rc) == {"weights": "imagenet", "source": "timm:resnet18.tv_in1k"}
    net = build_descriptor_net("resnet18", "gem", weights="imagenet")
    assert net.backbone.weights_record["weights"] == "imagenet"


def test_offline_imagenet_fails_before_training_naming_both_alternatives(offline: FakeHub) -> None:
    with pytest.raises(WeightsUnavailableError) as info:
        build_backbone("resnet18", weights="imagenet")
    msg = str(info.value)
    assert "weights='none'" in msg and "weights='/path/to/weights.pth'" in msg
    assert "resnet18.tv_in1k" in msg and "Name or service not known" in msg
    assert isinstance(info.value.__cause__, LocalEntryNotFoundError)
    with pytest.raises(WeightsUnavailableError, match="weights='none'"):
        check_weights("imagenet", "resnet50")
    # the Trainer builds its model in its constructor: nothing has trained when it fails
    x, y = torch.randn(16, 3, 32, 32), torch.arange(4).repeat_interleave(4)
    cfg = TrainConfig.from_dict(
        {
            "backbone": "resnet18",
            "weights": "imagenet",
            "batch_size": 8,
            "m_per_class": 2,
            "epochs": 1,
            "progress": False,
            "eval_every": 0,
        }
    )
    with pytest.raises(WeightsUnavailableError):
        Trainer(None, None, (x, y), None, cfg)


def test_connection_errors_are_reported_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        timm_hub, "hf_hub_download", FakeHub(tmp_path, error=ConnectionError("connection refused"))
    )
    with pytest.raises(WeightsUnavailableError, match="ConnectionError: connection refused"):
        create_timm_model("resnet10t", "imagenet", num_classes=0)


def test_a_bad_timm_argument_is_not_reported_as_a_download_problem(hub: FakeHub) -> None:
    with pytest.raises(TypeError):
        create_timm_model("resnet18", "imagenet", no_such_argument=1)


def test_weight_file_is_strict_and_recorded(tmp_path: Path) -> None:
    torch.manual_seed(5)
    src = timm.create_model("resnet18")
    path = tmp_path / "r18.pth"
    torch.save(src.state_dict(), path)
    bb = build_backbone("resnet18", weights=str(path))
    assert bb.weights_record == {
        "weights": "file",
        "path": str(path.resolve()),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    _assert_same(bb.model, {k: v for k, v in src.state_dict().items() if not k.startswith("fc.")})
    # a ResNet-18 file into a ResNet-34: an error naming the file (never a partial load)
    with pytest.raises(ValueError, match=r"r18\.pth"):
        build_backbone("resnet34", weights=path)
    with pytest.raises(FileNotFoundError, match=r"nope\.pth"):
        build_backbone("resnet18", weights=tmp_path / "nope.pth")
    # tiny CNN from a file; never from ImageNet
    tiny = build_backbone("tiny_cnn", in_channels=1, width=4)
    assert tiny.weights_record == {"weights": "none"}
    torch.save(tiny.state_dict(), tmp_path / "tiny.pth")
    again = build_backbone("tiny_cnn", in_channels=1, width=4, weights=tmp_path / "tiny.pth")
    _assert_same(again, tiny.state_dict())
    assert again.weights_record["sha256"] == file_sha256(tmp_path / "tiny.pth")
    with pytest.raises(ValueError, match="no pretrained weights"):
        build_backbone("tiny_cnn", weights="imagenet")


def test_defaults_and_conflicts(tmp_path: Path) -> None:
    assert build_backbone("resnet10t").weights_record == {"weights": "none"}
    assert find_weights_record(
        build_model({"backbone": "mlp", "input_dim": 4, "embed_dim": 2})
    ) == {"weights": "none"}
    with pytest.raises(TypeError, match="model.weights"):
        ModelConfig(backbone="resnet18", weights=3)  # type: ignore[arg-type]
    assert ModelConfig(weights=tmp_path).weights == str(tmp_path)
    with pytest.raises(ValueError, match="tiny CNN"):
        build_rcnaps("tiny", weights="imagenet")


def test_check_weights_records(tmp_path: Path, hub: FakeHub) -> None:
    assert check_weights("none", "resnet50") == {"weights": "none"}
    f = tmp_path / "w.pth"
    torch.save({"a": torch.zeros(2)}, f)
    assert check_weights(f, "resnet50")["sha256"] == file_sha256(f)
    assert check_weights("imagenet", "timm:resnet50", fetch=False) == {
        "weights": "imagenet",
        "source": "timm:resnet50.tv_in1k",
    }
    assert hub.calls == []
    assert check_weights("imagenet", "resnet18")["source"] == "timm:resnet18.tv_in1k"
    assert hub.calls and hub.calls[0][0] == "timm/resnet18.tv_in1k"
    with pytest.raises(ValueError, match="no ImageNet weights"):
        check_weights("imagenet", "mlp")
