"""``nx.sum``, ``nx.softmax``, … : torch reductions that accept axis names in ``dim``.

Each takes a tensor or NamedTensor; ``dim`` may be an int, a name, or a tuple mixing
both (``axis=`` is an alias).  Reducing a named axis removes it; reducing a bound
name the value lacks treats the value as replicated along it (``nx.sum(1., 'i')``
is the size of ``i``).  Return conventions follow the torch function with an int dim.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.ones(3, 4), {0: 'b'})
>>> nx.sum(x, ('b', 0))
tensor(12.)
"""
from __future__ import annotations

from typing import Any

import torch

from ._dispatch import dispatch
from ._errors import AxisTypeError
from ._layout import _as_tensor
from ._tensor import NamedTensor
from ._tape import taped

__all__ = ["sum", "mean", "prod", "max", "min", "amax", "amin", "argmax", "argmin",
           "logsumexp", "softmax", "log_softmax", "var", "std", "all", "any", "norm"]

_NO_DIM = object()


def _prepare(x: Any, fname: str):
    if isinstance(x, NamedTensor):
        return x
    if isinstance(x, (int, float, bool)):
        return NamedTensor._wrap(torch.as_tensor(x), ())
    return NamedTensor._wrap(_as_tensor(x, what=f"nx.{fname}"), ())


def _unwrap(out: Any) -> Any:
    if isinstance(out, NamedTensor) and not out._names:
        return out._data
    if isinstance(out, tuple):
        return type(out)([_unwrap(o) for o in out])
    return out


def _resolve_dim(dim, axis, fname):
    if axis is not None:
        if dim is not None and dim is not _NO_DIM:
            raise AxisTypeError(f"nx.{fname}: give dim= or axis=, not both")
        return axis
    return dim


def _no_axes(dim) -> bool:
    """``dim=()``: reduce over no axis (JAX's ``jnp.sum(x, axis=())`` is ``x``), unlike
    ``torch.sum(t, ())`` (every dim)."""
    return type(dim) in (tuple, list) and len(dim) == 0


def _over_nothing(torch_fn, x, fname: str, kwargs: dict, squeeze: bool = False,
                  before: tuple = ()):
    """``torch_fn`` over the empty set of axes: each entry is its own group of one, so
    ``x`` gets a trailing axis of size 1 and that axis is the one reduced (``before``:
    the arguments between the value and ``dim``, norm's ``p``)."""
    x = _prepare(x, fname)
    x1 = NamedTensor._wrap(x._data.unsqueeze(-1), x._names)
    out = dispatch(torch_fn, (x1, *before, -1), kwargs)
    if squeeze:   # a dim-wise op keeps the axis it works along
        out = NamedTensor._wrap(out._data.squeeze(-1), out._names) if type(out) is NamedTensor \
            else out.squeeze(-1)
    return _unwrap(out)


def _over(torch_fn, fname: str, x, before: tuple, dim, keepdim: bool, kwargs: dict):
    """``torch_fn(x, *before, dim=dim, keepdim=keepdim, **kwargs)``, each of ``dim`` and
    ``keepdim`` passed only when given."""
    kw = dict(kwargs)
    if dim is not None:
        kw["dim"] = dim
    if keepdim:
        kw["keepdim"] = True
    return _unwrap(dispatch(torch_fn, (_prepare(x, fname), *before), kw))


# the reductions for which dim=() means "over no axis" (the single-dim ones, max, min,
# argmax and argmin, refuse an empty tuple, as JAX's argmax does)
_OVER_NOTHING = {"sum", "mean", "prod", "amax", "amin", "logsumexp", "var", "std", "all",
                 "any"}


_DOC = """{what} over ``dim`` (ints, axis names, or a tuple mixing both; ``axis=`` alias).

Like ``torch.{name}`` with an int dim; a reduced named axis leaves ``named_shape``.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.arange(6.).reshape(2, 3), {{0: 'b'}})
>>> nx.{name}(x, 'b').shape
torch.Size([3])
"""
_MAXDOC = """{what} over one ``dim`` (an int or an axis name); with a dim, returns
``(values, indices)`` like ``torch.{name}(x, 0)``; with none, over all positional entries.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.arange(6.).reshape(2, 3), {{0: 'b'}})
>>> nx.{name}(x, 'b').values.shape
torch.Size([3])
"""
_SOFTDOC = """{what} along ``dim`` (an int, an axis name, or a tuple of them: one {name}
over all those axes together; default -1).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 4), {{0: 'classes'}})
>>> nx.{name}(x, 'classes').named_shape
{{'classes': 2}}
"""


