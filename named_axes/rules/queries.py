"""Rules for ops whose result is not a named value: queries of a value's metadata
(``is_floating_point``, ``stride``, ``numel`` ...: they answer for the positional view),
``new_*`` factories (plain tensors, as from the physical value), the in-place relayouts
a value with named axes refuses (``resize_``, ``as_strided_``, ``set_``), and
``torch.equal`` / ``torch.allclose``, which compare whole values, names included (no
per-instance answer fits in one ``bool``; inside ``xmap`` they refuse).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 3, 4), {0: 'b'})
>>> x.numel(), x.stride(), x.is_floating_point()
(12, (4, 1), True)
>>> t = torch.arange(6.).reshape(2, 3)
>>> torch.equal(nx.named(t, 'N C'), nx.named(t.T, 'C N'))
True
>>> torch.allclose(nx.named(t, 'N ...'), nx.named(t + 1e-9, 'N ...'))
True
"""
from __future__ import annotations

import functools

import torch

from .._env import bound_axes
from .._errors import AxisTypeError
from .._layout import align
from .._registry import op_name, register
from .._tensor import NamedTensor

_NT = NamedTensor


def _query(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    return func(x._data, *args[1:], **kwargs)


def _instance_layout(func, args, kwargs):
    """``is_contiguous`` answers for one instance's positional view (every instance has
    the same strides), not for the physical tensor with the named dims leading."""
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    d, k = x._data, len(x._names)
    return func(d[(0,) * k] if 0 not in d.shape[:k] else d, *args[1:], **kwargs)


def _single_value(func, args, kwargs):
    """``torch.is_nonzero`` reads one value, as ``bool()`` does: refused with named axes
    (whatever their sizes)."""
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    return func(x._scalar(op_name(func)), *args[1:], **kwargs)


def _relayout_in_place(func, args, kwargs):
    """``resize_``, ``resize_as_``, ``as_strided_``, ``set_`` on a value with named axes
    refuse (they rewrite the storage the instances share), but for a resize to the shape
    the value has, which leaves it as it is."""
    x = args[0]
    if type(x) is not _NT or not x._names:
        return NotImplemented
    if func is torch.Tensor.resize_ and len(args) > 1:
        size = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple, torch.Size)) \
            else args[1:]
        if tuple(size) == tuple(x.shape):
            return x
    if func in (torch.Tensor.resize_as_, torch.resize_as_) and len(args) > 1 and \
            tuple(args[1].shape) == x.shape:
        return x
    raise AxisTypeError(
        f"{op_name(func)}: a value with named axes {x.named_shape} cannot be resized or "
        f"re-strided in place (its instances share one storage); make a new value "
        f"instead (x.new_empty(shape), x.as_strided(...), torch.empty(...))")


def _numel(func, args, kwargs):
    return args[0].shape.numel()


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
        return func(*(v._data if type(v) is _NT else v for v in (a, b)), *rest, **kwargs)
    # allclose broadcasts the positional dims, right-aligned after the named ones (as for
    # each instance); equal compares the positional shapes as they are
    close = func is torch.allclose or func is torch.Tensor.allclose
    P = max(a.ndim, b.ndim)
    da = align(a._data, a._names, a.ndim, a._names, P if close else a.ndim)
    db = align(b._data, b._names, b.ndim, a._names, P if close else b.ndim)
    return func(da, db, *rest, **kwargs)


_declare = functools.partial(register, kind="shape")


def install() -> None:
    T = torch.Tensor
    _declare([T.is_floating_point, torch.is_floating_point, T.is_complex, torch.is_complex,
              T.element_size, T.get_device, T.data_ptr, T.storage_offset,
              T.is_signed, T.untyped_storage, T.storage, T.storage_type, T.is_pinned,
              T.is_shared, T.is_set_to, T.retain_grad, torch.is_tensor, T.__format__], _query)
    _declare([T.is_contiguous], _instance_layout)
    _declare([torch.is_nonzero, T.is_nonzero], _single_value)
    _declare([T.resize_, T.resize_as_, torch.resize_as_, T.as_strided_, T.set_],
             _relayout_in_place)
    _declare([T.numel, torch.numel, T.nelement], _numel)
    # (new_* make plain tensors, as from the physical value)
    _declare([T.new_zeros, T.new_ones, T.new_empty, T.new_full, T.new_tensor], _query)
    register([torch.equal, T.equal, torch.allclose, T.allclose], _whole, kind="whole")
