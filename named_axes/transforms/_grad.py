"""Reverse mode on torch.func, understanding named values: ``grad``, ``value_and_grad``,
``vjp`` and ``linear_transpose``.

Named inputs cross into torch.func as their physical tensors and come back named
(:mod:`._tree`).  Inside a named program the differentiated inputs are broadcast along
the axes the computation involves except ``reduce_axes``, so autodiff gives one
cotangent per instance (:mod:`._instances`): *per-example* gradients.

>>> import torch, named_axes as nx
>>> nx.grad(lambda x: (x ** 2).sum())(torch.tensor([1., 2.]))
tensor([2., 4.])
>>> out, f_vjp = nx.vjp(lambda x: 3 * x, torch.ones(2))
>>> f_vjp(torch.ones(2))
(tensor([3., 3.]),)
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch

from .._engine import engine_for
from .._env import REPLICATED, bound_axes
from .._errors import AxisSpecError, AxisTypeError, fmt_named_shape
from .._modes import building_graph
from .._tensor import NamedTensor
from ._instances import Region, fold_copies, fold_pullback, rerun_on_redo, static_tape
from ._jit import on_mesh_under_dynamo, run_jitted
from ._jit_sharded import is_dtensor
from ._tree import align_like, box_leaf, expand_over, mapped_over, named_axes_of, rebox, unbox
from .._levels import ORIGINAL as _functorch
from .._torch_private import functorch_active, tree_flatten, tree_map

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


def split_aux(out: Any, has_aux: bool, what: str, value: str = "out") -> tuple:
    """``fun``'s result ``out`` as ``(value, aux)`` (``aux`` None without ``has_aux``)."""
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):   # (a tensor would unpack too)
        raise AxisTypeError(f"{what}: has_aux=True needs fun to return ({value}, aux)")
    return out


def flat_result(result: Any, has_aux: bool, what: str, box: list) -> tuple:
    """``fun``'s ``result`` (``(out, aux)`` with ``has_aux``) as ``out`` and its physical
    leaves; ``box`` keeps ``[spec, names, aux unboxed or None]`` to rebuild them after."""
    out, aux = split_aux(result, has_aux, what)
    leaves, spec, names = unbox(out)
    box[:] = [spec, names, unbox(aux) if has_aux else None]
    return out, tuple(leaves)


_LEAF = tree_flatten(0)[1]   # the spec of an argument that is a single tensor


def _rebox(leaves: Sequence, spec: Any, names: list) -> Any:
    if spec is _LEAF:
        return box_leaf(leaves[0], names[0])
    return rebox(leaves, spec, names)


def _chunked(axes: dict, reduce_axes: tuple) -> dict:
    """The ``reduce_axes`` this call sees only a chunk of (a ``SerialLoop`` axis): name ->
    the size of a chunk's part, every rank's share counted where a mesh splits it too
    (over a mesh alone the gradient is summed over the ranks already)."""
    bound = bound_axes() if reduce_axes else {}
    out = {}
    for n in reduce_axes:
        if n in axes and n in bound:
            engine = engine_for((n,))   # (over ranks, one instance stands for every rank's)
            ranks = engine.seed_size(n, 1) if engine is not None else 1
            if axes[n] * ranks != bound[n]:
                out[n] = axes[n] * ranks
    return out


def _sum_over_chunks(g: Any, chunked: dict) -> Any:
    """A gradient summed over this chunk's instances of the ``chunked`` axes, summed over
    every chunk: one instance per chunk's part (on a mesh, the first rank's) holds the
    chunk's sum, and ``psum`` adds them."""
    if not isinstance(g, (torch.Tensor, _NT)):
        return g
    from ..lax import axis_index, psum
    named = type(g) is _NT
    for n in [n for n in chunked if not (named and n in g._names)]:
        first = (axis_index(n) % chunked[n] == 0).to(g._data.dtype if named else g.dtype)
        g = psum(g * first, n)
    if named and type(g) is not _NT:   # psum left no named axis: keep the type the
        g = _NT._wrap(g, ())           # gradient has without a loop (a NamedTensor)
    return g


