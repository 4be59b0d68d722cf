"""A post-grad pass for ``nx.jit``'s inductor graphs: a batched product summed over its
batch is one product.

``psum(o @ wo, 'heads')`` -- the output projection of an xmap attention, GPT-J's
included -- traces as a ``bmm`` over the heads (each head's (tokens, head_dim) @
(head_dim, model)) whose result is then summed over the heads: ``heads`` narrow
products and a (heads, tokens, model) intermediate.  Summing over the batch is
contracting over it, so the pass rewrites ``sum(permute(reshape(bmm(a, b))), batch)``
as one product of ``a`` laid out (tokens, heads * head_dim) and ``b`` as
(heads * head_dim, model), in the formulation timed fastest here (``_matmul_choice``).
P2's eight (1024, 32) @ (32, 256) and their sum took 3.1 ms, the one product 1.9.

>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def project(o, wo):
...     return torch.bmm(o, wo).sum(0)
>>> o, wo = torch.randn(4, 96, 32), torch.randn(4, 32, 128)
>>> gm = make_fx(project, tracing_mode="fake")(o, wo)
>>> FoldSummedBatch()(gm.graph)
>>> _ = gm.recompile()
>>> torch.ops.aten.bmm.default in [n.target for n in gm.graph.nodes]
False
>>> torch.allclose(gm(o, wo), project(o, wo), atol=1e-4)
True
"""
from __future__ import annotations

import hashlib
import math

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

__all__ = ["FoldSummedBatch", "OwnPasses"]

aten = torch.ops.aten
_RESHAPES = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _match(bmm: torch.fx.Node) -> tuple | None:
    """``(sum node, nodes to erase, reshape sizes, permutation)`` when ``bmm``'s only use
    is ``sum(permute(reshape(bmm)))`` over the batch (reshape splitting only the rows,
    reshape and permute optional), else None."""
    val = bmm.meta.get("val")
    if not isinstance(val, torch.Tensor) or not val.is_floating_point() or val.shape[0] < 2:
        return None
    h, m, n = (int(s) for s in val.shape)
    chain, sizes, perm = [bmm], [h, m, n], None
    node = _only_user(bmm)
    if node is not None and node.target in _RESHAPES:
        sizes = [int(s) for s in node.args[1]]
        if sizes[0] != h or sizes[-1] != n or math.prod(sizes[1:-1]) != m:
            return None
        chain.append(node)
        node = _only_user(node)
    if node is not None and node.target is aten.permute.default:
        perm = [int(p) % len(sizes) for p in node.args[1]]
        chain.append(node)
        node = _only_user(node)
    if node is None or node.target is not aten.sum.dim_IntList or node.kwargs:
        return None
    dims = node.args[1]
    if len(node.args) > 2 and node.args[2] or dims is None or len(dims) != 1:
        return None
    d = int(dims[0]) % len(sizes)
    if (perm[d] if perm is not None else d) != 0:
        return None
    return node, chain, sizes, perm


def _folded(h: int, m: int, k: int, n: int, sizes: list, perm: list | None):
    """The summed product as one 2-D product (``aten.mm``, decomposed by nx.jit's table
    into the timed formulation), reshaped and permuted like the sum's result."""
    rest = None if perm is None else [p - 1 for p in perm if p != 0]

    def fold(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        rows = a.permute(1, 0, 2).reshape(m, h * k)
        out = aten.mm.default(rows, b.reshape(h * k, n)).reshape(sizes[1:])
        return out if rest is None else out.permute(rest)
    return fold


class FoldSummedBatch(CustomGraphPass):
    """Rewrite each ``bmm`` summed over its batch as one 2-D product."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is aten.bmm.default:
                found = _match(node)
                if found is not None:
                    _replace(graph, node, *found)

    def uuid(self) -> str:
        """The digest of this module's and the matmul choice's source (cache key part)."""
        from . import _backend

        h = hashlib.sha256(_backend._source_digest().encode())
        with open(__file__, "rb") as f:
            h.update(f.read())
        return h.hexdigest()


class OwnPasses(CustomGraphPass):
    """nx.jit's post-grad passes as one (torch < 2.10 takes one): this fold, then
    :class:`_scalar_pass.RealizeScalars`."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        from ._scalar_pass import RealizeScalars

        FoldSummedBatch()(graph)
        RealizeScalars()(graph)

    def uuid(self) -> str:
        from ._scalar_pass import RealizeScalars

        return FoldSummedBatch().uuid() + RealizeScalars().uuid()


def _replace(graph: torch.fx.Graph, bmm: torch.fx.Node, total: torch.fx.Node,
             chain: list, sizes: list, perm: list | None) -> None:
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    from ._backend import _decompositions

    a, b = bmm.args
    h, m, k = (int(s) for s in a.meta["val"].shape)
    n = int(b.meta["val"].shape[2])
    vals = (a.meta["val"], b.meta["val"])
    mode = detect_fake_mode(vals)
    if mode is None:
        return
    # traced as inductor's pattern matcher traces its replacements: under the graph's
    # fake mode, with nx.jit's decompositions (the 2-D product's timed formulation)
    with mode:
        sub = make_fx(_folded(h, m, k, n, sizes, perm), _decompositions(flat=True),
                      tracing_mode="real")(*vals)
    if any(s.op == "get_attr" for s in sub.graph.nodes):
        return   # a formulation made a constant: keep the bmm
    env = dict(zip([s for s in sub.graph.nodes if s.op == "placeholder"], (a, b)))
    with graph.inserting_before(total):
        for s in sub.graph.nodes:
            if s.op == "call_function":
                env[s] = graph.node_copy(s, env.__getitem__)
            elif s.op == "output":
                result = env[s.args[0][0] if isinstance(s.args[0], (list, tuple))
                             else s.args[0]]
    total.replace_all_uses_with(result)
    for node in [total, *reversed(chain)]:
        graph.erase_node(node)
