"""``nx.lax`` control flow with the signatures of ``jax.lax`` (JAX 0.4.30; docs/guide.md §3).

Loops run as Python loops, traced unrolled: torch's control-flow operators take plain
tensors only, not NamedTensors.  A per-instance (named) predicate follows JAX's batching
rules: ``cond`` runs both branches and selects, ``while_loop`` runs while any instance's
condition holds.  A carry keeps its positional shapes and dtypes and may gain named axes.

>>> import torch, named_axes as nx
>>> nx.lax.fori_loop(0, 4, lambda i, c: c + i, torch.tensor(0))
tensor(6)
"""
from __future__ import annotations

import collections
import functools
import numbers
from typing import Any, Callable

import numpy as np
import torch

from .._abstract import run_abstractly
from .._dispatch import result
from .._errors import AxisSizeError, AxisSpecError, AxisTypeError
from .._engine import handed
from .._layout import align, union_names
from .._modes import building_graph, shapes_only
from .._plancache import PlanCache
from .._tensor import NamedTensor
from .._tape import taped
from .._torch_private import tree_flatten, tree_map, tree_unflatten
from ._common import _as_named
from ._reductions import pmax
from ._static_axes import (UNKNOWN, abstract, call_key, fixed_point, named_axes_of, settles,
                           union_axes, with_axes)

__all__ = ["select", "stop_gradient", "cond", "fori_loop", "while_loop", "scan"]

_NT = NamedTensor
_CARRY_FIX = "return a carry with init_val's positional shapes and dtypes"
_BRANCH_FIX = "make both branches return the same positional shapes and dtypes"
_NO_OPERAND = object()


