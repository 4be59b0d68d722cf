"""The dispatcher: every torch call that sees a NamedTensor comes here.

``dispatch(func, args, kwargs)`` looks ``func`` up in the op registry
(:mod:`named_axes._registry`, filled by :mod:`named_axes.rules`); a rule computes the
result with one call on the physical tensors (or returns ``NotImplemented``).  Anything
without a rule runs under ``torch.func.vmap`` over the named dims (:func:`vmap_fallback`,
``randomness='different'``): the result equals running the op once per index of every
named axis (docs/guide.md §1).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from ._draws import drawn_on_whole, drew, may_draw, on_xla, refuse_draw, states
from ._engine import NeedsWholeAxes, broadcast_operands
from ._env import TAPES, frames
from ._env import _state as _env_state
from ._errors import (AxisResourceError, AxisTypeError, NamedAxisError, ShapeError,
                      fmt_named_shape, resource_clash_message)
from ._layout import align, union_names
from ._modes import observed
from ._registry import ENTRIES, op_name, rule_while_compiling
from ._registry import is_inplace as _is_inplace
from ._plancache import PlanCache
from ._shape_errors import (READS_VALUES, _first_line, fmt_at, on_positional_shapes,
                            positional_failure, refuse_python_values, refuse_shared_writes)
from ._torch_private import (function_applies, is_functorch_wrapped, native_batch_norm_legit,
                             softmax_backward_data, softmax_backward_data_op, tensor_version,
                             tree_flatten, tree_unflatten)
from . import _tensor
from ._tensor import NamedTensor
from ._tape import note_call
from ._levels import ORIGINAL as _functorch
from ._writes import check_inplace, write_out

__all__ = ["dispatch", "vmap_fallback", "wrap", "result", "ShapeError", "READS_VALUES",
           "UseFallback", "check_instance"]

_Tensor = torch.Tensor
_NT = NamedTensor
_is_compiling = torch.compiler.is_dynamo_compiling
_grad_enabled = torch.is_grad_enabled
_entry = ENTRIES.get
_wrap_nt = NamedTensor._wrap

class UseFallback(RuntimeError):
    """Raised by a rule's helpers where the rule cannot lay the op out (returning
    ``NotImplemented`` from deep inside): the dispatcher runs the vmap fallback."""


def dispatch(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Run ``func(*args, **kwargs)`` where some arguments are NamedTensors: the one path of
    every op on named values (operators, methods, torch functions)."""
    if _env_state.draws is not None:   # (nx.vmap's randomness: transforms/_vmap)
        return _env_state.draws(func, args, kwargs)
    if not _grad_enabled():   # (a torch.autograd.Function's forward runs so)
        for v in args:
            if type(v) is _NT and v._data.requires_grad or isinstance(v, _Tensor) and \
                    v.requires_grad:
                refuse_user_function()
    if kwargs and kwargs.get("out") is not None:
        return write_out(func, args, kwargs, dispatch)
    if _is_compiling():
        rule, writes = rule_while_compiling(func), _is_inplace(func)
    else:
        entry = _entry(func)
        if entry is None:
            entry = (None, _writes_target(func))
        rule, writes = entry
    if writes:
        check_inplace(func, args, kwargs)
    a, kw = args, kwargs
    for v in (*args, *kwargs.values()) if kwargs else args:
        if type(v) is _NT and not v._names:
            a, kw = _unwrap_unnamed(func, args, kwargs)
            break
    ra, rkw = a, kw
    engine_op = _env_state.engine and not _INSIDE[0]
    if engine_op:   # the engine places the sums its cotangents need (_engine)
        handed = broadcast_operands(a, kw, _NT)
        if handed is not None:
            ra, rkw = handed
    try:
        out = drawn_on_whole(func, a, kw) if engine_op else NotImplemented
        # (a trace draws no numbers)
        drawn = engine_op and out is NotImplemented and not observed() and \
            may_draw(func)
        state = states(on_xla(a, kw)) if drawn else None
        if rule is not None and out is NotImplemented:
            try:
                out = _inside(rule, func, ra, rkw) if engine_op else rule(func, ra, rkw)
            except UseFallback:
                pass
            except NeedsWholeAxes as e:   # along axes an engine splits: on their whole
                out = e.engine.whole(func, a, kw, e.names)
        if out is NotImplemented:
            out = _inside(vmap_fallback, func, ra, rkw) if engine_op else \
                vmap_fallback(func, ra, rkw)
        # it drew (unnamed: a kernel's own, sdpa's dropout)
        if state is not None and drew(state):
            out = drawn_on_whole(func, a, kw, state, out)
    except NamedAxisError:
        raise
    except (RuntimeError, IndexError, ValueError) as e:
        # A positional problem: torch's message on the user's shapes, and a fix.
        raise ShapeError(positional_failure(op_name(func), func, args, kwargs, e)) from e
    if TAPES:   # inside nx.grad / nx.vjp: what its derivative reads (_tape)
        note_call(func, args, kwargs, out)
    return out


