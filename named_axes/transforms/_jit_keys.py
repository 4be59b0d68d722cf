"""The cache keys of ``nx.jit`` calls: what a compiled program was traced for.

A call's key holds its arguments' structure and each tensor's shape, strides, dtype,
device and ``requires_grad`` (and a NamedTensor's names), its static arguments, the
axes bound around it and the grad mode; a tensor passed twice also keys which
arguments repeat it, since the trace ties them into one input.

A call repeating the previous one's signature takes the fast lane (:func:`fast_lane`):
generated code that checks the containers and returns the tensor leaves, and one C++
guard (dynamo's ``TensorGuards``) over every leaf, instead of the full key.

>>> import torch
>>> x = torch.zeros(2)
>>> key, leaves, tied = call_key((x, 3), (), {}, False)
>>> len(leaves), tied
(2, False)
>>> key == call_key((torch.ones(2), 3), (), {}, False)[0]   # values are not keyed
True
>>> call_key((x, x), (), {}, False)[2]                      # one tensor passed twice
True
>>> args = (torch.zeros(2), (torch.ones(3), [torch.ones(1)]), {"lr": torch.ones(())})
>>> read = structure_reader(args)
>>> [tuple(t.shape) for t in read(args)]
[(2,), (3,), (1,), ()]
>>> read((torch.zeros(2), (torch.ones(3),), {"lr": torch.ones(())})) is None
True
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .._errors import AxisSpecError
from .._layout import from_numpy
from .._tensor import NamedTensor
from .._torch_private import tensor_guards, tree_flatten, tree_map
from ._trace_probe import storage_key

__all__ = ["call_key", "flatten_key", "value_key", "split_static", "detached", "numpy_as_tensors",
           "structure_reader", "tensor_guard", "fast_lane"]

_NT = NamedTensor
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


def flatten_key(tree: Any, leaves: list) -> Any:
    """Append ``tree``'s leaves to ``leaves`` (torch pytree order); return a hashable key.

    NamedTensor leaves go in as their physical tensors.  The key holds the structure and
    each tensor's shape, strides (the compiled code assumes them), dtype, device,
    requires_grad (and names, and a subclass's type); a hit costs one walk over the
    arguments (no TreeSpec, which hashes slowly).
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
        return value_key(tree)
    return (spec, tuple([flatten_key(x, leaves) for x in sub]))


def value_key(v: Any) -> tuple:
    """The key of a Python value a trace bakes in: its type and value, and a float's
    sign (``1``, ``1.0`` and ``True`` trace differently, and so do ``0.0`` and ``-0.0``).

    >>> value_key(1) == value_key(True), value_key(0.0) == value_key(-0.0)
    (False, False)
    """
    t = type(v)
    return (t, v, repr(v)) if t is float or t is complex else (t, v)


def call_key(dyn_args: Any, st_vals: tuple, bound: dict, grad_on: bool) -> tuple:
    """``(key, leaves, tied)`` of a call: see :func:`flatten_key`; ``grad_on``: the grad
    mode (with any other global state the program depends on); ``tied``: tensors share
    memory (one passed twice, or views of one tensor)."""
    leaves: list = []
    parts = []
    for a in dyn_args:   # flatten_key of the tuple, its first level unrolled
        if type(a) is _Tensor:
            leaves.append(a)
            parts.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad))
        else:
            parts.append(flatten_key(a, leaves))
    struct = tuple(parts)
    if st_vals:
        st_vals = tuple(map(value_key, st_vals))
    key = (struct, grad_on, st_vals, tuple(bound.items())) if bound or st_vals else (
        struct, grad_on)
    tensors = [x for x in leaves if isinstance(x, _Tensor)] if len(leaves) > 1 else ()
    memory = [storage_key(x) if type(x) is _Tensor or type(x) is _Parameter else id(x)
              for x in tensors] if len(tensors) > 1 else ()   # (a DTensor: no storage)
    tied = len(set(memory)) != len(memory)
    if tied:   # per tensor, the first sharing its memory, and its offset: the trace ties
        first: dict = {}   # them (an in-place update of one shows in the other)
        key = (key, tuple([(first.setdefault(m, i), x.storage_offset())
                           for i, (m, x) in enumerate(zip(memory, tensors))]))
    return key, leaves, tied


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
    """``args`` with numpy arrays as tensors (sharing memory when C-contiguous), or None
    if there are none."""
    import numpy as np

    if not any(isinstance(v, np.ndarray) for v in tree_flatten(args)[0]):
        return None
    return tree_map(lambda v: from_numpy(v) if isinstance(v, np.ndarray) else v, args)


