"""The semi-automatic pipeline that built the hierarchical landmarks labels (H-GLDv2), run offline.

Ramzi thesis §4.3 / SupRank §VI: GLDv2 landmarks come from Wikimedia Commons pages whose
"instance of" field gives a category per landmark (e.g. *lake*, *waterfall*, *mosque*). Those raw
categories are noisy and of uneven granularity ("church building" vs "church building
(1172-1954)"; 5.7k unique strings), so they were grouped into 78 super-categories and two final
labels (natural vs human-made). The steps, each a function here:

1. **Scrape** (not reproducible offline): ``{landmark_id: [raw "instance of" strings]}`` is the
   input of :func:`build_landmark_hierarchy`.
2. **Clean** (:func:`normalize_category`, :func:`is_irrelevant`): lower-case, strip Wikimedia
   prefixes / URLs / underscores, drop parenthesised qualifiers and years, collapse spaces; remove
   landmarks whose categories are irrelevant ("Wikimedia category", "Wikimedia disambiguation
   page" ...) or that still have more than one distinct category (the thesis' "lightweight manual
   cleaning", about 0.25 % of the landmarks).
3. **De-duplicate** (:func:`deduplicate`): one entry per normalised string.
4. **Embed** (:func:`embed_categories`): TF-IDF on character n-grams (sklearn, default), so that
   spelling variants ("church", "churches", "church building") are close. The thesis uses the CLIP
   text encoder; a sentence-embedding model is used instead of TF-IDF only when
   ``sentence_transformers`` is installed *and* a local model folder is given (nothing is ever
   downloaded).
5. **Cluster** (:func:`cluster_categories`): k-means, K = 12 in the thesis, to show the prominent
   groups ("church", "castle" ...); :func:`cluster_report` lists each cluster's strings for the
   annotator.
6. **Manual mapping** (:func:`read_mapping`, :func:`apply_mapping`): the annotators split clusters
   into semantic super-categories and group those into natural / human-made. Here that knowledge
   is a mapping file, one rule per line (CSV with a header)::

       keyword,super_category,natural_or_human_made[,cluster]
       church,Christian religious building,human-made
       cathedral,Christian religious building,human-made
       waterfall,Waterfall,natural
       lake,Lake,natural,3

   A rule matches a normalised category that contains ``keyword`` as whole word(s); the optional
   ``cluster`` restricts it to one k-means cluster. The first matching rule wins (order = file
   order); unmatched categories are reported as ``unassigned`` for the next round of annotation.
7. **Export** (:meth:`LandmarkHierarchy.write_csv`): the published H-GLDv2 format
   ``landmark_id,category,supercategory,hierarchical_label,natural_or_human_made`` read by
   :func:`rank_lab.data.datasets.hierarchical_labels.load_gldv2_hierarchical`, and ``(N, 3)``
   integer labels (:meth:`LandmarkHierarchy.labels`).
"""

from __future__ import annotations

import csv
import importlib.util
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rank_lab._validation import as_tensor, check_positive_int

__all__ = [
    "IRRELEVANT_CATEGORIES",
    "MappingRule",
    "LandmarkHierarchy",
    "normalize_category",
    "is_irrelevant",
    "deduplicate",
    "embed_categories",
    "cluster_categories",
    "cluster_report",
    "read_mapping",
    "apply_mapping",
    "build_landmark_hierarchy",
]

#: Normalised categories that say nothing about the landmark (thesis §4.3.1).
IRRELEVANT_CATEGORIES = (
    "wikimedia category",
    "wikimedia disambiguation page",
    "wikimedia list article",
    "wikimedia template",
    "wikimedia internal item",
)
UNASSIGNED = "unassigned"


