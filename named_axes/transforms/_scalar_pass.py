"""A post-grad pass for ``nx.jit``'s inductor graphs: scalars are computed once.

Inductor inlines a cheap pointwise producer into each consumer's loop.  For a scalar
feeding a large loop that means recomputing it per element: Adam's bias corrections
``1 - beta ** t`` (``t`` a tensor, as in every jitted training step) became two
``std::pow`` calls per vector of every parameter's update -- the C++ compiler cannot
hoist them, the scalar's input might alias the outputs -- and took 2 of the P1
tutorial step's 3.5 ms.  The pass marks such scalars to be realized (stored once, in
their own small kernel); a loop then loads them.

>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def step(p, t):
...     return p / (1 - 0.9 ** (t + 1))
>>> gm = make_fx(step, tracing_mode="fake")(torch.zeros(4096), torch.zeros(()))
>>> RealizeScalars()(gm.graph)
>>> [n.name for n in gm.graph.nodes if n.meta.get("inductor_realize_to_strides")]
['rsub']
"""
from __future__ import annotations

import hashlib

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

__all__ = ["RealizeScalars"]

# A value with at most SCALAR elements is realized when a consumer's loop covers at
# least LOOP elements: one small kernel call (~1 us) against per-element recomputation.
SCALAR = 1
LOOP = 1 << 12


def _numel(node: torch.fx.Node) -> int | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return int(val.numel())
    except (TypeError, RuntimeError):   # symbolic
        return None


def _is_view(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


class RealizeScalars(CustomGraphPass):
    """Mark each computed scalar feeding a large pointwise loop for realization."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if node.op != "call_function" or _is_view(node):
                continue
            n = _numel(node)
            if n is None or n > SCALAR:
                continue
            if any(user.op == "call_function" and (_numel(user) or 0) >= LOOP
                   for user in node.users):
                node.meta["inductor_realize_to_strides"] = True

    def uuid(self) -> str:
        """The digest of this module's source: inductor's FX-graph cache key part."""
        with open(__file__, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
