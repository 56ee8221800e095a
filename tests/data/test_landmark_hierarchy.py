"""The offline H-GLDv2 pipeline (Ramzi thesis §4.3): normalisation, cleaning, de-duplication,
TF-IDF embedding, k-means, the manual mapping file, and the export read back by the GLDv2 loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rank_lab.data.landmark_hierarchy import (
    MappingRule,
    apply_mapping,
    build_landmark_hierarchy,
    cluster_categories,
    cluster_report,
    deduplicate,
    embed_categories,
    is_irrelevant,
    normalize_category,
    read_mapping,
)

RAW = {
    1: "Category:Church_building (1172–1954)",
    2: "church building",
    3: "https://commons.wikimedia.org/wiki/Category:Cathedral",
    4: "Waterfall",
    5: "waterfalls",
    6: "Lake",
    7: "castle",
    8: "Wikimedia category",
    9: ["lake", "mountain"],  # two categories: removed
    10: ["Mountain", "mountain (Alps)"],  # one after normalisation: kept
    11: "stone bridge",
    12: "bridge",
    13: "mosque",
    14: [],
}
MAPPING = """# keyword,super_category,natural_or_human_made[,cluster]
keyword,super_category,natural_or_human_made,cluster
church,Christian religious building,human-made,
cathedral,Christian religious building,human-made,
waterfall,Waterfall,natural,
waterfalls,Waterfall,natural,
lake,Lake,natural,
mountain,Mountain,natural,
bridge,Bridge,human-made,
castle,Castle,human-made,
"""


def test_normalisation_and_cleaning():
    assert normalize_category("Category:Church_building (1172–1954)") == "church building"
    assert (
        normalize_category("https://commons.wikimedia.org/wiki/Category:Waterfalls") == "waterfalls"
    )
    assert normalize_category("  Lighthouse of the 19th century ") == "lighthouse of the century"
    assert is_irrelevant(normalize_category("Wikimedia disambiguation page")) and is_irrelevant("")
    assert not is_irrelevant("lake")
    uniq, inv = deduplicate(["a", "b", "a", "c"])
    assert uniq == ["a", "b", "c"] and inv.tolist() == [0, 1, 0, 2]
    with pytest.raises(TypeError):
        normalize_category(3)  # type: ignore[arg-type]


def test_tfidf_embedding_groups_spelling_variants():
    texts = ["church building", "church", "churches", "waterfall", "waterfalls", "lake"]
    emb = embed_categories(texts, method="tfidf")
    assert emb.shape[0] == 6 and np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sim = emb @ emb.T
    assert sim[3, 4] > sim[3, 0] and sim[1, 2] > sim[1, 5]
    labels = cluster_categories(emb, k=3, seed=0)
    assert labels[3] == labels[4] and labels[1] == labels[2] and labels[1] != labels[3]
    rep = cluster_report(texts, labels, max_items=2)
    assert sum(len(v) for v in rep.values()) <= 6 and set(rep) == set(labels.tolist())
    assert embed_categories(texts, method="auto").shape == emb.shape  # no local model: TF-IDF
    with pytest.raises(ValueError, match="local model"):
        embed_categories(texts, method="sentence")
    with pytest.raises(ValueError, match="method"):
        embed_categories(texts, method="clip")


def test_mapping_rules(tmp_path: Path):
    path = tmp_path / "map.csv"
    path.write_text(MAPPING)
    rules = read_mapping(path)
    assert rules[0] == MappingRule("church", "Christian religious building", "human-made", None)
    out = apply_mapping(
        ["stone bridge", "bridgewater", "mosque"], np.zeros(3, dtype=np.int64), rules
    )
    # whole words only
    assert out == [("Bridge", "human-made"), ("unassigned", ""), ("unassigned", "")]
    restricted = [MappingRule("lake", "Lake", "natural", cluster=2)]
    assert apply_mapping(["lake", "lake"], np.array([1, 2]), restricted) == [
        ("unassigned", ""),
        ("Lake", "natural"),
    ]
    path.write_text("keyword,super_category,natural_or_human_made\nlake,Lake,water\n")
    with pytest.raises(ValueError, match="natural / human-made"):
        read_mapping(path)
    path.write_text("word,kind\n")
    with pytest.raises(ValueError, match="header"):
        read_mapping(path)
    with pytest.raises(FileNotFoundError):
        read_mapping(tmp_path / "missing.csv")


def test_pipeline_end_to_end_and_export(tmp_path: Path):
    path = tmp_path / "map.csv"
    path.write_text(MAPPING)
    h = build_landmark_hierarchy(RAW, path, k=4, seed=0)
    assert h.method == "tfidf"
    assert h.removed == {8: "irrelevant", 9: "several categories", 14: "no category"}
    assert h.landmarks[1][0] == h.landmarks[2][0] == "church building"  # de-duplicated
    assert h.landmarks[1][2] == h.landmarks[3][2] == "Christian religious building"
    assert h.landmarks[10][2:] == ("Mountain", "natural") and h.landmarks[11][2:] == (
        "Bridge",
        "human-made",
    )
    assert h.unassigned == ["mosque"]
    assert len(h.categories) == len(set(h.categories)) == 10
    lab = h.labels([1, 4, 11])
    sup, kind = h.vocab["hierarchical_label"], h.vocab["natural_or_human_made"]
    assert [sup[i] for i in lab[:, 1]] == ["Christian religious building", "Waterfall", "Bridge"]
    assert [kind[i] for i in lab[:, 2]] == ["human-made", "natural", "human-made"]
    with pytest.raises(ValueError, match="unassigned"):
        h.labels([13])
    with pytest.raises(ValueError, match="removed: irrelevant"):
        h.labels([8])

    # the export is the published H-GLDv2 format, read back by the loader
    from rank_lab.data.datasets.hierarchical_labels import read_gldv2_hierarchy

    csv_path = h.write_csv(tmp_path / "train_label_to_hierarchical.csv")
    back = read_gldv2_hierarchy(csv_path)
    assert back[4] == ("Waterfall", "natural") and 13 not in back and len(back) == 10
    with pytest.raises(ValueError, match="empty"):
        build_landmark_hierarchy({}, path)
    with pytest.raises(ValueError, match="every landmark was removed"):
        build_landmark_hierarchy({1: "Wikimedia category"}, path)
