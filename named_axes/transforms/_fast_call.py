"""``nx.jit``'s fast lane: one check that a call repeats the previous call's signature.

A jitted training step is called with the same pytree of tensors every step (a tuple
of parameters, the optimizer's state, a batch).  Building the full cache key of such a
call (``_jit_keys.flatten_key``) walks the tree in Python and hashes a tuple per tensor;
instead, the lane keeps the previous call's *reader* -- generated code that checks the
containers' types and lengths (and dicts' keys) and returns the tensor leaves -- and a
C++ guard (``TensorGuards``, dynamo's) that checks every leaf's sizes, strides, dtype,
device and ``requires_grad`` in one call.

>>> import torch
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

from .._tensor import NamedTensor
from .._torch_private import tensor_guards

__all__ = ["structure_reader", "tensor_guard"]

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


def structure_reader(args: tuple) -> Callable[[tuple], list | None] | None:
    """A function from a call's ``args`` to its tensor leaves (pytree order) if the
    call has ``args``' structure -- the same containers (tuple, list, dict with the
    same keys in the same order), lengths and tensor positions -- else to None.

    A NamedTensor leaf gives its data, when its names are the same.  None when
    ``args`` hold anything but plain tensors, ``nn.Parameter``s, NamedTensors of those,
    tuples, lists and dicts (those calls take the full key).  The leaves' own
    properties are the guard's to check (:func:`tensor_guard`).
    """
    keys: list = []
    names: list = []
    lines: list[str] = []
    count = [0]

    def leaves_of(x: Any, expr: str) -> list[str] | None:
        t = type(x)
        if t is _Tensor or t is _Parameter:
            return [expr]
        if t is NamedTensor:   # its data, when its names are the same
            if type(x._data) is not _Tensor and type(x._data) is not _Parameter:
                return None
            name = f"v{count[0]}"
            count[0] += 1
            names.append(x._names)
            lines.append(f"    {name} = {expr}")
            lines.append(f"    if type({name}) is not NT or {name}._names != N[{len(names) - 1}]:"
                         " return None")
            return [f"{name}._data"]
        if t is tuple or t is list or t is dict:
            name = f"v{count[0]}"
            count[0] += 1
            lines.append(f"    {name} = {expr}")
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
        return None

    leaves = leaves_of(tuple(args), "a")
    if leaves is None or not leaves:
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
