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
    for f in (_naming.rename, _naming.refine_names, _naming.align_to, _naming.align_as,
              _naming.flatten, _naming.unflatten, __getitem__, __setitem__, __array_ufunc__):
        f.__qualname__ = f"NamedTensor.{f.__name__}"   # as help() and tracebacks name it
        setattr(NamedTensor, f.__name__, f)
    NamedTensor.grad = property(_get_grad, _set_grad, doc="The gradient, named as the value.")
