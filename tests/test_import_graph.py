"""named_axes's module-level import graph has no cycle (docs/architecture.md's layers:
each module imports only the ones before it at import time)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "named_axes"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _targets(mod: str, path: Path, node: ast.stmt, mods: dict) -> list[str]:
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package[:len(package) - node.level + 1] + ([node.module] if node.module
                                                                else [])
            target = ".".join(base)
        else:
            target = node.module or ""
        return [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                for a in node.names]
    return [a.name for a in node.names]


def import_graph() -> dict[str, set[str]]:
    """module -> the named_axes modules it imports at module level."""
    mods = _modules()
    graph = {}
    for mod, path in mods.items():
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= {t for t in _targets(mod, path, node, mods) if t in mods and t != mod}
        graph[mod] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_module_level_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 40 and "named_axes._dispatch" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
