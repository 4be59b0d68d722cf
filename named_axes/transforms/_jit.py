"""``jit``: trace the whole named program once into one aten graph, then compile it.

The program (names, xmap, torch.func transforms and all) is traced with ``make_fx``:
``jit(value_and_grad(xmap(loss)))`` becomes one graph holding the forward *and* the
backward, compiled by inductor (or any ``torch.compile`` backend by name).  Compiled
programs are cached on the call's key (``_jit_keys``); a cached call only flattens the
arguments, builds the key and calls the compiled function.  This module holds the
calls and the cache; ``_jit_program`` traces and compiles each program.

A call whose inputs require grad compiles through AOT autograd (its result is
differentiable); a program that runs a backward while traced (a whole training step)
compiles as it is and returns values.  What a compiled program could not replay (an
optimizer step, a ``.backward()`` inside it) raises (``_trace_probe``).  See
docs/guide.md ("Training steps under nx.jit") and docs/architecture.md ("jit and
autograd").

>>> import torch, named_axes as nx
>>> f = nx.jit(lambda x: (x.sin() ** 2).sum(), backend='eager')
>>> float(f(torch.zeros(3)))
0.0
"""
from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Callable, Sequence

import torch

from torch.fx.experimental.proxy_tensor import get_proxy_mode

from .. import _env
from .._errors import AxisResourceError, AxisTypeError
from .._modes import building_graph
from .._torch_private import dispatch_depth, functorch_transform_kind
from . import _store
from ._backend import Backend
from ._jit_keys import call_key, detached, fast_lane, numpy_as_tensors, split_static
from ._jit_program import Program, compile_program, load_stored, outside_dynamo, stored_ok
from ._jit_sharded import is_dtensor, local_program, on_local_shards

# the key under which a call's meshes in scope join its bound axes (an axis name never)
_RESOURCES = object()

__all__ = ["jit", "disable_jit", "on_mesh_under_dynamo", "run_jitted"]

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_is_compiling = torch.compiler.is_dynamo_compiling
_grad_enabled = torch.is_grad_enabled


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
    if dispatch_depth() and get_proxy_mode() is not None:
        return True
    return functorch_transform_kind() is not None


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

    Returns:
        The compiled function; ``.cache_size()`` tells how many programs it holds,
        ``.stats()`` how many calls ran compiled (``fast_lane``: of those, how many
        skipped the cache key), how many inline, and how many programs came from or
        went to the program store (``nx.set_program_store``).

    Gradients and side effects: docs/guide.md.  Calls made under another trace or
    transform (``make_fx``, dynamo, ``torch.func``, ``nx.grad`` ...), with tensor
    subclasses other than ``nn.Parameter``, on XLA (torch-xla compiles its graphs
    itself), or inside ``disable_jit()`` run ``fun`` inline, so ``grad(jit(f))``
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
    backend_ = Backend(backend, mode, tuple(sorted((options or {}).items())))
    return _jitted(_ProgramCache(fun, static, donate, backend_))


def _alike_on_every_rank(build: Callable, name: str) -> Program:
    """``build()``'s program, of the same kind on every rank when a mesh is in scope.

    A rank whose trace failed, or that runs inline while the others run compiled, would
    leave the others waiting in a collective.  So the ranks exchange what they built:
    if all failed, each raises its error; if some did, every rank raises an
    AxisResourceError naming them; if any runs inline, all do."""
    agree = _env.rank_agreement()
    if agree is None:
        return build()
    try:
        entry, err = build(), None
    except Exception as e:  # noqa: BLE001 - re-raised once the other ranks know
        entry, err = None, e
    kinds = agree(0 if err is not None else 1 if entry.compiled is None else 2)
    if err is not None and set(kinds) == {0}:
        raise err
    if 0 in kinds:
        failed = [r for r, k in enumerate(kinds) if k == 0]
        why = f": {type(err).__name__}: {err}" if err is not None else "; their error says why"
        raise AxisResourceError(
            f"jit({name}): tracing this program failed on rank(s) {failed} (each rank "
            f"traces its own shards), so no rank runs it{why}") from err
    if 1 in kinds and entry.compiled is not None:
        return entry._replace(compiled=None)   # inline, as on the ranks that must
    return entry


