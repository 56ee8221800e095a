"""save_feature_folder / load_feature_folder: round trip with extract_features, and every error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from rank_lab.data.datasets import DatasetFolderError
from rank_lab.ood import extract_features, load_feature_folder, save_feature_folder
from rank_lab.ood.toy import SmallConvNet


def _sets() -> tuple[dict[str, dict[str, torch.Tensor]], nn.Linear]:
    torch.manual_seed(0)
    model = SmallConvNet(3, width=4).eval()
    x, y = torch.rand(6, 1, 8, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    feats = extract_features(model, (x, y), layer="features", progress=False, device="cpu")
    ood = extract_features(
        model, torch.rand(4, 1, 8, 8), layer="features", progress=False, device="cpu"
    )
    return {"train": feats, "test": feats, "ood/noise": ood}, model.fc


def test_round_trip_from_extract_features(tmp_path: Path) -> None:
    sets, fc = _sets()
    save_feature_folder(tmp_path, sets, fc)
    feats, head = load_feature_folder(tmp_path)
    assert set(feats) == {"train", "test", "noise"} and "labels" not in feats["noise"]
    for k, v in sets["train"].items():
        assert torch.equal(feats["train"][k], v)
    x = sets["train"]["features"]
    torch.testing.assert_close(head(x), fc(x))
    torch.testing.assert_close(head(x), sets["train"]["logits"], atol=1e-5, rtol=1e-5)


def test_errors_name_the_problem_and_the_layout(tmp_path: Path) -> None:
    sets, fc = _sets()
    with pytest.raises(DatasetFolderError, match="does not exist.*Expected train.pt"):
        load_feature_folder(tmp_path / "nope")
    with pytest.raises(ValueError, match="sets keys"):
        save_feature_folder(tmp_path / "bad", {"val": sets["train"]}, fc)
    root = save_feature_folder(tmp_path / "ok", sets, fc)
    (root / "ood" / "noise.pt").unlink()
    with pytest.raises(DatasetFolderError, match="no OOD set"):
        load_feature_folder(root)
    torch.save({"features": torch.zeros(2, 3)}, root / "ood" / "x.pt")
    with pytest.raises(DatasetFolderError, match="keys"):
        load_feature_folder(root)
    torch.save({"features": torch.zeros(2, 3), "logits": torch.zeros(2, 3)}, root / "ood" / "x.pt")
    with pytest.raises(DatasetFolderError, match="disagree"):
        load_feature_folder(root)
    torch.save(
        {**sets["ood/noise"], "logits": sets["ood/noise"]["logits"][:3]}, root / "ood" / "x.pt"
    )
    with pytest.raises(DatasetFolderError, match="rows"):
        load_feature_folder(root)
    torch.save(
        {**sets["ood/noise"], "features": sets["ood/noise"]["features"] * float("nan")},
        root / "ood" / "x.pt",
    )
    with pytest.raises(DatasetFolderError, match="NaN"):
        load_feature_folder(root)
    torch.save(sets["ood/noise"], root / "ood" / "x.pt")
    torch.save((fc.weight[:, :2], fc.bias), root / "head.pt")
    with pytest.raises(DatasetFolderError, match="head.pt has weight"):
        load_feature_folder(root)
    (root / "head.pt").write_text("not a tensor file")
    with pytest.raises(DatasetFolderError, match="could not read"):
        load_feature_folder(root)
    (root / "test.pt").unlink()
    with pytest.raises(DatasetFolderError, match="test.pt"):
        load_feature_folder(root)
