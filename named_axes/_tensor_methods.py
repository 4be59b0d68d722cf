"""Attaches to NamedTensor the methods implemented above :mod:`named_axes._tensor` (which
cannot import them): the naming vocabulary and indexing by name (:mod:`named_axes._naming`),
numpy ufuncs (:mod:`named_axes._interop`) and ``.grad`` (aligned by name on assignment).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 3), 'batch ...')
>>> x.rename(batch='b')[{'b': 0}].shape
torch.Size([3])
"""
from __future__ import annotations

from . import _interop, _naming
from ._layout import align_to
from ._tensor import NamedTensor

__all__ = ["attach"]


def _get_grad(self):
    g = self._data.grad
    return None if g is None else NamedTensor._wrap(g, self._names)


def _set_grad(self, value) -> None:
    self._data.grad = None if value is None else align_to(
        value, self._names, self.ndim, what="NamedTensor.grad")


def attach() -> None:
    """Put the methods on NamedTensor (once, at ``import named_axes``)."""
    methods = {f.__name__: f for f in (
        _naming.rename, _naming.refine_names, _naming.align_to, _naming.align_as,
        _naming.flatten, _naming.unflatten, _naming.__getitem__, _naming.__setitem__)}
    methods["__array_ufunc__"] = _interop.array_ufunc
    for name, f in methods.items():
        f.__qualname__ = f"NamedTensor.{name}"   # as help() and tracebacks name it
        setattr(NamedTensor, name, f)
    NamedTensor.grad = property(_get_grad, _set_grad, doc="The gradient, named as the value.")
