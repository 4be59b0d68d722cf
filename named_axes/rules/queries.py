"""Rules for tensor queries: ops that read a value's metadata (``is_floating_point``,
``stride``, ``numel`` ...), ``new_*`` factories (plain tensors, as from the physical
value), and the in-place relayouts (``resize_``, ``as_strided_``, ``set_``) that a value
with named axes refuses.  Queries answer for the positional view.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 3, 4), {0: 'b'})
>>> x.numel(), x.stride(), x.is_floating_point()
(12, (4, 1), True)
"""
from __future__ import annotations

import functools

import torch

from .._errors import AxisTypeError
from .._registry import op_name, register
from .._tensor import NamedTensor

_NT = NamedTensor


def _query(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    return func(x._data, *args[1:], **kwargs)


def _relayout_in_place(func, args, kwargs):
    """``resize_``, ``resize_as_``, ``as_strided_``, ``set_`` on a value with named axes:
    they rewrite the storage the instances share (resize_ moved one instance's values
    into another's; under vmap the others were silent no-ops), so they refuse -- but for
    a resize to the shape the value has, which leaves it as it is (as PyTorch allowed)."""
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


_declare = functools.partial(register, kind="shape")


def install() -> None:
    T = torch.Tensor
    _declare([T.is_floating_point, torch.is_floating_point, T.is_complex, torch.is_complex,
              T.is_contiguous, T.element_size, T.get_device, T.data_ptr, T.storage_offset,
              T.is_signed, T.untyped_storage, T.storage, T.storage_type, T.is_pinned, T.is_shared, T.is_set_to,
              torch.is_nonzero, T.retain_grad, torch.is_tensor, T.__format__], _query)
    _declare([T.resize_, T.resize_as_, torch.resize_as_, T.as_strided_, T.set_],
             _relayout_in_place)
    _declare([T.numel, torch.numel, T.nelement], _numel)
    # (new_* make plain tensors, as from the physical value)
    _declare([T.new_zeros, T.new_ones, T.new_empty, T.new_full, T.new_tensor], _query)
