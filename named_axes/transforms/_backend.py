"""The ``"named_axes"`` torch.compile backend: inductor, with the collectives inlined.

Each ``nx.lax`` collective is a ``torch.library`` custom op (``named_axes::psum`` …):
opaque to inductor, which would call it as an external kernel.  On one device its
meaning is plain tensor code (its own implementation), so this backend hands inductor
those implementations as decompositions; the collective then fuses with its
neighbours.  ``nx.jit`` compiles with it when ``backend='inductor'``.

>>> import torch, named_axes as nx
>>> f = torch.compile(lambda x: (x * 2).sum(), backend="named_axes", fullgraph=True)
>>> float(f(torch.ones(3)))
6.0
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

__all__ = ["compile_named", "collective_decompositions", "BACKEND_NAME"]

BACKEND_NAME = "named_axes"


def collective_decompositions() -> dict:
    """``{OpOverload: implementation}`` for every registered ``named_axes::`` custom op."""
    try:
        from .. import lax  # noqa: F401  (registers the ops)
    except ImportError:  # pragma: no cover - collectives not built
        return {}
    from torch._library.custom_ops import OPDEFS

    table = {}
    for qualname, opdef in list(OPDEFS.items()):
        if qualname.startswith("named_axes::"):
            ns, name = qualname.split("::")
            packet = getattr(getattr(torch.ops, ns), name)
            table[packet.default] = opdef._init_fn
    return table


def compile_named(gm: torch.fx.GraphModule, example_inputs: Sequence) -> Callable:
    """Compile an FX graph (torch IR or aten) with inductor, collectives inlined."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    decomps = dict(select_decomp_table())
    decomps.update(collective_decompositions())
    return compile_fx(gm, list(example_inputs), decompositions=decomps)


def _register() -> None:
    from torch._dynamo import list_backends
    from torch._dynamo.backends.registry import register_backend

    if BACKEND_NAME not in list_backends(exclude_tags=()):
        register_backend(compile_named, name=BACKEND_NAME)


_register()
