"""One abstract run of a named program, noting what any assignment of resources costs.

:func:`trace_costs` runs an xmapped program once on fake tensors with a :class:`CostTape`
open; every op on named values notes its FLOPs (torch's ``FlopCounterMode``) and bytes
under the named axes it runs over, its collective or the axes it runs along, and where an
operand needing a gradient meets axes it lacks.  All at full sizes: an assignment only
scales them (:mod:`._auto`), so one trace prices every candidate.

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x, w: nx.lax.psum(x @ w, 'b'), in_axes=(['b', ...], [...]),
...             out_axes=[...])
>>> t = trace_costs(f, (torch.ones(8, 3), torch.ones(3, 5)))
>>> t.axis_sizes, t.work[frozenset({'b'})][0]    # 8 products of (3,) @ (3, 5): 2*8*15
({'b': 8}, 240)
>>> [(c.op, sorted(c.axes)) for c in t.comms]
[('psum', ['b'])]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from torch.utils.flop_counter import FlopCounterMode

from .._abstract import NoRealWrites
from .._env import _state as _env_state
from .._tape import Tape
from .._tensor import NamedTensor
from .._torch_private import FakeTensorMode, disable_dispatch_modes, tree_leaves, tree_map
from ..transforms._shapes import ShapeDtypeStruct, _describe, materialize

__all__ = ["CostTrace", "CostTape", "Comm", "Meet", "trace_costs"]

_NT = NamedTensor


@dataclass(frozen=True)
class Comm:
    """A collective of the program: ``op`` along the named ``axes``; the bytes and named
    axes of its operand (``x``) and of its result (``out``), at full sizes."""

    op: str
    axes: frozenset
    x_names: frozenset
    x_bytes: int
    out_names: frozenset
    out_bytes: int


@dataclass(frozen=True)
class Meet:
    """An operand that needs a gradient (``key``: which value; ``leaf``: an input of the
    program) named ``names`` meeting values that carry ``union``."""

    key: int
    names: frozenset
    nbytes: int
    union: frozenset
    leaf: bool


@dataclass
class CostTrace:
    """What :func:`trace_costs` noted (full sizes; see the module docstring).

    Attributes:
        axis_sizes: the program's named axes (the ones ``axis_resources`` may assign).
        work: named axes an op runs over (with, for an op along axes, those axes:
            ``(names, along)``) -> ``[FLOPs, bytes moved, number of ops]``.
        saved: named axes of a result -> its bytes (the activations a backward keeps).
        comms: the collectives and the ops along named axes, in program order.
        meets: where an operand needing a gradient meets axes it lacks.
        values: the distinct sets of named axes values carry.
        inputs: ``(names, bytes, differentiated)`` per tensor argument.
        sharded: per tensor argument, whether it came as a DTensor (laid out by the
            plan, so its gradient stays sharded; a full tensor's is gathered whole).
        outputs: ``(names, bytes)`` per result of the body.
    """

    axis_sizes: dict
    work: dict = field(default_factory=dict)
    saved: dict = field(default_factory=dict)
    comms: list = field(default_factory=list)
    meets: list = field(default_factory=list)
    values: set = field(default_factory=set)
    inputs: list = field(default_factory=list)
    sharded: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


def _nbytes(v: Any) -> int:
    data = v._data if type(v) is _NT else v
    return data.numel() * data.element_size()


def _names(v: Any) -> frozenset:
    return frozenset(v._names) if type(v) is _NT else frozenset()


def _tensors(values) -> list:
    return [v for v in values if type(v) is _NT or isinstance(v, torch.Tensor)]


class CostTape(Tape):
    """A tape that prices ops instead of following cotangents (see the module
    docstring); ``flops()`` reads the FLOPs counted so far."""

    def __init__(self, trace: CostTrace, flops: Callable[[], int]) -> None:
        super().__init__(())
        self.trace, self.flops, self.counted = trace, flops, 0
        self.inputs: dict = {}   # id -> the body's arguments (kept alive)
        self.met: list = []   # the values of the meets, kept alive: their ids are keys
        self.along_seen: dict = {}   # (id(operand), axes) -> operand: ops along axes

    def note(self, kind, operands, outputs, along=frozenset(), collective=None) -> None:
        ins, outs = _tensors(operands), _tensors(outputs)
        t = self.trace
        held = frozenset().union(*map(_names, ins))
        # the strings an op is called with name axes only where its operands have them
        # (an einsum's equation, a loss's reduction='mean' name none)
        along = frozenset(along) & held
        union = frozenset().union(*map(_names, ins + outs), along)
        total = self.flops()
        flops, self.counted = total - self.counted, total
        # an op along named axes (softmax over one) is computed on their whole where a
        # mesh splits them: its work is keyed by those axes too, not shared over them
        key = union if kind == "sum" or not along else (union, frozenset(along))
        w = t.work.setdefault(key, [0, 0, 0])
        w[0] += flops
        w[1] += sum(map(_nbytes, ins + outs))
        w[2] += 1
        for o in outs:
            t.values.add(_names(o))
            t.saved[_names(o)] = t.saved.get(_names(o), 0) + _nbytes(o)
        for v in ins:
            t.values.add(_names(v))
            if _needs_grad(v) and union - _names(v):
                self.met.append(v)   # (a freed value's id could name the next one)
                t.meets.append(Meet(id(v), _names(v), _nbytes(v), union,
                                    id(v) in self.inputs))
        contracted = held - frozenset().union(*map(_names, outs)) if outs else frozenset()
        if collective is not None and ins and outs:
            self._note_collective(collective, ins, outs)
        elif kind == "bilinear" and contracted and not along:
            # an einsum summing named axes away: a psum of its result over them
            t.comms.append(Comm("contract", contracted, held, max(map(_nbytes, ins)),
                                _names(outs[0]), _nbytes(outs[0])))
        elif along and ins and outs and (id(ins[0]), along) not in self.along_seen:
            # (an op along axes that calls another on the same operand, nx.mean calling
            # sum, is one reduction: the inner one is noted first)
            self.along_seen[id(ins[0]), along] = ins[0]
            op = "psum" if kind == "sum" else "whole"
            t.comms.append(Comm(op, frozenset(along), _names(ins[0]), _nbytes(ins[0]),
                                _names(outs[0]), _nbytes(outs[0])))

    def _note_collective(self, collective: tuple, ins: list, outs: list) -> None:
        op, axes = collective
        axes = frozenset(axes) if isinstance(axes, (tuple, list)) else frozenset((axes,))
        if op == "axis_index":
            return
        x = max(ins, key=_nbytes) if op != "pdot" else ins[0]
        names = frozenset().union(*map(_names, ins)) if op == "pdot" else _names(x)
        self.trace.comms.append(Comm(op, axes, names, _nbytes(x), _names(outs[0]),
                                     _nbytes(outs[0])))


def _needs_grad(v: Any) -> bool:
    data = v._data if type(v) is _NT else v
    return bool(data.requires_grad)


def trace_costs(fun: Callable, args: tuple, *, differentiate: bool | None = None) -> CostTrace:
    """Run the xmapped ``fun`` once on fake tensors made like ``args`` (tensors,
    NamedTensors or ``nx.ShapeDtypeStruct``s) and return what it costs, at full sizes.

    ``differentiate``: floating-point arguments are parameters a backward differentiates
    (default: the tensors among ``args`` that require grad; ``True``: every floating
    argument)."""
    if differentiate is None:
        wants = lambda x: isinstance(x, torch.Tensor) and x.requires_grad  # noqa: E731
    else:
        wants = lambda x: bool(differentiate)  # noqa: E731
    trace = CostTrace(axis_sizes={})
    trace.sharded = [type(x).__name__ == "DTensor" for x in tree_leaves(
        args, is_leaf=lambda x: isinstance(x, (ShapeDtypeStruct, _NT)))
        if isinstance(x, (torch.Tensor, _NT, ShapeDtypeStruct))]
    counter = FlopCounterMode(display=False)
    tape = CostTape(trace, counter.get_total_flops)

    def body(*a, **kw):
        trace.axis_sizes = dict(_env_state.stack[-1].sizes)   # this xmap's frame
        for v in _tensors(tree_leaves(a, is_leaf=lambda x: type(x) is _NT)):
            tape.inputs[id(v)] = v
            trace.inputs.append((_names(v), _nbytes(v), _needs_grad(v)))
            trace.values.add(_names(v))
        out = fun.fun(*a, **kw)
        for o in _tensors(tree_leaves(out, is_leaf=lambda x: type(x) is _NT)):
            trace.outputs.append((_names(o), _nbytes(o)))
        return out

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with disable_dispatch_modes():   # (an outer trace, nx.jit's, sees none of this)
        with mode, NoRealWrites(mode):   # (a closed-over tensor is written in its fake)
            fakes = _fake_args(args, wants)
            with counter, tape:
                fun.replaced(body)(*fakes)
    return trace


def _fake_args(args: tuple, wants: Callable):
    """``args`` as fake tensors (the active fake mode), requiring grad where ``wants``."""
    def fake(x):
        if not isinstance(x, (torch.Tensor, _NT, ShapeDtypeStruct)):
            return x
        t = materialize(_describe(x))
        data = t._data if type(t) is _NT else t
        if data.is_floating_point() and wants(x):
            data.requires_grad_(True)
        return t
    return tree_map(fake, args, is_leaf=lambda x: isinstance(x, (ShapeDtypeStruct, _NT)))
