"""Run a function on fake copies of its arguments: its result's shapes, dtypes and named
shapes, no FLOPs, no writes to real tensors.

``nx.eval_shape`` runs whole programs this way, and ``nx.lax`` control flow the branch a
concrete predicate did not take (and a loop's body past its last step), so that named
shapes follow JAX's abstract evaluation whatever the values decided.  The fake mode is
marked ``shapes_only``: control flow inside reads no values.  An op that would write into
a real tensor (fake mode runs an op on all-real operands for real) raises
:class:`WritesRealTensor` before it writes.

>>> import torch
>>> from named_axes._tensor import NamedTensor
>>> out = run_abstractly(lambda x: x.sum(0) * 2, NamedTensor._wrap(torch.ones(2, 5, 3), ('b',)))
>>> out.named_shape, tuple(out.shape), type(out._data).__name__
({'b': 2}, (3,), 'FakeTensor')
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ._tensor import NamedTensor
from ._torch_private import FakeTensor, FakeTensorMode, TorchDispatchMode, op_schema, tree_map

__all__ = ["shapes_only_mode", "fake_tree", "run_abstractly", "WritesRealTensor", "NoRealWrites"]


class WritesRealTensor(Exception):
    """An op run on fake values would write into a real tensor (one the function closes
    over): it was stopped before it wrote."""


class NoRealWrites(TorchDispatchMode):
    """Stops an op that writes into a real tensor (above the fake mode); with ``fakes``
    (that mode), runs it on that mode's fakes of the real tensors instead."""

    def __init__(self, fakes: FakeTensorMode | None = None) -> None:
        super().__init__()
        self.fakes = fakes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = op_schema(func)
        if schema is not None and schema.is_mutable:
            for i, a in enumerate(schema.arguments):
                if a.alias_info is None or not a.alias_info.is_write:
                    continue
                v = kwargs.get(a.name) if a.name in kwargs or i >= len(args) else args[i]
                for t in (v if isinstance(v, (list, tuple)) else (v,)):
                    if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor):
                        if self.fakes is None:
                            raise WritesRealTensor(f"{func} writes into a real tensor")
                        return func(*fake_tree(self.fakes, args), **fake_tree(self.fakes, kwargs))
        return func(*args, **kwargs)


def shapes_only_mode() -> FakeTensorMode:
    """A fake-tensor mode marked ``shapes_only``, with static shapes (a value read as a
    number is an unbacked symbol)."""
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv(),
                          static_shapes=True)
    mode.shapes_only = True
    return mode


def fake_tree(mode: FakeTensorMode, tree: Any) -> Any:
    """``tree`` with its real tensors and NamedTensors as fakes of ``mode``."""
    def fake(x):
        if type(x) is NamedTensor:
            return NamedTensor._wrap(mode.from_tensor(x._data), x._names)
        if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor):
            return mode.from_tensor(x)
        return x
    return tree_map(fake, tree)


def run_abstractly(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` on new fakes shaped as ``args``: fresh ones, without autograd history
    (torch cannot copy a differentiated tensor's into a fake inside a torch.func transform)."""
    mode = shapes_only_mode()
    with mode, NoRealWrites():
        return fn(*tree_map(_fresh, args))


def _fresh(x: Any) -> Any:
    if type(x) is NamedTensor:
        return NamedTensor._wrap(_fresh(x._data), x._names)
    if isinstance(x, torch.Tensor):
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return x
