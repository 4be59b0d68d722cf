"""The cache keys of ``nx.jit`` calls: what a compiled program was traced for.

A call's key holds its arguments' structure and each tensor's shape, strides, dtype,
device and ``requires_grad`` (and a NamedTensor's names), its static arguments, the
axes bound around it and the grad mode; a tensor passed twice also keys which
arguments repeat it, since the trace ties them into one input.

>>> import torch
>>> x = torch.zeros(2)
>>> key, leaves, tied = call_key((x, 3), (), {}, False)
>>> len(leaves), tied
(2, False)
>>> key == call_key((torch.ones(2), 3), (), {}, False)[0]   # values are not keyed
True
>>> call_key((x, x), (), {}, False)[2]                      # one tensor passed twice
True
"""
from __future__ import annotations

from typing import Any

import torch

from .._errors import AxisSpecError
from .._tensor import NamedTensor
from .._torch_private import tree_flatten, tree_map

__all__ = ["call_key", "flatten_key", "split_static", "detached", "numpy_as_tensors"]

_NT = NamedTensor
_Tensor = torch.Tensor


def flatten_key(tree: Any, leaves: list) -> Any:
    """Append ``tree``'s leaves to ``leaves`` (torch pytree order); return a hashable key.

    NamedTensor leaves go in as their physical tensors.  The key holds the structure and
    each tensor's shape, strides, dtype, device, requires_grad (and names, and the type
    of a tensor subclass), so a cache hit costs one walk over the arguments (no
    TreeSpec, which hashes slowly), the compiled code always sees the strides it was
    compiled for, and whether a call must run inline is known from the entry.
    """
    t = type(tree)
    if t is _Tensor:
        leaves.append(tree)
        return (tree.shape, tree.stride(), tree.dtype, tree.device, tree.requires_grad)
    if t is _NT:
        d = tree._data
        leaves.append(d)
        return (tree._names, d.shape, d.stride(), d.dtype, d.device, d.requires_grad)
    if t is tuple or t is list:
        return (t, tuple([flatten_key(x, leaves) for x in tree]))
    if t is dict:
        return (dict, tuple(tree), tuple([flatten_key(x, leaves) for x in tree.values()]))
    if isinstance(tree, _Tensor):
        leaves.append(tree)
        return (t, tree.shape, tree.stride(), tree.dtype, tree.device, tree.requires_grad)
    sub, spec = tree_flatten(tree)
    if len(sub) == 1 and sub[0] is tree:   # a non-container leaf: its value is static
        leaves.append(tree)
        return (t, tree)
    return (spec, tuple([flatten_key(x, leaves) for x in sub]))


def call_key(dyn_args: Any, st_vals: tuple, bound: dict, grad_on: bool) -> tuple:
    """``(key, leaves, tied)`` of a call: see :func:`flatten_key`; ``tied``: some tensor
    is passed more than once."""
    leaves: list = []
    parts = []
    for a in dyn_args:   # flatten_key of the tuple, its first level unrolled
        if type(a) is _Tensor:
            leaves.append(a)
            parts.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad))
        else:
            parts.append(flatten_key(a, leaves))
    struct = tuple(parts)
    key = (struct, grad_on, st_vals, tuple(bound.items())) if bound or st_vals else (
        struct, grad_on)
    tied = len(leaves) > 1 and len(set(map(id, leaves))) != len(leaves)
    if tied:   # the trace ties repeated tensors
        key = (key, _repeats(leaves))
    return key, leaves, tied


def _repeats(leaves: list) -> tuple:
    """Per leaf, the index of its first occurrence: a trace fed the same tensor twice
    uses one input for both, so that program serves only calls repeating it alike."""
    first: dict = {}
    return tuple([first.setdefault(id(x), i) for i, x in enumerate(leaves)])


def split_static(args: tuple, static: tuple, donate: tuple, name: str) -> tuple:
    """``(dynamic arguments, static argument values)`` of a call to ``jit(name)``."""
    n = len(args)
    for i in static + donate:
        if not -n <= i < n:
            raise AxisSpecError(f"jit({name}): static_argnums/donate_argnums name "
                                f"argument {i}, but the call has {n} arguments")
    st = {i % n for i in static}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in st)
    return dyn_args, tuple(args[i] for i in sorted(st))


def detached(tree: Any) -> Any:
    """``tree`` with its tensors (and NamedTensors' data) detached: plain tensors."""
    def leaf(x):
        if type(x) is _NT:
            d = x._data
            return x if type(d) is _Tensor and not d.requires_grad else _NT._wrap(
                d.detach(), x._names)
        return x.detach() if isinstance(x, _Tensor) else x
    t = type(tree)
    if t is _Tensor and not tree.requires_grad:
        return tree
    return leaf(tree) if t is _NT or isinstance(tree, _Tensor) else tree_map(leaf, tree)


def numpy_as_tensors(args: tuple) -> tuple | None:
    """``args`` with numpy arrays as tensors (sharing memory), or None if there are none."""
    import numpy as np

    if not any(isinstance(v, np.ndarray) for v in tree_flatten(args)[0]):
        return None
    return tree_map(lambda v: torch.from_numpy(v) if isinstance(v, np.ndarray) else v, args)
