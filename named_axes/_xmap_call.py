"""xmap's call plans and pytrees: how one argument structure enters an xmap.

Every call runs by a :class:`_Plan`.  The first call with an argument structure builds
it with every check (:meth:`._xmap._Xmapped._call`) and leaves it behind, keyed by
:func:`_flatten_key`; later calls with that structure only check sizes, permute each
leaf and place the outputs by the output plans cached alongside.  Arguments and outputs
are tuples/lists/dicts (namedtuples rebuilt by type) of leaves, flattened in one order.

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x: x * 2, in_axes=['b', ...], out_axes=['b', ...])
>>> [f(torch.arange(2.)) for _ in range(2)]   # the second call runs the cached plan
[tensor([0., 2.]), tensor([0., 2.])]
>>> len(f._plans)
1
>>> _unflatten(({'a': 0, 'b': [0, 0]}, 0), _flatten(({'a': 1, 'b': [2, 3]}, 4)))
({'a': 1, 'b': [2, 3]}, 4)
"""
from __future__ import annotations

import collections
from typing import Any

import torch

from . import _env
from ._errors import AxisSizeError, AxisSpecError, size_clash_message
from ._layout import from_numpy, to_named_perm
from ._parsing import path_str
from ._plancache import PlanCache
from ._tensor import NamedTensor

__all__ = ["_Plan", "_OutOps", "_as_torch", "_flatten", "_flatten_key", "_is_array",
           "_is_leaf", "_unflatten"]


_MAX_PLANS = 256   # call plans kept per xmapped function


class _Plan:
    """How one argument structure enters an xmap; the per-call work is a size check and
    a permute per leaf.

    ``record[i]`` (from the checks) is None for leaf ``i`` passed as is, else
    ``(resolved, names before, physical ndim)``; ``paths[i]`` is its pytree path.
    ``src`` are ``(leaf, dim, name)`` triples that define each name's size (first
    occurrence, in order), ``chk`` those that must agree with it.  ``outs`` caches
    output plans (:class:`_OutOps`) by output structure key (False: not cacheable).
    """

    __slots__ = ("ops", "src", "chk", "axis_sizes", "names", "flat", "outs", "carried",
                 "paths")

    def __init__(self, record: list, paths: list, axis_sizes: dict, flat: bool):
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
        self.axis_sizes = tuple(axis_sizes.items())
        self.names = frozenset(seen) | frozenset(axis_sizes)   # every axis this xmap binds
        self.flat = flat
        self.outs = PlanCache("xmap outputs", maxsize=_MAX_PLANS)
        # names the arguments carried in (not bound here): they may pass out again
        self.carried = frozenset(n for rec in record if rec is not None for n in rec[1])
        self.paths = [(path, rec and len(rec[1])) for path, rec in zip(paths, record)]

    def sizes(self, leaves: list, what: str | None = None) -> dict | None:
        """The axis sizes of this call; where a check fails, None (``what`` None) or the
        error, spelled for ``what``."""
        outer = _env._state.bound
        if outer and not self.names.isdisjoint(outer):
            if what is None:
                return None
            name = min(self.names & set(outer))
            raise AxisSpecError(f"{what}: axis {name!r} is already bound by an "
                                f"enclosing xmap/vmap; use a new name")
        sizes = {}
        for i, d, name in self.src:
            sizes[name] = leaves[i].shape[d]
        for i, d, name in self.chk:
            s = leaves[i].shape[d]
            if s != sizes[name]:
                if what is None:
                    return None
                raise AxisSizeError(f"{what}: " + size_clash_message(
                    name, sizes[name], self._site(name), s, self._where(i, d)))
        for name, s in self.axis_sizes:
            if sizes.setdefault(name, s) != s:
                if what is None:
                    return None
                raise AxisSizeError(f"{what}: " + size_clash_message(
                    name, s, "axis_sizes", sizes[name], self._site(name)))
        return sizes

    def _site(self, name) -> str:
        """Where the size of ``name`` came from (for an error message)."""
        return next(self._where(i, d) for i, d, n in self.src if n == name)

    def _where(self, i: int, d: int) -> str:
        path, k = self.paths[i]
        return f"{path_str(path)}, dim {d - k}"

    def enter(self, leaves: list) -> list:
        """The leaves named as this xmap's body sees them."""
        out = []
        for x, op in zip(leaves, self.ops):
            if op is not None:
                perm, names = op
                x = NamedTensor._wrap(x if perm is None else torch.permute(x, perm), names)
            out.append(x)
        return out


