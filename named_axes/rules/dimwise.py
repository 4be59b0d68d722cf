"""Dim-wise rules: ops with one dim argument whose result keeps the rest of the value's
shape (softmax, cumsum, sort, split, ...).  ``dim`` is translated to the physical layout;
where ``names_ok`` an axis name (softmax family: a tuple of names and ints) may be given.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 3), {0: 'b'})
>>> x.softmax('b').named_shape
{'b': 2}
"""
from __future__ import annotations

import functools

import torch

from .._dispatch import result
from .._registry import op_name, register, spellings
from .._errors import AxisSpecError
from .._tensor import NamedTensor
from . import named_ints
from .reductions import DEFAULT_DIM, _dims_of, _reduction, dim_keyword, take

_NT = NamedTensor

__all__ = ["DIMWISE", "install"]


# name -> (index of the dim argument, whether an axis name may be given)
# (an axis name is allowed where the result keeps that dim's size, or removes the dim)
DIMWISE = {
    "softmax": (1, True), "log_softmax": (1, True), "softmin": (1, True),
    "cumsum": (1, True), "cumprod": (1, True), "logcumsumexp": (1, True),
    "cummax": (1, True), "cummin": (1, True), "sort": (1, True), "argsort": (1, True),
    "normalize": (2, True), "glu": (1, False),
    "narrow": (1, False), "select": (1, False), "unbind": (1, False), "split": (2, False),
    "chunk": (2, False), "tensor_split": (2, False), "topk": (2, False), "kthvalue": (2, True),
    "diff": (2, False), "index_select": (1, False), "repeat_interleave": (2, False),
    "unflatten": (1, False), "msort": (None, False),
}


# ops whose tensor arguments (a named start or index) vary per instance: rules/named_ints.py
_NAMED_ARGS = {"narrow": named_ints.narrow, "index_select": named_ints.index_select}


def _dimwise(name: str, dim_index: int, names_ok: bool):
    per_instance = _NAMED_ARGS.get(name)

    def rule(func, args, kwargs):
        x = args[0]
        if type(x) is not _NT:
            return per_instance(func, args, kwargs) if per_instance else NotImplemented
        if len(args) == 2 and not kwargs and dim_index == 1:
            d = args[1]
            if type(d) is int or (names_ok and type(d) is str):
                x, (phys, _, _, _) = _dims_of(x, d, func)
                return result(func(x._data, phys[0]), x._names, func)
        rest = list(args[1:])
        kwargs = dim_keyword(func, kwargs)
        if any(isinstance(a, _NT) for a in (*rest, *kwargs.values())) or name == "diff" and \
                any(isinstance(a, torch.Tensor) for a in (*rest, *kwargs.values())):
            # (diff's prepend/append have the input's positional rank: per instance)
            return per_instance(func, args, kwargs) if per_instance else NotImplemented
        # the dim argument, taken out (its default if it has one); None (a legacy implicit
        # dim, or dim=None) is left to vmap
        in_rest = len(rest) > dim_index - 1
        d = take(rest, kwargs, dim_index - 1, "dim", DEFAULT_DIM.get(name))
        if d is None:
            return NotImplemented
        if isinstance(d, (tuple, list)):
            if name in _SOFTMAXES:
                return _softmax_over(name, func, x, d, rest, kwargs)
            return NotImplemented
        if not names_ok and not isinstance(d, int):
            raise AxisSpecError(
                f"{op_name(func)}: named axis {d!r} can't be used here: this op changes the "
                f"size of that dimension, and a named axis has one size; use a positional "
                f"dimension")
        x, (phys, _, _, _) = _dims_of(x, d, func)
        if in_rest:
            rest.insert(dim_index - 1, phys[0])
        else:
            kwargs["dim"] = phys[0]
        try:
            out = func(x._data, *rest, **kwargs)
        except (RuntimeError, IndexError):
            if name == "index_select":   # an index out of range, said per instance
                named_ints.explain_index(func, args, kwargs)
            raise
        return result(out, x._names, func)
    return rule


_SOFTMAXES = ("softmax", "log_softmax", "softmin")
# ops that remove their dim like median: the reduction rule (by name: the axis is reduced)
_REDUCES = ("kthvalue",)


def _softmax_over(name: str, func, x: _NT, dims, rest: list, kwargs: dict):
    """The softmax family over several dims at once (ints, names; ``()``: each entry alone,
    as in JAX).  A trailing size-1 dim, always normalized over, keeps ``()`` from meaning
    "every dim" to torch's reductions."""
    dtype = kwargs.pop("dtype", None)
    if any(not k.startswith("_") for k in kwargs):   # (F.softmax's own private keyword
        return NotImplemented                         # only steers its warning)
    for a in rest:   # torch.softmax(x, dim, dtype) / F.softmax(x, dim, stacklevel, dtype)
        if isinstance(a, torch.dtype):
            dtype = a
        elif a is not None and not isinstance(a, int):
            return NotImplemented
    x, (phys, _, _, _) = _dims_of(x, tuple(dims), func)
    data = x._data if dtype is None else x._data.to(dtype)
    data = data.unsqueeze(-1)
    dims = list(phys) + [data.dim() - 1]
    if name == "softmin":
        data = -data
    if name == "log_softmax":
        out = data - torch.logsumexp(data, dims, keepdim=True)
    else:
        e = torch.exp(data - data.amax(dims, keepdim=True).detach())
        out = e / e.sum(dims, keepdim=True)
    return result(out.squeeze(-1), x._names, func)


_declare = functools.partial(register, kind="dimwise")


def install() -> None:
    for name, (idx, names_ok) in DIMWISE.items():
        if idx is None:
            continue
        impl = _reduction(name, idx, False) if name in _REDUCES else _dimwise(name, idx, names_ok)
        _declare(spellings(name), impl)
