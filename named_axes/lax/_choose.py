"""``nx.lax.switch`` and ``nx.lax.clamp`` with the signatures and semantics of JAX 0.4.30's.

>>> import torch, named_axes as nx
>>> nx.lax.clamp(0., torch.tensor([-1., 0.5, 2.]), 1.)
tensor([0.0000, 0.5000, 1.0000])
"""
from __future__ import annotations

from typing import Any

import torch

from .._errors import AxisSizeError, AxisSpecError, AxisTypeError
from ._common import _as_named
from ._control import _NO_OPERAND, _bound, _operands, cond

__all__ = ["switch", "clamp"]


def switch(index: Any, branches: Any, *operands: Any, operand: Any = _NO_OPERAND) -> Any:
    """``branches[index](*operands)``, ``index`` clamped into range (``jax.lax.switch``):
    a :func:`cond` per branch, so a per-instance (named) index runs every branch and
    selects per instance.

    >>> import torch, named_axes as nx
    >>> nx.lax.switch(5, [lambda x: x, lambda x: x * 10], torch.tensor(1.))
    tensor(10.)
    """
    operands, branches = _operands("switch", operands, operand), list(branches)
    if not branches:
        raise AxisSpecError("switch: branches is empty; give at least one function")
    _bound(index, "switch", "index")
    if len(branches) == 1:
        return branches[0](*operands)
    return cond(index <= 0, branches[0], lambda *o: switch(index - 1, branches[1:], *o),
                *operands)


def clamp(min: Any, x: Any, max: Any) -> Any:
    """``x`` clamped into ``[min, max]`` (``jax.lax.clamp``: the bounds come first and
    last; ``max`` wins where ``min > max``).  Each bound has positional shape ``()`` or
    ``x``'s and ``x``'s dtype (a Python number: torch's dtype of it); names broadcast.
    Derivatives are JAX's: to ``x`` where it is strictly inside, to ``min`` where it is
    above ``x`` and below ``max``, to ``max`` where it is below ``x``; none at a tie."""
    lo, v, hi = (_as_named(a, "clamp", w) for a, w in ((min, "min"), (x, "x"), (max, "max")))
    for b, w in ((lo, "min"), (hi, "max")):
        if tuple(b.shape) not in ((), tuple(v.shape)):
            raise AxisSizeError(f"clamp: {w} needs positional shape () or x's {tuple(v.shape)}, "
                                f"got {tuple(b.shape)}")
    if not lo.dtype == v.dtype == hi.dtype:
        raise AxisTypeError(f"clamp: min, x and max need one dtype, got {lo.dtype}, {v.dtype}, "
                            f"{hi.dtype}")
    tie = torch.clamp(v, lo, hi).detach()
    return torch.where((v > lo) & (v < hi), v, torch.where(
        (lo > v) & (lo < hi), lo, torch.where(hi < v, hi, tie)))
