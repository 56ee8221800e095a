"""The package's import graph: no cycle, no arrow from a lower floor to a higher one (issue 17).

The graph is read from the source with :mod:`ast` (no import runs): every ``import`` and
``from ... import`` of every module under ``rank_lab/``, at the top of the module *and* inside
functions, classes and ``if`` blocks. The floors are :data:`LAYERS` below, the same table as in
docs/architecture.md (a test keeps the two equal). A module belongs to the longest prefix of its
dotted name in the table (its *unit*); it may import its own unit and any unit on a lower floor,
never a unit on its own floor or above.

The checkers are plain functions of a graph so that the last tests can show that they fail on a
fake graph with a cycle or an upward edge.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from rank_lab.losses import SmoothAP
from rank_lab.losses.registry import build_loss, list_losses, unregister_loss

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rank_lab"
ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"

#: The floors of the house: unit (a module or sub-package, dotted) -> floor. Lower floors never
#: import higher ones; units on one floor do not import each other. Keep docs/architecture.md equal.
LAYERS: dict[str, int] = {
    "rank_lab._validation": 0,
    "rank_lab._progress": 0,
    "rank_lab.vocabulary": 0,
    "rank_lab.registry": 0,
    "rank_lab.utils": 1,
    "rank_lab.stats": 1,
    "rank_lab.memory": 1,
    "rank_lab.ranking": 1,
    "rank_lab": 2,
    "rank_lab.metrics": 2,
    "rank_lab.models": 2,
    "rank_lab.data": 2,
    "rank_lab.engine": 2,
    "rank_lab.losses": 3,
    "rank_lab.train": 4,
    "rank_lab.retrieval": 4,
    "rank_lab.learned": 4,
    "rank_lab.ood": 4,
    "rank_lab.cost": 4,
    "rank_lab.train.distributed": 5,
    "rank_lab.fewshot": 5,
    "rank_lab.fixtures": 5,
    "rank_lab.book": 6,
}

Graph = Mapping[str, Mapping[str, list[str]]]  # module -> imported module -> ["file:line", ...]


def module_name(path: Path, root: Path) -> str:
    """``rank_lab/a/b.py`` -> ``rank_lab.a.b``; ``rank_lab/a/__init__.py`` -> ``rank_lab.a``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (relative imports resolved against
    ``module``)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path = PACKAGE) -> dict[str, dict[str, list[str]]]:
    """Every module of the package ``root`` and the package modules it imports, anywhere in its
    code.

    ``from p import x`` is an edge to ``p.x`` when that is a module, else to ``p``; importing
    ``p.q.r`` is also an edge to the packages ``p.q`` and ``p`` that Python initialises first
    (except the importer's own ancestors, which are already being initialised). Imports of other
    distributions are ignored.
    """
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, dict[str, list[str]]] = {}
    for mod, path in files.items():
        edges: dict[str, list[str]] = {}
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_package, node)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            else:
                continue
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            for target in targets:
                while target not in files and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target not in files:
                    continue
                parents = [target.rsplit(".", k)[0] for k in range(1, target.count(".") + 1)]
                for t in [target, *parents]:
                    places = (
                        edges.setdefault(t, [])
                        if t != mod and not mod.startswith(t + ".")
                        else None
                    )
                    if places is not None and where not in places:
                        places.append(where)
        graph[mod] = edges
    return graph


def find_cycles(graph: Graph) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def unit_of(module: str, layers: Mapping[str, int]) -> str | None:
    """The longest key of ``layers`` that is ``module`` or a package above it (None: no floor).

    A key without a dot (the top package) stands for its own ``__init__`` only, so that a new
    sub-package is not silently housed on the top package's floor.
    """
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        unit = ".".join(parts[:k])
        if unit in layers and (k == len(parts) or "." in unit):
            return unit
    return None


def upward_edges(graph: Graph, layers: Mapping[str, int]) -> list[str]:
    """Imports of a unit on the importer's floor or above (its own unit excepted), one line each."""
    bad = []
    for mod, edges in sorted(graph.items()):
        src = unit_of(mod, layers)
        for target, where in sorted(edges.items()):
            dst = unit_of(target, layers)
            if src is None or dst is None or src == dst:
                continue
            if layers[dst] >= layers[src]:
                bad.append(
                    f"{mod} (floor {layers[src]}) imports {target} (floor {layers[dst]}) at "
                    f"{', '.join(where)}"
                )
    return bad


def cycle_report(graph: Graph, cycles: list[list[str]]) -> list[str]:
    """The edges inside each cycle with where they are written (the message of a failure)."""
    lines = []
    for cycle in cycles:
        members = set(cycle)
        lines += [
            f"{a} -> {b} at {', '.join(graph[a][b])}"
            for a in cycle
            for b in sorted(graph[a])
            if b in members
        ]
    return lines


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, list[str]]]:
    return import_graph()


def test_no_import_cycles(graph):
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycle_report(graph, cycles))