def normalize_category(text: str) -> str:
    """Normalise a scraped category string (step 2).

    ``"Category:Church_building (1172–1954)"`` -> ``"church building"``;
    ``"https://commons.wikimedia.org/wiki/Category:Waterfalls"`` -> ``"waterfalls"``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (a category), got {type(text).__name__}")
    s = unicodedata.normalize("NFKC", text).strip()
    s = re.sub(r"^https?://\S*?/wiki/", "", s)
    s = re.sub(r"^(category|wd|q\d+)\s*:\s*", "", s, flags=re.IGNORECASE)
    s = s.replace("_", " ").lower()
    s = re.sub(r"\([^)]*\)|\[[^\]]*\]", " ", s)  # parenthesised qualifiers
    s = re.sub(r"\b\d{3,4}\s*[-–—]\s*\d{2,4}\b|\b\d+(st|nd|rd|th)?\b", " ", s)  # years, numbers
    s = re.sub(r"[^\w\s'-]", " ", s)
    return re.sub(r"\s+", " ", s).strip(" -'")


def is_irrelevant(normalized: str, irrelevant: Sequence[str] = IRRELEVANT_CATEGORIES) -> bool:
    """Whether a normalised category is empty or one of the irrelevant Wikimedia ones (step 2)."""
    return not normalized or normalized in irrelevant


def deduplicate(normalized: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Unique strings in first-seen order and the index of every input in them (step 3)."""
    uniq: dict[str, int] = {}
    inv = np.array([uniq.setdefault(s, len(uniq)) for s in normalized], dtype=np.int64)
    return list(uniq), inv


def embed_categories(
    texts: Sequence[str], method: str = "auto", model_path: str | Path | None = None, seed: int = 0
) -> np.ndarray:
    """Embed category strings, ``(n, d)`` float32 with unit rows (step 4).

    Args:
        texts: the unique normalised categories.
        method: ``"tfidf"`` (character 2-4-grams within word boundaries + word unigrams,
            sublinear tf), ``"sentence"`` (a local sentence-transformers model, ``model_path``
            required) or ``"auto"`` (``"sentence"`` when the package is installed and
            ``model_path`` exists, else ``"tfidf"``).
        model_path: folder of a locally stored sentence-embedding model (never downloaded).
        seed: unused by TF-IDF; kept for a uniform signature.
    """
    if not texts:
        raise ValueError("texts is empty")
    local = model_path is not None and Path(model_path).is_dir()
    has_st = importlib.util.find_spec("sentence_transformers") is not None
    if method == "auto":
        method = "sentence" if (local and has_st) else "tfidf"
    if method == "sentence":
        if not (local and has_st):
            raise ValueError(
                "method='sentence' needs the sentence_transformers package and a local model "
                "folder (model_path)"
            )
        # optional (not a declared dependency), imported where it is used
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(model_path), device="cpu")
        emb = np.asarray(model.encode(list(texts), normalize_embeddings=True), dtype=np.float32)
        return emb
    if method != "tfidf":
        raise ValueError(f"method must be 'auto', 'tfidf' or 'sentence', got {method!r}")
    # heavy import, paid only on this path
    from scipy.sparse import hstack

    # heavy import, paid only on this path
    from sklearn.feature_extraction.text import TfidfVectorizer

    # heavy import, paid only on this path
    from sklearn.preprocessing import normalize

    chars = TfidfVectorizer(
        analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True
    ).fit_transform(texts)
    words = TfidfVectorizer(
        analyzer="word", token_pattern=r"(?u)\b\w+\b", sublinear_tf=True
    ).fit_transform(texts)
    return normalize(hstack([chars, words]).tocsr()).toarray().astype(np.float32)


def cluster_categories(embeddings: np.ndarray, k: int = 12, seed: int = 0) -> np.ndarray:
    """k-means cluster of every category (step 5; K = 12 in the thesis), ``(n,)`` int64.

    Args:
        embeddings: ``(n, d)`` finite category embeddings (integers are cast to float).
        k: number of clusters, a positive int; a ``k`` above ``n`` is capped at ``n`` (one
            cluster per category).
        seed: k-means seed.

    Raises:
        ValueError / TypeError: an empty, non-2-D or non-finite ``embeddings``; ``k`` not a
            positive int.
    """
    # heavy import, paid only on this path
    from sklearn.cluster import KMeans

    k = check_positive_int(k, "k")
    # complex and meta refused
    x = as_tensor(embeddings, "embeddings").detach().cpu().double().numpy()
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"embeddings must be a non-empty (n, d) array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"embeddings contains {int((~np.isfinite(x)).sum())} NaN or inf value(s)")
    k = min(k, x.shape[0])
    return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x).astype(np.int64)


def _check_pairs(texts: Sequence[str], clusters: np.ndarray) -> None:
    if len(texts) != len(clusters):
        raise ValueError(f"texts has {len(texts)} entries but clusters has {len(clusters)}")


