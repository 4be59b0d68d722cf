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
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from torch.fx.experimental.proxy_tensor import get_proxy_mode

from .. import _env
from .._errors import AxisSpecError, AxisTypeError
from .._tensor import NamedTensor
from ._graph import rebuild_output, trace_flat

__all__ = ["jit", "disable_jit"]

_NT = NamedTensor
_Tensor = torch.Tensor
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_is_compiling = torch.compiler.is_compiling


def _flatten_key(tree: Any, leaves: list) -> Any:
    """Append ``tree``'s leaves to ``leaves`` (torch pytree order); return a hashable key.

    The key holds the structure and each leaf's shape, dtype, device and names, so a
    cache hit costs one walk over the arguments (no TreeSpec, which hashes slowly).
    """
    t = type(tree)
    if t is _Tensor:
        leaves.append(tree)
        return (tree.shape, tree.dtype, tree.device)
    if t is _NT:
        leaves.append(tree)
        d = tree._data
        return (tree._names, d.shape, d.dtype, d.device)
    if t is tuple or t is list:
        return (t, tuple([_flatten_key(x, leaves) for x in tree]))
    if t is dict:
        return (dict, tuple(tree), tuple([_flatten_key(x, leaves) for x in tree.values()]))
    if isinstance(tree, _Tensor):
        leaves.append(tree)
        return (t, tree.shape, tree.dtype, tree.device)
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


def _compile(gm: torch.fx.GraphModule, example: list, backend: str) -> Callable:
    if backend == "inductor":
        from ._backend import compile_named

        return compile_named(gm, example)
    if backend == "eager":
        return gm
    return torch.compile(gm, backend=backend, fullgraph=True, dynamic=False)


def _must_inline(leaves: list) -> bool:
    """Inside another transform or trace, jit is transparent: run the program inline."""
    if _is_compiling() or get_proxy_mode() is not None:
        return True
    grad_on = torch.is_grad_enabled()
    for x in leaves:
        t = x._data if type(x) is _NT else x
        if isinstance(t, _Tensor) and (_is_wrapped(t) or (grad_on and t.requires_grad)
                                       or type(t) is not _Tensor):
            return True
    return False


def jit(fun: Callable, *, static_argnums: int | Sequence[int] = (),
        donate_argnums: int | Sequence[int] = (), backend: str = "inductor") -> Callable:
    """Compile ``fun``: trace it once per input signature into an aten graph and compile.

    Args:
        fun: a named or positional program returning a pytree of tensors.
        static_argnums: arguments that are Python values baked into the trace (hashable;
            a new value traces again).
        donate_argnums: arguments whose buffers the program may reuse (accepted; torch
            keeps them intact).
        backend: ``'inductor'`` (default), ``'eager'``, or any ``torch.compile`` backend.

    Returns:
        The compiled function; ``.cache_size()`` tells how many programs it holds.

    Inputs that require grad (with grad enabled), functorch-wrapped inputs, and calls
    under another trace run the program inline, so ``grad(jit(f))`` differentiates ``f``.

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
    cache: dict = {}
    name = getattr(fun, "__name__", "fun")

    @functools.wraps(fun)
    def run(*args):
        if _flags.disabled:
            return fun(*args)
        n = len(args)
        for i in static + donate:
            if not -n <= i < n:
                raise AxisSpecError(f"jit({name}): static_argnums/donate_argnums name "
                                    f"argument {i}, but the call has {n} arguments")
        if static:
            st = {i % n for i in static}
            dyn_args = tuple(a for i, a in enumerate(args) if i not in st)
            st_vals = tuple(args[i] for i in sorted(st))
        else:
            dyn_args, st_vals = args, ()
        leaves: list = []
        struct = _flatten_key(dyn_args, leaves)
        if _must_inline(leaves):
            return fun(*args)
        bound = _env.bound_axes()
        try:
            key = (struct, st_vals, tuple(bound.items()) if bound else ())
            entry = cache.get(key)
        except TypeError:
            raise AxisTypeError(f"jit({name}): static arguments must be hashable, got "
                                f"{st_vals!r}") from None
        entry = cache.get(key)
        if entry is None:
            entry = cache[key] = _build(fun, args, static, backend)
        compiled, tensor_pos, out_info = entry
        return rebuild_output(compiled(*_phys(leaves, tensor_pos)), out_info)

    run.cache_size = lambda: len(cache)  # type: ignore[attr-defined]
    run.clear_cache = cache.clear  # type: ignore[attr-defined]
    return run


def _phys(leaves: list, tensor_pos: list) -> list:
    return [x._data if type(x) is _NT else x for x in map(leaves.__getitem__, tensor_pos)]


def _build(fun: Callable, args: tuple, static: tuple, backend: str):
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
    gm, leaves, (_, _, tensor_pos), out_info = trace_flat(dyn_fun, dyn_args)
    example = [leaves[i] for i in tensor_pos]
    compiled = _compile(gm, example, backend)
    return compiled, tensor_pos, out_info
