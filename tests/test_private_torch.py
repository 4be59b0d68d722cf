"""Private torch names are reached only through ``named_axes/_torch_private.py``.

An AST scan of ``named_axes/**/*.py`` finds every private torch name: an attribute chain
rooted at ``torch`` (or a name imported from it) with a component that starts with ``_``
(``torch._C._functorch.maybe_current_level``, ``torch.ops.aten._to_copy``), an import of
one (``from torch.utils._pytree import tree_map``, ``import torch._dynamo``), the
private attributes of torch objects (``dtensor._local_tensor``, ``node._sequence_nr``,
``getattr(fn, "_forward_cls")``), and the private hooks of torch classes a subclass
overrides (``def _should_skip_dynamo``).  A name is counted as written up to the component after
its last private one (``torch._C._functorch.TransformType.Grad`` counts as
``torch._C._functorch.TransformType``); a private attribute of an object the scan cannot
name counts once per attribute (``._local_tensor``).

The rules (issue 30, item 3): (a) none outside ``_torch_private.py``; (b) at most
:data:`LIMIT` distinct ones inside it; (c) none inside a ``try`` guarded by ``except
Exception`` (nor in such a handler), anywhere -- a torch upgrade that moves a private name
must fail loudly, not fall back in silence.  Calls of ``_torch_private``'s own functions
count as private uses for (c).
"""
from __future__ import annotations

import ast
import functools
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "named_axes"
COMPAT = "_torch_private.py"
LIMIT = 30

# Private attributes of torch objects, found on values the scan cannot trace to torch
# (a DTensor, an autograd node, an OpOverload, a module).  ``_data``, ``_names`` are
# NamedTensor's own and are not listed.
PRIVATE_ATTRS = frozenset({
    "_local_tensor", "_spec", "_sequence_nr", "_forward_cls", "fw_metadata", "_version",
    "_base", "_schema", "_parameters", "_buffers", "_modules", "_is_zerotensor",
    "_init_fn", "_opoverload", "_op_dispatcher", "_custom_op_handlers", "_overloadpacket",
    "_is_view", "_typed_storage", "_saved_tensors", "_backward_hooks", "_forward_hooks",
    "_forward_pre_hooks", "_make_subclass", "_make_wrapper_subclass", "_mode_key",
    "_binops", "_binop_handlers", "_grad_fn", "_cdata",
})
# Private hooks of torch classes that a subclass overrides (``def _should_skip_dynamo``
# in a TorchDispatchMode subclass): a private torch name too, counted like an attribute.
PRIVATE_HOOKS = frozenset({"_should_skip_dynamo"})

def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _normal(dotted: str) -> str:
    """``dotted`` up to the component after its last private one."""
    parts = dotted.split(".")
    last = max(i for i, p in enumerate(parts) if _private(p))
    return ".".join(parts[:last + 2])