class _ProgramCache:
    """The compiled programs of one jitted function, by call key, and its call counts."""

    def __init__(self, fun: Callable, static: tuple, donate: tuple, backend: Backend):
        self.fun, self.static, self.donate, self.backend = fun, static, donate, backend
        self.name = getattr(fun, "__name__", "fun")
        self.programs: dict = {}   # call key -> Program
        # the fast lane (_jit_keys.fast_lane): the last call's reader, guard and entry
        self.fast: list = [None, None, None]
        # calls run compiled, run inline, compiled by the fast lane; programs loaded from
        # the program store, saved to it
        self.counts = [0, 0, 0, 0, 0]
        self.lanes: dict = {}  # call key -> its fast lane's (reader, guard)
        self.others: dict = {}   # call key -> programs whose closed-over state changed
        # torch's global state of the last call (default dtype, autocast, grad mode ...,
        # which the traces bake in): its guard and its part of the call keys
        self.state: list = [None, None]
        self.new_state()
        self.sharded: _ProgramCache | None = None   # on_shards()'s programs

    def add(self, args: tuple, dyn_args: tuple, st_vals: tuple, bound: dict, key: tuple,
            leaves: list, tied: bool) -> Program:
        """The program for a call whose key missed, now cached under it: the one serving
        the call's plain form, a stored one, or a new one."""
        cache, counts = self.programs, self.counts
        # a program computing its own gradients serves calls differing only in
        # which inputs require grad (nn.Parameters first, its plain results next)
        plain_key = None if tied else call_key(
            [detached(a) for a in dyn_args], st_vals, bound, (False, self.state[1]))[0]
        entry = cache.get(plain_key)
        if entry is not None and not (entry.values and entry.holds()):
            entry = None
        ident = None
        if entry is None and stored_ok(self.backend, bound, tied):
            ident = _store.identify(self.fun, args, leaves, key)   # the program store
            entry = None if ident is None else load_stored(ident, leaves)
            counts[3] += entry is not None
        if entry is None:
            entry = _alike_on_every_rank(
                lambda: compile_program(self.fun, args, self.static, self.backend, ident),
                self.name)
            counts[4] += entry.stored
            if entry.values and plain_key is not None:
                cache.setdefault(plain_key, entry)
        cache[key] = entry
        return entry

    def take_lane(self, key: tuple, args: tuple, entry: Program) -> None:
        """Make the fast lane this call's (it missed the lane, or the lane was another's)."""
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = fast_lane(args)
        read, check = lane[0], entry.closed
        if check is not None:   # (the slow path finds the program that holds)
            read = lambda a: lane[0](a) if check() else None  # noqa: E731
        self.fast[:] = [read, lane[1], entry] if lane[1] is not None else [None] * 3

    def get(self, key: tuple) -> Program | None:
        """The program cached for ``key`` that may run now, or None."""
        entry = self.programs.get(key)
        return entry if entry is None or entry.holds() else self.other(key)

    def other(self, key: tuple) -> Program | None:
        """For a call whose cached program's closed-over state changed (a module's
        ``eval()``): one kept before that holds now, or None (a new one is traced)."""
        kept = self.others.setdefault(key, [])
        new = next((p for p in kept if p.holds()), None)
        if new is not None:
            kept.remove(new)
        kept.insert(0, self.programs.pop(key))
        del kept[4:]
        if new is not None:
            self.programs[key] = new
        return new

    def new_state(self) -> None:
        """Calls are now made under another global state: key them by it (the fast
        lane was the old state's)."""
        now = _global_state()
        self.state[:] = [now, now[1:]]   # (grad mode is keyed apart)
        self.fast[:] = [None, None, None]

    def on_shards(self) -> Callable:
        """The jitted program of this function on local shards, for calls taking
        DTensors (``_jit_sharded``; made on first use): their layouts its argument 0."""
        if self.sharded is None:
            shift = tuple(i + 1 if i >= 0 else i for i in self.static)
            donate = tuple(i + 1 if i >= 0 else i for i in self.donate)
            self.sharded = _ProgramCache(local_program(self.fun), (0, *shift), donate,
                                         self.backend)
            self.sharded.run = _jitted(self.sharded)
        return self.sharded.run

    def n_programs(self) -> int:
        return len({id(e) for e in self.programs.values()}) + (
            0 if self.sharded is None else self.sharded.n_programs())

    def clear(self) -> None:
        self.programs.clear()
        self.lanes.clear()
        self.others.clear()
        self.fast[:] = [None, None, None]
        if self.sharded is not None:
            self.sharded.clear()

    def stats(self) -> dict:
        counts = self.counts
        if self.sharded is not None:   # (calls taking DTensors: on_shards)
            counts = [a + b for a, b in zip(counts, self.sharded.counts)]
        return {"compiled": counts[0], "inline": counts[1], "fast_lane": counts[2],
                "programs": self.n_programs(), "store_loaded": counts[3],
                "store_saved": counts[4]}


