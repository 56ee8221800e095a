"""The floors inside rank_lab.metrics (docs/architecture.md, "The metrics"): definitions below the
engine, the engine's sub-packages in the order they build on each other, no re-export module.

The table between the ``metrics-floors`` markers of docs/architecture.md is the map; every import
between two modules of ``rank_lab.metrics`` (read with :mod:`ast`, top level and inside functions)
must go from a unit to its own unit or a lower floor, and every module must have a unit.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "rank_lab" / "metrics"
DOC = ROOT / "docs" / "architecture.md"


def floors() -> dict[str, int]:
    """``unit -> floor`` from the documented table (units relative to ``rank_lab.metrics``)."""
    text = DOC.read_text(encoding="utf-8")
    table = re.search(
        r"<!-- metrics-floors: begin -->(.*?)<!-- metrics-floors: end -->", text, re.S
    )
    assert table, "docs/architecture.md lost its metrics-floors table"
    out = {}
    for floor, cell in re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", table.group(1), re.M):
        for unit in re.findall(r"`([\w.]+)`", cell):
            out[unit] = int(floor)
    return out


def modules() -> dict[str, Path]:
    """Dotted names relative to ``rank_lab.metrics`` ('' for its ``__init__``) -> file."""
    out = {}
    for path in sorted(METRICS.rglob("*.py")):
        parts = list(path.relative_to(METRICS).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def unit_of(module: str, table: dict[str, int]) -> str | None:
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in table:
            return ".".join(parts[:k])
    return None


def imports(path: Path, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Modules of rank_lab.metrics imported by ``path`` (relative names) with their line."""
    out = []
    mods = modules()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = ("rank_lab.metrics." + module).rstrip(".").split(".")
                anchor = anchor if is_package else anchor[:-1]
                base = ".".join(anchor[: len(anchor) - (node.level - 1)] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            if not t.startswith("rank_lab.metrics."):
                continue
            rel = t[len("rank_lab.metrics.") :]
            while rel and rel not in mods:
                rel = rel.rpartition(".")[0]
            if rel:
                out.append((rel, node.lineno))
    return out


def transparent(module: str, path: Path) -> bool:
    """A package ``__init__`` that imports nothing (a docstring): not a floor of its own."""
    return path.name == "__init__.py" and not any(
        isinstance(n, (ast.Import, ast.ImportFrom))
        and (getattr(n, "module", "") or "") != "__future__"
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    )


def test_every_metrics_module_has_a_floor() -> None:
    table = floors()
    homeless = [
        m for m, p in modules().items() if m and not transparent(m, p) and unit_of(m, table) is None
    ]
    assert not homeless, (
        f"modules of rank_lab.metrics without a floor in docs/architecture.md: {homeless}"
    )
    stale = [u for u in table if not any(m == u or m.startswith(u + ".") for m in modules())]
    assert not stale, f"the metrics-floors table names units that do not exist: {stale}"


def upward(table: dict[str, int], edges: list[tuple[str, str, int]]) -> list[str]:
    """Edges ``(importer, imported, line)`` from a unit to its own floor or above (own unit
    excepted)."""
    bad = []
    for module, target, line in edges:
        src, dst = unit_of(module, table), unit_of(target, table)
        if src is None or dst is None or src == dst:
            continue
        if table[dst] >= table[src]:
            bad.append(
                f"{module} (floor {table[src]}) imports {target} (floor {table[dst]}) at line "
                f"{line}"
            )
    return bad


def test_no_import_from_a_lower_floor_to_a_higher_one_inside_metrics() -> None:
    mods = modules()
    # '' is the public API, on top
    edges = [
        (module, target, line)
        for module, path in mods.items()
        if module
        for target, line in imports(path, module, path.name == "__init__.py")
        if target and not transparent(target, mods[target])
    ]
    assert edges, "the import reader found no import inside rank_lab.metrics"
    bad = upward(floors(), edges)
    assert not bad, "imports against the metrics floors of docs/architecture.md:\n  " + "\n  ".join(
        bad
    )


def test_no_module_only_re_exports() -> None:
    """Issue 29: every module of rank_lab.metrics defines something (no former-name shim)."""
    shims = []
    for module, path in modules().items():
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defines = any(
            isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign))
            and not (isinstance(n, (ast.Assign, ast.AnnAssign)) and "__all__" in ast.unparse(n))
            for n in tree.body
        )
        if not defines:
            shims.append(module)
    assert not shims, f"modules that only import: {shims}"
    text = "\n".join(p.read_text(encoding="utf-8") for p in METRICS.rglob("*.py"))
    assert "still importable" not in text and "re-exported" not in text


def test_the_checker_finds_upward_and_sideways_imports() -> None:
    table = {"low": 0, "mid.a": 1, "mid.b": 1, "high": 2}
    edges = [
        ("high.x", "low", 1),
        ("mid.a.y", "low.z", 2),
        ("low", "high", 3),
        ("mid.a", "mid.b", 4),
        ("mid.a.q", "mid.a", 5),
    ]
    assert upward(table, edges) == [
        "low (floor 0) imports high (floor 2) at line 3",
        "mid.a (floor 1) imports mid.b (floor 1) at line 4",
    ]
    assert unit_of("mid.a.y", table) == "mid.a" and unit_of("other", table) is None
