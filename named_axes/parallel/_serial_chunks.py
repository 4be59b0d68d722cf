"""The values of a ``SerialLoop``'s chunks, taken together (:mod:`._serial` runs them).

A chunk's output may lack an axis that another chunk's carries (it is broadcast to
match); outputs lacking the loop axes are compared across chunks; and ``pmax`` /
``pmin`` over a loop axis take the extreme of the chunks' partial extremes, their
cotangent shared among the entries attaining it, as ``amax`` shares it.

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x: nx.lax.pmax(x, 'i'), in_axes=['i', ...], out_axes=[...],
...             axis_resources={'i': nx.SerialLoop(2)})
>>> f(torch.tensor([1., 4., 2., 3.]))
tensor(4.)
"""
from __future__ import annotations

import contextlib
from functools import reduce
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .._layout import align
from .._tensor import NamedTensor
from .._torch_private import EagerDispatchMode, functorch_unwrapped, op_schema, tensor_version
from ..transforms._trace_probe import _Keeper, storage_key, written_tensors

__all__ = ["_same_layout", "_equal", "_names_of", "_attaining", "_extreme_of_chunks", "_padded",
           "_versions", "ChunkWrites"]


def _same_layout(outs: list, j: int) -> list:
    """The chunks' ``j``-th outputs laid out alike.  A chunk may return a value without an
    axis that another chunk's carries (the grad family folds copies that are all equal,
    which one chunk may see and another not): broadcast it along that axis."""
    items = [o[j] for o in outs]
    named = [x for x in items if isinstance(x, NamedTensor)]
    if not named or all(isinstance(x, NamedTensor) and x._names == named[0]._names
                        for x in items):
        return outs
    union: dict = {}
    for x in named:
        for n, size in zip(x._names, x._data.shape):
            union.setdefault(n, size)
    names = tuple(union)
    fixed = []
    for o in outs:
        x = o[j]
        data = x._data if isinstance(x, NamedTensor) else torch.as_tensor(x)
        have = x._names if isinstance(x, NamedTensor) else ()
        p = data.dim() - len(have)
        data = align(data, have, p, names, p)
        data = data.expand(tuple(union.values()) + tuple(data.shape[len(names):]))
        fixed.append(list(o[:j]) + [NamedTensor._wrap(data, names)] + list(o[j + 1:]))
    return fixed


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same values (one may be broadcast along the other's
    batch dims: a chunk's value that does not depend on a vmapped input)."""
    if a.shape != b.shape:
        try:
            a, b = torch.broadcast_tensors(a, b)
        except RuntimeError:
            return False
    return torch.equal(a, b)


def _names_of(x: Any) -> tuple:
    return x._names if isinstance(x, NamedTensor) else ()


# the extreme of a loop's chunks -> how many entries of all its chunks attain it
_TOTALS = WeakIdKeyDictionary()


def _attaining(x: Any, extreme: Any) -> torch.Tensor:
    """How many entries of this chunk's operand ``x`` attain its partial ``extreme``, per
    entry of ``extreme`` (the reduced axes summed out), as a float tensor shaped like it.
    A partial that is itself the extreme of another (nested) loop's chunks brings the
    count over all of them: ``x`` holds that loop's running chunk only."""
    total = _TOTALS.get(extreme._data if isinstance(extreme, NamedTensor) else extreme)
    if total is not None:
        return total
    with torch.no_grad():
        if not isinstance(x, NamedTensor):
            return (x == extreme).to(torch.float32)
        e_names = _names_of(extreme)
        e_data = extreme._data if isinstance(extreme, NamedTensor) else extreme
        p = x._data.dim() - len(x._names)
        wide = align(e_data, e_names, p, x._names, p)
        hit = (x._data == wide).to(torch.float32)
        gone = tuple(i for i, n in enumerate(x._names) if n not in e_names)
        count = hit.sum(gone) if gone else hit
        kept = tuple(n for n in x._names if n in e_names)
        return align(count, kept, p, e_names, p) if kept != e_names else count


class _ExtremeOfChunks(torch.autograd.Function):
    """The extreme of the chunks' partial extremes; backward: each partial gets the share
    of the cotangent its chunk's entries attaining the extreme hold (``amax`` shares it
    evenly among all of them; a pairwise ``torch.maximum`` halved it per pair)."""
    generate_vmap_rule = True   # (under vmap: forward, backward and jvp per batch entry)

    @staticmethod
    def forward(value, shares, *partials):
        return value.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shares = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return (None, None, *[g * s for s in ctx.shares])

    @staticmethod
    def jvp(ctx, _value_t, _shares_t, *partial_ts):
        ts = [t * s for t, s in zip(partial_ts, ctx.shares) if t is not None]
        return reduce(torch.add, ts) if ts else None


def _extreme_of_chunks(parts: list, kind: str) -> Any:
    """``max``/``min`` over the chunks' ``(partial, count)`` pairs, differentiable with
    the cotangent shared among the attaining entries by their counts."""
    partials = [p for p, _ in parts]
    datas = [p._data if isinstance(p, NamedTensor) else p for p in partials]
    value = reduce(torch.maximum if kind == "max" else torch.minimum, [d.detach() for d in datas])
    counts = [c._data if isinstance(c, NamedTensor) else c for _, c in parts]
    with torch.no_grad():
        here = [torch.where(d == value, c, torch.zeros_like(c)) for d, c in zip(datas, counts)]
        total = reduce(torch.add, here)
        shares = [(h / total).to(value.dtype) for h in here]   # 0/0 where a NaN won, as amax
    out = _ExtremeOfChunks.apply(value, shares, *datas)
    _TOTALS[out] = total
    first = partials[0]
    return NamedTensor._wrap(out, first._names) if isinstance(first, NamedTensor) else out


def _padded(v: Any, cuts: Any, sizes: dict, names: tuple, pad: bool) -> Any:
    """A chunk's ``v`` padded with zeros to the whole of the loop axes ``names`` (``pad``;
    ``cuts(v's names)``: the chunk's ``(dim, start, size)`` along each, ``sizes``: their
    whole), or the chunk cut from their whole; ``v`` itself if not a NamedTensor."""
    if not isinstance(v, NamedTensor):
        return v
    data = v._data
    for dim, start, size in cuts(v._names):
        n = v._names[dim]
        if n in names and not pad:
            data = data.narrow(dim, start, size)
        elif n in names:
            counts = (start, sizes[n] - start - size)   # zeros before and after the chunk

            def grown(t: torch.Tensor, d: int) -> torch.Tensor:
                zeros = [t.new_zeros(t.shape[:d] + (k,) + t.shape[d + 1:]) for k in counts]
                return torch.cat([zeros[0], t, zeros[1]], d)

            data = _in_memory_order(data, grown, dim)
    return NamedTensor._wrap(data, v._names)


def _in_memory_order(data: torch.Tensor, fn, dim: int) -> torch.Tensor:
    """``fn(t, d)`` on ``data`` viewed with its dims in memory order (``d``: where ``dim``
    went), viewed back: the result's memory holds its dims in ``data``'s order (a random
    op fills memory in order, as the vectorized run's did)."""
    order = sorted(range(data.dim()), key=lambda d: -data.stride(d))
    out = fn(data.permute(order), order.index(dim))
    return out.permute([order.index(d) for d in range(data.dim())])


def _versions(leaves: list, names: tuple) -> list:
    """The version counters of the data of the input leaves carrying some of ``names``
    (bumped by in-place writes; the others' writes are undone per chunk: ChunkWrites)."""
    out = []
    for x in leaves:
        try:
            out.append(tensor_version(x._data) if isinstance(x, NamedTensor)
                       and set(x._names) & set(names) else None)
        except RuntimeError:   # (an inference tensor has no version counter)
            out.append(None)
    return out


class ChunkWrites(_Keeper, EagerDispatchMode):
    """Every chunk starts from the state the call found (as from its random state): the
    tensors that existed before the call and that a chunk writes in place (a closed-over
    counter or buffer, an input lacking the loop axes) are given their values back before
    the next chunk runs (:meth:`restore`), so that they end as one run of the body leaves
    them, as the vectorized run does (every chunk writes them alike: a value carrying a
    loop axis cannot be written into one lacking it).  The chunks' own memory -- what the
    call made, the inputs' slices along the loop axes -- is theirs to write.

    >>> import torch, named_axes as nx
    >>> n = torch.zeros(())
    >>> f = nx.xmap(lambda x: x + n.add_(1), in_axes=['i', ...], out_axes=['i', ...],
    ...             axis_resources={'i': nx.SerialLoop(2)})
    >>> f(torch.zeros(4)).tolist(), float(n)
    ([1.0, 1.0, 1.0, 1.0], 1.0)
    """

    # (the library's checks run as without it; 'unseen': what only makes new memory, a
    # tensor moved onto XLA, may run without it: parallel/_xla._unwatched)
    runs_values, unseen = True, True

    def __init__(self, leaves: list, loop_names: tuple) -> None:
        super().__init__()
        self._kept: dict = {}
        self._made = {None} | {_memory(functorch_unwrapped(x._data)) for x in leaves
                      if isinstance(x, NamedTensor) and type(x._data) is torch.Tensor
                      and set(x._names) & set(loop_names)}

    def watching(self, first: bool) -> Any:
        """This mode for a pass's first chunk, and for the others if it kept a tensor:
        every chunk runs the same ops (a mode costs each op a Python call)."""
        return self if first or self._kept else contextlib.nullcontext()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(t is not torch.Tensor for t in types):   # (a DTensor's op: not kept)
            return func(*args, **kwargs)
        for t in written_tensors(func, args, kwargs):
            if _memory(t) not in self._made:
                self._keep(t)
        out = func(*args, **kwargs)
        fresh = _FRESH.get(func)
        if fresh is None:   # which results are new memory (not a view or a written input)
            fresh = _FRESH[func] = tuple(r.alias_info is None for r in op_schema(func).returns)
        for o, new in zip(out if isinstance(out, (tuple, list)) else (out,), fresh):
            if new and type(o) is torch.Tensor:
                self._made.add(_memory(o))
        return out


_FRESH: dict = {}


def _memory(t: torch.Tensor) -> Any:
    """``t``'s storage address; None (not kept) for a tensor with none to read: forward
    AD's zeros, an empty tensor, a lazy device's (XLA's, whose views are told apart from
    their base only by torch-xla itself)."""
    try:
        key = storage_key(t)
    except RuntimeError:
        return None
    return None if isinstance(key, tuple) else key