def _jitted(programs: _ProgramCache) -> Callable:
    """The jitted function: a call repeating the last one's signature takes the fast
    lane; others look their key up, and a miss adds a program (or runs inline)."""
    fun, static, donate, name = programs.fun, programs.static, programs.donate, programs.name
    fast, counts, state = programs.fast, programs.counts, programs.state

    @functools.wraps(fun)
    def run(*args):
        if _flags.disabled or _in_transform():   # inside another trace or transform,
            counts[1] += 1                       # jit is transparent
            return fun(*args)
        if _global_state() != state[0]:   # (grad mode, default dtype, autocast ...)
            programs.new_state()
        read = fast[0]
        if read is not None and not _env.bound_axes() and not _env.resources():
            flat = read(args)
            if flat is not None and fast[1].check(*flat):
                entry = fast[2]
                counts[0] += 1
                counts[2] += 1
                return entry.rebuild(_outputs(entry, flat, name))
        if static or donate:
            dyn_args, st_vals = split_static(args, static, donate, name)
        else:
            dyn_args, st_vals = args, ()
        bound = _bound()
        key, leaves, tied = call_key(dyn_args, st_vals, bound, (_grad_enabled(), state[1]))
        try:
            entry = programs.get(key)
        except TypeError:
            arrays = numpy_as_tensors(args)
            if arrays is not None:   # numpy arrays are arrays, as in JAX's jit
                return run(*arrays)
            raise AxisTypeError(f"jit({name}): static arguments must be hashable, got "
                                f"{st_vals!r}") from None
        if entry is None:
            # tensor subclasses (but nn.Parameter), which the compiled code cannot take,
            # and calls on an XLA mesh (torch-xla compiles its graphs itself) run inline;
            # DTensors on a mesh compile for the rank's shards
            others = [t for t in leaves if type(t) is not _Tensor
                      and type(t) is not _Parameter and isinstance(t, _Tensor)]
            if not others and all(k[1] != "xla" for k in _env.resources()):
                entry = programs.add(args, dyn_args, st_vals, bound, key, leaves, tied)
            elif others and _env.resources() and all(is_dtensor(t) for t in others):
                return on_local_shards(programs.on_shards(), args)
        compiled, tensor_pos, rebuild, pure = entry[:4] if entry else (None,) * 4
        if compiled is None:   # tensor subclasses, or a differentiable mesh program not
            counts[1] += 1     # cut in two (_jit_program): inline
            return fun(*args)
        if pure and tensor_pos is None and not (static or bound or tied):
            programs.take_lane(key, args, entry)
        if tensor_pos is not None:
            leaves = [leaves[i] for i in tensor_pos]
        counts[0] += 1
        return rebuild(_outputs(entry, leaves, name))

    run.cache_size = programs.n_programs  # type: ignore[attr-defined]
    run.clear_cache = programs.clear  # type: ignore[attr-defined]
    run.stats = programs.stats  # type: ignore[attr-defined]
    return run