class _OutOps(list):
    """Per-leaf output plans (:func:`._layout.insert_plan`, None for a leaf passed as
    is); ``kept``: the names some leaf keeps named (checked per call against what binds
    them outside, :meth:`escapes`)."""

    kept: tuple = ()

    def escapes(self, carried: frozenset) -> bool:
        """Whether a kept name is one that nothing outside binds."""
        if not self.kept:   # (the common case, on every call: no generator)
            return False
        bound = _env._state.bound
        return any(n not in carried and n not in bound for n in self.kept)


def _is_leaf(x: Any) -> bool:
    return not isinstance(x, (tuple, list, dict))


def _is_array(x: Any) -> bool:
    if isinstance(x, (torch.Tensor, NamedTensor)):
        return True
    return type(x).__module__ == "numpy" and hasattr(x, "shape") and hasattr(x, "dtype")


def _as_torch(x: Any) -> Any:
    if isinstance(x, (torch.Tensor, NamedTensor)):
        return x
    import numpy as np

    if isinstance(x, np.ndarray):
        return from_numpy(x)
    return torch.as_tensor(x)   # numpy scalars


def _unflatten(tree: Any, leaves: list, it=None) -> Any:
    """Rebuild ``tree`` (tuples/lists/dicts) with ``leaves`` in flattening order."""
    if it is None:
        it = iter(leaves)
    if _is_leaf(tree):
        return next(it)
    if isinstance(tree, dict):
        items = {k: _unflatten(v, leaves, it) for k, v in tree.items()}
        if type(tree) is dict:
            return items
        if isinstance(tree, collections.defaultdict):
            return type(tree)(tree.default_factory, items)
        return type(tree)(items)   # an OrderedDict stays one, as in JAX's pytrees
    items = [_unflatten(v, leaves, it) for v in tree]
    if hasattr(tree, "_fields"):
        return type(tree)(*items)
    return type(tree)(items)


def _flatten(tree: Any) -> list:
    if _is_leaf(tree):
        return [tree]
    vals = tree.values() if isinstance(tree, dict) else tree
    return [leaf for v in vals for leaf in _flatten(v)]


def _flatten_key(tree: Any, leaves: list, key: list) -> bool:
    """Flatten ``tree`` like :func:`_flatten`, appending the physical tensor of each array
    leaf to ``leaves`` and a structure token to ``key``: ``(type, len or keys)`` for a
    container, ``ndim`` for a tensor, ``(names, ndim)`` for a NamedTensor, the type of any
    other leaf.  False for leaves the plans do not cover (numpy values)."""
    if isinstance(tree, torch.Tensor):
        leaves.append(tree)
        key.append(tree.dim())
        return True
    if isinstance(tree, NamedTensor):
        data = tree._data
        leaves.append(data)
        key.append((tree._names, data.dim()))
        return True
    t = type(tree)
    if isinstance(tree, (tuple, list, dict)):
        key.append((t, tuple(tree) if isinstance(tree, dict) else len(tree)))
        for v in (tree.values() if isinstance(tree, dict) else tree):
            if type(v) is torch.Tensor:   # the common leaf, inline
                leaves.append(v)
                key.append(v.dim())
            elif not _flatten_key(v, leaves, key):
                return False
        return True
    if t.__module__ == "numpy":
        return False
    leaves.append(tree)
    key.append(t)
    return True
