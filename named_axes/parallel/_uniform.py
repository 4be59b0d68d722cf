"""Cotangents known to be the same on every rank of some mesh dims (the local-shard path).

On the local-shard path (:mod:`._dtensor_spmd`) a value replicated over mesh dims holds,
on each rank, a share of its cotangent; the shares are summed where a sum is needed
(``psum``'s transpose, a replicated input's gradient).  Where the shares are known to be
equal on every rank of the dims summed over, the sum is the share times the number of
ranks and no all-reduce is needed (as DTensor's placements know a replicated cotangent
needs none).  The knowledge is a mark on the cotangent tensor: a fact about its values,
valid while the tensor's version counter is unchanged.

:class:`Replication` carries the marks through one call's backward graph.  A backward
node keeps a cotangent the same on every rank of a mesh dim when its forward values are
(its backward then computes the same thing everywhere).  Which forward values are the
same along a mesh dim the named program says: a value lacking every axis split over it, and every
value it was computed from up to the collectives (anything else reducing a split axis
is refused on this path) -- so a few values whose names are known (collective inputs,
outputs, einsum operands) mark, through the graph above them, every node computing the
same thing on those ranks.  Where autograd adds several cotangents into one, the sum
is marked when every part was (counted per edge, per backward).

A replicated value broadcast into an einsum along split axes (a column-parallel layer's
input) gets a share of its cotangent that differs per rank.  Summing it right there
(Megatron's "f", :class:`._local_comms.SumBeforeBroadcast`) makes the cotangents
above it the same on every rank: ``psum``'s transpose then costs nothing, and the
gradients of the layer norms and embeddings above come out whole, without the flat
all-reduce of replicated parameter gradients.  It is done where the value was computed
from a collective's result (the residual stream): there it replaces an all-reduce that
the ``psum`` below would have made; elsewhere the shares are summed once, with the
parameters'.

>>> import torch
>>> t = mark_uniform(torch.ones(2), "mesh", frozenset({0}))
>>> uniform_dims(t, "mesh"), uniform_dims(t.add_(1), "mesh")
(frozenset({0}), frozenset())
"""
from __future__ import annotations

import torch
from torch.autograd.function import BackwardCFunction

from .._torch_private import forward_class, graph_task_id, node_sequence_nr, tensor_version

__all__ = ["Replication", "mark_uniform", "uniform_dims"]

_UNIFORM = "_nx_uniform"   # (version, DeviceMesh, mesh dims) on a cotangent (module docstring)


def mark_uniform(t: torch.Tensor, dm, dims: frozenset) -> torch.Tensor:
    """Mark ``t`` as holding the same values on every rank along the mesh dims ``dims``."""
    if dims:
        setattr(t, _UNIFORM, (tensor_version(t), dm, dims))
    return t


def uniform_dims(t: torch.Tensor, dm) -> frozenset:
    """The mesh dims of ``dm`` along which ``t`` is marked the same on every rank (none
    once ``t`` changed in place after the mark)."""
    mark = getattr(t, _UNIFORM, None)
    if mark is None or mark[0] != tensor_version(t) or mark[1] is not dm:
        return frozenset()
    return mark[2]


# The local-shard path's collectives (and pmean's division of a psum): a value computed
# from their results is replicated up to them, not beyond (their inputs are each rank's).
COLLECTIVES = frozenset({"SumOverRanksBackward", "ExtremeOverRanksBackward",
                         "DivideByCountBackward"})

# Where the autograd Functions that compute local ops live (the collectives' own, over
# axes this path does not split, and einsum's copies).
_LOCAL_FUNCTIONS = ("named_axes.lax.", "named_axes.rules.")

# The autograd Functions of this path that read marks on what they are handed.
_READERS = COLLECTIVES | {"ShardsOfBackward", "SumGradsOverRanksBackward",
                          "GatherOverRanksBackward", "SumBeforeBroadcastBackward"}


def _sequence_now() -> int:
    """The sequence number of the next autograd node made on this thread, or less."""
    return node_sequence_nr(torch.empty(0, requires_grad=True).view(0).grad_fn)


