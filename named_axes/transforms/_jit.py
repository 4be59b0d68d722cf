"""``jit``: trace the whole named program once into one aten graph, then compile it.

The program (names, xmap, torch.func transforms and all) is traced with ``make_fx``:
``jit(value_and_grad(xmap(loss)))`` becomes one graph holding the forward *and* the
backward, compiled by inductor (or any ``torch.compile`` backend by name).  Compiled
programs are cached on the shapes, dtypes, devices and named shapes of the inputs, the
static arguments and the bound axes; a cached call only flattens the arguments,
builds the key and calls the compiled function.

>>> import torch, named_axes as nx
>>> f = nx.jit(lambda x: (x.sin() ** 2).sum(), backend='eager')
>>> float(f(torch.zeros(3)))
0.0
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, NamedTuple, Sequence

import torch

from torch.fx.experimental.proxy_tensor import get_proxy_mode

from .. import _env
from .._errors import AxisSpecError, AxisTypeError, NamedAxisError
from .._modes import building_graph
from .._tensor import NamedTensor
from .._torch_private import (HigherOrderOperator, dispatch_depth, functorch_transform_kind,
                              op_schema, tree_flatten, tree_map, tree_unflatten)
from . import _store
from ._backend import Backend, _grad_constants, compile_boxed
from ._fast_call import structure_reader, tensor_guard
from ._graph import trace_flat
from ._instances import FOLD_MISSES
from ._trace_probe import (TraceProbe, check_grads_untouched, check_no_stale_numbers,
                           preserving_writes, refusing_optimizer_steps)

__all__ = ["jit", "disable_jit"]

_NT = NamedTensor
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_is_compiling = torch.compiler.is_compiling
_dispatch_depth = dispatch_depth
_peek_functorch = functorch_transform_kind   # (None: no torch.func transform)


def _flatten_key(tree: Any, leaves: list) -> Any:
    """Append ``tree``'s leaves to ``leaves`` (torch pytree order); return a hashable key.

    NamedTensor leaves go in as their physical tensors.  The key holds the structure and
    each tensor's shape, strides, dtype, device, requires_grad (and names, and the type
    of a tensor subclass), so a cache hit costs one walk over the arguments (no
    TreeSpec, which hashes slowly), the compiled code always sees the strides it was
    compiled for, and whether a call must run inline is known from the entry.
    """
    t = type(tree)
    if t is _Tensor:
        leaves.append(tree)
        return (tree.shape, tree.stride(), tree.dtype, tree.device, tree.requires_grad)
    if t is _NT:
        d = tree._data
        leaves.append(d)
        return (tree._names, d.shape, d.stride(), d.dtype, d.device, d.requires_grad)
    if t is tuple or t is list:
        return (t, tuple([_flatten_key(x, leaves) for x in tree]))
    if t is dict:
        return (dict, tuple(tree), tuple([_flatten_key(x, leaves) for x in tree.values()]))
    if isinstance(tree, _Tensor):
        leaves.append(tree)
        return (t, tree.shape, tree.stride(), tree.dtype, tree.device, tree.requires_grad)
    sub, spec = tree_flatten(tree)
    if len(sub) == 1 and sub[0] is tree:   # a non-container leaf: its value is static
        leaves.append(tree)
        return (t, tree)
    return (spec, tuple([_flatten_key(x, leaves) for x in sub]))


class _Flags(threading.local):
    disabled = False


_flags = _Flags()


@contextlib.contextmanager
def disable_jit():
    """Within this block, ``jit``-ted functions run eagerly (for debugging).

    >>> import torch, named_axes as nx
    >>> with nx.disable_jit():
    ...     nx.jit(lambda x: x + 1)(torch.zeros(1))
    tensor([1.])
    """
    old = _flags.disabled
    _flags.disabled = True
    try:
        yield
    finally:
        _flags.disabled = old


def _in_transform() -> bool:
    """Whether a trace (make_fx, dynamo, a FakeTensorMode as in nx.eval_shape) or a
    torch.func transform is running."""
    if _is_compiling() or building_graph():   # (compiled code must not run on fakes)
        return True
    if _dispatch_depth() and get_proxy_mode() is not None:
        return True
    return _peek_functorch is not None and _peek_functorch() is not None


def _must_inline(leaves: list) -> bool:
    """Whether a call with these leaves runs the program inline (outside any transform):
    one with tensor subclasses (other than ``nn.Parameter``), which the compiled code
    cannot take.  (Tensors wrapped by torch.func exist only while its transform runs.)
    """
    for t in leaves:
        if type(t) is not _Tensor and type(t) is not _Parameter and isinstance(t, _Tensor):
            return True
    return False


def _no_grad_call(compiled: Callable) -> Callable:
    """``compiled`` run with grad disabled (its results are values)."""
    set_grad = torch.set_grad_enabled

    def call(args):
        prev = torch.is_grad_enabled()
        set_grad(False)
        try:
            return compiled(args)
        finally:
            set_grad(prev)
    return call


def jit(fun: Callable, *, static_argnums: int | Sequence[int] = (),
        donate_argnums: int | Sequence[int] = (), backend: str = "inductor",
        mode: str | None = None, options: dict | None = None) -> Callable:
    """Compile ``fun``: trace it once per input signature into an aten graph and compile.

    Args:
        fun: a named or positional program returning a pytree of tensors.
        static_argnums: arguments that are Python values baked into the trace (hashable;
            a new value traces again).
        donate_argnums: arguments whose buffers the program may reuse (accepted; torch
            keeps them intact).
        backend: ``'inductor'`` (default), ``'eager'``, or any ``torch.compile`` backend.
        mode, options: ``torch.compile``'s, for inductor: ``mode="max-autotune"`` gives
            inductor's own GEMM autotuning; ``options`` are inductor config entries.
            The program is lowered to plain aten ops and kernels are inductor's choice.

    Returns:
        The compiled function; ``.cache_size()`` tells how many programs it holds,
        ``.stats()`` how many calls ran compiled (``fast_lane``: of those, how many
        repeated the previous call's signature and skipped the cache key) and how many
        inline.
        Compiled code is also kept in inductor's on-disk cache
        (``TORCHINDUCTOR_CACHE_DIR``), so a second process compiles the same program
        faster (tracing still runs).  With a program store (opt-in:
        ``nx.set_program_store(dir)`` or ``NAMED_AXES_PROGRAM_STORE=dir``) a CPU program
        whose results are values is also compiled, when the process exits, into a
        library that a later process loads in milliseconds, without tracing: the first
        call of each signature then runs the program once eagerly to identify it
        (``transforms/_store.py`` says what it stores and what it refuses);
        ``.stats()`` counts ``store_loaded`` and ``store_saved``.

    Gradients.  Calls whose inputs (or closed-over tensors such as a module's
    ``nn.Parameter`` weights) require grad, with grad enabled, are compiled too:

    * a program that computes no gradients itself (a forward, a loss) compiles through
      AOT autograd, like ``torch.compile``: its result is differentiable, and
      ``.backward()`` runs the compiled backward (gradients reach ``param.grad``);
    * a program that runs a backward while it is traced (``jit(value_and_grad(f))``, a
      whole training step) already *is* its forward and backward: it compiles as it
      is and runs with grad disabled, so its results (loss, gradients, updated
      parameters) are values, as with JAX's ``jit``.  Such results cannot be
      differentiated again: to differentiate through the step, apply the transform
      outside (``nx.grad(step)``): under it the program runs inline.

    Side effects.  The compiled program replays the traced tensor operations: closed-over
    tensors are read (and updated in place) on every call, but Python numbers the trace
    read -- closed-over floats, ``float()`` / ``.item()`` of a tensor -- are baked in,
    as JAX's ``jit`` bakes Python values.  What a compiled program could not carry
    raises a ``NamedAxisError`` instead of training wrongly: a ``torch.optim`` step or a
    ``loss.backward()`` inside the program, a tensor it updates in place and reads as a
    number (``transforms/_trace_probe.py``).

    Calls made under another trace or transform (``make_fx``, dynamo, ``torch.func``,
    ``nx.grad`` ...), with tensor subclasses other than ``nn.Parameter``, or inside
    ``disable_jit()`` run ``fun`` inline, uncompiled, so ``grad(jit(f))``
    differentiates ``f``.

    >>> import torch, named_axes as nx
    >>> loss = lambda w, x: (x @ w).tanh().sum('b')
    >>> step = nx.jit(nx.value_and_grad(nx.xmap(loss, in_axes=({}, ['b', ...]), out_axes=[...])),
    ...               backend='eager')
    >>> v, g = step(torch.zeros(3), torch.ones(4, 3))
    >>> float(v), g.shape
    (0.0, torch.Size([3]))
    """
    if not callable(fun):
        raise AxisTypeError(f"jit: fun must be callable, got {type(fun).__name__}")
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    donate = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
    if not isinstance(backend, str):
        raise AxisTypeError(f"jit: backend must be a string, got {backend!r}")
    if (mode is not None or options) and backend != "inductor":
        raise AxisTypeError(f"jit: mode= and options= are inductor's; backend={backend!r}")
    backend = Backend(backend, mode, tuple(sorted((options or {}).items())))
    cache: dict = {}
    name = getattr(fun, "__name__", "fun")
    # The fast lane (_fast_call): the last call's reader of its tensor leaves (its
    # arguments are pytrees of plain tensors, parameters or NamedTensors of those), a
    # C++ guard checking the leaves' sizes, strides, dtypes, devices and grad flags in
    # one call, its entry and the grad mode it was made under.
    fast: list = [None, None, None, None]
    # calls run compiled, run inline, compiled by the fast lane; programs loaded from the
    # program store, saved to it
    counts = [0, 0, 0, 0, 0]
    lanes: dict = {}  # cache key -> its fast lane's (reader, guard)

    @functools.wraps(fun)
    def run(*args):
        if _flags.disabled or _in_transform():   # inside another trace or transform,
            counts[1] += 1                       # jit is transparent
            return fun(*args)
        grad_on = _grad_enabled()
        read = fast[0]
        if read is not None and fast[3] is grad_on and not _env.bound_axes():
            flat = read(args)
            if flat is not None and fast[1].check(*flat):
                entry = fast[2]
                counts[0] += 1
                counts[2] += 1
                return entry.rebuild(entry.compiled(flat))
        if static or donate:
            dyn_args, st_vals = _split_static(args, static, donate, name)
        else:
            dyn_args, st_vals = args, ()
        bound = _env.bound_axes()
        key, leaves, tied = key_of(dyn_args, st_vals, bound, grad_on)
        try:
            entry = cache.get(key)
        except TypeError:
            arrays = _numpy_as_tensors(args)
            if arrays is not None:   # numpy arrays are arrays, as in JAX's jit
                return run(*arrays)
            raise AxisTypeError(f"jit({name}): static arguments must be hashable, got "
                                f"{st_vals!r}") from None
        if entry is None:
            if _must_inline(leaves):
                counts[1] += 1
                return fun(*args)
            # a program computing its own gradients serves calls differing only in
            # which inputs require grad (nn.Parameters first, its plain results next)
            plain_key = None if tied else key_of(
                [_detached(a) for a in dyn_args], st_vals, bound, False)[0]
            entry = cache.get(plain_key)
            if entry is not None and not entry.values:
                entry = None
            ident = None
            if entry is None and _stored_ok(backend, bound, tied):
                ident = _store.identify(fun, args, leaves, key)   # the program store
                entry = None if ident is None else _load_stored(ident, leaves)
                counts[3] += entry is not None
            if entry is None:
                misses = FOLD_MISSES[0]
                with _store.compile_lock:
                    try:
                        entry = _build(fun, args, static, backend, ident)
                    except NamedAxisError:   # e.g. an unfolded copy met out_axes
                        if FOLD_MISSES[0] == misses:
                            raise
                    if FOLD_MISSES[0] != misses:
                        # a gradient inside decides its named shape by value (see
                        # _instances.drop_replicated): one eager call on copies, then retrace
                        with preserving_writes():   # closed-over state advances once
                            fun(*_copies(args))
                        entry = _build(fun, args, static, backend)
                counts[4] += entry.stored
                if entry.values and plain_key is not None:
                    cache.setdefault(plain_key, entry)
            cache[key] = entry
        compiled, tensor_pos, rebuild, pure = entry[:4]
        if pure and tensor_pos is None and not (static or bound or tied):
            # this call missed the lane (or it was another's): the lane is now this key's
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = _fast_lane(args)
            fast[:] = [lane[0], lane[1], entry, grad_on] if lane[1] is not None else [
                None, None, None, None]
        if tensor_pos is not None:
            leaves = [leaves[i] for i in tensor_pos]
        counts[0] += 1
        return rebuild(compiled(leaves))

    def key_of(dyn_args, st_vals, bound, grad_on) -> tuple:
        """``(key, leaves, tied)`` of a call: see ``_flatten_key``."""
        leaves: list = []
        parts = []
        for a in dyn_args:   # _flatten_key of the tuple, its first level unrolled
            if type(a) is _Tensor:
                leaves.append(a)
                parts.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad))
            else:
                parts.append(_flatten_key(a, leaves))
        struct = tuple(parts)
        key = (struct, grad_on, st_vals, tuple(bound.items())) if bound or st_vals else (
            struct, grad_on)
        tied = len(leaves) > 1 and len(set(map(id, leaves))) != len(leaves)
        if tied:   # the trace ties repeated tensors
            key = (key, _repeats(leaves))
        return key, leaves, tied

    def n_programs() -> int:
        return len({id(e) for e in cache.values()})

    run.cache_size = n_programs  # type: ignore[attr-defined]

    def clear_cache() -> None:
        cache.clear()
        lanes.clear()
        fast[:] = [None, None, None, None]

    run.clear_cache = clear_cache  # type: ignore[attr-defined]
    run.stats = lambda: {"compiled": counts[0], "inline": counts[1],  # type: ignore[attr-defined]
                         "fast_lane": counts[2], "programs": n_programs(),
                         "store_loaded": counts[3], "store_saved": counts[4]}
    return run


_grad_enabled = torch.is_grad_enabled


def _fast_lane(args: tuple) -> tuple:
    """``(reader, guard)`` passing calls with ``args``' structure and tensor properties
    (``(None, None)`` when such calls must take the full key)."""
    read = structure_reader(args)
    guard = None if read is None else tensor_guard(read(args))
    return (read, guard) if guard is not None else (None, None)


def _copies(args: tuple) -> tuple:
    """``args`` with every tensor leaf cloned (an eager warm-up call must not mutate them)."""
    return tree_map(lambda x: x.detach().clone().requires_grad_(x.requires_grad)
                    if isinstance(x, torch.Tensor) else
                    NamedTensor._wrap(x._data.detach().clone(), x._names)
                    if isinstance(x, NamedTensor) else x, args,
                    is_leaf=lambda x: isinstance(x, NamedTensor))


def _detached(tree: Any) -> Any:
    """``tree`` with its tensors (and NamedTensors' data) detached: plain tensors."""
    def leaf(x):
        if type(x) is _NT:
            d = x._data
            return x if type(d) is _Tensor and not d.requires_grad else _NT._wrap(
                d.detach(), x._names)
        return x.detach() if isinstance(x, _Tensor) else x
    t = type(tree)
    if t is _Tensor and not tree.requires_grad:
        return tree
    return leaf(tree) if t is _NT or isinstance(tree, _Tensor) else tree_map(leaf, tree)


def _split_static(args: tuple, static: tuple, donate: tuple, name: str) -> tuple:
    n = len(args)
    for i in static + donate:
        if not -n <= i < n:
            raise AxisSpecError(f"jit({name}): static_argnums/donate_argnums name "
                                f"argument {i}, but the call has {n} arguments")
    st = {i % n for i in static}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in st)
    return dyn_args, tuple(args[i] for i in sorted(st))


class Program(NamedTuple):
    """One compiled program of a jitted function (see :func:`_build`)."""
    compiled: Callable
    tensor_pos: Any
    rebuild: Callable
    pure: bool
    values: bool
    stored: bool = False   # loaded from the program store, or handed to it


def _numpy_as_tensors(args: tuple) -> tuple | None:
    """``args`` with numpy arrays as tensors (sharing memory), or None if there are none."""
    import numpy as np

    if not any(isinstance(v, np.ndarray) for v in tree_flatten(args)[0]):
        return None
    return tree_map(lambda v: torch.from_numpy(v) if isinstance(v, np.ndarray) else v, args)


def _stored_ok(backend: Backend, bound: dict, tied: bool) -> bool:
    """Whether this call may use the program store (see ``_store``): one is set, the
    backend is inductor in its default mode, no axes are bound around the call, no
    tensor is passed twice."""
    return (backend == Backend("inductor") and not bound and not tied
            and _store.program_store() is not None and _store.available())


def _load_stored(ident: Any, leaves: list) -> Program | None:
    """The stored program ``ident`` names, or None when the store lacks it."""
    compiled = _store.load(ident)
    if compiled is None:
        return None
    pos = [i for i, x in enumerate(leaves) if isinstance(x, _Tensor)]
    return Program(compiled, None if len(pos) == len(leaves) else pos,
                   _output_builder(ident.out_info, ident.is_tensor), True, False, True)


def _build(fun: Callable, args: tuple, static: tuple, backend: Backend, ident: Any = None):
    """Trace and compile ``fun`` into a :class:`Program`.

    ``tensor_pos`` picks the tensor leaves out of the flat leaves (None: all of them);
    ``rebuild`` turns the compiled function's flat outputs into ``fun``'s result;
    ``pure``: the program mutates nothing; ``values``: it ran a backward while traced
    (it computes its own gradients), so it runs with grad disabled and serves calls
    whatever their inputs' ``requires_grad``.  ``ident``: the call's identity in the
    program store (``_store.identify``); a program whose results are values, that
    mutates nothing and closes over no tensor the trace made is compiled into it.
    """
    n = len(args)
    st = {i % n for i in static}
    if st:
        st_args = {i: args[i] for i in st}

        def dyn_fun(*dyn):
            it = iter(dyn)
            return fun(*[st_args[i] if i in st else next(it) for i in range(n)])

        dyn_args = tuple(a for i, a in enumerate(args) if i not in st)
    else:
        dyn_fun, dyn_args = fun, args
    result: list = []
    traced_inputs: list = []
    probe = TraceProbe()

    def traced(*a):
        with probe:
            result[:] = [dyn_fun(*a)]
        traced_inputs[:] = [x._data if type(x) is _NT else x for x in tree_flatten(a)[0]
                            if type(x) is _NT or isinstance(x, _Tensor)]
        return result[0]

    # fake tensors: tracing must not run the program (it may mutate its inputs)
    name = getattr(fun, "__name__", "fun")
    try:
        with refusing_optimizer_steps(name):
            gm, leaves, (_, _, tensor_pos), out_info = trace_flat(traced, dyn_args,
                                                                   mode="fake")
    finally:
        probe.restore()
    # which output leaves are tensors (a None *value* among them is a constant)
    is_tensor = [type(x) is _NT or isinstance(x, _Tensor) for x in tree_flatten(result[0])[0]]
    result.clear()
    check_grads_untouched(name, traced_inputs + _constants(gm))
    traced_inputs.clear()
    check_no_stale_numbers(name, probe)
    example = [leaves[i] for i in tensor_pos]
    values = probe.ran
    all_tensors = len(tensor_pos) == len(leaves)
    rebuild = _output_builder(out_info, is_tensor)
    differentiable = not values and _grad_enabled() and (
        any(t.requires_grad for t in example) or _grad_constants(gm))
    positions = None if ident is None else _store.closed_over_positions(_constants(gm), ident)
    stored = (positions is not None and not differentiable and _pure(gm)
              and _same_output(out_info, is_tensor, ident))
    if stored:   # compiled for later processes at exit
        _store.save_later(gm, example, ident, positions)
    if values:   # the program computes its gradients itself: its results are values
        with torch.no_grad():
            compiled = _no_grad_call(compile_boxed(gm, [t.detach() for t in example], backend,
                                              grad_off=True))
    elif differentiable:
        # differentiable: compiled forward and backward (AOT autograd), collectives as
        # plain torch code (their custom ops carry no autograd formula)
        from ._backend import inline_collectives

        compiled = compile_boxed(inline_collectives(gm), example, backend)
    else:
        compiled = compile_boxed(gm, example, backend)
    return Program(compiled, None if all_tensors else tensor_pos, rebuild, _pure(gm), values,
                   stored)


def _same_output(out_info: list, is_tensor: list, ident: Any) -> bool:
    """Whether the traced result has the structure the identifying eager call returned."""
    spec, names, consts = ident.out_info
    return (is_tensor == ident.is_tensor and out_info[0] == spec and out_info[1] == names
            and repr(out_info[2]) == repr(consts))


def _constants(gm: torch.fx.GraphModule) -> list:
    """The tensors the graph closed over (parameters, buffers, other tensors)."""
    attrs = (getattr(gm, n.target, None) for n in gm.graph.nodes if n.op == "get_attr")
    return [v for v in attrs if isinstance(v, torch.Tensor)]


def _pure(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph mutates nothing (then a call repeating one tensor as two
    arguments may use a program traced for distinct ones)."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = op_schema(node.target)
        if (schema is not None and schema.is_mutable) or isinstance(
                node.target, HigherOrderOperator):
            return False
    return True


def _repeats(leaves: list) -> tuple:
    """Per leaf, the index of its first occurrence: a trace fed the same tensor twice
    uses one input for both, so that program serves only calls repeating it alike."""
    first: dict = {}
    return tuple([first.setdefault(id(x), i) for i, x in enumerate(leaves)])


def _output_builder(out_info: list, is_tensor: list) -> Callable:
    """A function from the compiled flat outputs to the program's result.

    Generated once per cache entry as one expression (``lambda o: (o[0], (o[1], o[2]))``)
    for results made of tuples, lists and dicts; other containers use the pytree.
    """
    o_spec, o_names, consts = out_info
    tensor_index: dict = {}
    for i, flag in enumerate(is_tensor):
        if flag:
            tensor_index[i] = len(tensor_index)

    def box(i: int, flat: Sequence) -> Any:
        if not is_tensor[i]:
            return consts[i]
        x = flat[tensor_index[i]]
        return x if o_names[i] is None else NamedTensor._wrap(x, o_names[i])

    skeleton = tree_unflatten(list(range(len(consts))), o_spec)
    keys: list = []

    def expr(node: Any) -> str | None:
        t = type(node)
        if t is int:
            if not is_tensor[node]:
                return f"C[{node}]"
            k = tensor_index[node]
            return f"o[{k}]" if o_names[node] is None else f"W(o[{k}], N[{node}])"
        if node is None:
            return "None"
        if t is tuple or t is list:
            parts = [expr(x) for x in node]
            if any(p is None for p in parts):
                return None
            body = ", ".join(parts)
            if t is list:
                return f"[{body}]"
            return f"({body},)" if parts else "()"
        if t is dict:
            parts = [expr(x) for x in node.values()]
            if any(p is None for p in parts):
                return None
            keys.append(list(node))
            j = len(keys) - 1
            return "{" + ", ".join(f"K[{j}][{m}]: {p}" for m, p in enumerate(parts)) + "}"
        return None

    code = expr(skeleton)
    if code is None:
        n = len(consts)
        return lambda flat: tree_unflatten([box(i, flat) for i in range(n)], o_spec)
    env = {"W": NamedTensor._wrap, "C": consts, "N": o_names, "K": keys}
    return eval(f"lambda o: {code}", env)  # noqa: S307 - code built above from indices
