"""What the rule modules share: dim spelling and positional-dim checks."""
from __future__ import annotations

import torch

from .._dispatch import ShapeError, UseFallback, check_instance, result
from .._shape_errors import positional_failure
from .._errors import AxisSpecError
from .._registry import op_name
from .._tensor import NamedTensor

_NT = NamedTensor


def _spelled(op) -> str:
    """``op`` as users spell it (rules pass the function: the lookup, which dynamo may not
    trace, runs only for an error)."""
    return op if isinstance(op, str) else op_name(op)


def first_only(args: tuple, kwargs: dict) -> bool:
    """``args[0]`` is named and no other argument is (lists of tensors included)."""
    if type(args[0]) is not _NT:
        return False
    for a in args[1:]:
        if type(a) is _NT or (isinstance(a, (list, tuple)) and any(type(e) is _NT for e in a)):
            return False
    return not any(type(v) is _NT for v in kwargs.values())


def on_data(func, args: tuple, kwargs: dict):
    """``func`` on named ``args[0]``'s data, the result named as ``args[0]``."""
    x = args[0]
    return result(func(x._data, *args[1:], **kwargs), x._names, func)


def per_tensor(fn, out):
    """``fn`` applied to ``out``, a tensor, or to each tensor of a (nested) tuple of them."""
    if isinstance(out, torch.Tensor):
        return fn(out)
    return type(out)([per_tensor(fn, o) for o in out])


def given(args: tuple, kwargs: dict, start: int = 1, /, **defaults) -> list:
    """The arguments from ``args[start]`` on, each by position or by keyword: ``defaults``
    names them in order, with the value of one given neither way."""
    return [args[i] if len(args) > i else kwargs.get(k, d)
            for i, (k, d) in enumerate(defaults.items(), start)]


def _norm_pos(d: int, p: int, op) -> int:
    """Positional dim ``d`` of ``p`` as a non-negative index.  With ``p == 0`` torch reads
    -1 and 0 as the scalar itself, which no physical dim stands for: the vmap fallback."""
    if p == 0 and d in (-1, 0):
        raise UseFallback(d)
    if not -max(p, 1) <= d < max(p, 1):
        raise _AxisIndexError(
            f"{_spelled(op)}: dimension {d} is out of range for a value with {p} positional "
            f"dimension(s) (expected one in [{-max(p, 1)}, {max(p, 1) - 1}], or an axis name)"
        )
    return d + p if d < 0 else d


class _AxisIndexError(AxisSpecError, IndexError):
    """A positional dim out of range (a ValueError subclass, and an IndexError like torch's)."""


def instance_invalid(func, args, kwargs, why: str | None = None):
    """Raise for positional shapes outside the op's requirements: :class:`ShapeError` with
    torch's message for one instance (or ``why``); ``UseFallback`` if torch accepts it."""
    check_instance(func, args, kwargs)
    if why is not None:
        raise ShapeError(positional_failure(_spelled(func), func, args, kwargs, why))
    raise UseFallback(func)
