"""xmap's pytrees: arguments and outputs as tuples/lists/dicts (namedtuples rebuilt by
type) of array leaves, flattened in one fixed order, with a structure key for the plans.

>>> from named_axes._xmap_tree import _flatten, _unflatten
>>> _flatten(({'a': 1, 'b': [2, 3]}, 4))
[1, 2, 3, 4]
>>> _unflatten(({'a': 0, 'b': [0, 0]}, 0), [1, 2, 3, 4])
({'a': 1, 'b': [2, 3]}, 4)
"""
from __future__ import annotations

import collections
from typing import Any

import torch

from ._tensor import NamedTensor

__all__ = ["_as_torch", "_flatten", "_flatten_items", "_flatten_key", "_is_array", "_is_leaf",
           "_unflatten"]


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
        # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d)
        return torch.from_numpy(np.require(x, requirements="C"))
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
    out = []
    for v in vals:
        out += _flatten(v)
    return out


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
    if isinstance(tree, (tuple, list)):
        key.append((t, len(tree)))
        return _flatten_items(tree, leaves, key)
    if isinstance(tree, dict):
        key.append((t, tuple(tree)))
        return _flatten_items(tree.values(), leaves, key)
    if t.__module__ == "numpy":
        return False
    leaves.append(tree)
    key.append(t)
    return True


def _flatten_items(items, leaves: list, key: list) -> bool:
    for v in items:
        if type(v) is torch.Tensor:   # the common leaf, inline
            leaves.append(v)
            key.append(v.dim())
        elif not _flatten_key(v, leaves, key):
            return False
    return True