def _reduction(torch_fn, what: str, doc: str = _DOC):
    """``nx.<name>`` for the torch reduction ``torch_fn``, documented from ``doc``."""
    fname = torch_fn.__name__

    def reduction(x, dim=None, keepdim: bool = False, *, axis=None, **kwargs):
        if type(x) is NamedTensor and x._names and (type(dim) is str or type(dim) is int) \
                and not keepdim and axis is None and not kwargs:
            # torch_fn(x, dim): the rule's fast lane (one memoised dim translation)
            return _unwrap(dispatch(torch_fn, (x, dim), {}))
        dim = _resolve_dim(dim, axis, fname)
        if _no_axes(dim) and fname in _OVER_NOTHING:
            return _over_nothing(torch_fn, x, fname, kwargs)
        return _over(torch_fn, fname, x, (), dim, keepdim, kwargs)
    return _public(reduction, fname, doc.format(what=what, name=fname))


def _dimwise(torch_fn, what: str):
    """``nx.<name>`` for the torch function ``torch_fn`` that works along ``dim``."""
    fname = torch_fn.__name__

    def dimwise(x, dim=_NO_DIM, *, axis=None, **kwargs):
        dim = _resolve_dim(dim, axis, fname)
        if dim is _NO_DIM:
            dim = -1
        if _no_axes(dim):   # over no axis: softmax gives ones, log_softmax zeros (as JAX)
            return _over_nothing(torch_fn, x, fname, kwargs, squeeze=True)
        return _unwrap(dispatch(torch_fn, (_prepare(x, fname), dim), kwargs))
    return _public(dimwise, fname, _SOFTDOC.format(what=what, name=fname))


def _public(f, fname: str, doc: str):
    """``f`` as ``nx.<fname>``: its name and docstring, taped along the axes it reduces."""
    f.__name__ = f.__qualname__ = fname
    f.__doc__ = doc
    return taped(along=True)(f)


sum = _reduction(torch.sum, "Sum")
mean = _reduction(torch.mean, "Mean")
prod = _reduction(torch.prod, "Product")
amax = _reduction(torch.amax, "Maximum")
amin = _reduction(torch.amin, "Minimum")
argmax = _reduction(torch.argmax, "Index of the maximum")
argmin = _reduction(torch.argmin, "Index of the minimum")
logsumexp = _reduction(torch.logsumexp, "log(sum(exp))")
var = _reduction(torch.var, "Variance")
std = _reduction(torch.std, "Standard deviation")
all = _reduction(torch.all, "Logical and")
any = _reduction(torch.any, "Logical or")
max = _reduction(torch.max, "Maximum", _MAXDOC)
min = _reduction(torch.min, "Minimum", _MAXDOC)
softmax = _dimwise(torch.softmax, "Softmax")
log_softmax = _dimwise(torch.log_softmax, "Log-softmax")


@taped("nonlinear", along=True)
def norm(x, p="fro", dim=None, keepdim: bool = False, *, axis=None, ord=None, **kwargs):
    """The ``p``-norm over ``dim`` (ints, names or a mix; ``axis=`` alias; ``ord=`` alias of p).

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.ones(2, 4), {0: 'b'})
    >>> nx.norm(x, dim=('b', 0))
    tensor(2.8284)
    >>> nx.norm(x, 1, dim='b')
    tensor([2., 2., 2., 2.])

    The second positional argument is the order ``p``, as in ``torch.norm``: an axis name
    there is an error that says to write ``dim=``.
    """
    dim = _resolve_dim(dim, axis, "norm")
    if ord is not None:
        p = ord
    if p is not None and not isinstance(p, (int, float)) and p not in ("fro", "nuc"):
        raise AxisTypeError(
            f"nx.norm: the second argument is the order p (as in torch.norm), got {p!r}; "
            f"to take the norm over an axis write nx.norm(x, dim={p!r}) "
            f"(or nx.norm(x, 2, dim={p!r}))")
    if _no_axes(dim):   # over no axis: each entry's own norm, |x|
        return _over_nothing(torch.norm, x, "norm", kwargs, before=(2 if p == "fro" else p,))
    return _over(torch.norm, "norm", x, (p,), dim, keepdim, kwargs)

