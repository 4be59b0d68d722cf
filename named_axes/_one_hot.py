"""``nx.one_hot``: one-hot encoding whose classes axis may be a named axis.

Built from a comparison with ``arange`` rather than ``F.one_hot`` (which reads the
label values to check them, breaking make_fx / torch.compile tracing).

>>> import torch, named_axes as nx
>>> y = nx.one_hot(torch.tensor([0, 2]), 3, dim='classes')
>>> y.shape, y.named_shape
(torch.Size([2]), {'classes': 3})
"""
from __future__ import annotations

from typing import Any, Hashable

import torch

from ._dispatch import result
from ._env import _state as _env_state
from ._env import bound_axes
from ._errors import AxisSizeError, AxisTypeError
from ._parsing import check_name
from ._tensor import NamedTensor
from ._tape import taped
from .lax._common import _engine_method, _norm

__all__ = ["one_hot"]


@taped("constant")
def one_hot(labels: Any, num_classes: int, dim: Any = -1, *, axis: Any = None,
            dtype: torch.dtype | None = None) -> Any:
    """One-hot encode integer ``labels`` into ``num_classes`` classes along ``dim``.

    Args:
        labels: an integer tensor or NamedTensor.
        num_classes: the number of classes (an int; ``nx.lax.psum(1, 'classes')`` works).
        dim: where the classes axis goes: a positional index in the result (default -1,
            last) or an axis name, making the classes axis a named axis. ``axis=`` alias.
            Labels that already carry that named axis keep it once: each instance
            compares with its own index, ``labels == nx.lax.axis_index(dim)`` (JAX's
            ``jax.nn.one_hot(labels, n, axis=name)`` inside xmap).
        dtype: the result dtype (default ``torch.int64``, like ``F.one_hot``).

    Returns:
        ``labels`` with one more (positional or named) axis of size ``num_classes``.

    Raises:
        AxisSizeError: ``num_classes`` differs from the size of the axis named ``dim``
            (bound, or carried by ``labels``).
        AxisSpecError: ``dim`` is out of range.

    >>> import torch, named_axes as nx
    >>> nx.one_hot(torch.tensor([1, 0]), 2)
    tensor([[0, 1],
            [1, 0]])
    >>> f = nx.xmap(lambda y: nx.one_hot(y, 3, dim='i'), in_axes=['i', ...], out_axes=['i', ...])
    >>> f(torch.tensor([0, 1, 0]))          # labels carrying 'i': labels == axis_index('i')
    tensor([1, 1, 0])
    """
    if axis is not None:
        dim = axis
    if isinstance(num_classes, torch.Tensor):
        num_classes = int(num_classes)
    if not isinstance(num_classes, int) or num_classes < 0:
        raise AxisTypeError(f"one_hot: num_classes must be a non-negative int, got {num_classes!r}")
    dtype = torch.int64 if dtype is None else dtype
    if isinstance(labels, NamedTensor):
        data, names, p = labels._data, labels._names, labels.ndim
    elif isinstance(labels, torch.Tensor):
        data, names, p = labels, (), labels.dim()
    else:
        raise AxisTypeError(f"one_hot: labels must be a tensor, got {type(labels).__name__}")
    if not isinstance(dim, int) or isinstance(dim, bool):
        return _named_classes(data, names, p, num_classes, dim, dtype)
    d = len(names) + _norm(dim, p + 1, "one_hot", "dim", " (of the result)")
    classes = torch.arange(num_classes, device=data.device)
    shape = [1] * (data.dim() + 1)
    shape[d] = num_classes
    out = (data.unsqueeze(d) == classes.reshape(shape)).to(dtype)
    return result(out, names, one_hot) if names else out


def _named_classes(data: torch.Tensor, names: tuple, p: int, num_classes: int, dim: Any,
                   dtype: torch.dtype) -> Any:
    """The classes axis as the named axis ``dim``."""
    name = check_name(dim, where="one_hot: dim")
    bound = bound_axes()
    held = name in names
    size = bound[name] if name in bound else data.shape[names.index(name)] if held else None
    if size is not None and size != num_classes:
        where = "bound" if name in bound else "carried by the labels"
        raise AxisSizeError(f"one_hot(dim={name!r}): num_classes={num_classes} but axis "
                            f"{name!r} is {where} with size {size}; one axis name has one size")
    # classes after the labels' named dims, as F.one_hot puts them last: no permute
    classes = _class_indices(name, num_classes, name in bound, data.device)
    k = len(names)
    if held:   # each instance of the labels compares with its own index
        j = names.index(name)
        classes = classes.reshape((1,) * j + (-1,) + (1,) * (k - j - 1 + p))
        return result((data == classes).to(dtype), names, one_hot)
    if p:
        classes = classes.reshape((classes.shape[0],) + (1,) * p)
    out = (data.unsqueeze(k) == classes).to(dtype)
    return result(out, names + (name,), one_hot)


def _class_indices(name: Hashable, num_classes: int, is_bound: bool,
                   device: torch.device) -> torch.Tensor:
    """The indices of axis ``name`` held here (a SerialLoop chunk holds some of them)."""
    if _env_state.engine and is_bound:
        method = _engine_method("axis_index", (name,))
        if method is not None:
            return method((name,))._data.to(device)
    return torch.arange(num_classes, device=device)
