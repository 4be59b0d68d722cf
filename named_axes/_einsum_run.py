"""Running a named einsum's plan (:mod:`._einsum`): one positional ``torch.einsum`` on
the physical tensors, or, where an engine computes a contracted named axis in pieces
(a SerialLoop's chunks, a mesh's ranks), that einsum keeping the axis and its ``psum``.

>>> import torch, named_axes as nx
>>> nx.einsum('{i}->', nx.named(torch.arange(4.), 'i'))   # planned, then run here
tensor(6.)
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from ._dispatch import result
from ._einsum2 import einsum2
from ._engine import NeedsWholeAxes, engine_for
from ._env import _state as _env_state
from ._env import current_frame
from ._tensor import NamedTensor

_NT = NamedTensor


def _run_plan(plan: tuple, operands: tuple, bound: dict, out: Any = None) -> Any:
    """Run ``plan`` (``out``: the einsum's result, when already computed)."""
    eq, _, _, _, scaled, expand, perm, names, _ = plan
    if out is None:
        datas = [x._data if type(x) is _NT else x for x in operands]
        if _env_state.engine:   # an engine may hand operands over, contract its values
            every = names + tuple(n for n, _ in plan.contracted)   # the product's axes
            engine = engine_for(every)
            if engine is not None:
                datas = _handed(engine, operands, every)
        out = _einsum(eq, datas)
    scale = 1
    for n in scaled:
        scale *= bound[n]
    if scale != 1:
        out = out * scale
    if expand:
        shape = tuple(out.shape)
        out = out.reshape((1,) * len(expand) + shape).expand(
            tuple(bound[n] for n in expand) + shape)
    if perm is not None:
        out = out.permute(perm + tuple(range(len(perm), out.dim())))
    return result(out, names, torch.einsum)


def _einsum(eq: str, datas: list) -> torch.Tensor:
    return einsum2(eq, *datas) if len(datas) == 2 else torch.einsum(eq, *datas)


def _handed(engine, operands: tuple, every: tuple) -> list:
    """The operands' tensors as ``engine`` hands them to a product over ``every``."""
    return [engine.broadcast(x._data, x._names, every) if type(x) is _NT else
            engine.broadcast(x, (), every) for x in operands]


def _split_axes(names) -> tuple:
    """The names among ``names`` that an engine in scope computes piece by piece (the
    axes of a ``SerialLoop``: each chunk holds part of them)."""
    out = []
    for n in names:
        frame = current_frame(n)
        if frame is not None and frame.engine is not None and frame.engine.splits(n):
            out.append(n)
    return tuple(out)


def _run_split(plan: tuple, operands: tuple, bound: dict) -> Any:
    """``_run_plan`` when a contracted or broadcast named axis is split by an engine, else
    None.  A contraction over such an axis keeps it in the einsum and sums it with
    ``nx.lax.psum``, which the engine makes exact (a SerialLoop replays it across its
    chunks, as it does for pdot); an output axis broadcast from nothing gets the size
    this piece holds."""
    eq, _, _, _, scaled, expand, perm, names, contracted = plan
    loop = _split_axes([n for n, _ in contracted])
    grow = _split_axes(expand)
    if not loop and not grow:
        return None
    sizes = dict(bound)
    for n in grow:
        sizes[n] = current_frame(n).engine.local_size(n)
    if not loop:
        return _run_plan(plan, operands, sizes)
    engine = current_frame(loop[0]).engine
    try:
        engine.check_contraction(tuple({n for x in operands if type(x) is _NT
                                        for n in x._names}), loop)
    except NeedsWholeAxes as e:   # summed on their whole (two axes split on one mesh dim)
        return e.engine.whole(functools.partial(_einsum_on, plan, bound), tuple(operands),
                              {}, e.names, run=_call)
    every = names + tuple(n for n, _ in contracted)   # the product's axes
    datas = _handed(engine, operands, every)
    # a mesh's ranks each contract their part of the loop axes and the parts are summed
    summed = engine.sum_pieces(lambda: _einsum(eq, datas), loop, operands)
    if summed is not None:
        return _run_plan(plan, operands, sizes, summed)
    # else the einsum keeps the loop axes in front of its output [kept names..., positional]
    from .lax import psum

    lhs, out = eq.split("->")
    lead = "".join(c for n, c in contracted if n in loop)
    data = torch.einsum(f"{lhs}->{lead}{out}", *datas)
    kept = tuple(n for n in names if n not in expand)
    summed = psum(NamedTensor._wrap(data, loop + kept), loop)
    return _run_plan(plan, operands, sizes, summed._data if type(summed) is _NT else summed)


def _einsum_on(plan: tuple, bound: dict, *operands) -> Any:
    out = _run_split(plan, operands, bound)
    return _run_plan(plan, operands, bound) if out is None else out


def _call(func, args, kwargs):
    return func(*args, **kwargs)