def _outputs(entry: Program, flat: list, name: str) -> list:
    """The flat results of ``entry`` run on ``flat``.  A values-only program's carry,
    where eager results would be differentiable, a backward that refuses
    (:class:`_ValuesOnly`); an input that is such a result adds no edge, so steps fed
    their own results make no chain of nodes."""
    if not entry.values or not _grad_enabled():
        return entry.compiled(flat)
    needs = [t for t in flat if t.requires_grad and not getattr(t.grad_fn, "values_only", 0)]
    if not needs:
        return entry.compiled(flat)
    return list(_ValuesOnly.apply(name, entry.compiled, flat, *needs))


class _ValuesOnly(torch.autograd.Function):
    """The results of a compiled program, tied to its inputs that require grad, with a
    backward that raises: nx.jit compiles a program that takes its derivatives inside (a
    training step) to values."""

    @staticmethod
    def forward(ctx, name: str, compiled: Callable, flat: list, *needs):
        ctx.name, ctx.values_only = name, True   # (a Function's node is its ctx)
        out = compiled(flat)
        ctx.mark_non_differentiable(*[o for o in out if not (
            isinstance(o, _Tensor) and (o.is_floating_point() or o.is_complex()))])
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        raise AxisTypeError(
            f"jit({ctx.name}): its results are values (the program takes derivatives "
            f"inside, and nx.jit compiles it with them); they cannot be differentiated "
            f"again: apply the transform outside (nx.grad(step)) or call it without nx.jit")


def _global_state() -> tuple:
    """torch's global settings a trace bakes in: grad mode, the default dtype (``torch.ones``
    takes it), autocast (it inserts casts), deterministic algorithms."""
    return (_grad_enabled(), torch.get_default_dtype(), torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"), torch.is_autocast_enabled("cuda"),
            torch.get_autocast_dtype("cuda"), torch.are_deterministic_algorithms_enabled())


def _bound() -> dict:
    """The axes bound around a call, and the meshes in scope (their collectives are in
    the program) under a key no axis name is."""
    bound = _env.bound_axes()
    return {**bound, _RESOURCES: _env.resources()} if _env.resources() else bound


def on_mesh_under_dynamo(program: Callable) -> bool:
    """Whether dynamo is tracing a call of ``program`` (an xmap) that places named axes
    on a torch.distributed mesh now in scope: :func:`run_jitted` runs such a call.

    >>> on_mesh_under_dynamo(len)   # not tracing, not an xmap
    False
    """
    resources = getattr(program, "axis_resources", None)
    if not _is_compiling() or not resources or isinstance(resources, dict) and any(
            getattr(r, "chunks", 1) > 1 for r in resources.values()):   # (a SerialLoop
        return False   # replays values, which no trace has: its engine runs outside dynamo)
    # (a mesh in scope is known by its key: ("Mesh", platform, ...))
    return any(key[1] != "xla" for key in _env.resources())


_JITTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def run_jitted(fun: Callable, args: tuple):
    """``fun(*args)`` run by ``jit(fun)`` (one per ``fun``, kept while ``fun`` lives),
    outside dynamo's graph: dynamo cannot carry the local-shard engine's Python state,
    while nx.jit traces the engine as it runs (:func:`on_mesh_under_dynamo`)."""
    return outside_dynamo(_run_jitted, fun, args)


def _run_jitted(fun: Callable, args: tuple):
    jitted = _JITTED.get(fun)
    if jitted is None:
        jitted = _JITTED[fun] = jit(fun)
    return jitted(*args)
