"""Moving dims between the positional and the named parts of a physical tensor.

The physical layout of a NamedTensor is ``[named dims..., positional dims...]``.
``align`` brings an operand into a common layout ``[U..., P positional]`` (size-1
dims where it lacks a name or positional rank) so that one torch call serves all.

>>> import torch, named_axes as nx
>>> t = torch.arange(6.).reshape(2, 3)
>>> nx.positional(nx.named(t, {1: 'c'}), {0: 'c'}).shape
torch.Size([3, 2])
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping

import numpy as np
import torch

from ._engine import NeedsWholeAxes, engine_for
from ._env import INNER, axis_size, bound_axes
from ._errors import (AxisResourceError, AxisSizeError, AxisSpecError, AxisTypeError,
                      fmt_named_shape, fmt_names)
from ._parsing import AxisMapping, check_identifier, parse_mapping
from ._plancache import PlanCache
from ._registry import op_name
from ._tensor import RECORDERS, NamedTensor
from ._tape import taped

__all__ = ["align", "align_to", "named", "positional", "to_named_perm", "insert_named",
           "insert_plan", "apply_insert", "union_names"]


def align_plan(names: tuple, p: int, U: tuple, P: int):
    """How :func:`align` lays out a value named ``names`` with ``p`` positional dims as
    ``[U..., P positional]``: None for no change, else ``(perm or None, template or None)``
    for :func:`apply_align`."""
    order = [u for u in U if u in names]
    perm = None
    if tuple(order) != names:
        src = {n: i for i, n in enumerate(names)}
        perm = tuple([src[n] for n in order] + list(range(len(names), len(names) + p)))
    pos_of = {n: i for i, n in enumerate(order)}
    template = ([pos_of.get(u, -1) for u in U] + [-1] * (P - p)
                + list(range(len(order), len(order) + p)))
    if len(template) == len(names) + p and perm is None:
        return None
    if all(t >= 0 for t in template) and template == sorted(template):
        template = None
    return perm, template


_ALIGN_PLANS = PlanCache("align", align_plan)


def align(data: torch.Tensor, names: tuple, p: int, U: tuple, P: int) -> torch.Tensor:
    """Lay ``data`` (named ``names``, ``p`` positional dims) out as ``[U..., P positional]``
    (size 1 for the names and leading positional dims it lacks)."""
    plan = _ALIGN_PLANS(names, p, U, P)
    return data if plan is None else apply_align(data, plan)


def apply_align(data: torch.Tensor, plan) -> torch.Tensor:
    """``align`` by a plan from :func:`align_plan` (not None)."""
    perm, template = plan
    if perm is not None:
        data = torch.permute(data, perm)
    if template is not None:
        shape = data.shape
        data = data.reshape([shape[i] if i >= 0 else 1 for i in template])
    return data


def union_names(operands, *, op) -> tuple:
    """The union of the names of ``operands`` (``(label, NamedTensor)`` pairs) in order of
    appearance, checking sizes by name; ``op`` is the op's spelling or the function."""
    sizes: dict = {}
    where: dict = {}
    U: list = []
    for label, x in operands:
        shape = x._data.shape
        for i, n in enumerate(x._names):
            s = shape[i]
            if n in sizes:
                if sizes[n] != s:
                    if not isinstance(op, str):  # spelled only when needed (dynamo-friendly)
                        op = op_name(op)
                    raise AxisSizeError(
                        f"{op}: inconsistent sizes for axis {n!r}: {sizes[n]} ({where[n]}) vs "
                        f"{s} ({label}); axes with one name must have one size")
            else:
                sizes[n] = s
                where[n] = label
                U.append(n)
    return tuple(U)


def align_to(value: Any, names: tuple, p: int, *, what: str) -> torch.Tensor:
    """The physical tensor of ``value`` laid out for a value named ``names`` with rank ``p``,
    refusing named axes the target lacks (gradients, in-place updates)."""
    if isinstance(value, NamedTensor):
        extra = [n for n in value._names if n not in names]
        if extra:
            raise AxisSizeError(
                f"{what}: the value has named axis {extra[0]!r} "
                f"(named_shape {fmt_named_shape(value.named_shape)}) that the target lacks "
                f"(named axes: {', '.join(map(repr, names)) or 'none'}); this would broadcast "
                f"it silently — reduce it first")
        vp = value.ndim
        return align(value._data, value._names, vp, names, max(vp, p))
    return value