def refuse_user_function() -> None:
    """Refuse an op on named values beside a tensor that needs a gradient (grad mode off)
    inside the forward of a user's ``torch.autograd.Function`` given named values: its
    ``apply`` takes a NamedTensor for a non-tensor, and returns the NamedTensor it gets
    back untouched, so autograd would record nothing through it."""
    if _is_compiling():   # (dynamo traces no frames; its own Function rules apply)
        return
    for cls, given in function_applies(inspect.currentframe()):   # (its forward runs inside)
        given = tree_flatten(given)[0]   # (one of the library's own is not refused)
        if not cls.__module__.startswith("named_axes.") and any(
                type(v) is _NT for v in given) and any(
                (v._data if type(v) is _NT else v).requires_grad for v in given
                if type(v) is _NT or isinstance(v, _Tensor)):
            raise AxisTypeError(
                f"{cls.__name__}.apply on named values: torch.autograd.Function takes a "
                f"NamedTensor for a non-tensor argument, so autograd would record no "
                f"gradient through {cls.__name__}. Write the rule with nx.custom_vjp "
                f"(or nx.custom_jvp), which takes named values, or apply "
                f"{cls.__name__} to positional tensors outside the named program")


_INSIDE = [0]   # > 0 while an engine's op runs (its operands were handed over once)

def _inside(run: Callable, func: Callable, a: tuple, kw: dict) -> Any:
    """``run(func, a, kw)`` for an op whose operands the engine was handed: the ops it
    runs inside are not handed again."""
    _INSIDE[0] += 1
    try:
        return run(func, a, kw)
    finally:
        _INSIDE[0] -= 1


def _unwrap_unnamed(func: Callable, args: tuple, kwargs: dict) -> tuple:
    """NamedTensors that carry no names (xmap's ``in_axes={}`` inputs) as their plain data,
    so rules take their plain-operand fast paths; only next to a value that carries names,
    and never an in-place op's target."""
    for v in (*args, *kwargs.values()) if kwargs else args:   # (a loop: on every op)
        if type(v) is _NT and v._names or type(v) in (list, tuple) and any(
                type(e) is _NT and e._names for e in v):
            break
    else:
        return args, kwargs
    keep = _keeps_target(func)
    a = tuple(v._data if type(v) is _NT and not v._names and (i or not keep) else v
              for i, v in enumerate(args))
    kw = {k: v._data if type(v) is _NT and not v._names else v for k, v in kwargs.items()}
    return a, kw


_writes_target = PlanCache("in-place ops", _is_inplace)   # (mul_, __imul__)


def _keeps_target(func: Callable) -> bool:
    """Does ``func`` write into (or hook onto) its first argument?  (Under dynamo: assume
    so; a lookup keyed by the function can fail its guards.)"""
    if torch.compiler.is_dynamo_compiling():
        return True
    return _writes_target(func) or func in (
        _Tensor.__setitem__, _Tensor.backward, _Tensor.register_hook)