def fast_lane(args: tuple) -> tuple:
    """``(reader, guard)`` passing calls with ``args``' structure and tensor properties
    (``(None, None)`` when such calls must take the full key)."""
    read = structure_reader(args)
    guard = None if read is None else tensor_guard(read(args))
    return (read, guard) if guard is not None else (None, None)


def structure_reader(args: tuple) -> Callable[[tuple], list | None] | None:
    """A function from a call's ``args`` to its tensor leaves (pytree order; a
    NamedTensor's data) if the call has ``args``' structure -- the same containers, dict
    keys, lengths, tensor positions and names -- else to None.

    None when ``args`` hold anything but plain tensors, ``nn.Parameter``s, NamedTensors
    of those, tuples, lists and dicts.  The leaves' own properties are the guard's to
    check (:func:`tensor_guard`).
    """
    keys: list = []
    names: list = []
    lines: list[str] = []

    def leaves_of(x: Any, expr: str) -> list[str] | None:
        t = type(x)
        if t is _Tensor or t is _Parameter:
            return [expr]
        if t is not _NT and t is not tuple and t is not list and t is not dict:
            return None
        name = f"v{len(lines)}"
        lines.append(f"    {name} = {expr}")
        if t is _NT:   # its data, when its names are the same
            if type(x._data) is not _Tensor and type(x._data) is not _Parameter:
                return None
            names.append(x._names)
            lines.append(f"    if type({name}) is not NT or {name}._names != N[{len(names) - 1}]:"
                         " return None")
            return [f"{name}._data"]
        test = f"type({name}) is not {t.__name__} or len({name}) != {len(x)}"
        if t is dict:
            if not all(type(k) is str for k in x):   # pytree order of other keys
                return None
            keys.append(tuple(x))
            test += f" or tuple({name}) != K[{len(keys) - 1}]"
            items = [(f"{name}[{k!r}]", v) for k, v in x.items()]
        else:
            items = [(f"{name}[{i}]", v) for i, v in enumerate(x)]
        lines.append(f"    if {test}: return None")
        out: list[str] = []
        for sub_expr, v in items:
            sub = leaves_of(v, sub_expr)
            if sub is None:
                return None
            out += sub
        return out

    leaves = leaves_of(tuple(args), "a")
    if not leaves:
        return None
    source = "def read(a):\n" + "\n".join(lines) + f"\n    return [{', '.join(leaves)}]\n"
    env: dict = {"K": keys, "N": names, "NT": NamedTensor}
    exec(source, env)  # noqa: S102 - code built above from the arguments' structure
    return env["read"]


def tensor_guard(leaves: list) -> Any:
    """A guard passing exactly plain tensors like ``leaves`` (None when unavailable):
    ``guard.check(*others)`` is True when ``others`` have their sizes, strides, dtypes,
    devices, dispatch keys and ``requires_grad``."""
    if not all(type(a) is _Tensor or type(a) is _Parameter for a in leaves):
        return None
    try:
        guard = tensor_guards(leaves)
        return guard if guard.check(*leaves) else None
    # a torch without this (private) guard, or tensors without strides (sparse, nested)
    except (ImportError, AttributeError, TypeError, RuntimeError):  # pragma: no cover
        return None