def to_named_perm(positions: tuple, k: int, ndim: int) -> tuple | None:
    """The permutation moving the positional dims ``positions`` (sorted ``(pos, name)``
    pairs, relative to the positional part) of a tensor of ``ndim`` dims with ``k``
    leading named dims to the named part (None when it is the identity)."""
    moved = [k + p for p, _ in positions]
    rest = [d for d in range(k, ndim) if d not in moved]
    perm = list(range(k)) + moved + rest
    return None if perm == list(range(ndim)) else tuple(perm)


def insert_named(x: NamedTensor, mapping: AxisMapping, *, sizes: Mapping, what: str):
    """Place the named axes that ``mapping`` lists into positional dims: a Tensor, or a
    NamedTensor of the names it does not place.  Axes ``x`` lacks are broadcast to
    ``sizes``."""
    return apply_insert(x._data, insert_plan(x._names, x.ndim, mapping, what=what), sizes)


def insert_plan(names: tuple, p: int, mapping: AxisMapping, *, what: str) -> tuple:
    """What :func:`insert_named` does to a value named ``names`` with ``p`` positional dims:
    ``(missing, perm, keep)`` — the names to broadcast in front, one permutation of the
    physical dims (None for the identity) and the names that stay named.  Raises
    AxisSpecError when ``mapping`` does not fit the result's rank."""
    placed = mapping.names
    keep = tuple(n for n in names if n not in placed)
    missing = tuple(n for n in placed if n not in names)
    full = missing + names   # the physical dims' names once the missing ones are in front
    src = {n: i for i, n in enumerate(full)}
    by_pos = dict(mapping.resolve(p + len(placed), what=what, placed=len(placed)))
    positional = iter(range(len(full), len(full) + p))
    # [kept..., then each result dim: a placed axis or the next positional dim]
    perm = [src[n] for n in keep] + [src[by_pos[i]] if i in by_pos else next(positional)
                                     for i in range(p + len(placed))]
    return missing, (None if perm == list(range(len(perm))) else tuple(perm)), keep


def apply_insert(data: torch.Tensor, plan: tuple, sizes: Mapping):
    """Apply an :func:`insert_plan` to the physical tensor ``data``."""
    missing, perm, keep = plan
    if missing:
        shape = list(data.shape)
        data = data.reshape(*[1] * len(missing), *shape).expand(
            *[sizes[n] for n in missing], *shape)
    if perm is not None:
        data = torch.permute(data, perm)
    return NamedTensor._wrap(data, keep) if keep else data


@taped("linear")
def named(t: Any, axes: Any) -> NamedTensor:
    """Make a NamedTensor from a tensor (outside xmap).

    Args:
        t: a ``torch.Tensor`` (or numpy array, or NamedTensor to name more axes of).
        axes: an axis mapping: ``{0: 'batch'}``, ``['batch', ...]`` or ``'batch ...'``.

    >>> import torch, named_axes as nx
    >>> nx.named(torch.zeros(2, 3, 4), 'a b ...').named_shape
    {'a': 2, 'b': 3}
    """
    mapping = parse_mapping(axes)
    for n in mapping.names:
        check_identifier(n, where="named()")
    if isinstance(t, NamedTensor):
        base, before, p = t._data, t._names, t.ndim
    else:
        base = _as_tensor(t, what="named()")
        before, p = (), base.dim()
    clash = [n for n in mapping.names if n in before]
    if clash:
        raise AxisSpecError(f"named(): the value already has a named axis {clash[0]!r}")
    resolved = mapping.resolve(p, what="named()")
    perm = to_named_perm(resolved, len(before), base.dim())
    data = base if perm is None else torch.permute(base, perm)
    for rec in RECORDERS:   # axes made here are this function's own, as an inner xmap's
        rec.setdefault(INNER, set()).update(mapping.names)
    return NamedTensor._wrap(data, before + tuple(n for _, n in resolved))


