"""The grad family on torch.func, understanding named values.

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

from .._env import bound_axes
from .._errors import AxisSpecError, AxisTypeError, fmt_named_shape
from .._layout import align
from .._modes import building_graph
from .._tensor import NamedTensor
from ._instances import Redo, Region, drop_replicated, fold_copies
from ._tree import box_leaf, expand_over, named_axes_of, rebox, unbox
from .._levels import ORIGINAL as _functorch
from .._torch_private import functorch_active, tree_flatten, tree_map, tree_unflatten

__all__ = ["grad", "value_and_grad", "vjp", "linear_transpose"]

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


def _chunked(axes: dict, reduce_axes: tuple) -> dict:
    """The ``reduce_axes`` this call sees only a chunk of (a ``SerialLoop`` axis): name ->
    chunk size."""
    if not reduce_axes:
        return {}
    bound = bound_axes()
    return {n: axes[n] for n in reduce_axes
            if n in axes and n in bound and bound[n] != axes[n]}


def _sum_over_chunks(g: Any, chunked: dict) -> Any:
    """A gradient summed over this chunk's instances of the ``chunked`` axes, summed over
    every chunk: one instance per chunk holds the chunk's sum, ``psum`` (which the loop
    engine replays chunk by chunk) adds them."""
    if not isinstance(g, (torch.Tensor, _NT)):
        return g
    from ..lax import axis_index, psum
    named = type(g) is _NT
    names = tuple(n for n in chunked if not (named and n in g._names))
    for n in names:
        first = (axis_index(n) % chunked[n] == 0).to(g._data.dtype if named else g.dtype)
        g = psum(g * first, n)
    if named and type(g) is not _NT:   # psum left no named axis: keep the type the
        g = _NT._wrap(g, ())           # gradient has without a loop (a NamedTensor)
    return g


def _rebox(leaves: Sequence, spec: Any, names: list) -> Any:
    if spec is _LEAF:
        return box_leaf(leaves[0], names[0])
    return rebox(leaves, spec, names)


def _call(fun, args, nums, prepared, phys):
    """``fun`` on args where argument ``nums[k]`` is rebuilt from ``phys[k]``."""
    call = list(args)
    for i, (_, spec, names), leaves in zip(nums, prepared, phys):
        # a leaf with no named axes goes in as a plain tensor (torch APIs such as
        # torch.func.functional_call accept nothing else)
        call[i] = _rebox(leaves, spec, [n or None for n in names])
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
        nums = nums_for.get(len(args))
        if nums is None:
            nums = nums_for[len(args)] = _argnums(argnums, len(args), what)
        sizes = _named_sizes(args)
        try:
            return _value_and_grad_once(args, nums, sizes, True)
        except Redo as redo:   # a closed-over value carries axes the arguments lack
            return _value_and_grad_once(args, nums, {**sizes, **redo.args[0]}, False)

    def _value_and_grad_once(args, nums, sizes, first_run):
        prepared = _prepare(args, nums, sizes, reduce_axes)
        out_names: list = []
        region = Region(sizes, reduce_axes)

        def phys_fun(*phys):
            out = _call(fun, args, nums, prepared, phys)
            loss, aux = out if has_aux else (out, None)
            if has_aux and not (isinstance(out, tuple) and len(out) == 2):
                raise AxisTypeError(f"{what}: has_aux=True needs fun to return (loss, aux)")
            data = _scalar_phys(loss, what)
            names = loss._names if isinstance(loss, _NT) else ()
            out_names[:] = [loss._names if isinstance(loss, _NT) else None]
            region.settle(first_run)
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

        aux_box: list = []
        with region:
            if _autograd_ok(prepared):
                g, (value, aux_tensors) = _autograd_grad_and_value(phys_fun, prepared)
            else:
                g, (_, (value, aux_tensors)) = _functorch["grad_and_value"](
                    phys_fun, argnums=tuple(range(len(nums))), has_aux=True)(
                        *[p[0] for p in prepared])
        grads = tuple([_rebox(gl, spec, names) for gl, (_, spec, names) in zip(g, prepared)])
        chunked = _chunked(region.axes, reduce_axes)
        if chunked:   # a SerialLoop chunk summed its own instances: add the other chunks'
            grads = tree_map(lambda gr: _sum_over_chunks(gr, chunked), grads)
        value = box_leaf(value, out_names[0])
        trees = [value] + list(grads)
        if has_aux:
            aux_leaves, aux_spec, aux_names = aux_box
            it = iter(aux_tensors)
            aux_leaves = [next(it) if isinstance(a, torch.Tensor) else a for a in aux_leaves]
            trees.append(rebox(aux_leaves, aux_spec, aux_names))
        added = tuple(n for n in sizes if n not in reduce_axes)
        if added:   # fold copies made by the broadcast that JAX computes once
            trees = fold_copies(trees, [None, *(args[i] for i in nums)], added,
                                 getattr(fun, "__code__", fun))
        value, grads = trees[0], tuple(trees[1:1 + len(nums)])
        grads = grads[0] if isinstance(argnums, int) else grads
        if has_aux:
            return (value, trees[-1]), grads
        return value, grads

    return run


def _autograd_ok(prepared: list) -> bool:
    """Whether plain ``torch.autograd`` computes what ``torch.func.grad`` would.

    Yes when nothing traces or transforms around us (no torch.func level to nest in,
    no make_fx / dynamo / graph-building dispatch mode) and every differentiated leaf is a plain
    floating tensor.  Eagerly this is much cheaper: no functorch level, no wrapper
    tensors, no per-call ``autograd.Function`` classes.
    """
    if (functorch_active() or building_graph()
            or torch.is_inference_mode_enabled()):
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


def _phys_outputs(fun, out_box: list):
    """Wrap ``fun`` so it returns physical leaves; the output structure goes to ``out_box``."""
    def phys(*args):
        out = fun(*args)
        leaves, spec, names = unbox(out)
        out_box[:] = [spec, names]
        return tuple(leaves)
    return phys


def _align_like(value: Any, like: torch.Tensor, names: tuple | None, what: str,
                lead: tuple = (), lead_sizes: tuple = ()) -> torch.Tensor:
    """A (co)tangent laid out like the physical tensor ``like`` named ``names`` (behind
    the batch axes ``lead`` of sizes ``lead_sizes``, when mapped over)."""
    names = names or ()
    p = like.dim() - len(names)
    shape = tuple(lead_sizes) + tuple(like.shape)
    if isinstance(value, _NT):
        extra = [n for n in value._names if n not in names and n not in lead]
        if extra:
            raise AxisSpecError(f"{what}: the value has named axis {extra[0]!r} that the "
                                f"primal/output (named axes {names}) lacks")
        data = align(value._data, value._names, value.ndim, tuple(lead) + names, p)
    else:
        data = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return data.expand(shape) if data.shape != shape else data


def mapped_over(fn: Callable, depth: int) -> Callable:
    """``fn`` mapped (``torch.func.vmap``) over ``depth`` leading dims of every argument:
    the batch axes a pullback or a jvp is mapped over (one level per axis)."""
    for _ in range(depth):
        fn = _functorch["vmap"](fn)
    return fn


def _unbox_primals(primals, what, reduce_axes=None, sizes=None):
    if reduce_axes is not None:
        sizes = named_axes_of(primals) if sizes is None else sizes
        primals = tuple(tree_map(lambda l: expand_over(l, sizes, reduce_axes), p)
                        for p in primals)
    return [unbox(p) for p in primals]


def _rebuild(fun, boxes):
    def call(*phys):
        return fun(*[rebox(leaves, spec, names) for leaves, (_, spec, names) in zip(phys, boxes)])
    return call


def vjp(fun: Callable, *primals: Any, has_aux: bool = False, reduce_axes: Sequence = ()):
    """``(fun(*primals), vjp_fn)`` (plus ``aux``); ``vjp_fn(cotangent)`` returns a tuple.

    Cotangents of named outputs may be NamedTensors (aligned by name) or plain tensors
    (broadcast along the output's named axes).  Inside a named program the cotangent
    is per instance, as in JAX (see :mod:`._instances`): an output lacking a named axis
    that the computation involves receives the given cotangent in every instance.

    >>> import torch, named_axes as nx
    >>> out, f_vjp = nx.vjp(torch.sin, torch.zeros(2))
    >>> f_vjp(torch.ones(2))
    (tensor([1., 1.]),)
    """
    reduce_axes = tuple(reduce_axes)
    sizes = named_axes_of(primals)
    try:
        return _vjp_once(fun, primals, has_aux, reduce_axes, sizes, True)
    except Redo as redo:   # a closed-over value carries axes the primals lack
        return _vjp_once(fun, primals, has_aux, reduce_axes, {**sizes, **redo.args[0]}, False)


def _vjp_once(fun, primals, has_aux, reduce_axes, sizes, first_run):
    what = f"vjp({getattr(fun, '__name__', 'fun')})"
    boxes = _unbox_primals(primals, what, reduce_axes, sizes)
    out_box: list = []
    aux_box: list = []
    region = Region(sizes, reduce_axes)
    inner = _rebuild(fun, boxes)

    def settled(*phys):
        out = inner(*phys)
        region.settle(first_run)
        return out

    if has_aux:
        def split(*phys):
            out, aux = settled(*phys)
            aux_box[:] = [unbox(aux)]
            return out
        target = _phys_outputs(split, out_box)
    else:
        target = _phys_outputs(settled, out_box)
    with region:
        res = _functorch["vjp"](target, *[b[0] for b in boxes])
    out_leaves, vjp_phys = res[0], res[1]
    spec, names = out_box
    out = rebox(out_leaves, spec, names)
    chunked = _chunked(region.axes, reduce_axes)
    forward_axes = set(bound_axes())
    added = tuple(n for n in sizes if n not in reduce_axes)
    if added:   # copies of a value JAX computes once (the cotangents still align to
        code = getattr(fun, "__code__", fun)   # the physical outputs)
        leaves, spec = tree_flatten(out)
        out = tree_unflatten(drop_replicated([(o, added, (code, "vjp")) for o in leaves]), spec)

    def vjp_fn(cotangent):
        cts, ct_spec = tree_flatten(cotangent)
        if len(cts) != len(out_leaves):
            raise AxisSpecError(f"{what}: the cotangent has {len(cts)} leaves but the output "
                                f"has {len(out_leaves)}")
        # axes the cotangent carries and the output does not: bound since the forward (a
        # vmap over the pullback, as jacrev does), so the pullback is mapped over them
        batch: dict = {}
        for c, n in zip(cts, names):
            if type(c) is _NT:
                for b, size in zip(c._names, c._data.shape):
                    if b not in (n or ()) and b not in forward_axes and b in bound_axes():
                        batch.setdefault(b, size)
        lead = tuple(batch)
        if region.transposed and len(lead) != 1 and torch.compiler.is_compiling():
            _refuse_transposed_rule(what, region.transposed[0])
        phys = []
        for i, (c, o, n) in enumerate(zip(cts, out_leaves, names)):
            ct = _align_like(c, o, n, f"{what} cotangent {i}", lead, tuple(batch.values()))
            scale = region.seed_scale(n or ())
            phys.append(ct * scale if scale != 1 else ct)   # once per instance
        with region:
            grads = mapped_over(vjp_phys, len(lead))(tuple(phys))
        if lead:   # a plain leaf's gradient carries the batch axes too
            grads = tuple(rebox(g, spec_, [lead + (m or ()) for m in names_])
                          for g, (_, spec_, names_) in zip(grads, boxes))
        else:
            grads = tuple(rebox(g, spec_, names_) for g, (_, spec_, names_) in zip(grads, boxes))
        if chunked:   # a SerialLoop chunk summed its own instances: add the other chunks'
            grads = tree_map(lambda gr: _sum_over_chunks(gr, chunked), grads)
        return grads

    if has_aux:
        leaves, aspec, anames = aux_box[0]
        return out, vjp_fn, rebox(leaves, aspec, anames)
    return out, vjp_fn


def _refuse_transposed_rule(what: str, rule: str) -> None:
    """A custom_jvp's reverse rule transposes its JVP rule with ``torch.func.vjp`` inside
    the backward.  Dynamo (torch 2.13) traces that backward where the forward calls the
    rule and keeps the functorch levels it had there; a pullback replays it after the
    forward's level closed, which only lines up when the pullback is mapped over one
    axis (as jacrev's is): otherwise torch fails an internal assert."""
    raise AxisTypeError(
        f"{what}: {rule}'s reverse rule (its JVP rule transposed with torch.func.vjp in "
        f"the backward) cannot run in this pullback under torch.compile: dynamo (torch "
        f"2.13) replays that backward at the functorch level of the forward. Take the "
        f"gradient with nx.grad / nx.value_and_grad, or compile the step with nx.jit")


def linear_transpose(fun: Callable, *primals: Any, reduce_axes: Sequence = ()) -> Callable:
    """The transpose of a linear ``fun``; ``primals`` give shapes and dtypes only.

    Returns a function from an output cotangent to a tuple shaped like ``primals``.

    >>> import torch, named_axes as nx
    >>> t = nx.linear_transpose(lambda x, y: 0.5 * x - 0.5 * y, torch.tensor(0.), torch.tensor(0.))
    >>> t(torch.tensor(1.))
    (tensor(0.5000), tensor(-0.5000))
    """
    def zero(leaf):
        if isinstance(leaf, _NT):
            return NamedTensor._wrap(torch.zeros_like(leaf._data), leaf._names)
        if isinstance(leaf, torch.Tensor):
            return torch.zeros_like(leaf)
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            from ._shapes import materialize
            return materialize(leaf, torch.zeros)
        return leaf

    zeros = tuple(tree_map(zero, p) for p in primals)
    _, f_vjp = vjp(fun, *zeros, reduce_axes=reduce_axes)
    return f_vjp