def test_no_import_from_a_lower_floor_to_a_higher_one(graph):
    bad = upward_edges(graph, LAYERS)
    assert not bad, "imports against the floors of docs/architecture.md:\n  " + "\n  ".join(bad)


def test_every_module_has_a_floor(graph):
    homeless = sorted(m for m in graph if unit_of(m, LAYERS) is None)
    assert not homeless, (
        f"modules without a floor (add their unit to LAYERS and docs/architecture.md): {homeless}"
    )
    stale = sorted(
        u for u in LAYERS if u not in graph and not any(m.startswith(u + ".") for m in graph)
    )
    assert not stale, f"LAYERS names units that do not exist: {stale}"


def _in_function_imports(root: Path = PACKAGE) -> list[tuple[str, str, bool]]:
    """``(file:line, imported module, commented)`` of every import inside a function or class
    body."""
    out = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        tree = ast.parse(source, str(path))
        for scope in ast.walk(tree):
            if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for node in ast.walk(scope):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                above = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
                commented = above.startswith("#") or "#" in lines[node.lineno - 1]
                where = f"{path.relative_to(root.parent)}:{node.lineno}"
                out += [(where, name, commented) for name in names]
    return sorted(set(out))


def test_package_imports_sit_at_the_top_of_modules():
    """No ``rank_lab`` import (absolute or relative) inside a function: a hidden arrow of the
    graph."""
    hidden = [f"{w}: {n}" for w, n, _ in _in_function_imports() if n.startswith(("rank_lab", "."))]
    assert not hidden, (
        "imports of rank_lab inside functions (move them to the top):\n  " + "\n  ".join(hidden)
    )


def test_deferred_third_party_imports_say_why():
    """An optional or heavy dependency imported where it is used carries a comment saying why."""
    silent = [
        f"{w}: {n}"
        for w, n, c in _in_function_imports()
        if not n.startswith(("rank_lab", ".")) and not c
    ]
    assert not silent, "imports inside functions without a comment saying why:\n  " + "\n  ".join(
        silent
    )


