"""One call of an xmapped function by its cached plan: the fast path of :mod:`._xmap`.

The first call with an argument structure goes the checked way (``_Xmapped._call_slow``)
and leaves a :class:`_Plan` behind; later calls with that structure only check sizes,
permute each leaf and place the outputs by the output plans cached alongside.

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x: x * 2, in_axes=['b', ...], out_axes=['b', ...])
>>> [f(torch.arange(2.)) for _ in range(2)]   # the second call runs the cached plan
[tensor([0., 2.]), tensor([0., 2.])]
>>> len(f._plans)
1
"""
from __future__ import annotations

from typing import Any

import torch

from . import _env
from ._layout import insert_plan, to_named_perm
from ._parsing import match_prefix
from ._plancache import PlanCache
from ._tensor import NamedTensor
from ._xmap_tree import _is_leaf

__all__ = ["_Plan", "_OutOps", "_out_plan", "_escapes", "_shared_resource"]


_MAX_PLANS = 256   # call plans kept per xmapped function


class _Plan:
    """How one argument structure enters an xmap (cached per structure key, see
    :func:`._xmap_tree._flatten_key`); the per-call work is a size check and a permute per leaf.

    ``ops[i]`` is None (leaf passed as is) or ``(perm, names)`` for the physical tensor
    of leaf ``i``.  ``src`` are ``(leaf, dim, name)`` triples that define each name's
    size (first occurrence, in order), ``chk`` those that must agree with it.
    ``outs`` caches output plans by output structure key (False: not cacheable).
    """

    __slots__ = ("ops", "src", "chk", "fixed_new", "fixed_chk", "names", "flat", "outs",
                 "carried")

    def __init__(self, record: list, axis_sizes: dict, flat: bool, carried: frozenset):
        self.ops, src, chk, seen = [], [], [], set()
        for i, rec in enumerate(record):
            if rec is None:
                self.ops.append(None)
                continue
            resolved, before, ndim = rec
            k = len(before)
            for pos, name in resolved:
                (chk if name in seen else src).append((i, k + pos, name))
                seen.add(name)
            self.ops.append((to_named_perm(resolved, k, ndim) if resolved else None,
                             before + tuple(n for _, n in resolved)))
        self.src, self.chk = tuple(src), tuple(chk)
        self.fixed_new = tuple((n, s) for n, s in axis_sizes.items() if n not in seen)
        self.fixed_chk = tuple((n, s) for n, s in axis_sizes.items() if n in seen)
        self.names = frozenset(seen)
        self.flat = flat
        self.outs = PlanCache("xmap outputs", maxsize=_MAX_PLANS)
        self.carried = carried   # names the arguments carried in (see _xmap._call_slow)

    def sizes(self, leaves: list) -> dict | None:
        """The axis sizes of this call, or None when a check fails (the slow path then
        raises the exact error)."""
        outer = _env._state.bound
        if outer and not self.names.isdisjoint(outer):
            return None
        sizes = {}
        for i, d, name in self.src:
            sizes[name] = leaves[i].shape[d]
        for i, d, name in self.chk:
            if leaves[i].shape[d] != sizes[name]:
                return None
        for name, s in self.fixed_chk:
            if sizes[name] != s:
                return None
        for name, s in self.fixed_new:
            sizes[name] = s
        return sizes

    def enter(self, leaves: list) -> list:
        out = []
        for x, op in zip(leaves, self.ops):
            if op is not None:
                perm, names = op
                x = NamedTensor._wrap(x if perm is None else torch.permute(x, perm), names)
            out.append(x)
        return out


class _OutOps(list):
    """Per-leaf output plans; ``kept``: the names some leaf keeps named (checked per call
    against what binds them outside, see :func:`_escapes`)."""

    kept: tuple = ()


def _out_plan(out_axes, out: Any, what: str):
    """The per-leaf :func:`insert_plan` for an output that the slow path accepted (None
    for a leaf passed as is), or False where an output leaf needs the slow path."""
    ops = _OutOps()
    for path, leaf, mapping in match_prefix(out_axes, out, _is_leaf, what=what):
        if isinstance(leaf, (torch.Tensor, NamedTensor)):
            names = leaf._names if isinstance(leaf, NamedTensor) else ()
            ops.append(insert_plan(names, leaf.ndim, mapping, what=what))
        elif leaf is None or isinstance(leaf, str) or not (mapping.entries or mapping.rank):
            ops.append(None)
        else:
            return False   # a Python scalar becomes a tensor: rare, keep the slow path
    ops.kept = tuple({n: None for op in ops if op is not None for n in op[2]})
    return ops


def _escapes(keep: tuple, carried: frozenset) -> bool:
    """Whether an output's kept names include one that nothing outside binds."""
    bound = _env._state.bound
    for n in keep:
        if n not in carried and n not in bound:
            return True
    return False


def _shared_resource(ra, rb):
    """The mesh resource two axes' resources share (for an error message)."""
    ra = ra if isinstance(ra, tuple) else (ra,)
    rb = rb if isinstance(rb, tuple) else (rb,)
    common = [r for r in ra if r in rb]
    return common[0] if common else ra[0]
