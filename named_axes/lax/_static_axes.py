"""The named axes of ``nx.lax`` control flow's results, whatever the values decide
(docs/guide.md §3): what the values skipped runs here on fake values
(:mod:`named_axes._abstract`), and the result is broadcast along what it lacks.

>>> union_axes([('a',), ()], [('b', 'a'), ('c',)])
[('a', 'b'), ('c',)]
"""
from __future__ import annotations

import types
from typing import Any, Callable

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .._abstract import WritesRealTensor, run_abstractly
from .._env import bound_axes
from .._errors import AxisTypeError
from .._tensor import NamedTensor
from .._torch_private import (DataDependentOutputException, DynamicOutputShapeException,
                              tree_flatten, tree_unflatten)
from ._collectives import axis_index

__all__ = ["UNKNOWN", "named_axes_of", "settles", "fixed_point", "abstract", "call_key",
           "union_axes", "with_axes"]

_NT = NamedTensor


def named_axes_of(*trees: Any) -> list:
    return [tuple(v._names) if type(v) is _NT else () for v in tree_flatten(trees)[0]]


def settles(first: list, before: list, after: list):
    """The carry's final named axes when one step showed them settled: its input held
    init_val's axes and the step added none (per leaf), else None."""
    for f, b, a in zip(first, before, after):
        if not set(f) <= set(b) or not set(a) <= set(b):
            return None
    return before


def fixed_point(step: Callable, val: Any, axes: list) -> list:
    """The named axes (per leaf) of a loop carry ``val`` grown by ``step`` from ``axes``
    until they stop growing, by runs on fake values (JAX batches a carry from the start
    along every axis its body ever adds)."""
    while True:
        out = abstract("while_loop", lambda v: step(with_axes(v, axes)), val)
        if out is UNKNOWN:
            return axes
        grown = union_axes(axes, named_axes_of(out))
        if grown == axes:
            return axes
        axes = grown


UNKNOWN = object()


def call_key(fns: tuple, operands: tuple) -> tuple | None:
    """What the named axes of plain functions' results called on ``operands`` may depend
    on, but values: their code, the layouts of what they are given and close over, the
    bound axes (None: another callable, or a closure cell not yet filled)."""
    key = [tuple(bound_axes().items())]
    for fn in fns:
        if type(fn) is not types.FunctionType:
            if isinstance(fn, (bool, int)):
                key.append(fn)
                continue
            return None
        try:
            cells = [c.cell_contents for c in fn.__closure__ or ()]
        except ValueError:
            return None
        key.append(fn.__code__)
        _layouts(cells, key)
        _layouts(fn.__defaults__ or (), key)
        _layouts(list((fn.__kwdefaults__ or {}).values()), key)
    _layouts(operands, key)
    return tuple(key)


def _layouts(values, key: list) -> None:
    for v in values:
        if type(v) in (list, tuple):
            key.append(len(v))
            _layouts(v, key)
        elif type(v) is dict:
            key.append(tuple(v))
            _layouts(v.values(), key)
        elif type(v) is _NT:
            key.append((_NT, v._names, tuple(v._data.shape), v._data.dtype, v._data.device))
        elif isinstance(v, torch.Tensor):
            key.append((type(v), tuple(v.shape), v.dtype, v.device))
        elif v is None or isinstance(v, (str, bool, int, float, complex)):
            key.append(v)
        else:
            key.append((type(v), id(v)))


def abstract(op: str, fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` on fake values: a branch not taken, a loop step not run (its named
    axes count, :mod:`named_axes._abstract`); ``UNKNOWN`` where it would write into a
    real tensor it closes over, or cannot run on fakes (its named axes do not count)."""
    try:
        return run_abstractly(fn, *args)
    except (DataDependentOutputException, DynamicOutputShapeException,
            GuardOnDataDependentSymNode) as e:
        raise AxisTypeError(
            f"{op}: the named axes of its result are those of every branch and step, "
            f"found by running the ones the values skip on fake tensors, and one needs a "
            f"tensor's value there ({str(e).splitlines()[0][:200]}); keep values out of "
            f"shapes and Python control flow inside it") from None
    except (WritesRealTensor, AssertionError, RuntimeError):
        # writes into a tensor it closes over, or torch cannot make a fake of one (a
        # differentiated tensor inside a torch.func transform): not run, the axes unknown
        return UNKNOWN


def union_axes(a: list, b: list) -> list:
    """Per leaf: the named axes of ``a``'s then those ``b``'s adds, in order."""
    return [tuple(x or ()) + tuple(n for n in (y or ()) if n not in (x or ()))
            for x, y in zip(a, b)]


def with_axes(tree: Any, axes: list) -> Any:
    """``tree`` with each leaf broadcast along the named axes of ``axes`` (per leaf) it
    lacks (a ``torch.where`` on an all-true mask along them: the engines' broadcast)."""
    flat, spec = tree_flatten(tree)
    out = []
    for v, want in zip(flat, axes):
        have = v._names if type(v) is _NT else ()
        missing = [n for n in want if n not in have]
        if missing:
            mask = None
            for n in missing:
                m = axis_index(n) >= 0
                mask = m if mask is None else mask & m
            v = v if isinstance(v, (torch.Tensor, _NT)) else torch.as_tensor(v)
            device = (v._data if type(v) is _NT else v).device
            mask = NamedTensor._wrap(mask._data.to(device), mask._names)
            v = torch.where(mask, v, v)
        out.append(v)
    return tree_unflatten(out, spec)