def _chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """The root of an attribute chain and its attribute names, outermost last."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return node, attrs[::-1]


class _Scan(ast.NodeVisitor):
    def __init__(self, source: str, ours: frozenset = frozenset()):
        self.tree = ast.parse(source)
        self.ours = ours                       # attributes named_axes sets itself
        self.aliases: dict[str, str] = {}      # local name -> dotted torch name
        self.compat: set[str] = set()          # names bound from _torch_private
        self.found: list[tuple[int, str]] = []
        self.guarded: list[tuple[int, str]] = []
        self._guard = 0
        self._inner: set[int] = set()
        self._alias_values: dict[int, str] = {}   # `name = torch....`: value -> name
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "torch" or a.name.startswith("torch."):
                        if a.asname:
                            self.aliases[a.asname] = a.name
                        else:
                            self.aliases["torch"] = "torch"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                    node.module == "torch" or node.module.startswith("torch.")):
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.ImportFrom) and node.module and (
                    node.module.endswith("_torch_private")):
                self.compat.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level and not node.module:
                self.compat.update(a.asname or a.name for a in node.names
                                   if a.name == "_torch_private")
        for node in ast.walk(self.tree):   # `_ft = torch._C._functorch`: an alias too
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name) and isinstance(node.value, ast.Attribute):
                dotted = self._dotted(node.value)
                if dotted is not None:
                    self.aliases.setdefault(node.targets[0].id, dotted)
                    self._alias_values[id(node.value)] = node.targets[0].id
        self.visit(self.tree)

    def _dotted(self, node: ast.AST) -> str | None:
        """The dotted torch name of an attribute chain (None: not rooted at torch),
        without a last attribute that named_axes sets itself."""
        root, attrs = _chain(node)
        if not isinstance(root, ast.Name) or root.id not in self.aliases:
            return None
        if attrs and attrs[-1] in self.ours:
            attrs = attrs[:-1]
        return ".".join([self.aliases[root.id], *attrs])

    def _add(self, line: int, name: str) -> None:
        self.found.append((line, name))
        if self._guard:
            self.guarded.append((line, name))

    def visit_Try(self, node):
        broad = any(h.type is None or any(
            isinstance(t, ast.Name) and t.id in ("Exception", "BaseException")
            for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]))
            for h in node.handlers)
        self._guard += broad
        for stmt in node.body:
            self.visit(stmt)
        for h in node.handlers:
            self.visit(h)
        self._guard -= broad
        for stmt in node.orelse + node.finalbody:
            self.visit(stmt)

    visit_TryStar = visit_Try

    def visit_Import(self, node):
        self._underscore_alias(node)
        for a in node.names:
            if a.name.startswith("torch.") and any(map(_private, a.name.split("."))) and \
                    not (a.asname and self._used_as_root(a.asname)):
                self._add(node.lineno, _normal(a.name))

    def _underscore_alias(self, node) -> None:
        """A torch name imported under an alias that starts with ``_`` (``import
        torch.utils.checkpoint as _ckpt``) reads as a private torch name wherever it is
        used: count it, so no scan that does not resolve aliases can see one."""
        module = node.module if isinstance(node, ast.ImportFrom) and node.level == 0 else ""
        for a in node.names:
            dotted = f"{module}.{a.name}" if module else a.name
            if (dotted == "torch" or dotted.startswith("torch.")) and a.asname and \
                    _private(a.asname):
                self._add(node.lineno, f"{dotted} as {a.asname}")

    def visit_ImportFrom(self, node):
        self._underscore_alias(node)
        if node.level == 0 and node.module and (
                node.module == "torch" or node.module.startswith("torch.")):
            for a in node.names:
                dotted = f"{node.module}.{a.name}"
                if any(map(_private, dotted.split("."))) and not self._used_as_root(
                        a.asname or a.name):
                    self._add(node.lineno, _normal(dotted))

    def _used_as_root(self, name: str) -> bool:
        """Whether ``name`` is only used as the root of attribute chains (then the
        chains are counted, not the import)."""
        uses = [n for n in ast.walk(self.tree)
                if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
        roots = {id(n.value) for n in ast.walk(self.tree) if isinstance(n, ast.Attribute)}
        return bool(uses) and all(id(n) in roots for n in uses)

    def visit_Attribute(self, node):
        if id(node) in self._inner:
            return self.generic_visit(node)
        self._skip_inner(node)
        name = self._alias_values.get(id(node))
        if name is not None and self._used_as_root(name):
            return self.generic_visit(node)   # counted where the alias is used
        dotted = self._dotted(node)
        if dotted is not None:
            if any(map(_private, dotted.split("."))):
                self._add(node.lineno, _normal(dotted))
            return self.generic_visit(node)
        for a in _chain(node)[1]:
            if a in PRIVATE_ATTRS:
                self._add(node.lineno, "." + a)
        self.generic_visit(node)

    def _skip_inner(self, node: ast.AST) -> None:
        sub = node.value if isinstance(node, ast.Attribute) else None
        while isinstance(sub, ast.Attribute):
            self._inner.add(id(sub))
            sub = sub.value

    def visit_FunctionDef(self, node):
        if node.name in PRIVATE_HOOKS:
            self._add(node.lineno, "." + node.name)
        self.generic_visit(node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.compat and self._guard:
            self.guarded.append((node.lineno, f"_torch_private: {node.id}"))

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("getattr", "hasattr", "setattr", "delattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            attr, target = node.args[1].value, node.args[0]
            dotted = self._dotted(ast.Attribute(value=target, attr=attr, ctx=ast.Load()))
            if dotted is not None:
                if any(map(_private, dotted.split("."))):
                    self._add(node.lineno, _normal(dotted))
                    self._inner.add(id(target))
                    self._skip_inner(target)
            elif attr in PRIVATE_ATTRS:
                self._add(node.lineno, "." + attr)
        self.generic_visit(node)


def _ours() -> frozenset:
    """The private attributes named_axes sets on objects itself (``fn._named_axes =
    True``): not torch's."""
    out = set()
    for p in PACKAGE.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                out.add(n.attr)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                    n.func.id == "setattr" and len(n.args) > 1 and \
                    isinstance(n.args[1], ast.Constant):
                out.add(n.args[1].value)
    return frozenset(out - PRIVATE_ATTRS)