class _Run:
    """One run of a reverse-mode call: the differentiated arguments ``nums`` broadcast
    along ``sizes`` except ``reduce_axes`` (one copy per instance), the :class:`Region`
    recording the axes met and the tape deciding the results' named shapes."""

    def __init__(self, fun, args, nums, sizes, reduce_axes, first_run, own_level=False):
        self.fun, self.args, self.nums, self.first_run = fun, args, nums, first_run
        self.reduce_axes = reduce_axes
        self.boxes = []   # per differentiated argument: (physical leaves, spec, names)
        for i in nums:
            a = args[i]
            if type(a) in (_Tensor, _Parameter, _NT):   # one leaf: no pytree
                leaf = expand_over(a, sizes, reduce_axes) if sizes else a
                named = type(leaf) is _NT
                self.boxes.append(([leaf._data if named else leaf], _LEAF,
                                   [leaf._names if named else None]))
            else:
                self.boxes.append(unbox(tree_map(
                    lambda leaf: expand_over(leaf, sizes, reduce_axes), a)))
        self.region = Region(sizes, reduce_axes)
        self.tape = static_tape(tuple(n for n in sizes if n not in reduce_axes), own_level)

    def call(self, phys, plain_unnamed: bool = True) -> Any:
        """``fun`` with argument ``nums[k]`` rebuilt from ``phys[k]`` (the tape's roots; a
        leaf with no named axes a plain tensor with ``plain_unnamed``: torch APIs such as
        torch.func.functional_call accept nothing else), the region settled after."""
        call = list(self.args)
        if len(phys) > len(self.nums):   # the other arguments' leaves, through torch.func
            rest = iter(rebox(phys[-1], *self.rest[1:]))
            call = [a if i in self.nums else next(rest) for i, a in enumerate(call)]
        for i, (_, spec, names), leaves in zip(self.nums, self.boxes, phys):
            call[i] = _rebox(leaves, spec, [n or None for n in names] if plain_unnamed
                             else names)
            self.tape.roots(call[i], self.args[i])
        out = self.fun(*call)
        self.region.settle(self.first_run)
        return out

    def chunked(self) -> dict:
        """Once the function ran, where it ran: see :func:`_chunked`."""
        return _chunked(self.region.axes, self.reduce_axes)

    def grads(self, phys: Sequence, chunked: dict, lead: tuple = ()) -> tuple:
        """The gradients (one leaf list per argument) named as the arguments, behind the
        batch axes ``lead``; a SerialLoop chunk's sums added over the other chunks."""
        grads = tuple(_rebox(g, spec, [lead + (m or ()) for m in names] if lead else names)
                      for g, (_, spec, names) in zip(phys, self.boxes))
        return tree_map(lambda g: _sum_over_chunks(g, chunked), grads) if chunked else grads


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
        try:
            return rerun_on_redo(lambda sizes, first: _value_and_grad_once(
                _Run(fun, args, nums, sizes, reduce_axes, first), has_aux, what,
                isinstance(argnums, int)), named_axes_of(args))
        except RuntimeError as e:   # torch's "only Tensors of floating point dtype ..."
            _check_inexact(args, nums, what, e)
            raise

    return run


def _check_inexact(args: tuple, nums: tuple, what: str, error: Exception) -> None:
    """Raise, from ``error``, an ``AxisTypeError`` naming the first differentiated
    argument that is not floating point or complex (JAX's ``grad`` refuses it too)."""
    for i in nums:
        for leaf in tree_flatten(args[i])[0]:
            if type(leaf) is _NT or isinstance(leaf, _Tensor):
                if not (leaf.dtype.is_floating_point or leaf.dtype.is_complex):
                    raise AxisTypeError(
                        f"{what}: argument {i} has dtype {leaf.dtype}; gradients are taken "
                        f"with respect to floating-point or complex values only. Pass it "
                        f"as a float (.float()), or leave it out of argnums") from error


def _value_and_grad_once(r: _Run, has_aux: bool, what: str, single: bool) -> tuple:
    """One run of :func:`value_and_grad`'s ``fun``: the loss seeded as the sum of every
    instance's loss, the results folded to the named shapes the tape decides."""
    out_names, aux_box = [None], [None]

    def phys_fun(*phys):
        loss, aux = split_aux(r.call(phys), has_aux, what, "loss")
        data = _scalar_phys(loss, what)
        out_names[0] = loss._names if isinstance(loss, _NT) else None
        r.tape.decide(loss, aux)
        total = data.sum() if data.dim() else data   # per-instance losses: their sum
        scale = r.region.seed_scale(out_names[0] or ())
        if scale != 1:   # a loss lacking a relevant axis counts once per instance
            total = total * scale
        if not has_aux:
            return total, (data, [])
        aux_box[0] = unbox(aux)
        # torch.func unwraps tensors only: other aux leaves stay in aux_box
        return total, (data, [a for a in aux_box[0][0] if isinstance(a, torch.Tensor)])

    with r.region, r.tape:
        if _autograd_ok(r.boxes):
            g, (value, aux_tensors) = _autograd_grad_and_value(phys_fun, r.boxes)
        else:
            # (the other arguments too: torch.func wraps them at its level, where the
            # function may write into them -- a module's running statistics)
            r.rest = unbox(tuple(a for i, a in enumerate(r.args) if i not in r.nums))
            g, (_, (value, aux_tensors)) = _functorch["grad_and_value"](
                phys_fun, argnums=tuple(range(len(r.boxes))), has_aux=True)(
                    *[b[0] for b in r.boxes], r.rest[0])
    grads = r.grads(g, r.chunked())
    trees = [box_leaf(value, out_names[0]), *grads]
    if has_aux:   # the aux tree back, its tensor leaves the ones torch.func returned
        aux_leaves, aux_spec, aux_names = aux_box[0]
        it = iter(aux_tensors)
        trees.append(rebox([next(it) if isinstance(a, torch.Tensor) else a
                            for a in aux_leaves], aux_spec, aux_names))
    # fold the copies made by the broadcast along axes JAX never added
    trees = fold_copies(trees, r.tape)
    value, grads = trees[0], tuple(trees[1:1 + len(grads)])
    grads = grads[0] if single else grads
    return ((value, trees[-1]), grads) if has_aux else (value, grads)