def wrap(out: Any, names: tuple) -> Any:
    """Wrap every tensor in ``out`` (a tensor, tuple, list or torch.return_types) with
    ``names``.  With no names, ``out`` as it is: an op whose result carries no named axis
    returns plain tensors, as ``nx.lax``, ``nx.einsum`` and the ``nx`` functions do."""
    if not names:
        return out
    if isinstance(out, _Tensor):
        return _wrap_nt(out, names)
    if isinstance(out, (tuple, list)):
        return type(out)([wrap(o, names) for o in out])   # tuple, list, structseq
    return out


def result(out: Any, names: tuple, func: Callable) -> Any:
    """:func:`wrap` an op's output; two axes mapped to one resource may never meet in one
    value (docs/guide.md §5)."""
    for pair in _env_state.conflicts if len(names) > 1 else ():
        if pair <= set(names):
            res = {n: r for f in frames() for n, r in f.resources.items()}   # inner wins
            raise AxisResourceError(resource_clash_message(op_name(func), *pair, res))
    return _wrap_nt(out, names) if names and type(out) is _Tensor else wrap(out, names)

def vmap_fallback(func: Callable, args: tuple, kwargs: dict) -> Any:
    """``func`` run once per index of every named axis, via nested ``torch.func.vmap``
    (``randomness='different'``, an nx.vmap axis' own)."""
    flat, spec = tree_flatten((args, kwargs))
    idx = [i for i, leaf in enumerate(flat) if isinstance(leaf, _NT)]
    if not idx:
        return func(*args, **kwargs)
    check_instance(func, args, kwargs, flat, spec, real=True)
    operands = [(f"operand {i}", flat[i]) for i in idx]
    U = union_names(operands, op=func)
    inplace = _is_inplace(func)
    phys = []
    member = []
    for i in idx:
        x = flat[i]
        order = tuple(n for n in U if n in x._names)
        phys.append(align(x._data, x._names, x.ndim, order, x.ndim))
        member.append(set(order))

    # vmap returns tensors only: the op's other outputs (None, ints) ride outside it
    out_spec: list = []
    py_values: list = []   # each call's non-tensor outputs (the loop: one per instance)

    def call(*tensors):
        leaves = list(flat)
        for j, t in zip(idx, tensors):
            leaves[j] = t
        a, kw = tree_unflatten(leaves, spec)
        out_leaves, s = tree_flatten(func(*a, **kw))
        out_spec[:] = [s, [_SLOT if isinstance(o, _Tensor) else o for o in out_leaves]]
        py_values.append(out_spec[1])
        return tuple(o for o in out_leaves if isinstance(o, _Tensor))

    f = call
    rand = {n: fr.randomness for fr in frames() if fr.randomness for n in fr.sizes}
    for name in reversed(U):
        in_dims = tuple(0 if name in m else None for m in member)
        f = _functorch["vmap"](f, in_dims=in_dims, randomness=rand.get(name, "different"))
    try:
        looped = _LOOPED.get(func)
        if looped is not None and looped(flat):
            raise _Looped
        tensors = f(*phys)
    except (RuntimeError, IndexError, _Looped) as e:
        refuse_draw(func, e, rand)
        if not isinstance(e, _Looped) and not any(m in str(e) for m in _UNBATCHABLE):
            raise
        # functorch has no batching rule, the op branches on values, or its result's
        # shape depends on the values (nonzero, unique, masked_select, ...): loop instead
        shared = [v for i, v in enumerate(flat) if isinstance(v, _Tensor) and i not in idx]
        tensors = _loop(call, phys, member, U, func, shared)
        refuse_python_values(func, py_values)
    s, others = out_spec
    it = iter(tensors)
    out = tree_unflatten([next(it) if o is _SLOT else o for o in others], s)
    target = args[0] if args else next(iter(kwargs.values()), None)   # (nn.init: tensor=)
    if inplace and isinstance(target, _NT):
        return target
    return result(out, U, func)


_INSTANCE_OK = PlanCache("per-instance call checks")