def cluster_report(
    texts: Sequence[str], clusters: np.ndarray, max_items: int = 10
) -> dict[int, list[str]]:
    """``{cluster: its first max_items strings}``, what the annotator reads (step 5).

    Raises:
        ValueError: ``texts`` and ``clusters`` of different lengths, ``max_items`` not a positive
            int.
    """
    max_items = check_positive_int(max_items, "max_items")
    _check_pairs(texts, clusters)
    out: dict[int, list[str]] = {}
    for t, c in zip(texts, clusters, strict=True):
        out.setdefault(int(c), [])
        if len(out[int(c)]) < max_items:
            out[int(c)].append(t)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class MappingRule:
    """One line of the manual mapping file (step 6)."""

    keyword: str
    super_category: str
    natural_or_human_made: str
    cluster: int | None = None

    def __post_init__(self) -> None:
        for name in ("keyword", "super_category"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"{name} must be a non-empty str, got {v!r}")
        if self.natural_or_human_made not in ("natural", "human-made"):
            raise ValueError(
                "natural_or_human_made must be 'natural' or 'human-made', got "
                f"{self.natural_or_human_made!r}"
            )
        c = self.cluster
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0):
            raise ValueError(f"cluster must be None or a k-means cluster id >= 0, got {c!r}")

    def matches(self, normalized: str, cluster: int) -> bool:
        """Whole-word match of the keyword (optionally within one k-means cluster)."""
        if self.cluster is not None and self.cluster != cluster:
            return False
        return re.search(rf"\b{re.escape(self.keyword)}\b", normalized) is not None


def read_mapping(path: str | Path) -> list[MappingRule]:
    """Read a mapping CSV (``keyword,super_category,natural_or_human_made[,cluster]``, header; ``#``
    comments)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"mapping file {str(path)!r} does not exist")
    lines = [
        ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    reader = csv.DictReader(lines)
    need = ("keyword", "super_category", "natural_or_human_made")
    if reader.fieldnames is None or any(c not in reader.fieldnames for c in need):
        raise ValueError(
            f"mapping file {str(path)!r} needs the header {','.join(need)}[,cluster], got "
            f"{reader.fieldnames}"
        )
    rules = []
    for i, row in enumerate(reader, start=2):
        kw = normalize_category(row["keyword"])
        kind = row["natural_or_human_made"].strip().lower()
        if not kw or not row["super_category"].strip() or kind not in ("natural", "human-made"):
            raise ValueError(
                f"mapping file {str(path)!r}, rule {i}: need a keyword, a super_category and "
                f"natural / human-made, got {row}"
            )
        cl = (row.get("cluster") or "").strip()
        rules.append(MappingRule(kw, row["super_category"].strip(), kind, int(cl) if cl else None))
    if not rules:
        raise ValueError(f"mapping file {str(path)!r} holds no rule")
    return rules


def apply_mapping(
    texts: Sequence[str], clusters: np.ndarray, rules: Sequence[MappingRule]
) -> list[tuple[str, str]]:
    """``(super_category, natural_or_human_made)`` of every category; ``("unassigned", "")`` if no
    rule matches.

    Raises:
        ValueError: ``texts`` and ``clusters`` of different lengths.
    """
    _check_pairs(texts, clusters)
    out = []
    for t, c in zip(texts, clusters, strict=True):
        hit = next((r for r in rules if r.matches(t, int(c))), None)
        out.append((hit.super_category, hit.natural_or_human_made) if hit else (UNASSIGNED, ""))
    return out


@dataclass
class LandmarkHierarchy:
    """Result of :func:`build_landmark_hierarchy`.

    Attributes:
        landmarks: ``{landmark_id: (category, cluster, super_category, natural_or_human_made)}``
            for the kept landmarks (``super_category == "unassigned"`` when no rule matched).
        removed: ``{landmark_id: reason}`` ("irrelevant", "several categories", "no category").
        categories: the unique normalised categories; ``clusters`` their k-means clusters.
    """

    landmarks: dict[int, tuple[str, int, str, str]]
    removed: dict[int, str]
    categories: list[str]
    clusters: np.ndarray
    method: str = "tfidf"
    vocab: dict[str, list[str]] = field(default_factory=dict)

    @property
    def unassigned(self) -> list[str]:
        """Categories that no mapping rule covers (for the next annotation round)."""
        return sorted({v[0] for v in self.landmarks.values() if v[2] == UNASSIGNED})

    def labels(self, landmark_ids: Sequence[int], *, drop_unassigned: bool = True) -> torch.Tensor:
        """``(N, 3)`` long labels (landmark, super-category id, natural/human-made id), fine first.

        Ids are indices in ``vocab["hierarchical_label"]`` and ``vocab["natural_or_human_made"]``
        (sorted names). Unknown or unassigned landmarks raise a ``ValueError``.
        """
        rows = []
        for lid in landmark_ids:
            if int(lid) not in self.landmarks:
                raise ValueError(
                    f"landmark {lid} is not in the hierarchy (removed: "
                    f"{self.removed.get(int(lid), 'unknown')})"
                )
            _, _, sup, kind = self.landmarks[int(lid)]
            if sup == UNASSIGNED and drop_unassigned:
                raise ValueError(f"landmark {lid} has no super-category yet (category unassigned)")
            rows.append(
                [
                    int(lid),
                    self.vocab["hierarchical_label"].index(sup),
                    self.vocab["natural_or_human_made"].index(kind),
                ]
            )
        return torch.tensor(rows, dtype=torch.long).reshape(-1, 3)

    def write_csv(self, path: str | Path, *, include_unassigned: bool = False) -> Path:
        """Write the H-GLDv2 format
        ``landmark_id,category,supercategory,hierarchical_label,natural_or_human_made``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                [
                    "landmark_id",
                    "category",
                    "supercategory",
                    "hierarchical_label",
                    "natural_or_human_made",
                ]
            )
            for lid, (cat, _, sup, kind) in sorted(self.landmarks.items()):
                if sup == UNASSIGNED and not include_unassigned:
                    continue
                w.writerow(
                    [
                        lid,
                        f"https://commons.wikimedia.org/wiki/Category:{cat.replace(' ', '_')}",
                        cat,
                        sup,
                        kind,
                    ]
                )
        return path


