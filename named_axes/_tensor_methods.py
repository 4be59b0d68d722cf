"""NamedTensor's methods that the modules above :mod:`named_axes._tensor` implement:
PyTorch's named-tensor vocabulary and named indexing (:mod:`named_axes._naming`), numpy
ufuncs (:mod:`named_axes._interop`), assigning ``.grad`` (aligned by name,
:mod:`named_axes._layout`), positional indexing (:mod:`named_axes._dispatch`).

``_tensor`` sits below those modules, so it cannot import them; this module, above all of
them, attaches the methods to the class when ``named_axes`` is imported.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 3), 'batch ...')
>>> x.rename(batch='b')[{'b': 0}].shape
torch.Size([3])
"""
from __future__ import annotations

import torch

from . import _interop, _layout, _naming
from ._dispatch import dispatch
from ._tensor import NamedTensor

__all__ = ["attach"]

_Tensor = torch.Tensor


def rename(self, *args, **rename_map):
    """Rename named axes: ``x.rename(batch='b')`` or ``x.rename({'batch': 'b'})``.

    >>> import torch, named_axes as nx
    >>> nx.named(torch.zeros(2, 3), 'batch ...').rename(batch='b').named_shape
    {'b': 2}
    """
    return _naming.rename(self, *args, **rename_map)


def refine_names(self, *names):
    """Name positional dims (``None`` skips one, ``...`` stands for the rest): like
    :func:`named_axes.named` with a list.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.zeros(2, 3, 4), 'batch ...').refine_names('seq', ...)
    >>> x.shape, x.named_shape
    (torch.Size([4]), {'batch': 2, 'seq': 3})
    """
    return _naming.refine_names(self, *names)


def align_to(self, *names):
    """Place named axes as positional dims in the order given; ``...`` stands for the
    positional dims; names the value lacks become size-1 dims; named axes not listed
    stay named.  With every name placed the result is a ``torch.Tensor``.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.zeros(2, 3, 4), 'b c ...')
    >>> x.align_to('c', ..., 'b').shape
    torch.Size([3, 4, 2])
    """
    return _naming.align_to(self, *names)


def align_as(self, other):
    """``self`` laid out to broadcast against ``nx.positional(other)``: other's named
    axes leading (size 1 where ``self`` lacks one), then the positional dims.

    >>> import torch, named_axes as nx
    >>> y = nx.named(torch.zeros(2, 3, 4), 'b c ...')
    >>> nx.named(torch.ones(3), 'c').align_as(y).shape
    torch.Size([1, 3, 1])
    """
    return _naming.align_as(self, other)


def flatten(self, *args, **kwargs):
    """``x.flatten(start_dim, end_dim)`` on positional dims, or PyTorch's named form
    ``x.flatten(['c', 'h'], 'features')``: named axes merged into one (row-major in
    the order listed).

    >>> import torch, named_axes as nx
    >>> nx.named(torch.zeros(2, 3, 4), 'c h ...').flatten(['c', 'h'], 'f').named_shape
    {'f': 6}
    """
    return _naming.flatten(self, *args, **kwargs)


def unflatten(self, *args, **kwargs):
    """``x.unflatten(dim, sizes)`` on a positional dim, or PyTorch's named form
    ``x.unflatten('features', (('c', 2), ('h', 3)))``: one named axis split in several.

    >>> import torch, named_axes as nx
    >>> nx.named(torch.zeros(6, 4), 'f ...').unflatten('f', (('c', 2), ('h', 3))).named_shape
    {'c': 2, 'h': 3}
    """
    return _naming.unflatten(self, *args, **kwargs)


def __getitem__(self, index):
    """Positional indexing as torch; ``x[{'batch': 3}]``, ``x[{'seq': slice(0, 4)}]``
    select along named axes (see :mod:`named_axes._naming`)."""
    if type(index) is dict or type(index) is str:
        return _naming.getitem(self, index)
    return dispatch(_Tensor.__getitem__, (self, index), {})


def __setitem__(self, index, value) -> None:
    if type(index) is dict or type(index) is str:
        return _naming.setitem(self, index, value)
    dispatch(_Tensor.__setitem__, (self, index, value), {})


def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
    """numpy ufuncs and operators (``ndarray + x``, ``np.exp(x)``) run as torch ops,
    numpy arrays taken as tensors (see :mod:`named_axes._interop`)."""
    return _interop.array_ufunc(ufunc, method, inputs, kwargs)


def _get_grad(self):
    g = self._data.grad
    return None if g is None else NamedTensor._wrap(g, self._names)


def _set_grad(self, value) -> None:
    if value is None:
        self._data.grad = None
    else:
        self._data.grad = _layout.align_to(value, self._names, self.ndim, what="NamedTensor.grad")


def attach() -> None:
    """Put the methods above on NamedTensor (once, at ``import named_axes``)."""
    for f in (rename, refine_names, align_to, align_as, flatten, unflatten, __getitem__,
              __setitem__, __array_ufunc__):
        f.__qualname__ = f"NamedTensor.{f.__name__}"   # as help() and tracebacks name it
        setattr(NamedTensor, f.__name__, f)
    NamedTensor.grad = property(_get_grad, _set_grad, doc="The gradient, named as the value.")
