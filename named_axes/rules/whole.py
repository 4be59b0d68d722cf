"""Rules for ops whose result is one Python value about whole tensors: ``torch.equal``
and ``torch.allclose``.

No per-instance answer fits in a ``bool``, so these compare whole values, names
included, as ``torch.equal`` compares whole tensors: equal named shapes (names in any
order), then the values aligned by name.  Values whose named shapes differ are neither
equal nor close.  Inside ``xmap``, where each instance of a bound axis is its own value,
they refuse: a per-instance answer must be a tensor (``(a == b).all()``).

>>> import torch, named_axes as nx
>>> t = torch.arange(6.).reshape(2, 3)
>>> torch.equal(nx.named(t, 'N C'), nx.named(t.T, 'C N'))
True
>>> torch.equal(nx.named(t, 'N C'), nx.named(t + 1e-3 * (t == 0), 'N C'))
False
>>> torch.allclose(nx.named(t, 'N ...'), nx.named(t + 1e-9, 'N ...'))
True
"""
from __future__ import annotations

import torch

from .._env import bound_axes
from .._errors import AxisTypeError
from .._layout import align
from .._registry import op_name, register
from .._tensor import NamedTensor

__all__ = ["install"]

_NT = NamedTensor


def _whole(func, args, kwargs):
    a, b, rest = args[0], args[1], args[2:]
    a_axes = a.named_shape if type(a) is _NT else {}
    b_axes = b.named_shape if type(b) is _NT else {}
    bound = [n for n in (*a_axes, *b_axes) if n in bound_axes()]
    if bound:
        raise AxisTypeError(
            f"{op_name(func)}: inside xmap each instance of axis {bound[0]!r} is its own "
            f"value, and one Python bool cannot answer for each; compute a named tensor "
            f"instead: (a == b).all() for equal, torch.isclose(a, b).all() for allclose")
    if a_axes != b_axes:
        return False
    if not a_axes:
        return func(_plain(a), _plain(b), *rest, **kwargs)
    # allclose broadcasts the positional dims, right-aligned after the named ones (as for
    # each instance); equal compares the positional shapes as they are
    close = func is torch.allclose or func is torch.Tensor.allclose
    P = max(a.ndim, b.ndim)
    da = align(a._data, a._names, a.ndim, a._names, P if close else a.ndim)
    db = align(b._data, b._names, b.ndim, a._names, P if close else b.ndim)
    return func(da, db, *rest, **kwargs)


def _plain(v):
    return v._data if type(v) is _NT else v


def install() -> None:
    register([torch.equal, torch.Tensor.equal, torch.allclose, torch.Tensor.allclose], _whole,
             kind="whole")
