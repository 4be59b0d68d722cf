"""``nx.jit`` of calls taking DTensors (sharded parameters, inputs laid out by a
``NamedSharding``) on a mesh: compiled for each rank's local shards.

Every DTensor leaf goes in as its local tensor, its :class:`Layout` a static argument;
inside the trace it is rebuilt around the traced shard (the mesh engine sees what it
sees eagerly), and a DTensor the program returns comes out as shard and layout.

>>> import torch
>>> is_dtensor(torch.ones(2))
False
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from .._tensor import NamedTensor
from .._torch_private import tree_map

__all__ = ["is_dtensor", "local_program", "on_local_shards"]

_NT = NamedTensor


def is_dtensor(x: Any) -> bool:
    """Whether ``x`` is a DTensor (or a NamedTensor over one)."""
    return type(x._data if type(x) is _NT else x).__name__ == "DTensor"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a DTensor's shards live: hashable (a program's static argument) and a pytree
    leaf (a constant among a traced program's outputs)."""
    mesh: Any
    placements: tuple
    shape: tuple
    stride: tuple

    def rebuild(self, local: torch.Tensor) -> Any:
        """The DTensor of this layout around ``local`` (this rank's shard)."""
        from torch.distributed.tensor import DTensor

        return DTensor.from_local(local, self.mesh, self.placements, run_check=False,
                                  shape=torch.Size(self.shape), stride=self.stride)


def _split(tree: Any) -> tuple:
    """``(tree with each DTensor as its local shard, one Layout per leaf -- None for the
    others)`` (a NamedTensor over a DTensor: its names kept on the shard)."""
    layouts = []

    def local(x):
        d = x._data if type(x) is _NT else x
        if not is_dtensor(d):
            layouts.append(None)
            return x
        layouts.append(Layout(d.device_mesh, tuple(d.placements), tuple(d.shape),
                              tuple(d.stride())))
        # (differentiable: a program run inline keeps its results' autograd graph)
        shard = d.to_local()
        return _NT._wrap(shard, x._names) if type(x) is _NT else shard

    return tree_map(local, tree), tuple(layouts)


def _joined(tree: Any, layouts: tuple) -> Any:
    """The inverse of :func:`_split`: each leaf with a Layout rebuilt as its DTensor."""
    it = iter(layouts)

    def back(x):
        lay = next(it)
        if lay is None:
            return x
        d = lay.rebuild(x._data if type(x) is _NT else x)
        return _NT._wrap(d, x._names) if type(x) is _NT else d

    return tree_map(back, tree)


def local_program(fun: Callable) -> Callable:
    """``fun`` of ``(input layouts, *local args)``: the DTensors rebuilt, ``fun`` run,
    its result returned as ``(result with DTensors as their shards, their Layouts)``."""
    def on_shards(layouts, *args):
        return _split(fun(*_joined(args, layouts)))

    on_shards.__name__ = getattr(fun, "__name__", "fun")
    return on_shards


def on_local_shards(jitted_local: Callable, args: tuple) -> Any:
    """Call ``jitted_local`` (``jit`` of :func:`local_program`, its argument 0 static) on
    ``args``' local shards; the DTensors among its results rebuilt."""
    local_args, layouts = _split(args)
    out, out_layouts = jitted_local(layouts, *local_args)
    return _joined(out, out_layouts)