def _real_instance_check(func, flat, spec):
    """torch's complaint about the first instance's call on a copy of its values, or None.
    For ops whose meta kernels (or batching rules) skip torch's checks; only for plain
    eager tensors (never under a dispatch mode or transform, which would record it), with
    the random states restored and every tensor copied (writes land on the copies)."""
    if observed():
        return None
    leaves = list(flat)
    devices = set()
    shared = []    # copies of the plain tensors every instance shares
    sizes = {}
    target = flat[0] if _is_inplace(func) and flat else None
    for j, v in enumerate(flat):
        if isinstance(v, (_Tensor, _NT)):
            data = v._data if type(v) is _NT else v
            if type(data) not in (_Tensor, torch.nn.Parameter) or data.is_meta or \
                    is_functorch_wrapped(data):
                return None
            if type(v) is _NT:
                sizes.update(zip(v._names, data.shape))
                if 0 in data.shape[:len(v._names)]:
                    return None
                data = data[(0,) * len(v._names)]
            copy = data.detach().clone()
            if data.requires_grad:   # (not a leaf: in-place ops stay allowed)
                copy = copy.requires_grad_().clone()
            leaves[j] = copy
            if type(v) is not _NT and v is not target:
                shared.append((leaves[j], leaves[j].clone()))
            if data.is_cuda:
                devices.add(data.device.index)
    a, kw = tree_unflatten(leaves, spec)
    gens = [(g, g.get_state()) for g in flat if isinstance(g, torch.Generator)]
    try:
        with torch.random.fork_rng(devices=sorted(devices)), \
                torch.autograd.graph.saved_tensors_hooks(_kept, _kept):   # (unseen by an
            func(*a, **kw)                    # enclosing checkpoint's count of its saves)
    except (RuntimeError, IndexError, ValueError) as e:
        return _first_line(e)
    except Exception:
        return None
    finally:   # (a generator= argument's state restored too)
        for g, state in gens:
            g.set_state(state)
    # a write into a plain argument (running statistics, a max_norm weight): every
    # instance would update it in turn (compared by value: kernels such as
    # native_batch_norm write without bumping the version counter)
    refuse_shared_writes(op_name(func), [(t, None, -1 if _bits_differ(t, before) else
                                           tensor_version(t)) for t, before in shared], sizes)
    return None


def _kept(t):
    return t


def _bits_differ(a, b) -> bool:
    if a.numel() == 0:
        return False
    return not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def check_instance(func: Callable, args: tuple, kwargs: dict, flat=None, spec=None,
                   real: bool = False) -> None:
    """Raise :class:`ShapeError` (torch's message on the user's positional shapes) when
    one instance's call of ``func`` fails on meta tensors of its shapes (``real``: or on
    a copy of the first instance's values).  Cached per signature (op, call structure,
    positional shapes, dtypes, other arguments): a valid layout costs a dict lookup."""
    if torch.compiler.is_dynamo_compiling():
        return
    if flat is None:
        flat, spec = tree_flatten((args, kwargs))
    try:
        key = (func, spec) + tuple((tuple(v.shape), v.dtype) if isinstance(v, (_Tensor, _NT))
                                   else v for v in flat)
        hash(key)
    except TypeError:
        key = None
    level = 2 if real else 1   # checked on meta tensors (1), and on real values too (2)
    if key is not None and (_INSTANCE_OK.lookup(key) or 0) >= level:
        return
    msg = on_positional_shapes(func, args, kwargs)
    if msg is None and real and key is not None:   # (uncached: not on every call)
        msg = _real_instance_check(func, flat, spec)
    if msg is not None:
        raise ShapeError(positional_failure(op_name(func), func, args, kwargs, msg))
    if key is not None:
        _INSTANCE_OK.store(key, level)


class _Looped(Exception):
    """An op that functorch batches wrongly: run it per instance."""


