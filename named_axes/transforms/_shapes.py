"""``eval_shape``: the shapes, dtypes and named shapes of a program's results, no FLOPs.

The program runs on fake tensors (``FakeTensorMode`` with a ``ShapeEnv``, marked
``shapes_only``): every op computes metadata only, and a Python number read from a
tensor is a symbol with no value -- all an op whose shape does not depend on it needs
(a slice at a per-instance start).  Control flow whose number of steps depends on
values (``while_loop``) may read the mark and give the carry's shapes without running.

>>> import torch, named_axes as nx
>>> nx.eval_shape(lambda x: x.sum(0), nx.ShapeDtypeStruct((5, 3), torch.float32, {'b': 2}))
ShapeDtypeStruct(shape=(3,), dtype=torch.float32, named_shape={'b': 2})
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .._abstract import NoRealWrites, fake_tree, shapes_only_mode
from .._errors import AxisTypeError, fmt_named_shape
from .._tensor import NamedTensor
from .._torch_private import (DataDependentOutputException, DynamicOutputShapeException,
                              FakeTensorMode, tree_leaves, tree_map)

__all__ = ["ShapeDtypeStruct", "eval_shape", "materialize"]


@dataclass(frozen=True)
class ShapeDtypeStruct:
    """The shape, dtype and named shape of a value (JAX's ``ShapeDtypeStruct``)."""

    shape: tuple
    dtype: torch.dtype
    named_shape: Mapping = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "named_shape", dict(self.named_shape))

    def __repr__(self) -> str:
        return (f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype}, "
                f"named_shape={fmt_named_shape(self.named_shape)})")

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, frozenset(self.named_shape.items())))

    @property
    def ndim(self) -> int:
        return len(self.shape)


def materialize(s: ShapeDtypeStruct, factory=torch.empty, device=None) -> Any:
    """A tensor (NamedTensor when ``named_shape``) with the layout ``s`` describes."""
    named = dict(getattr(s, "named_shape", {}) or {})
    data = factory(tuple(named.values()) + tuple(s.shape), dtype=s.dtype, device=device)
    return NamedTensor._wrap(data, tuple(named)) if named else data


def _torch_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    import numpy as np
    try:
        return torch.from_numpy(np.empty(0, dtype=np.dtype(dtype))).dtype
    except TypeError:
        raise AxisTypeError(f"eval_shape: dtype {dtype!r} has no torch equivalent") from None


def _duck_array(x: Any) -> bool:
    """An argument that only has ``shape`` and ``dtype`` (JAX's duck-typed arrays)."""
    return (not isinstance(x, (torch.Tensor, NamedTensor)) and hasattr(x, "shape")
            and hasattr(x, "dtype") and not isinstance(x, type))


def _describe(x: Any) -> Any:
    if isinstance(x, NamedTensor):
        return ShapeDtypeStruct(tuple(x.shape), x.dtype, x.named_shape)
    if isinstance(x, torch.Tensor):
        return ShapeDtypeStruct(tuple(x.shape), x.dtype, {})
    return x


def eval_shape(fun: Callable, *args: Any, **kwargs: Any) -> Any:
    """The :class:`ShapeDtypeStruct` of every tensor ``fun(*args)`` would return.

    Arguments may be tensors, NamedTensors, :class:`ShapeDtypeStruct` or any object with
    ``shape`` and ``dtype`` (a torch or numpy dtype; ``named_shape`` optional), as in JAX.

    Raises:
        AxisTypeError: ``fun`` is not callable, or a result's shape (or a Python number
            ``fun`` computes from a tensor) depends on the values (JAX raises a
            ``ConcretizationTypeError`` there).

    >>> import torch, named_axes as nx
    >>> f = nx.xmap(lambda x: x @ x.T, in_axes=['b', ...], out_axes=['b', ...])
    >>> nx.eval_shape(f, torch.ones(1000, 300, 300)).shape     # no 1000 matmuls are run
    (1000, 300, 300)
    >>> g = nx.xmap(lambda x: torch.narrow(x, 0, nx.lax.axis_index('b') * 2, 2),
    ...             in_axes=['b', ...], out_axes=['b', ...])
    >>> nx.eval_shape(g, torch.ones(3, 8))                     # a start per instance
    ShapeDtypeStruct(shape=(3, 2), dtype=torch.float32, named_shape={})
    """
    if not callable(fun):
        raise AxisTypeError(f"eval_shape: fun must be callable, got {type(fun).__name__}")
    name = getattr(fun, "__name__", type(fun).__name__)
    mode = shapes_only_mode()
    with mode, NoRealWrites(mode):   # a closed-over tensor is written in its fake only
        fargs, fkw = _fakes(mode, args), _fakes(mode, kwargs)
        try:
            out = fun(*fargs, **fkw)
        except (DataDependentOutputException, DynamicOutputShapeException,
                GuardOnDataDependentSymNode) as e:
            raise _value_needed(name, e) from None
    is_nt = lambda x: isinstance(x, NamedTensor)  # noqa: E731
    _check_static_shapes(name, tree_leaves(out, is_leaf=is_nt))
    return tree_map(_describe, out, is_leaf=is_nt)


def _fakes(mode: FakeTensorMode, tree: Any) -> Any:
    """``tree`` with its tensors, NamedTensors, ShapeDtypeStructs and duck-typed arrays
    as fake tensors of ``mode`` (which must be active: new tensors are made in it)."""
    def struct(x):
        if not _duck_array(x):
            return x
        return materialize(ShapeDtypeStruct(tuple(x.shape), _torch_dtype(x.dtype),
                                            getattr(x, "named_shape", None) or {}))
    return tree_map(struct, fake_tree(mode, tree), is_leaf=_duck_array)


def _value_needed(name: str, e: Exception) -> AxisTypeError:
    """The error for a program that needs a value the fake tensors do not have."""
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    text = text.split(" (unhinted")[0]
    return AxisTypeError(
        f"eval_shape({name}): the program needs a tensor's value ({text}), which "
        f"eval_shape does not have: it computes shapes and dtypes only. Keep "
        f"values out of shapes and Python control flow (a fixed-size form such "
        f"as torch.nonzero_static, nx.lax.cond / select on a tensor predicate, "
        f"nx.lax.dynamic_slice for a start), or call fun itself")


def _check_static_shapes(name: str, leaves: list) -> None:
    """Refuse a result whose positional shape depends on values (a symbol, not an int)."""
    for x in leaves:
        if isinstance(x, (torch.Tensor, NamedTensor)) and \
                not all(type(d) is int for d in x.shape):
            raise AxisTypeError(
                f"eval_shape({name}): a result's positional shape "
                f"({', '.join(str(d) for d in x.shape)}) depends on the values (an op such as "
                f"torch.nonzero, unique or masked_select); eval_shape has no values. Use "
                f"a fixed-size form (torch.nonzero_static(x, size=n), torch.where(mask, "
                f"x, fill))")
