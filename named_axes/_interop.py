"""NamedTensor in the torch ecosystem: DataLoader collation (:func:`collate`),
torch.save / torch.load (``weights_only=True``: :func:`install`), numpy ufuncs and
operators (:func:`array_ufunc`); ``copy.deepcopy`` and pickling are NamedTensor's own.

A NamedTensor is not a ``torch.Tensor``, so it cannot be an ``nn.Parameter`` or a
registered buffer; keep the positional tensor there and name it in ``forward``, or put
NamedTensors in a module's state dict through ``get_extra_state``/``set_extra_state``
(see ``docs/migrating.md``).

>>> import io, torch, named_axes as nx
>>> from torch.utils.data import DataLoader
>>> data = [nx.named(torch.full((3, 2), float(i)), 'seq ...') for i in range(4)]
>>> batch = next(iter(DataLoader(data, batch_size=2, collate_fn=nx.collate)))
>>> batch.shape, batch.named_shape
(torch.Size([2, 2]), {'seq': 3})
>>> buf = io.BytesIO(); torch.save({'x': data[1]}, buf); _ = buf.seek(0)
>>> torch.load(buf)['x'].named_shape
{'seq': 3}
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

import numpy as np
import torch

from ._errors import AxisTypeError, fmt_named_shape
from ._layout import from_numpy
from ._tensor import NamedTensor, _rebuild_named

__all__ = ["collate", "array_ufunc", "install"]


def collate(batch):
    """``torch.utils.data.default_collate`` that also stacks NamedTensors (in tuples,
    dicts, ... as default_collate walks them): usable as ``DataLoader(collate_fn=nx.collate)``.

    Containers holding a NamedTensor are walked here as default_collate walks them (its
    type map is private); everything else is default_collate's.

    >>> import torch, named_axes as nx
    >>> ex = [(nx.named(torch.ones(3, 2), 'seq ...'), 1), (nx.named(torch.zeros(3, 2), 'seq ...'), 0)]
    >>> x, y = nx.collate(ex)
    >>> x.shape, x.named_shape, y
    (torch.Size([2, 2]), {'seq': 3}, tensor([1, 0]))
    """
    from torch.utils.data import default_collate

    elem = batch[0]
    if isinstance(elem, NamedTensor):   # stacked by name: equal names need equal sizes
        return torch.stack(list(batch), 0)
    if not _holds_named(elem):
        return default_collate(batch)
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):   # namedtuple
        return type(elem)(*(collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, Mapping):
        parts = {key: collate([d[key] for d in batch]) for key in elem}
        mutable, items = isinstance(elem, MutableMapping), parts.items()
    else:
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        parts = [collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return parts   # as default_collate: a tuple's columns come back as a list
        mutable, items = isinstance(elem, MutableSequence), enumerate(parts)
    if mutable:   # as default_collate: a copy of the container, holding the parts
        clone = copy.copy(elem)
        for key, part in items:
            clone[key] = part
        return clone
    try:
        return type(elem)(parts)
    except TypeError:   # a container that cannot be built from its parts
        return parts


def _holds_named(x) -> bool:
    """Whether a NamedTensor is in ``x`` or in the containers default_collate walks."""
    if isinstance(x, NamedTensor):
        return True
    if isinstance(x, Mapping):
        return any(_holds_named(v) for v in x.values())
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        return any(_holds_named(v) for v in x)
    return False


# numpy ufunc name -> torch function, where torch spells it otherwise
_UFUNC_ALIASES = {"divide": "true_divide", "power": "pow", "absolute": "abs",
                  "conjugate": "conj", "arctan2": "atan2", "arcsin": "asin", "arccos": "acos",
                  "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh",
                  "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift",
                  "invert": "bitwise_not", "mod": "remainder"}


def _as_tensor(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return from_numpy(v)
    if isinstance(v, np.generic):
        return torch.as_tensor(v)
    return v


def _other_ufunc(ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """A ufunc form with no torch function (``np.add.reduce``, ``where=``, ``np.spacing``):
    numpy's own, on the values, when no input has named axes (as for a plain tensor);
    else our error (numpy's would print the values)."""
    named = [v for v in (*inputs, *kwargs.get("out", ())) if isinstance(v, NamedTensor)]
    have = [v for v in named if v._names]
    if have:
        form = ufunc.__name__ + ("" if method == "__call__" else f".{method}")
        extra = f" with {', '.join(sorted(kwargs))}=" if kwargs else ""
        raise AxisTypeError(
            f"numpy {form}{extra} on a NamedTensor with named axes "
            f"{fmt_named_shape(have[0].named_shape)}: only elementwise ufunc calls that "
            f"torch spells too (np.add(x, y), np.exp(x)) act per instance; use the torch "
            f"function on the NamedTensor, or place the axes first (nx.positional)")
    plain = [v._data if isinstance(v, NamedTensor) else v for v in inputs]
    return getattr(ufunc, method)(*plain, **kwargs)


def array_ufunc(self, ufunc, method: str, *inputs, **kwargs) -> Any:
    """NamedTensor's ``__array_ufunc__`` (numpy's protocol): numpy arrays become tensors
    and the ufunc runs as the torch function of the same name; the result is a NamedTensor.
    In-place forms (``arr += x``) write into the array when the result carries no named
    axes, and raise otherwise (an ndarray cannot hold named axes: write ``arr = arr + x``).

    >>> import numpy as np, torch, named_axes as nx
    >>> x = nx.named(torch.ones(2, 3), 'b ...')
    >>> (np.arange(3.) + x).named_shape
    {'b': 2}
    """
    name = ufunc.__name__
    out = kwargs.pop("out", None)
    fn = getattr(torch, _UFUNC_ALIASES.get(name, name), None)
    if method != "__call__" or kwargs or fn is None:
        return _other_ufunc(ufunc, method, inputs, kwargs if out is None else {**kwargs, "out": out})
    args = [_as_tensor(v) for v in inputs]
    result = fn(*args)
    if out is None:
        return result
    if len(out) != 1 or not isinstance(out[0], np.ndarray):
        return NotImplemented
    if isinstance(result, NamedTensor) and result._names:
        raise AxisTypeError(
            f"numpy {name} into an ndarray (e.g. `arr {'+' if name == 'add' else name}= x`): "
            f"the result has named axes {fmt_named_shape(result.named_shape)}, which an "
            f"ndarray cannot hold; write `arr = arr + x` (a NamedTensor) or place the axes "
            f"first (nx.positional)")
    if isinstance(result, NamedTensor):
        result = result._data
    np.copyto(out[0], result.detach().cpu().numpy(), casting="same_kind")
    return out[0]


def install() -> None:
    """Allow NamedTensor in the weights_only unpickler (torch's own extension point,
    idempotent).  DataLoader's default collation is left as torch has it: pass
    ``collate_fn=nx.collate``."""
    torch.serialization.add_safe_globals([NamedTensor, _rebuild_named])


install()