def _scan() -> dict[str, _Scan]:
    ours = _ours()
    return {str(p.relative_to(PACKAGE)): _Scan(p.read_text(), ours)
            for p in sorted(PACKAGE.rglob("*.py"))}


def _listing(rows) -> str:
    return "\n".join(f"  {f}:{line}: {name}" for f, line, name in rows)


def test_scan_finds_private_names():
    """The scan itself: each form it must see."""
    src = """
import torch
import torch._dynamo
import torch.utils._pytree as pytree
from torch.utils._pytree import tree_map
from torch._C import _functorch as ft
from torch.distributed.tensor import DTensor
torch._C._functorch.TransformType.Grad
ft.maybe_current_level()
pytree.tree_flatten
getattr(torch._C, "_aoti", None)
x._local_tensor, node._sequence_nr, getattr(fn, "_forward_cls"), y._data, DTensor._spec
torch.__version__, torch.nn.functional.relu, torch.func.grad._ours
_ft = torch._C._functorch
_ft.get_unwrapped
try:
    torch._C._foo()
except Exception:
    pass
"""
    s = _Scan(src, frozenset({"_ours"}))
    assert sorted({n for _, n in s.found}) == sorted({
        "torch._dynamo", "torch.utils._pytree.tree_map", "torch._C._functorch.TransformType",
        "torch._C._functorch.maybe_current_level", "torch.utils._pytree.tree_flatten",
        "torch._C._aoti", "._local_tensor", "._sequence_nr", "._forward_cls",
        "torch.distributed.tensor.DTensor._spec", "torch._C._foo",
        "torch._C._functorch.get_unwrapped"})
    assert s.guarded == [(17, "torch._C._foo")]


@functools.lru_cache(maxsize=None)
def _offenders():
    scans = _scan()
    outside = [(f, line, n) for f, s in scans.items() if f != COMPAT for line, n in s.found]
    guarded = [(f, line, n) for f, s in scans.items() for line, n in s.guarded]
    inside = sorted({n for _, n in scans[COMPAT].found})
    return outside, guarded, inside


def test_private_torch_names_only_in_compat_module():
    outside, guarded, _ = _offenders()
    assert not outside, (f"{len(outside)} private torch names outside {COMPAT} (add them "
                         f"there, with why and the public alternative):\n{_listing(outside)}")


def test_no_private_torch_name_under_except_exception():
    _, guarded, _ = _offenders()
    assert not guarded, ("private torch names inside a try guarded by `except Exception` "
                         f"(catch what is expected: ImportError, AttributeError):\n"
                         f"{_listing(guarded)}")


def test_at_most_limit_private_names():
    _, _, inside = _offenders()
    assert len(inside) <= LIMIT, (f"{len(inside)} distinct private torch names in {COMPAT} "
                                  f"(at most {LIMIT}):\n" + "\n".join(f"  {n}" for n in inside))


def _torch_xla_private_uses(source: str) -> list:
    """``(line, chain)`` of each attribute chain rooted at an ``import torch_xla...`` name
    with a private component (torch-xla's ``_XLAC`` and the like)."""
    tree = ast.parse(source)
    roots = {(a.asname or a.name.split(".")[0]) for n in ast.walk(tree)
             if isinstance(n, ast.Import) for a in n.names if a.name.split(".")[0] == "torch_xla"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root, attrs = _chain(node)
            if isinstance(root, ast.Name) and root.id in roots and any(map(_private, attrs)):
                found.append((node.lineno, ".".join([root.id, *attrs])))
    return found


def test_private_torch_xla_names_only_in_compat_module():
    # torch-xla's private names (its graph runtime) live in the compat module too; they
    # are torch-xla's, not torch's, so LIMIT does not count them
    outside = [f"{p.relative_to(PACKAGE)}:{line}: {name}"
               for p in sorted(PACKAGE.rglob("*.py")) if p.name != COMPAT
               for line, name in _torch_xla_private_uses(p.read_text())]
    assert not outside, "private torch-xla names outside the compat module:\n" + "\n".join(outside)
    inside = _torch_xla_private_uses((PACKAGE / COMPAT).read_text())
    assert inside and all("_XLAC" in name for _, name in inside)
