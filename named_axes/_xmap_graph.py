"""How ``torch.compile`` sees an xmap: one call in dynamo's graph, where that is safe.

An xmap whose body reads nothing from outside its arguments but modules, functions and
constants (:func:`outside_reads`) goes into dynamo's graph as one call
(``torch.compiler.allow_in_graph``) instead of being traced through the library, whose
every function and global read would be a guard; why and how: docs/architecture.md,
"Under torch.compile".  Any other body (a closed-over tensor: its gradient; a buffer
updated in place: its values) is traced by dynamo, which tracks such reads itself.

>>> import math, torch
>>> scale = 2.0
>>> [(name, value) for _, name, value in outside_reads(lambda x: x * scale * math.pi)]
[('scale', 2.0)]
>>> w = torch.ones(3)
>>> outside_reads(lambda x: x * w) is None      # a closed-over tensor
True
"""
from __future__ import annotations

import builtins
import dis
import functools
import types
from typing import Any, Callable

import torch

from ._env import bound_axes
from ._modes import LOWERING
from ._torch_private import dynamo_loaded, functorch_active

__all__ = ["GraphCall", "outside_reads"]

# modules whose functions and classes read no user state (their globals are theirs)
_LIBRARIES = frozenset({"torch", "named_axes", "math", "cmath", "numpy", "operator",
                        "functools", "itertools", "einops", "builtins", "typing",
                        "collections", "numbers", "string", "re", "enum", "dataclasses"})
_CONSTANTS = (int, float, complex, bool, str, bytes, type(None), type(Ellipsis),
              torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format)


def _library(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    if isinstance(obj, types.ModuleType):
        module = obj.__name__
    return module.split(".")[0] in _LIBRARIES


def _constant(v: Any) -> bool:
    if type(v) in (tuple, frozenset):
        return all(_constant(x) for x in v)
    return type(v) in _CONSTANTS


def _globals_read(code: types.CodeType, free: tuple = ()) -> set | None:
    """The global names ``code`` (and the code nested in it) loads, or None when it
    writes a global or one of the function's closed-over variables ``free``."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") or (
                ins.opname in ("STORE_DEREF", "DELETE_DEREF") and ins.argval in free):
            return None
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(ins.argval)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            inner = _globals_read(c, free)
            if inner is None:
                return None
            names |= inner
    return names


def outside_reads(fun: Callable) -> list | None:
    """What ``fun`` reads from outside its arguments, or None when that may hold state (a
    tensor, a module, a list ...): ``(holder, key, value)`` for each global (``holder``
    the globals dict) and closed-over variable (``holder`` the cell, ``key`` None) that
    holds a constant or a user function (itself checked the same way).  Modules,
    functions and classes of torch, named_axes and the standard numeric libraries are
    read freely."""
    walk = _Walk()
    ok = walk.function(fun, top=True) if isinstance(fun, types.FunctionType) else \
        walk.visit(fun, None, None)
    return walk.reads if ok else None


class _Walk:
    """:func:`outside_reads`'s walk over what a function reads."""

    def __init__(self) -> None:
        self.reads: list = []
        self.seen: set = set()

    def visit(self, obj: Any, holder: Any, key: Any) -> bool:
        if isinstance(obj, functools.partial):
            return self.visit(obj.func, None, None) and _constant(obj.args) and \
                _constant(tuple(obj.keywords.values()))
        if _constant(obj):
            self.reads.append((holder, key, obj))
            return True
        if isinstance(obj, types.ModuleType):
            return _library(obj)
        if isinstance(obj, (type, types.BuiltinFunctionType)):
            self_ = getattr(obj, "__self__", None)
            return _library(obj) and (self_ is None or isinstance(self_, (type, types.ModuleType)))
        if isinstance(obj, types.FunctionType):
            if _library(obj) and obj.__closure__ is None:   # a library's own function
                return True   # (a closure a library made, nx.grad(f)'s, is read through)
        elif not (type(obj).__name__ == "_Xmapped" and _library(obj)
                  and not obj.axis_resources):   # an xmap it calls, vectorized
            return False
        if holder is not None:
            self.reads.append((holder, key, obj))
        if id(obj) in self.seen:
            return True
        self.seen.add(id(obj))
        return self.function(obj) if isinstance(obj, types.FunctionType) else \
            self.visit(obj.fun, None, None)

    def function(self, fn: types.FunctionType, top: bool = False) -> bool:
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:   # not bound yet (a recursive inner function)
                return False
            if not self.visit(value, cell, None):
                return False
        for d in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
            if not self.visit(d, None, None):
                return False
        if _library(fn) and not top:
            return True   # a closure a library made: what it closed over was read above
        names = _globals_read(fn.__code__, fn.__code__.co_freevars)
        if names is None:
            return False   # it writes state outside itself
        glob = fn.__globals__
        for name in names:
            if name in glob:
                if not self.visit(glob[name], glob, name):
                    return False
            elif not hasattr(builtins, name):
                return False   # not defined yet: whatever it will be is unknown
        return True


class GraphCall:
    """An xmap's call as one node of dynamo's graph: ``run(args)`` runs the xmap as it
    would run without dynamo; :meth:`applies` (traced by dynamo) says whether a call may
    take this route: dynamo loaded (:meth:`register`), plain tensor arguments, no named
    program or ``torch.func`` transform around it, the outside values the body reads
    unchanged since the check."""

    def __init__(self, run: Callable, fun: Callable) -> None:
        reads = outside_reads(fun)
        self.ok = reads is not None
        self.cells = tuple((h, v) for h, k, v in reads or () if k is None)
        self.globals = tuple((h, k, v) for h, k, v in reads or () if k is not None)
        self.run = run
        self.call = None
        self.register()

    def register(self) -> None:
        """Make :attr:`call` the function dynamo writes into its graph, once dynamo is
        loaded (it is not imported for this: a process that never compiles does not
        pay for it); until then dynamo traces the call as before."""
        if self.ok and self.call is None and dynamo_loaded():
            self.call = torch.compiler.allow_in_graph(_opaque(self.run))

    def applies(self, args: tuple, kwargs: dict) -> bool:
        if self.call is None or kwargs or bound_axes() or functorch_active():
            return False
        for a in args:   # (a tensor subclass, DTensor: dynamo traces it as before)
            if (type(a).__module__, type(a).__qualname__) not in _PLAIN_TYPES:
                return False
        for cell, value in self.cells:
            if cell.cell_contents is not value:
                return False
        for glob, name, value in self.globals:
            if glob.get(name, _MISSING) is not value:
                return False
        return True


_MISSING = object()
# by name: dynamo knows an argument's type from its tensor guard, while an identity test
# against a second name for that class costs it a Python-evaluated guard
_PLAIN_TYPES = frozenset((t.__module__, t.__qualname__)
                         for t in (torch.Tensor, torch.nn.Parameter))


def _opaque(run: Callable) -> Callable:
    """The function dynamo writes into its graph: the xmap run outside dynamo, its
    collectives lowered to plain code for the user's backend (``_modes.LOWERING``)."""
    def xmap_call(*args):
        LOWERING[0] += 1
        try:
            return run(args)
        finally:
            LOWERING[0] -= 1
    return xmap_call
