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


def _make_reduction(torch_fn, fname: str, doc: str):
    def reduction(x, dim=None, keepdim: bool = False, *, axis=None, **kwargs):
        if type(x) is NamedTensor and x._names and (type(dim) is str or type(dim) is int) \
                and not keepdim and axis is None and not kwargs:
            # torch_fn(x, dim): the rule's fast lane (one memoised dim translation)
            return _unwrap(dispatch(torch_fn, (x, dim), {}))
        dim = _resolve_dim(dim, axis, fname)
        if _no_axes(dim) and fname in _OVER_NOTHING:
            return _over_nothing(torch_fn, x, fname, kwargs)
        return _over(torch_fn, fname, x, (), dim, keepdim, kwargs)
    return _public(reduction, fname, doc)


def _make_dimwise(torch_fn, fname: str, doc: str):
    def dimwise(x, dim=_NO_DIM, *, axis=None, **kwargs):
        dim = _resolve_dim(dim, axis, fname)
        if dim is _NO_DIM:
            dim = -1
        if _no_axes(dim):   # over no axis: softmax gives ones, log_softmax zeros (as JAX)
            return _over_nothing(torch_fn, x, fname, kwargs, squeeze=True)
        return _unwrap(dispatch(torch_fn, (_prepare(x, fname), dim), kwargs))
    return _public(dimwise, fname, doc)


def _public(f, fname: str, doc: str):
    """``f`` as ``nx.<fname>``: its name and docstring, taped along the axes it reduces."""
    f.__name__ = f.__qualname__ = fname
    f.__doc__ = doc
    return taped(along=True)(f)


_DOC = """{what} over ``dim`` (ints, axis names, or a tuple mixing both; ``axis=`` alias).

Like ``torch.{name}`` with an int dim; a reduced named axis leaves ``named_shape``.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.arange(6.).reshape(2, 3), {{0: 'b'}})
>>> nx.{name}(x, 'b').shape
torch.Size([3])
"""

sum = _make_reduction(torch.sum, "sum", _DOC.format(what="Sum", name="sum"))
mean = _make_reduction(torch.mean, "mean", _DOC.format(what="Mean", name="mean"))
prod = _make_reduction(torch.prod, "prod", _DOC.format(what="Product", name="prod"))
amax = _make_reduction(torch.amax, "amax", _DOC.format(what="Maximum", name="amax"))
amin = _make_reduction(torch.amin, "amin", _DOC.format(what="Minimum", name="amin"))
argmax = _make_reduction(torch.argmax, "argmax", _DOC.format(what="Index of the maximum", name="argmax"))
argmin = _make_reduction(torch.argmin, "argmin", _DOC.format(what="Index of the minimum", name="argmin"))
logsumexp = _make_reduction(torch.logsumexp, "logsumexp", _DOC.format(what="log(sum(exp))", name="logsumexp"))
var = _make_reduction(torch.var, "var", _DOC.format(what="Variance", name="var"))
std = _make_reduction(torch.std, "std", _DOC.format(what="Standard deviation", name="std"))
all = _make_reduction(torch.all, "all", _DOC.format(what="Logical and", name="all").replace("arange(6.)", "arange(6)"))
any = _make_reduction(torch.any, "any", _DOC.format(what="Logical or", name="any").replace("arange(6.)", "arange(6)"))

_MAXDOC = """{what} over one ``dim`` (an int or an axis name); with a dim, returns
``(values, indices)`` like ``torch.{name}(x, 0)``; with none, the {what2} of all positional entries.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.arange(6.).reshape(2, 3), {{0: 'b'}})
>>> nx.{name}(x, 'b').values.shape
torch.Size([3])
"""
max = _make_reduction(torch.max, "max", _MAXDOC.format(what="Maximum", what2="maximum", name="max"))
min = _make_reduction(torch.min, "min", _MAXDOC.format(what="Minimum", what2="minimum", name="min"))


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


softmax = _make_dimwise(torch.softmax, "softmax", """Softmax along ``dim`` (an int, an axis name, or a tuple of them: one
softmax over all those axes together; default -1).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 4), {0: 'classes'})
>>> nx.softmax(x, 'classes').named_shape
{'classes': 2}
""")
log_softmax = _make_dimwise(torch.log_softmax, "log_softmax", """Log-softmax along ``dim`` (an int, an axis name, or a tuple of them;
default -1).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 4), {0: 'classes'})
>>> nx.log_softmax(x, 'classes').shape
torch.Size([4])
""")
