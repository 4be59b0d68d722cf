"""named_axes's import graph, function-local imports included, has no cycle, and every
import goes to the importer's own layer or one below (docs/architecture.md's layers:
parsing and state -> named values and the dispatcher with its rules -> named ops and
``lax`` -> transforms -> parallel -> the API).  Where a lower layer needs a higher one,
the higher one registers itself (an engine, NamedTensor's methods
attached by ``_naming.attach``, the torch.func opt-in)."""
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


def import_graph(local: bool = False) -> dict[str, set[str]]:
    """module -> the named_axes modules it imports at module level (``local``: anywhere,
    function bodies included)."""
    mods = _modules()
    graph = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        deps = set()
        for node in (ast.walk(tree) if local else tree.body):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= {t for t in _targets(mod, path, node, mods) if t in mods and t != mod}
        graph[mod] = deps
    return graph


def function_local_imports() -> list[str]:
    """``module:line`` of every import of a named_axes module inside a function."""
    mods = _modules()
    found = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top and any(
                    t in mods for t in _targets(mod, path, node, mods)):
                found.append(f"{mod}:{node.lineno}")
    return found


# The layers, lowest first (docs/architecture.md).  A package is one layer.
LAYERS = (
    {"_errors", "_parsing", "_plancache", "_torch_private", "_version", "_levels", "_env",
     "_engine", "_modes"},
    {"_tensor", "_abstract", "_tape", "_registry", "_layout", "_dispatch", "_draws", "_writes",
     "_shape_errors",
     "_naming", "_interop", "_compile_compat", "rules"},
    {"_einsum", "_einsum2", "_one_hot", "_functions", "_einops", "nn", "lax"},
    {"transforms"},
    {"parallel"},
    {"", "_xmap", "_xmap_call", "_xmap_graph", "_pmap", "_calibrate"},
)


def layer_of(mod: str) -> int:
    first = mod.split(".")[1] if "." in mod else ""
    for i, members in enumerate(LAYERS):
        if first in members:
            return i
    raise AssertionError(f"{mod} has no layer: add it to LAYERS and docs/architecture.md")


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


def test_the_import_graph_has_no_cycle_function_local_imports_included():
    graph = import_graph()
    assert len(graph) > 40 and "named_axes._dispatch" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
    everything = import_graph(local=True)
    assert _cycle(everything) is None, " -> ".join(_cycle(everything))


def test_every_import_goes_to_its_own_layer_or_below():
    upward = [f"{m} -> {t}" for m, deps in import_graph(local=True).items()
              for t in deps if layer_of(t) > layer_of(m)]
    assert not upward, upward


def test_function_local_imports_stay_few():
    # Each is an import deferred for cost (torch.distributed, torch_xla, inductor) or
    # for a module of the same layer; the count only goes down.
    local = function_local_imports()
    assert len(local) <= 56, local


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