def build_landmark_hierarchy(
    landmark_categories: Mapping[int, str | Sequence[str]],
    rules: Sequence[MappingRule] | str | Path,
    *,
    k: int = 12,
    method: str = "auto",
    model_path: str | Path | None = None,
    seed: int = 0,
    irrelevant: Sequence[str] = IRRELEVANT_CATEGORIES,
) -> LandmarkHierarchy:
    """Run steps 2-6 on ``{landmark_id: raw category or list of raw categories}``.

    Args:
        landmark_categories: the scraped "instance of" strings of every landmark.
        rules: mapping rules or the path of a mapping CSV (:func:`read_mapping`).
        k: number of k-means clusters (12 in the thesis; capped at the number of categories).
        method, model_path: the embedding (:func:`embed_categories`).
        seed: k-means seed.
        irrelevant: normalised categories that remove a landmark.

    Returns:
        A :class:`LandmarkHierarchy`.
    """
    if not landmark_categories:
        raise ValueError("landmark_categories is empty")
    k = check_positive_int(k, "k")
    if isinstance(rules, (str, Path)):
        rules = read_mapping(rules)
    kept: dict[int, str] = {}
    removed: dict[int, str] = {}
    for lid, raw in landmark_categories.items():
        items = [raw] if isinstance(raw, str) else list(raw)
        norm = {normalize_category(s) for s in items}
        if any(is_irrelevant(s, irrelevant) for s in norm):
            removed[int(lid)] = "irrelevant"
        elif not norm:
            removed[int(lid)] = "no category"
        elif len(norm) > 1:
            removed[int(lid)] = "several categories"
        else:
            kept[int(lid)] = norm.pop()
    if not kept:
        raise ValueError("every landmark was removed by the cleaning step")
    cats, inv = deduplicate(list(kept.values()))
    local = model_path is not None and Path(model_path).is_dir()
    used = (
        method
        if method != "auto"
        else (
            "sentence" if local and importlib.util.find_spec("sentence_transformers") else "tfidf"
        )
    )
    clusters = cluster_categories(embed_categories(cats, used, model_path, seed), k, seed)
    mapped = apply_mapping(cats, clusters, rules)
    landmarks = {
        lid: (cats[i], int(clusters[i]), *mapped[i]) for lid, i in zip(kept, inv, strict=True)
    }
    assigned = [v for v in landmarks.values() if v[2] != UNASSIGNED]
    vocab = {
        "hierarchical_label": sorted({v[2] for v in assigned}),
        "natural_or_human_made": sorted({v[3] for v in assigned}),
    }
    return LandmarkHierarchy(landmarks, removed, cats, clusters, used, vocab)