@taped("linear")
def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``on_true`` where ``pred`` holds, else ``on_false`` (``jax.lax.select``): the cases
    have one positional shape and dtype, ``pred`` that shape or ``()``; names broadcast.

    >>> import torch, named_axes as nx
    >>> nx.lax.select(torch.tensor([True, False]), torch.ones(2), torch.zeros(2))
    tensor([1., 0.])
    """
    p, t, f = (_as_named(v, "select", w) for v, w in
               ((pred, "pred"), (on_true, "on_true"), (on_false, "on_false")))
    if tuple(t.shape) != tuple(f.shape) or tuple(p.shape) not in ((), tuple(t.shape)):
        raise AxisSizeError(f"select: the cases need one positional shape and pred it or (); got "
                            f"pred {tuple(p.shape)}, cases {tuple(t.shape)}, {tuple(f.shape)}")
    if t._data.dtype != f._data.dtype or p._data.dtype.is_floating_point:
        raise AxisTypeError(f"select: the cases need one dtype and pred a boolean one, got "
                            f"{t.dtype}, {f.dtype}, pred {p.dtype}; torch.where promotes")
    return torch.where(_on(p, t._data.device) != 0, result(t._data, t._names, select),
                       result(f._data, f._names, select))


def _on(p: Any, device: torch.device) -> Any:
    """The predicate on the cases' device (an engine may keep index values, and the
    predicates made from them, on the CPU beside values on its devices: torch-xla)."""
    p = _as_named(p, "select", "pred")
    if p._data.device != device:
        p = NamedTensor._wrap(p._data.to(device), p._names)
    return result(p._data, p._names, select)


@taped("constant")
def stop_gradient(x: Any) -> Any:
    """``x`` (a pytree) with no gradient flowing back (``jax.lax.stop_gradient``).

    >>> import torch, named_axes as nx
    >>> w = torch.ones(2, requires_grad=True)
    >>> nx.lax.stop_gradient({'w': w})['w'].requires_grad
    False
    """
    def leaf(v):
        if type(v) is _NT:
            return NamedTensor._wrap(v._data.detach(), v._names)
        return v.detach() if isinstance(v, torch.Tensor) else v
    return tree_map(leaf, x)


def _leaf_type(v: Any) -> tuple:
    """(positional shape, dtype, weak) of a leaf; a Python number is weakly typed (weak:
    its type, else None)."""
    if isinstance(v, (torch.Tensor, _NT)):
        return tuple(v.shape), v.dtype, None
    if isinstance(v, (bool, int, float, complex)):
        return (), torch.as_tensor(v).dtype, type(v) if type(v) in (int, float, complex) else None
    return None, type(v), None


def _kind(dt) -> str:
    return "b" if dt == torch.bool else "c" if dt.is_complex else "fi"[not dt.is_floating_point]


def _same(a: tuple, b: tuple) -> bool:
    if a[0] != b[0] or a[0] is None and a[1] is not b[1]:
        return False
    if a[0] is None or a[1] == b[1]:
        return True
    return _takes(a, b[1]) or _takes(b, a[1])


def _takes(weak: tuple, dtype: torch.dtype) -> bool:
    """Whether a weakly typed number takes ``dtype``: torch's promotion of the number
    with a tensor of ``dtype`` gives ``dtype`` (JAX's weak types: ``0`` takes float32)."""
    return weak[2] is not None and torch.result_type(torch.empty((), dtype=dtype),
                                                    weak[2]()) == dtype


def _carry(step: Callable, init: Any) -> tuple:
    """``init`` as a loop carries it, and its types (:func:`_types`): numbers and numpy
    arrays as tensors, a weakly typed Python number of the dtype a step on fake values
    makes of it (JAX re-traces a loop whose step promotes a weak carry).  Under dynamo
    (which cannot trace a fake run) ``init`` as given."""
    if torch.compiler.is_dynamo_compiling():
        return init, _types(init)
    flat, spec = tree_flatten(init)
    types = [_leaf_type(v) for v in flat]
    flat = [torch.as_tensor(v) if t[2] or isinstance(v, (np.ndarray, np.generic)) else v
            for v, t in zip(flat, types)]
    for probe in (init, tree_unflatten(flat, spec)) if any(t[2] for t in types) else ():
        try:
            out = run_abstractly(step, probe)
        except Exception:    # (cannot run on fakes, or on a number: torch's dtypes)
            continue
        out, out_spec = tree_flatten(out)
        if out_spec == spec:  # (else the loop reports it)
            flat = [v.to(o[1]) if o[0] == () and _takes(t, o[1]) else v
                    for v, t, o in zip(flat, types, map(_leaf_type, out))]
        break
    return tree_unflatten(flat, spec), (spec, [_leaf_type(v)[:2] + t[2:] for v, t in
                                               zip(flat, types)])


def _types(tree: Any) -> tuple:
    flat, spec = tree_flatten(tree)
    return spec, [_leaf_type(v) for v in flat]


def _leaf_paths(spec) -> list[str]:
    """Each leaf's path as torch's pytree writes it (``[0]['w']``, ``[1].field``),
    read off the tree's spec: a mapping's keys, a namedtuple's fields, else indices."""
    if spec.is_leaf():
        return [""]
    kids = spec.children() if hasattr(spec, "children") else spec.children_specs
    context = spec.context[1] if spec.type is collections.defaultdict else spec.context
    if spec.type in (dict, collections.OrderedDict, collections.defaultdict):
        keys = [f"[{k!r}]" for k in context]
    elif isinstance(context, type) and issubclass(context, tuple) and \
            hasattr(context, "_fields"):
        keys = [f".{f}" for f in context._fields]
    else:
        keys = [f"[{i}]" for i in range(len(kids))]
    return [k + rest for k, kid in zip(keys, kids) for rest in _leaf_paths(kid)]


def _check(op: str, what: str, ref: tuple, new: Any, fix: str, sides=("input", "output")):
    """``new`` has the tree structure, positional shapes and dtypes of ``ref`` (as
    :func:`_types` describes them)."""
    spec, leaves = _types(new)
    if spec != ref[0]:
        raise AxisTypeError(f"{op}: {what} must have identical types, but the structure "
                            f"differs: {ref[0]} vs {spec}; {fix}")
    for k, (a, b) in enumerate(zip(ref[1], leaves)):
        if not _same(a, b):
            path = _leaf_paths(spec)[k]
            raise AxisTypeError(f"{op}: {what} must have identical types, but the "
                                f"component {path or '(root)'} is {_fmt(a)} in the {sides[0]} and "
                                f"{_fmt(b)} in the {sides[1]} (positional shape and dtype); {fix}")


def _fmt(t: tuple) -> str:
    return f"{t[1]}{list(t[0])}" if t[0] is not None else t[1].__name__


def _predicate(pred: Any, op: str, ints: bool) -> Any:
    """A Python bool when every instance takes one decision, else the boolean value to
    select with (a named one, or any value while tracing)."""
    if isinstance(pred, (np.ndarray, np.generic)):
        pred = torch.as_tensor(pred)
    if isinstance(pred, bool) or ints and isinstance(pred, (numbers.Integral, float)):
        return bool(pred)
    if not isinstance(pred, (torch.Tensor, _NT)):
        raise AxisTypeError(f"{op}: the predicate must be a boolean scalar, got "
                            f"{type(pred).__name__}")
    p = _as_named(pred, op, "the predicate")
    dt = p._data.dtype
    if p.ndim or not (dt == torch.bool or ints and _kind(dt) in "fi"):   # (JAX: != 0)
        raise AxisTypeError(f"{op}: the predicate must be a boolean scalar (positional shape "
                            f"()), got dtype {dt} and positional shape {tuple(p.shape)}")
    p = p if dt == torch.bool else _as_named(p != 0, op)
    if p._names or building_graph():
        return p if p._names else p._data
    try:
        return bool(p._data)
    except RuntimeError:                 # a torch.func.vmap'd value: one per instance
        return p._data


def _select_tree(pred: Any, new: Any, old: Any) -> Any:
    def leaf(a, b):
        if a is None or not isinstance(a, (torch.Tensor, _NT)) and a == b:
            return a
        a, b = (v if isinstance(v, (torch.Tensor, _NT)) else torch.as_tensor(v) for v in (a, b))
        return torch.where(_on(pred, (a._data if type(a) is _NT else a).device), a, b)
    return tree_map(leaf, new, old)


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any,
         operand: Any = _NO_OPERAND) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)`` (``jax.lax.cond``;
    its older ``operand=`` keyword is the one operand).

    A Python or concrete 0-d predicate calls one branch.  A per-instance (named)
    predicate, or any tensor predicate while tracing, runs both branches and selects
    per instance, as JAX's batched ``cond`` does (so both must be safe to run).

    >>> import torch, named_axes as nx
    >>> f = lambda x: nx.lax.cond(nx.lax.axis_index('i') > 0, lambda v: v * 10, lambda v: v, x)
    >>> nx.xmap(f, in_axes=['i', ...], out_axes=['i', ...])(torch.tensor([1., 2.]))
    tensor([ 1., 20.])
    """
    operands = _operands("cond", operands, operand)
    p = _predicate(pred, "cond", ints=True)
    if isinstance(p, bool):
        taken, other = (true_fun, false_fun) if p else (false_fun, true_fun)
        out = taken(*operands)
        if not isinstance(pred, (torch.Tensor, _NT)):
            return out   # a Python value: the program decides
        # a tensor's value decides, never the named axes: JAX's cond gives both branches'
        key = call_key((true_fun, false_fun, p), operands)
        axes = _BRANCHES.lookup(key) if key is not None else None
        if axes is None:
            axes = _branch_axes(out, other, operands, p)
            if key is not None:
                _BRANCHES.store(key, axes)
        return out if axes is UNKNOWN else with_axes(out, axes)   # (UNKNOWN: as taken)
    t, f = true_fun(*operands), false_fun(*operands)
    _check("cond", "true_fun and false_fun output", _types(t), f, _BRANCH_FIX,
           ("true branch", "false branch"))
    return _select_tree(p, t, f)


def _operands(op: str, operands: tuple, operand: Any) -> tuple:
    if operand is _NO_OPERAND:
        return operands
    if operands:
        raise AxisTypeError(f"{op}: pass the operands positionally or as operand=, not both")
    return (operand,)


def _any(p: Any, op: str) -> bool:
    """Whether any instance's condition holds (read in Python: loops run unrolled).  A
    ``pmax`` over the named axes lets every SerialLoop chunk and mesh rank run the same
    number of steps, so a collective in the body meets its peers."""
    why = "is traced (nx.jit, make_fx, torch.compile)"
    if not building_graph():
        try:
            if type(p) is _NT:
                p = pmax(NamedTensor._wrap(p._data.to(torch.int32), p._names), p._names)
            return bool(p.any())
        except RuntimeError as e:
            why = f"cannot be read here ({e})"
    raise AxisTypeError(f"{op}: the loop condition {why}, so the number of steps is unknown: "
                        f"loops run as Python loops (torch's loop operator takes no "
                        f"NamedTensor). Use fori_loop with Python bounds or scan, or run the "
                        f"loop outside the traced function")


def _loop_shapes(cond_fun: Callable, body_fun: Callable, val: Any, p: Any, ref: tuple) -> Any:
    """``while_loop`` under ``nx.eval_shape``: the carry after any number of steps, its
    named axes grown by steps on fake values (selected as the condition selects) until
    they stop growing."""
    while True:
        nxt = _select_tree(p, _step("while_loop", body_fun, ref, val), val)
        q = _predicate(cond_fun(nxt), "while_loop", ints=False)
        q = p if isinstance(q, bool) else q
        if list(map(set, named_axes_of(nxt, q))) == list(map(set, named_axes_of(val, p))):
            return nxt
        val, p = nxt, q


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """Repeat ``val = body_fun(val)`` while ``cond_fun(val)`` (``jax.lax.while_loop``).

    A Python loop (torch's ``while_loop`` operator takes no NamedTensor), so under
    ``nx.jit`` the condition must be a Python bool.  A per-instance (named) condition
    runs while any instance's holds; finished ones keep their value (JAX's batching).

    >>> import torch, named_axes as nx
    >>> f = lambda: nx.lax.while_loop(lambda c: c < nx.lax.axis_index('i') * 3,
    ...                               lambda c: c + 2, torch.tensor(0))
    >>> nx.xmap(f, in_axes=[], out_axes=['i', ...], axis_sizes={'i': 3})()
    tensor([0, 4, 6])
    """
    val, ref = _carry(body_fun, init_val)
    first = named_axes_of(init_val)
    by_values, settled = False, None   # (a tensor condition; the carry's final named axes)
    while True:
        c = cond_fun(val)
        p = _predicate(c, "while_loop", ints=False)
        if not isinstance(p, bool) and shapes_only():
            return _loop_shapes(cond_fun, body_fun, val, p, ref)
        by_values = by_values or isinstance(c, (torch.Tensor, _NT))
        if p is False or not isinstance(p, bool) and not _any(p, "while_loop"):
            break
        new = _step("while_loop", body_fun, ref, val)
        new = new if p is True else _select_tree(p, new, val)
        if by_values and settled is None:
            settled = settles(first, named_axes_of(val), named_axes_of(new))
        val = new
    if not by_values:
        return val   # Python conditions: the program decides the steps
    return _settled(val, first, settled, _while_step(cond_fun, body_fun, ref))


def _step(op: str, body_fun: Callable, ref: tuple, *args: Any) -> Any:
    """``body_fun(*args)``, the carry it returns checked against ``ref`` (init_val's types)."""
    new = body_fun(*args)
    _check(op, "body_fun output and input", ref, new, _CARRY_FIX)
    return new


def _while_step(cond_fun: Callable, body_fun: Callable, ref: tuple) -> Callable:
    """One step of a while_loop, selected where a named condition holds."""
    def step(val):
        p = _predicate(cond_fun(val), "while_loop", ints=False)
        new = _step("while_loop", body_fun, ref, val)
        return new if isinstance(p, bool) else _select_tree(p, new, val)
    return step


def _settled(val: Any, first: list, settled: Any, step: Callable) -> Any:
    """The carry ``val`` of a loop whose step count tensors decided, with JAX's named
    axes whatever the count: ``settled`` if a step showed them, else those of ``first``
    and ``val`` grown by ``step`` on fake values to a fixed point."""
    if settled is None:
        settled = fixed_point(step, val, union_axes(first, named_axes_of(val)))
    return with_axes(val, settled)


# (both branches, which ran, the layouts of what they get) -> the result's named axes,
# as JAX keeps a traced branch (so the untaken branch's fake run happens once)
_BRANCHES = PlanCache("cond branches", maxsize=512)


def _branch_axes(out: Any, other: Callable, operands: tuple, p: bool) -> Any:
    """The named axes (per leaf) of a cond's result ``out`` and of the branch ``other``
    it did not take, from a run on fake values, its types checked against ``out``'s;
    ``UNKNOWN`` where ``out`` has them all, or as :func:`_abstract`."""
    ghost = abstract("cond", other, *operands)
    if ghost is UNKNOWN:
        return UNKNOWN
    t, f = (out, ghost) if p else (ghost, out)
    _check("cond", "true_fun and false_fun output", _types(t), f, _BRANCH_FIX,
           ("true branch", "false branch"))
    have = named_axes_of(out)
    axes = union_axes(have, named_axes_of(ghost))
    return UNKNOWN if axes == have else axes   # (nothing to add: as taken)


def _bound(b: Any, op: str, what: str = "each of lower and upper") -> Any:
    """A loop bound (or switch index) as a Python int when every instance has the same
    one, else a tensor."""
    if isinstance(b, numbers.Integral) and not isinstance(b, bool):
        return int(b)
    if isinstance(b, (torch.Tensor, _NT)) and not b.ndim and _kind(b.dtype) == "i":
        try:
            return b if type(b) is _NT and b._names or building_graph() else int(b)
        except RuntimeError:             # a torch.func.vmap'd bound
            return b
    raise AxisTypeError(f"{op}: {what} takes Python ints or integer 0-d tensors, got "
                        f"{type(b).__name__} {getattr(b, 'dtype', '')}"
                        f"{list(getattr(b, 'shape', ()))}")


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)`` (``jax.lax.fori_loop``).

    A Python loop (traced unrolled: torch's loop operators do not take NamedTensors); with
    int bounds ``i`` is a Python int.  Tensor bounds, per instance if named, run as
    :func:`while_loop` over ``(i, val)``.

    >>> import torch, named_axes as nx
    >>> nx.lax.fori_loop(0, 3, lambda i, x: x * 2, torch.ones(2))
    tensor([8., 8.])
    """
    lo, hi = _bound(lower, "fori_loop"), _bound(upper, "fori_loop")
    if isinstance(lo, int) and isinstance(hi, int):
        val, ref = _carry(functools.partial(body_fun, lo), init_val)
        first, settled = named_axes_of(init_val), None
        static = all(isinstance(b, numbers.Integral) for b in (lower, upper))
        for i in range(lo, hi):
            new = _step("fori_loop", body_fun, ref, i, val)
            if not static and settled is None:
                settled = settles(first, named_axes_of(val), named_axes_of(new))
            val = new
        if static:
            return val   # Python bounds: the program decides the steps
        return _settled(val, first, settled, functools.partial(_step, "fori_loop", body_fun,
                                                                ref, lo))
    i = torch.as_tensor(lo) if isinstance(lo, int) else lo
    return while_loop(lambda c: c[0] < hi, lambda c: (c[0] + 1, body_fun(*c)), (i, init_val))[1]


def _at(a: Any, i: Any) -> Any:
    """Entry ``i`` of ``a``'s leading positional dim (``i=None``: zeros shaped like one)."""
    x = _as_named(a, "scan", "xs")
    k, d = len(x._names), x._data
    d = d.new_zeros(d.shape[:k] + d.shape[k + 1:]) if i is None else d.select(k, i)
    return result(d, x._names, scan)


def _stack(vals: list, empty: bool) -> Any:
    """The steps' ``y`` leaves stacked along a new leading positional dim, named alike."""
    if vals[0] is None:
        return None
    ref = next((v for v in vals if isinstance(v, (torch.Tensor, _NT))), None)
    if ref is not None:   # a Python number among tensors is weakly typed: it takes theirs
        ref = ref._data if type(ref) is _NT else ref
        vals = [v if isinstance(v, (torch.Tensor, _NT)) else
                torch.as_tensor(v, dtype=torch.result_type(ref, v)) for v in vals]
    nts = [_as_named(v, "scan", "the y of f") for v in vals]
    U = union_names([(f"y at step {i}", v) for i, v in enumerate(nts)], op="scan")
    p = nts[0].ndim
    data = [align(handed(v._data, v._names, U), v._names, p, U, p) for v in nts]
    shape = torch.broadcast_shapes(*(d.shape for d in data))
    out = torch.stack([d.expand(shape) for d in data], len(U))
    return result(out.narrow(len(U), 0, 0) if empty else out, U, scan)


def _length(flat: list, length: Any) -> int:
    sizes = [_as_named(a, "scan", "xs").shape[:1] for a in flat if a is not None]
    if any(not s for s in sizes):
        raise AxisSizeError("scan: every leaf of xs needs a leading positional dim to "
                            "scan over; got a value with positional shape ()")
    sizes = [s[0] for s in sizes]
    if length is None and not sizes:
        raise AxisSpecError("scan: xs has no values to scan over; pass length=")
    if len(set(sizes + ([] if length is None else [int(length)]))) > 1:
        raise AxisSizeError(f"scan: xs leading positional sizes {sizes} and length={length} "
                            f"disagree; give every leaf of xs the same leading size")
    return sizes[0] if sizes else int(length)


def scan(f: Callable, init: Any, xs: Any, length: Any = None, reverse: bool = False,
         unroll: Any = 1) -> Any:
    """``carry, y = f(carry, x)`` over the leading positional dim of ``xs``
    (``jax.lax.scan``); returns the final carry and the ``y``'s stacked along a new
    leading positional dim (in the order of ``xs``, also when ``reverse``).

    ``unroll`` changes nothing (a Python loop).  ``xs`` may be None with ``length``.
    Named axes of ``xs`` and ``init`` broadcast by name.

    >>> import torch, named_axes as nx
    >>> nx.lax.scan(lambda c, x: (c + x, c + x), torch.tensor(0.), torch.arange(4.))
    (tensor(6.), tensor([0., 1., 3., 6.]))
    """
    if not isinstance(unroll, numbers.Integral) or unroll < 1 and unroll is not False:
        raise AxisSpecError(f"scan: unroll must be a bool or a positive int, got {unroll!r}")
    flat, spec = tree_flatten(xs)
    n = _length(flat, length)
    carry, ref = _carry(lambda c: f(c, tree_unflatten(
        [None if a is None else _at(a, 0 if n else None) for a in flat], spec))[0], init)
    ys = [None] * max(n, 1)
    for i in (range(n - 1, -1, -1) if reverse else range(n)) if n else [None]:
        out = f(carry, tree_unflatten([None if a is None else _at(a, i) for a in flat], spec))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise AxisTypeError(f"scan: f must return a pair (carry, y), got "
                                f"{type(out).__name__}")
        _check("scan", "the carry input and output of f", ref, out[0], _CARRY_FIX)
        carry, ys[i or 0] = out if n else (carry, out[1])
    y_flat = [tree_flatten(y) for y in ys]
    leaves = [_stack([yf[0][j] for yf in y_flat], n == 0) for j in range(len(y_flat[0][0]))]
    return carry, tree_unflatten(leaves, y_flat[0][1])