def _unusual(solve: bool):
    """When functorch batches an op wrongly: not every operand named, or (``solve``) an A
    with batch dims of its own (broadcast against B's), or else positional shapes that
    differ or are 0-d (whose dim 0 the batching rule reads as the batch dim)."""
    def when(flat) -> bool:
        tensors = [v for v in flat if isinstance(v, (_Tensor, _NT))]
        if any(type(v) is _Tensor for v in flat) or not tensors:
            return True
        if solve:
            return tensors[0].ndim != 2
        return tensors[0].ndim == 0 or len({tuple(t.shape) for t in tensors}) > 1
    return when


# ops whose functorch batching rules give other values than the per-instance loop,
# with when: solve decides B's vector-or-matrix form on the batched rank,
# lstsq broadcasts a batched B against A wrongly, native_batch_norm aligns a batched
# weight with the wrong dim, _softmax_backward_data with one operand batched
_LOOPED = {f: when for fs, when in (
    ((torch.linalg.solve, torch.linalg.solve_ex, torch.linalg.lstsq), _unusual(True)),
    ((torch.native_batch_norm, native_batch_norm_legit), lambda flat: True),
    ((softmax_backward_data, softmax_backward_data_op,
      softmax_backward_data_op.default), _unusual(False)),
) for f in fs if f is not None}

_SLOT = object()  # marks where a tensor output goes back
_UNBATCHABLE = ("Batching rule not implemented", "data-dependent control flow",
                "We could not generate a fallback",
                # dynamic shapes: functorch refuses them, or its per-example fallback
                # (argwhere, bincount, ...) fails to stack unequal results
                "dynamic shape", "differently shaped", "stack expects each tensor to be equal size",
                "please provide an explicit positive num_classes",   # one_hot(x, -1)
                # some batching rules refuse dims torch takes on 0-d values (flip(-1))
                "Dimension out of range")


def _loop(call, phys, member, U, func, shared):
    """``call`` once per index of the named dims ``U`` (leading, in order), stacked.  An op
    that writes into one of the ``shared`` plain tensor arguments (a running statistic)
    is refused (the write undone), and so are results whose shapes differ between
    instances (a named value has one positional shape)."""
    import itertools

    sizes = {}
    for t, m in zip(phys, member):
        order = [n for n in U if n in m]
        sizes.update(zip(order, t.shape[:len(order)]))
    op = op_name(func)
    saved = [(t, t.detach().clone(), tensor_version(t)) for t in shared]
    outs, where = [], []
    for index in itertools.product(*[range(sizes[n]) for n in U]):
        at = dict(zip(U, index))
        sliced = [t[tuple(at[n] for n in U if n in m)] for t, m in zip(phys, member)]
        outs.append(call(*sliced))
        where.append(at)
        if not outs[1:]:
            refuse_shared_writes(op, saved, sizes)
    if not outs:
        raise ShapeError(f"{op}: a named axis has size 0 ({fmt_named_shape(sizes)}), so the shape "
                         f"of this op's result (which depends on the values) is unknown")
    for j in range(len(outs[0])):
        s0 = tuple(outs[0][j].shape)
        for o, at in zip(outs, where):
            if tuple(o[j].shape) != s0:
                what = f"result {j}" if len(outs[0]) > 1 else "its result"
                raise ShapeError(
                    f"{op}: the shape of {what} depends on the values and differs between "
                    f"instances of the named axes {fmt_named_shape(sizes)}: {s0} at "
                    f"{fmt_at(where[0])} but {tuple(o[j].shape)} at {fmt_at(at)}; a named "
                    f"value has one positional shape for every index of its named axes. "
                    f"Use a fixed-size form (torch.nonzero_static(x, size=n), "
                    f"torch.where(mask, x, fill), a mask instead of selecting), or make the "
                    f"named axes positional first (nx.positional, lax.all_gather)")
    lead = tuple(sizes[n] for n in U)
    return tuple(torch.stack([o[j] for o in outs]).reshape(lead + tuple(outs[0][j].shape))
                 for j in range(len(outs[0])))


# NamedTensor.__torch_function__ calls this module's dispatch; bound here (not on the
# first call) so that dynamo never guards on a stub that later replaces itself
_tensor._dispatch = dispatch