def _autograd_ok(boxes: list) -> bool:
    """Whether plain ``torch.autograd`` computes what ``torch.func.grad`` would (much
    cheaper eagerly: no functorch level, no wrapper tensors): nothing traces or
    transforms around us and every differentiated leaf is a floating tensor."""
    if functorch_active():
        return False
    if building_graph():
        # (a DTensor under nx.jit's trace -- a sharded parameter -- must stay one for the
        # mesh engine, and torch.func's wrapper hides it: plain autograd, traced)
        if torch.compiler.is_dynamo_compiling() or not any(
                is_dtensor(x) for leaves, _, _ in boxes for x in leaves):
            return False
    if torch.is_inference_mode_enabled():   # (after: dynamo cannot trace it)
        return False
    # plain tensors, and subclasses such as DTensor (whose engine saves tensors for the
    # backward through saved-tensor hooks, which torch.func refuses)
    return all(isinstance(x, _Tensor) and (x.is_floating_point() or x.is_complex())
               for leaves, _, _ in boxes for x in leaves)


def _autograd_grad_and_value(phys_fun: Callable, boxes: list) -> tuple:
    """``torch.func.grad_and_value(phys_fun, has_aux=True)`` by ``torch.autograd.grad``:
    ``(grads, (value, aux_tensors))``, ``grads`` one list per argument.  When the loss
    also depends on tensors outside that require grad (grad on), the results stay
    connected to them, as torch.func's do (the backward is then recorded)."""
    outer = torch.is_grad_enabled()
    # (a leaf requiring grad keeps its link to the outer graph)
    inputs = [[x.view_as(x) if outer and x.requires_grad else x.detach().requires_grad_()
               for x in leaves] for leaves, _, _ in boxes]
    flat = [x for mine in inputs for x in mine]
    with torch.enable_grad():
        loss, (value, aux_tensors) = phys_fun(*inputs)
    connected = outer and (any(x.requires_grad for leaves, _, _ in boxes for x in leaves)
                           or _reaches_outside(loss, flat))
    grads = [None] * len(flat)
    if loss.requires_grad:   # (else the loss does not depend on the inputs)
        grads = torch.autograd.grad(loss, flat, allow_unused=True, create_graph=connected)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, flat)]
    if not connected:
        value = value.detach()
        aux_tensors = [a.detach() for a in aux_tensors]
    it = iter(grads)
    return [[next(it) for _ in mine] for mine in inputs], (value, aux_tensors)


_ACCUMULATE = type((torch.zeros((), requires_grad=True) * 1).grad_fn.next_functions[0][0])


def _reaches_outside(loss: torch.Tensor, mine: list) -> bool:
    """Whether ``loss``'s autograd graph reaches a leaf requiring grad other than ``mine``."""
    ours = {id(x) for x in mine}
    seen = {loss.grad_fn}
    stack = [loss.grad_fn] if loss.grad_fn is not None else []
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is None or nxt in seen:
                continue
            seen.add(nxt)
            if type(nxt) is not _ACCUMULATE:
                stack.append(nxt)
            elif id(nxt.variable) not in ours:   # a leaf
                return True
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


def vjp(fun: Callable, *primals: Any, has_aux: bool = False, reduce_axes: Sequence = ()):
    """``(fun(*primals), vjp_fn)`` (plus ``aux``); ``vjp_fn(cotangent)`` returns a tuple.

    Cotangents of named outputs may be NamedTensors (aligned by name) or plain tensors
    (broadcast along the output's named axes).  Inside a named program the cotangent
    is per instance, as in JAX: an output lacking a named axis that the computation
    involves receives the given cotangent in every instance.

    >>> import torch, named_axes as nx
    >>> out, f_vjp = nx.vjp(torch.sin, torch.zeros(2))
    >>> f_vjp(torch.ones(2))
    (tensor([1., 1.]),)
    """
    reduce_axes, nums = tuple(reduce_axes), tuple(range(len(primals)))
    what = f"vjp({getattr(fun, '__name__', 'fun')})"
    return rerun_on_redo(lambda sizes, first: _vjp_once(
        _Run(fun, primals, nums, sizes, reduce_axes, first, not functorch_active()),
        has_aux, what), named_axes_of(primals))


