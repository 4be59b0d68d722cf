"""The grad family on torch.func, understanding named values: ``grad`` and
``value_and_grad`` here, ``vjp`` and ``linear_transpose`` in :mod:`._vjp`.

Named inputs cross into torch.func as their physical tensors and come back named
(:mod:`._tree`).  Inside a named program, a scalar loss that carries named axes gives
*per-example* gradients: every differentiated input is first broadcast along the named
axes the arguments carry and it lacks, so torch.func differentiates one copy per named
index; axes listed in ``reduce_axes`` are not broadcast, so their per-example gradients
are summed (JAX's ``reduce_axes``).  Autodiff itself is torch.func's.

>>> import torch, named_axes as nx
>>> nx.grad(lambda x: (x ** 2).sum())(torch.tensor([1., 2.]))
tensor([2., 4.])
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch

from .._errors import AxisSpecError, AxisTypeError, fmt_named_shape
from .._modes import building_graph
from .._tensor import NamedTensor
from ._instances import Redo, Region, fold_copies, static_tape
from ._jit import on_mesh_under_dynamo, run_jitted
from ._jit_sharded import is_dtensor
from ._tree import box_leaf, expand_over, named_axes_of, rebox, unbox
from ._vjp import _chunked, _sum_over_chunks
from .._levels import ORIGINAL as _functorch
from .._torch_private import functorch_active, tree_flatten, tree_map

__all__ = ["grad", "value_and_grad"]

_NT = NamedTensor
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


def _argnums(argnums, n: int, what: str) -> tuple:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise AxisSpecError(f"{what}: argnums must name at least one argument")
    for a in nums:
        if not isinstance(a, int) or not -n <= a < n:
            raise AxisSpecError(f"{what}: argnums={argnums!r} names argument {a!r}, but the "
                                f"call has {n} positional arguments")
    return tuple(a % n for a in nums)


_LEAF = tree_flatten(0)[1]   # the spec of an argument that is a single tensor
_SCALARS = (int, float, bool, complex, str, type(None))


def _named_sizes(args: Sequence) -> dict:
    """``named_axes_of(args)``, without the pytree walk for tensor and scalar arguments."""
    sizes: dict = {}
    for a in args:
        t = type(a)
        if t is _NT:
            for n, size in zip(a._names, a._data.shape):
                sizes.setdefault(n, size)
        elif not (t is _Tensor or t is _Parameter or t in _SCALARS):
            for n, size in named_axes_of(a).items():
                sizes.setdefault(n, size)
    return sizes


def _prepare(args: Sequence, nums: tuple, sizes: dict, reduce_axes) -> list:
    """Per differentiated argument: (physical leaves, spec, names), broadcast along
    ``sizes`` (except ``reduce_axes``) so there is one copy per instance."""
    prepared = []
    for i in nums:
        a = args[i]
        t = type(a)
        if t is _Tensor or t is _Parameter or t is _NT:   # one leaf: no pytree
            leaf = expand_over(a, sizes, reduce_axes) if sizes else a
            if type(leaf) is _NT:
                prepared.append(([leaf._data], _LEAF, [leaf._names]))
            else:
                prepared.append(([leaf], _LEAF, [None]))
            continue
        arg = tree_map(lambda leaf: expand_over(leaf, sizes, reduce_axes), a)
        prepared.append(unbox(arg))
    return prepared


def _rebox(leaves: Sequence, spec: Any, names: list) -> Any:
    if spec is _LEAF:
        return box_leaf(leaves[0], names[0])
    return rebox(leaves, spec, names)


def _call(fun, args, nums, prepared, phys, tape=None):
    """``fun`` on args where argument ``nums[k]`` is rebuilt from ``phys[k]``; the
    rebuilt leaves are the roots of ``tape``."""
    call = list(args)
    for i, (_, spec, names), leaves in zip(nums, prepared, phys):
        # a leaf with no named axes goes in as a plain tensor (torch APIs such as
        # torch.func.functional_call accept nothing else)
        call[i] = _rebox(leaves, spec, [n or None for n in names])
        if tape is not None:
            tape.roots(call[i], args[i])
    return fun(*call)


def _scalar_phys(out: Any, what: str) -> torch.Tensor:
    """The physical tensor of a loss, checking its positional part is a scalar."""
    if isinstance(out, _NT):
        if out.ndim:
            raise AxisSpecError(f"{what}: fun must return a scalar loss (positional shape ()), "
                                f"got positional shape {tuple(out.shape)} and named shape "
                                f"{fmt_named_shape(out.named_shape)}; reduce the positional "
                                f"axes first")
        return out._data
    if isinstance(out, torch.Tensor):
        if out.dim():
            raise AxisSpecError(f"{what}: fun must return a scalar loss, got shape "
                                f"{tuple(out.shape)}")
        return out
    raise AxisTypeError(f"{what}: fun must return a tensor, got {type(out).__name__}")


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
                   reduce_axes: Sequence = ()) -> Callable:
    """A function returning ``(fun(*args), gradient)`` (``((value, aux), gradient)`` with aux).

    Args:
        fun: returns a scalar (positional shape ``()``; named axes allowed).
        argnums: which positional argument(s) to differentiate; each may be a pytree.
        has_aux: ``fun`` returns ``(loss, aux)``.
        reduce_axes: named axes along which to sum per-example gradients.

    Raises:
        AxisSpecError: a non-scalar loss or a bad ``argnums``.

    >>> import torch, named_axes as nx
    >>> loss = lambda w, x: (x * w).sum()        # per example: x carries 'b'
    >>> f = nx.xmap(nx.grad(loss), in_axes=({}, ['b', ...]), out_axes=['b', ...])
    >>> f(torch.ones(2), torch.tensor([[1., 2.], [3., 4.]]))   # per-example gradients
    tensor([[1., 2.],
            [3., 4.]])
    """
    reduce_axes = tuple(reduce_axes)
    what = f"value_and_grad({getattr(fun, '__name__', 'fun')}, argnums={argnums!r})"
    nums_for: dict = {}   # number of arguments -> normalized argnums

    @functools.wraps(fun)
    def run(*args):
        if on_mesh_under_dynamo(fun):   # torch.compile of a mesh call's value and grad:
            return run_jitted(run, args)   # forward and backward as one nx.jit program
        nums = nums_for.get(len(args))
        if nums is None:
            nums = nums_for[len(args)] = _argnums(argnums, len(args), what)
        sizes = _named_sizes(args)
        once = (fun, argnums, has_aux, reduce_axes, what, args, nums)
        try:
            return _value_and_grad_once(*once, sizes, True)
        except Redo as redo:   # a closed-over value carries axes the arguments lack
            return _value_and_grad_once(*once, {**sizes, **redo.args[0]}, False)

    return run


def _value_and_grad_once(fun, argnums, has_aux, reduce_axes, what, args, nums, sizes,
                         first_run):
    """One run of :func:`value_and_grad`'s ``fun`` with the differentiated arguments
    broadcast along ``sizes``; :class:`Redo` when a first run meets more axes."""
    prepared = _prepare(args, nums, sizes, reduce_axes)
    out_names: list = []
    aux_box: list = []
    added = tuple(n for n in sizes if n not in reduce_axes)
    region = Region(sizes, reduce_axes)
    tape = static_tape(added)
    phys_fun = _loss_fun(fun, args, nums, prepared, has_aux, what, region, first_run,
                         out_names, aux_box, tape)
    with region, tape:
        g, value, aux_tensors = _grad_and_value(phys_fun, prepared)
    grads = tuple([_rebox(gl, spec, names) for gl, (_, spec, names) in zip(g, prepared)])
    chunked = _chunked(region.axes, reduce_axes)
    if chunked:   # a SerialLoop chunk summed its own instances: add the other chunks'
        grads = tree_map(lambda gr: _sum_over_chunks(gr, chunked), grads)
    value = box_leaf(value, out_names[0])
    trees = [value] + list(grads)
    if has_aux:
        trees.append(_aux_tree(aux_box, aux_tensors))
    if added:   # fold the copies made by the broadcast along axes JAX never added
        trees = fold_copies(trees, tape)
    value, grads = trees[0], tuple(trees[1:1 + len(nums)])
    grads = grads[0] if isinstance(argnums, int) else grads
    if has_aux:
        return (value, trees[-1]), grads
    return value, grads


def _loss_fun(fun, args, nums, prepared, has_aux, what, region, first_run, out_names,
              aux_box, tape) -> Callable:
    """``fun`` as a function of the differentiated arguments' physical leaves, returning
    ``(seed, (loss, aux tensors))``: the seed is the sum of every instance's loss.  The
    loss's names go to ``out_names``, the aux structure to ``aux_box``; ``tape`` decides
    the named shapes of the results from the program."""
    def phys_fun(*phys):
        out = _call(fun, args, nums, prepared, phys, tape)
        loss, aux = out if has_aux else (out, None)
        if has_aux and not (isinstance(out, tuple) and len(out) == 2):
            raise AxisTypeError(f"{what}: has_aux=True needs fun to return (loss, aux)")
        data = _scalar_phys(loss, what)
        names = loss._names if isinstance(loss, _NT) else ()
        out_names[:] = [loss._names if isinstance(loss, _NT) else None]
        region.settle(first_run)
        tape.decide(loss, aux)
        total = data.sum() if data.dim() else data   # per-instance losses: their sum
        scale = region.seed_scale(names)
        if scale != 1:   # a loss lacking a relevant axis counts once per instance
            total = total * scale
        if not has_aux:
            return total, (data, [])
        aux_leaves, aux_spec, aux_names = unbox(aux)
        aux_box[:] = [aux_leaves, aux_spec, aux_names]
        # torch.func unwraps tensors only: other aux leaves stay in aux_box
        return total, (data, [a for a in aux_leaves if isinstance(a, torch.Tensor)])

    return phys_fun


def _grad_and_value(phys_fun: Callable, prepared: list) -> tuple:
    """``(grads, loss, aux tensors)`` of ``phys_fun`` at the prepared leaves: by plain
    autograd where it computes what torch.func would, else by torch.func."""
    if _autograd_ok(prepared):
        g, (value, aux_tensors) = _autograd_grad_and_value(phys_fun, prepared)
    else:
        g, (_, (value, aux_tensors)) = _functorch["grad_and_value"](
            phys_fun, argnums=tuple(range(len(prepared))), has_aux=True)(
                *[p[0] for p in prepared])
    return g, value, aux_tensors


def _aux_tree(aux_box: list, aux_tensors: list) -> Any:
    """The aux tree back, its tensor leaves the ones torch.func returned."""
    aux_leaves, aux_spec, aux_names = aux_box
    it = iter(aux_tensors)
    aux_leaves = [next(it) if isinstance(a, torch.Tensor) else a for a in aux_leaves]
    return rebox(aux_leaves, aux_spec, aux_names)


def _autograd_ok(prepared: list) -> bool:
    """Whether plain ``torch.autograd`` computes what ``torch.func.grad`` would.

    Yes when nothing traces or transforms around us (no torch.func level to nest in,
    no make_fx / dynamo / graph-building dispatch mode) and every differentiated leaf is a plain
    floating tensor.  Eagerly this is much cheaper: no functorch level, no wrapper
    tensors, no per-call ``autograd.Function`` classes.
    """
    if functorch_active():
        return False
    if building_graph():
        # (a DTensor under nx.jit's trace -- a sharded parameter -- must stay one for the
        # mesh engine, and torch.func's wrapper hides it: plain autograd, traced)
        if torch.compiler.is_dynamo_compiling() or not any(
                is_dtensor(x) for leaves, _, _ in prepared for x in leaves):
            return False
    if torch.is_inference_mode_enabled():
        return False
    for leaves, _, _ in prepared:
        for x in leaves:
            # plain tensors, and subclasses such as DTensor (whose engine saves tensors
            # for the backward through saved-tensor hooks, which torch.func refuses)
            if not (isinstance(x, _Tensor) and (x.is_floating_point() or x.is_complex())):
                return False
    return True


def _autograd_grad_and_value(phys_fun: Callable, prepared: list) -> tuple:
    """``torch.func.grad_and_value(phys_fun, has_aux=True)`` by ``torch.autograd.grad``.

    ``phys_fun(*leaf_lists)`` returns ``(loss, (value, aux_tensors))``.  Returns
    ``(grads, (value, aux_tensors))`` with ``grads`` one list per argument.  When the
    loss also depends on tensors outside that require grad (grad on), the results stay
    connected to them, as torch.func's do (the backward is then recorded).
    """
    outer = torch.is_grad_enabled()
    inputs, connected = [], False
    for leaves, _, _ in prepared:
        mine = []
        for x in leaves:
            if outer and x.requires_grad:   # keep the link to the outer graph
                mine.append(x.view_as(x))
                connected = True
            else:
                mine.append(x.detach().requires_grad_())
        inputs.append(mine)
    flat = [x for mine in inputs for x in mine]
    if outer:
        loss, (value, aux_tensors) = phys_fun(*inputs)
        connected = connected or _reaches_outside(loss, flat)
        grads = _grads(loss, flat, connected)
    else:
        with torch.enable_grad():
            loss, (value, aux_tensors) = phys_fun(*inputs)
            grads = _grads(loss, flat, False)
    for i, (g, x) in enumerate(zip(grads, flat)):
        if g is None:
            grads[i] = torch.zeros_like(x, requires_grad=False)
    if not connected:
        value = value.detach()
        aux_tensors = [a.detach() for a in aux_tensors]
    it = iter(grads)
    return [[next(it) for _ in mine] for mine in inputs], (value, aux_tensors)


def _accumulate_grad_type() -> type:
    leaf = torch.zeros((), requires_grad=True)
    return type((leaf * 1).grad_fn.next_functions[0][0])


_ACCUMULATE = _accumulate_grad_type()


def _grads(loss: torch.Tensor, inputs: list, create_graph: bool) -> list:
    if not loss.requires_grad:   # the loss does not depend on the inputs
        return [None] * len(inputs)
    return list(torch.autograd.grad(loss, inputs, allow_unused=True,
                                    create_graph=create_graph))


def _reaches_outside(loss: torch.Tensor, mine: list) -> bool:
    """Whether ``loss``'s autograd graph reaches a leaf requiring grad other than ``mine``."""
    root = loss.grad_fn
    if root is None:
        return False
    ours = {id(x) for x in mine}
    seen = {root}
    stack = [root]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is None or nxt in seen:
                continue
            seen.add(nxt)
            if type(nxt) is _ACCUMULATE:   # a leaf
                if id(nxt.variable) not in ours:
                    return True
            else:
                stack.append(nxt)
    return False


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
         reduce_axes: Sequence = ()) -> Callable:
    """The gradient of a scalar ``fun`` (``(gradient, aux)`` with ``has_aux``).

    See :func:`value_and_grad` for the arguments and the named-axes semantics.

    >>> import torch, named_axes as nx
    >>> loss = lambda w, x: (x * w).sum()
    >>> f = nx.xmap(nx.grad(loss, reduce_axes=('b',)), in_axes=({}, ['b', ...]), out_axes=[...])
    >>> f(torch.ones(2), torch.tensor([[1., 2.], [3., 4.]]))   # summed over 'b'
    tensor([4., 6.])
    """
    vg = value_and_grad(fun, argnums, has_aux, reduce_axes=reduce_axes)

    @functools.wraps(fun)
    def run(*args):
        (value, g) = vg(*args)
        return (g, value[1]) if has_aux else g

    return run