@taped("linear")
def positional(nt: Any, axes: Any = ...) -> torch.Tensor:
    """Turn a NamedTensor back into a ``torch.Tensor``, placing its named axes per ``axes``.

    ``axes`` defaults to the value's names in their stored order, leading.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.zeros(2, 3), {1: 'c'})
    >>> nx.positional(x, {-1: 'c'}).shape
    torch.Size([2, 3])
    """
    if not isinstance(nt, NamedTensor):
        if isinstance(nt, torch.Tensor):
            nt = NamedTensor._wrap(nt, ())
        else:
            raise AxisTypeError(f"positional() needs a NamedTensor, got {type(nt).__name__}")
    if axes is ...:
        axes = list(nt._names) + [...]
    mapping = parse_mapping(axes)
    try:
        check_whole(nt, nt._names, "positional()")
    except NeedsWholeAxes as e:   # (the DTensor engine's local path: on the whole)
        return e.engine.whole(positional, (nt, axes), {}, e.names, run=call)
    left = [n for n in nt._names if n not in mapping.names]
    if left:
        raise AxisSpecError(
            f"positional() has named axis {left[0]!r} (named_shape "
            f"{fmt_named_shape(nt.named_shape)}) that axes={mapping.spelling} does not place; "
            f"add it to axes, or reduce it first (e.g. nx.sum(x, {left[0]!r}))")
    sizes = dict(bound_axes())
    sizes.update(zip(nt._names, nt._data.shape))
    for n in mapping.names:
        if n not in sizes:
            raise AxisSpecError(
                f"positional(): axes={mapping.spelling} places axis {n!r}, which the value "
                f"does not have (its named axes: {fmt_names(nt._names)}) and no enclosing "
                f"xmap or vmap binds")
    return insert_named(nt, mapping, sizes=sizes, what="positional()")


def check_whole(nt: NamedTensor, names, what: str) -> None:
    """Refuse to place the named axes ``names`` of ``nt`` as positional dims where it holds
    a SerialLoop chunk's share of one; :class:`NeedsWholeAxes` where the engine computes
    the op on whole axes."""
    bound = bound_axes()
    for n, size in zip(nt._names, nt._data.shape):
        if n in names and bound.get(n, size) != size:
            engine = engine_for((n,))
            if engine is not None:
                engine.check_named_op(what, (n,))
            raise AxisResourceError(
                f"{what}: axis {n!r} is computed in chunks here (this chunk holds "
                f"{size} of its {bound[n]} indices, axis_resources maps it to a SerialLoop); "
                f"a value positional along it would need every chunk. Reduce over it with "
                f"nx.lax (psum, pmax, ...) or let xmap's out_axes place it")


def call(func: Callable, args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)``: how an engine runs a whole-axes op that is not a torch op."""
    return func(*args, **kwargs)


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """``a`` as a tensor sharing its memory where it can (a copy for negative strides,
    which torch refuses; ``np.require`` keeps a 0-d array 0-d, ``np.ascontiguousarray``
    does not).

    >>> import numpy as np
    >>> from_numpy(np.array(2.0)).shape, from_numpy(np.arange(3)[::-1]).tolist()
    (torch.Size([]), [2, 1, 0])
    """
    return torch.from_numpy(np.require(a, requirements="C"))


def _as_tensor(t: Any, *, what: str) -> torch.Tensor:
    if isinstance(t, torch.Tensor):
        return t
    if isinstance(t, np.ndarray):
        return from_numpy(t)
    raise AxisTypeError(f"{what}: expected a tensor or numpy array, got {type(t).__name__}")


def expand_to(x: NamedTensor, name: Hashable, *, op: str) -> NamedTensor:
    """``x`` broadcast along a bound axis it lacks (a value replicated along ``name``)."""
    n = axis_size(name, op=op)
    data = x._data.unsqueeze(0).expand((n,) + tuple(x._data.shape))
    return NamedTensor._wrap(data, (name,) + x._names)