class Replication:
    """One local-shard call's knowledge of which values are the same on every rank, and
    the hooks that carry cotangent marks back through its graph (module docstring).

    Args:
        dm: the call's DeviceMesh.
    """

    def __init__(self, dm) -> None:
        self.dm = dm
        self.start = _sequence_now()
        self.seeds: list = []        # (node, mesh dims its value is the same along)
        self.broadcasts: list = []   # (the node computing a broadcast operand, its switch)

    def ours(self, node) -> bool:
        """Whether ``node`` is a local op of this call (made since it started): a torch op
        or one of ``nx.lax``'s own autograd Functions, not this path's edges and
        collectives nor a user's Function."""
        if node is None or type(node).__name__ == "AccumulateGrad" \
                or node_sequence_nr(node) < self.start:
            return False
        if isinstance(node, BackwardCFunction):
            return forward_class(node, type).__module__.startswith(_LOCAL_FUNCTIONS)
        return True

    def seed(self, t: torch.Tensor, dims: frozenset) -> None:
        """``t`` holds the same values on every rank along the mesh dims ``dims``."""
        if dims and self.ours(t.grad_fn):
            self.seeds.append((t.grad_fn, dims))

    def broadcast(self, t: torch.Tensor, switch: list) -> None:
        """``t`` is an operand broadcast along split axes behind a sum whose ``switch[0]``
        :meth:`finish` sets (sum there, or leave the shares for later)."""
        self.broadcasts.append((t.grad_fn, switch))

    # -- after the call's forward ---------------------------------------------------------
    def finish(self, roots: list) -> None:
        """Place the hooks, given the backward nodes of the call's outputs ``roots``."""
        if not self.seeds:
            return   # nothing known the same on any rank: no mark to carry
        graph = self._graph(roots)
        same = self._same_values(graph)
        fed = self._fed_by_collective(graph)
        for node, switch in self.broadcasts:
            switch[0] = fed.get(node, False)
        edges: dict = {}
        for nexts, _ in graph.values():
            for nxt, slot in nexts:
                if nxt is not None:
                    edges[(id(nxt), slot)] = edges.get((id(nxt), slot), 0) + 1
        # the joins whose sum someone reads a mark of: a node that passes marks, or reads them
        readers = {id(n) for n in graph if n in same or type(n).__name__ in _READERS}
        joins = {key: n for key, n in edges.items() if n > 1 and key[0] in readers}
        slots_of: dict = {}
        for node_id, slot in joins:
            slots_of.setdefault(node_id, []).append(slot)
        records: dict = {}   # (id(node), slot) -> [(graph task, mesh dims of one part)]
        for node, (nexts, _) in graph.items():
            keep = same.get(node, frozenset())
            into = [(i, (id(nxt), slot)) for i, (nxt, slot) in enumerate(nexts)
                    if (id(nxt), slot) in joins]
            if keep or into:
                node.register_hook(self._after(keep, into, records))
            slots = slots_of.get(id(node))
            if slots:
                node.register_prehook(self._before(id(node), slots, joins, records))

    def _graph(self, roots: list) -> dict:
        """node -> (its next_functions, whether it is :meth:`ours`), for every backward
        node of this call from ``roots`` up (autograd Functions too: each edge into a node
        must be counted)."""
        graph: dict = {}
        stack = [r for r in roots if r is not None]
        while stack:
            node = stack.pop()
            if node in graph or type(node).__name__ == "AccumulateGrad" \
                    or node_sequence_nr(node) < self.start:
                continue
            nexts = node.next_functions
            graph[node] = (nexts, self.ours(node))
            stack.extend(nxt for nxt, _ in nexts if nxt is not None and nxt not in graph)
        return graph

    def _same_values(self, graph: dict) -> dict:
        """node -> the mesh dims its forward values are the same along (from the seeds,
        through this call's ops, up to the collectives)."""
        same: dict = {}
        stack = list(self.seeds)
        while stack:
            node, dims = stack.pop()
            had = same.get(node, frozenset())
            if dims <= had or node not in graph:
                continue
            same[node] = had | dims
            stack.extend((nxt, dims) for nxt, _ in graph[node][0]
                         if nxt in graph and graph[nxt][1])
        return same

    def _fed_by_collective(self, graph: dict) -> dict:
        """node -> whether a broadcast operand's node computes, through this call's ops,
        from a collective's result (a walk up each, stopping at the first found)."""
        fed: dict = {}
        for start, _ in self.broadcasts:
            seen, stack, found = set(), [start], False
            while stack and not found:
                node = stack.pop()
                if node in seen or node not in graph:
                    continue
                seen.add(node)
                for nxt, _ in graph[node][0]:
                    if nxt is None:
                        continue
                    if type(nxt).__name__ in COLLECTIVES or fed.get(nxt):
                        found = True
                        break
                    if graph.get(nxt, (None, False))[1]:
                        stack.append(nxt)
            fed[start] = found
        return fed

    # -- the hooks (they hold ids and mesh dims, never a node: no cycle keeps a graph) ----
    def _after(self, keep, into: list, records: dict):
        """A node post-hook: mark what the node hands back (along the mesh dims ``keep``
        its forward values are the same along and every cotangent it was handed is), and
        note each part that flows into a join (``into``)."""
        dm = self.dm

        def hook(grad_inputs, grad_outputs):
            if keep:
                given = [g for g in grad_outputs if g is not None]
                dims = keep.intersection(*(uniform_dims(g, dm) for g in given)) \
                    if given else frozenset()
                for g in grad_inputs:
                    if g is not None:
                        mark_uniform(g, dm, dims)
            if into:
                task = graph_task_id()
                for i, key in into:
                    g = grad_inputs[i]
                    records.setdefault(key, []).append(
                        (task, None if g is None else uniform_dims(g, dm)))
        return hook

    def _before(self, node_id: int, slots: list, joins: dict, records: dict):
        """A node pre-hook: a cotangent autograd added up from several parts is marked
        along the mesh dims all parts were, when every part of this backward was seen."""
        dm = self.dm

        def hook(grad_outputs):
            task = graph_task_id()
            for slot in slots:
                parts = [d for t, d in records.pop((node_id, slot), ()) if t == task]
                g = grad_outputs[slot]
                if g is None or len(parts) != joins[(node_id, slot)]:
                    continue
                dims = [d for d in parts if d is not None]
                if dims:
                    mark_uniform(g, dm, frozenset.intersection(*dims))
        return hook