def _vjp_once(r: _Run, has_aux: bool, what: str) -> tuple:
    box: list = []

    def target(*phys):
        out, leaves = flat_result(r.call(phys, plain_unnamed=False), has_aux, what, box)
        r.tape.decide(out, grads=False)
        return leaves

    with r.region, r.tape:
        out_leaves, vjp_phys = _functorch["vjp"](target, *[b[0] for b in r.boxes])[:2]
    spec, names, aux_box = box
    # copies of a value JAX computes once (the cotangents align to the physical outputs)
    out = fold_copies([rebox(out_leaves, spec, names)], r.tape)[0]
    chunked = r.chunked()

    def vjp_fn(cotangent):
        cts = tree_flatten(cotangent)[0]
        if len(cts) != len(out_leaves):
            raise AxisSpecError(f"{what}: the cotangent has {len(cts)} leaves but the output "
                                f"has {len(out_leaves)}")
        batch = _mapped_axes(r, cts, names, what)
        lead = tuple(batch)
        if r.region.transposed and len(lead) != 1 and torch.compiler.is_dynamo_compiling():
            # dynamo traced a custom_jvp's transposed rule at the forward's functorch
            # levels; replayed after they closed, it lines up only mapped over one axis
            # (jacrev's): otherwise torch fails an internal assert
            raise AxisTypeError(
                f"{what}: {r.region.transposed[0]}'s reverse rule (its JVP rule transposed "
                f"with torch.func.vjp in the backward) cannot run in this pullback under "
                f"torch.compile: dynamo replays that backward at the functorch level of the "
                f"forward. Take the gradient with nx.grad / nx.value_and_grad, or compile "
                f"the step with nx.jit")
        phys = [_seeded(r, c, o, n, f"{what} cotangent {i}", batch)
                for i, (c, o, n) in enumerate(zip(cts, out_leaves, names))]
        with r.region:
            grads = mapped_over(vjp_phys, len(lead))(tuple(phys))
        grads = r.grads(grads, chunked, lead)
        # copies along the axes no cotangent meets (see _instances)
        return grads if lead else fold_pullback(grads, r.tape, cts)

    return (out, vjp_fn, rebox(*aux_box)) if has_aux else (out, vjp_fn)


def _mapped_axes(r: _Run, cts: list, names: list, what: str) -> dict:
    """The axes (name -> size) a pullback is mapped over, once per instance: those a
    cotangent carries and its output lacks that the computation never met (bound since
    the forward -- a vmap over the pullback, as jacrev does -- or an enclosing xmap's)."""
    batch: dict = {}
    for c, n in zip(cts, names):
        for b, size in (zip(c._names, c._data.shape) if type(c) is _NT else ()):
            if b not in (n or ()) and b not in r.region.axes and b not in r.reduce_axes \
                    and b in bound_axes():
                batch.setdefault(b, size)
    for b in batch if REPLICATED in r.region.seen else ():
        if b not in r.region.seen[REPLICATED]:
            continue
        raise AxisSpecError(
            f"{what}: the cotangent carries axis {b!r}, which the output and the primals lack, "
            f"and the function reduces a value replicated along {b!r} over it (psum of a "
            f"value lacking it): JAX transposes that per instance of {b!r}, which this "
            f"pullback cannot; pass the primals with axis {b!r} (broadcast along it)")
    return batch


def _seeded(r: _Run, c: Any, out: torch.Tensor, names: tuple | None, what: str,
            batch: dict) -> torch.Tensor:
    """The physical cotangent of output ``out`` (named ``names``) given ``c``: for an
    output lacking a relevant axis, the sum of its instances' -- psum of a ``c`` varying
    along the axis, else ``c`` scaled by the count."""
    summed = tuple(a for a in (c._names if type(c) is _NT else ())
                   if (a in r.region.axes or a in r.reduce_axes) and a not in (names or ()))
    if summed:
        from ..lax import psum
        c = psum(c, summed)
    ct = align_like(c, out, names, what, tuple(batch), tuple(batch.values()))
    scale = r.region.seed_scale((names or ()) + summed)
    return ct * scale if scale != 1 else ct   # once per instance


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

    return vjp(fun, *(tree_map(zero, p) for p in primals), reduce_axes=reduce_axes)[1]