def test_no_private_name_is_imported_across_modules():
    """``from rank_lab.a import _x`` reaches into another module's privates: make ``x`` public or
    move it."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mod, is_package = module_name(path, PACKAGE), path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and _resolve(mod, is_package, node).startswith(
                "rank_lab"
            ):
                private = [
                    a.name
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
                if private:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {private}")
    assert not bad, "private names imported across modules:\n  " + "\n  ".join(bad)


def test_docs_show_the_same_floors():
    """docs/architecture.md lists the floors as ``| floor | units |`` rows: the same map as
    LAYERS."""
    rows = re.findall(
        r"^\|\s*(\d+)\s*\|([^|]*)\|", ARCHITECTURE_DOC.read_text(encoding="utf-8"), re.M
    )
    documented = {
        unit: int(floor) for floor, cell in rows for unit in re.findall(r"`(rank_lab[\w.]*)`", cell)
    }
    assert documented == LAYERS


# --- the checkers can fail ---------------------------------------------------------------------


def test_a_cycle_is_found():
    fake = {
        "p.a": {"p.b": ["a.py:1"]},
        "p.b": {"p.c": ["b.py:2"]},
        "p.c": {"p.a": ["c.py:3"]},
        "p.d": {"p.a": ["d.py:1"]},
    }
    assert find_cycles(fake) == [["p.a", "p.b", "p.c"]]
    assert cycle_report(fake, find_cycles(fake)) == [
        "p.a -> p.b at a.py:1",
        "p.b -> p.c at b.py:2",
        "p.c -> p.a at c.py:3",
    ]
    assert find_cycles({"p.a": {"p.b": ["a.py:1"]}, "p.b": {}}) == []


def test_an_upward_or_sideways_edge_is_found():
    layers = {"p.low": 0, "p.mid": 1, "p.high": 2, "p.side": 2, "p.high.top": 3}
    fake = {
        "p.low.x": {"p.high.y": ["x.py:5"], "p.low.z": ["x.py:6"]},  # up two floors; own unit
        "p.high.y": {"p.mid": ["y.py:1"], "p.side.w": ["y.py:2"]},  # down (fine); sideways
        "p.high.top.t": {"p.high.y": ["t.py:1"]},  # a nested unit one floor up imports down: fine
        "p.mid": {"p.high.top.t": ["m.py:9"]},  # the most specific unit decides
    }
    assert upward_edges(fake, layers) == [
        "p.high.y (floor 2) imports p.side.w (floor 2) at y.py:2",
        "p.low.x (floor 0) imports p.high.y (floor 2) at x.py:5",
        "p.mid (floor 1) imports p.high.top.t (floor 3) at m.py:9",
    ]
    assert unit_of("q.other", layers) is None
    assert unit_of("p", {"p": 0}) == "p" and unit_of("p.new", {"p": 0}) is None


def test_the_graph_sees_imports_inside_functions_and_relative_imports(tmp_path):
    pkg = tmp_path / "fakepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text(
        "import os\n\ndef f():\n    from fakepkg.sub import b\n    return b\n"
    )
    (pkg / "sub" / "b.py").write_text(
        "class C:\n    def g(self):\n        from ..a import f\n        return f\n"
    )
    g = import_graph(pkg)
    assert {m: sorted(e) for m, e in g.items()} == {
        "fakepkg": [],
        "fakepkg.a": ["fakepkg.sub", "fakepkg.sub.b"],
        "fakepkg.sub": ["fakepkg.sub.b"],
        "fakepkg.sub.b": ["fakepkg.a"],
    }
    assert g["fakepkg.a"]["fakepkg.sub.b"] == ["fakepkg/a.py:4"]
    assert find_cycles(g) == [["fakepkg.a", "fakepkg.sub", "fakepkg.sub.b"]]
    assert [n for _, n, _ in _in_function_imports(pkg)] == ["fakepkg.sub", "..a"]


def test_the_documented_new_loss_registers_and_takes_both_calls():
    """The ``python`` block under "A new loss" in docs/architecture.md runs as it is shown."""
    text = ARCHITECTURE_DOC.read_text(encoding="utf-8")
    block = re.search(r"## A new loss\n.*?```python\n(.*?)```", text, re.S)
    assert block is not None, "docs/architecture.md lost its example of a new loss"
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/architecture.md", "exec"), namespace)
    try:
        assert "my_smooth_ap" in list_losses()
        loss = build_loss("My-Smooth-AP")
        assert isinstance(loss, namespace["MySmoothAP"])
        emb, labels = (
            torch.randn(12, 4, generator=torch.Generator().manual_seed(0)),
            torch.arange(3).repeat(4),
        )
        expect = SmoothAP(tau=0.01)(emb, labels)
        torch.testing.assert_close(loss(emb, labels), expect)
        torch.testing.assert_close(
            loss(emb, labels, emb, labels, ref_self_index=torch.arange(12)), expect
        )
    finally:
        unregister_loss("my_smooth_ap")


def test_the_documented_new_training_loop_runs_and_resumes_bit_for_bit(tmp_path, monkeypatch):
    """The ``python`` block under "A new training loop" in docs/architecture.md runs as it is shown:
    a straight run equals a run interrupted after its first epoch and resumed from the
    checkpoint."""
    from rank_lab.engine import EngineConfig
    from rank_lab.engine.loop import Engine

    text = ARCHITECTURE_DOC.read_text(encoding="utf-8")
    block = re.search(r"## A new training loop\n.*?```python\n(.*?)```", text, re.S)
    assert block is not None, "docs/architecture.md lost its example of a new training loop"
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/architecture.md", "exec"), namespace)
    fit_regressor = namespace["fit_regressor"]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Linear(3, 1)

    straight_model = model()
    straight = fit_regressor(straight_model, x, y, epochs=3)
    assert len(straight) == 3 and straight[-1] < straight[0]
    ckpt = tmp_path / "run.pt"
    original = Engine.train_step
    calls = {"n": 0}

    def interrupted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] > 3:  # the second epoch's first step (3 batches per epoch)
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fit_regressor(model(), x, y, epochs=3, engine=EngineConfig(checkpoint=ckpt))
    monkeypatch.setattr(Engine, "train_step", original)
    resumed_model = model()
    resumed = fit_regressor(resumed_model, x, y, epochs=3, engine=EngineConfig(checkpoint=ckpt))
    assert resumed == straight
    assert torch.equal(resumed_model.weight, straight_model.weight)


def test_the_documented_new_backbone_and_pooling_register_and_build():
    """The ``python`` block under "A new model" in docs/architecture.md runs as it is shown."""
    from rank_lab.models import build_model
    from rank_lab.models.backbones import BACKBONES, list_backbones
    from rank_lab.models.heads import ModelConfig
    from rank_lab.models.pooling import POOLINGS, list_poolings

    text = ARCHITECTURE_DOC.read_text(encoding="utf-8")
    block = re.search(r"## A new model \(backbone, pooling\)\n.*?```python\n(.*?)```", text, re.S)
    assert block is not None, "docs/architecture.md lost its example of a new model"
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/architecture.md", "exec"), namespace)
    try:
        assert "one_conv" in list_backbones() and "my_lse" in list_poolings()
        model = build_model(
            {
                "backbone": "one_conv",
                "in_channels": 1,
                "width": 8,
                "pooling": "my_lse",
                "embed_dim": 4,
            }
        )
        x = torch.randn(3, 1, 6, 6)
        emb = model(x)
        assert emb.shape == (3, 4)
        torch.testing.assert_close(emb.norm(dim=1), torch.ones(3))
        assert ModelConfig(backbone="One-Conv", pooling="My-LSE").pooling == "My-LSE"
        pool = POOLINGS.build("my_lse")
        fmap = torch.randn(2, 3, 4, 5)
        torch.testing.assert_close(pool(fmap), torch.logsumexp(fmap.reshape(2, 3, 20), dim=2))
    finally:
        BACKBONES.unregister("one_conv")
        POOLINGS.unregister("my_lse")
    assert "one_conv" not in BACKBONES and "my_lse" not in POOLINGS
