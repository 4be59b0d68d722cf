"""Reverse mode by hand: ``vjp`` and its pullback, and ``linear_transpose``.

The named-axes semantics are the grad family's (:mod:`._grad`, :mod:`._instances`):
primals are broadcast along the named axes the computation involves, so the pullback
gives one cotangent per instance.  Also the pieces the other transforms share: a
(co)tangent laid out like a physical tensor, the physical view of a function, and the
sum of a gradient over the chunks of a ``SerialLoop`` axis.

>>> import torch, named_axes as nx
>>> out, f_vjp = nx.vjp(lambda x: 3 * x, torch.ones(2))
>>> f_vjp(torch.ones(2))
(tensor([3., 3.]),)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from .._engine import engine_for, handed
from .._env import bound_axes
from .._errors import AxisSpecError, AxisTypeError
from .._layout import align
from .._tensor import NamedTensor
from ._instances import Redo, Region, fold_copies, fold_pullback, static_tape
from ._tree import expand_over, named_axes_of, rebox, unbox
from .._levels import ORIGINAL as _functorch
from .._torch_private import functorch_active, tree_flatten, tree_map

__all__ = ["vjp", "linear_transpose"]

_NT = NamedTensor


def _chunked(axes: dict, reduce_axes: tuple) -> dict:
    """The ``reduce_axes`` this call sees only a chunk of (a ``SerialLoop`` axis): name ->
    the size of a chunk's part of it (``axis_index`` steps through a chunk's part before
    the next chunk's).  Over a mesh alone there is nothing to add: the gradient of a value
    lacking the axis is summed over the ranks already (its cotangent is the whole on
    each); a chunk's part split over a mesh too is counted with every rank's share."""
    if not reduce_axes:
        return {}
    bound = bound_axes()
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
    every chunk: one instance per chunk's part holds the chunk's sum (on a mesh, the
    first rank's: every rank's gradient is the sum over the ranks already), ``psum``
    (which the loop engine replays chunk by chunk) adds them."""
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
        own = tuple(value._names)
    else:
        data = torch.as_tensor(value, dtype=like.dtype, device=like.device)
        own = ()
    # on a mesh, a cotangent lacking an axis split over ranks meets the output's split
    # instances here: its own gradient (an outer derivative of the pullback) sums their
    # parts over the ranks (Engine.broadcast)
    data = handed(data, own, tuple(lead) + names)
    return data.expand(shape) if data.shape != shape else data


def mapped_over(fn: Callable, depth: int) -> Callable:
    """``fn`` mapped (``torch.func.vmap``) over ``depth`` leading dims of every argument:
    the batch axes a pullback or a jvp is mapped over (one level per axis)."""
    for _ in range(depth):
        fn = _functorch["vmap"](fn)
    return fn


def _unbox_primals(primals, reduce_axes=None, sizes=None):
    """Each primal unboxed (:func:`unbox`), broadcast first along ``sizes`` (default:
    the primals' named axes) except ``reduce_axes`` when those are given."""
    if reduce_axes is not None:
        sizes = named_axes_of(primals) if sizes is None else sizes
        primals = tuple(tree_map(lambda l: expand_over(l, sizes, reduce_axes), p)
                        for p in primals)
    return [unbox(p) for p in primals]


def _rebuild(fun, boxes, primals=None, tape=None):
    def call(*phys):
        args = [rebox(leaves, spec, names) for leaves, (_, spec, names) in zip(phys, boxes)]
        if tape is not None:
            for a, p in zip(args, primals):
                tape.roots(a, p)
        return fun(*args)
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
    boxes = _unbox_primals(primals, reduce_axes, sizes)
    out_box: list = []
    aux_box: list = []
    region = Region(sizes, reduce_axes)
    added = tuple(n for n in sizes if n not in reduce_axes)
    tape = static_tape(added, own_level=not functorch_active())
    target = _vjp_target(_rebuild(fun, boxes, primals, tape), region, first_run, has_aux,
                         out_box, aux_box, tape)
    with region, tape:
        res = _functorch["vjp"](target, *[b[0] for b in boxes])
    out_leaves, vjp_phys = res[0], res[1]
    spec, names = out_box
    out = rebox(out_leaves, spec, names)
    chunked = _chunked(region.axes, reduce_axes)
    forward_axes = set(bound_axes())
    if added:   # copies of a value JAX computes once (the cotangents still align to
        out = fold_copies([out], tape)[0]   # the physical outputs)
    vjp_fn = _pullback(what, vjp_phys, out_leaves, names, boxes, region, chunked,
                       forward_axes, tape)
    if has_aux:
        leaves, aspec, anames = aux_box[0]
        return out, vjp_fn, rebox(leaves, aspec, anames)
    return out, vjp_fn


def _vjp_target(inner: Callable, region: Region, first_run: bool, has_aux: bool,
                out_box: list, aux_box: list, tape) -> Callable:
    """The function of physical leaves that torch.func's vjp differentiates: ``inner``,
    settling ``region`` once it ran (and the named shapes of its output on ``tape``),
    its aux (unboxed) kept aside in ``aux_box``."""
    def settled(*phys):
        out = inner(*phys)
        region.settle(first_run)
        if has_aux:
            out, aux = out
            aux_box[:] = [unbox(aux)]
        tape.decide(out, grads=False)
        return out

    return _phys_outputs(settled, out_box)


def _batch_axes(cts: list, names: list, forward_axes: set) -> dict:
    """Axes the cotangent carries and the output does not: bound since the forward (a
    vmap over the pullback, as jacrev does), so the pullback is mapped over them."""
    batch: dict = {}
    for c, n in zip(cts, names):
        if type(c) is _NT:
            for b, size in zip(c._names, c._data.shape):
                if b not in (n or ()) and b not in forward_axes and b in bound_axes():
                    batch.setdefault(b, size)
    return batch


def _pullback(what: str, vjp_phys: Callable, out_leaves: list, names: list, boxes: list,
              region: Region, chunked: dict, forward_axes: set, tape) -> Callable:
    """``vjp_fn``: a cotangent of the output -> the primals' cotangents, named."""
    def vjp_fn(cotangent):
        cts, ct_spec = tree_flatten(cotangent)
        if len(cts) != len(out_leaves):
            raise AxisSpecError(f"{what}: the cotangent has {len(cts)} leaves but the output "
                                f"has {len(out_leaves)}")
        batch = _batch_axes(cts, names, forward_axes)
        lead = tuple(batch)
        if region.transposed and len(lead) != 1 and torch.compiler.is_dynamo_compiling():
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
        if not lead:   # copies along the axes no cotangent meets (see _instances)
            grads = fold_pullback(grads, tape, cts)
        return grads

    return vjp_fn


def _refuse_transposed_rule(what: str, rule: str) -> None:
    """A custom_jvp's reverse rule transposes its JVP rule with ``torch.func.vjp`` inside
    the backward.  Dynamo traces that backward where the forward calls the rule and keeps
    the functorch levels it had there; a pullback replays it after the forward's level
    closed, which only lines up when the pullback is mapped over one axis (as jacrev's
    is): otherwise torch fails an internal assert."""
    raise AxisTypeError(
        f"{what}: {rule}'s reverse rule (its JVP rule transposed with torch.func.vjp in "
        f"the backward) cannot run in this pullback under torch.compile: dynamo replays "
        f"that backward at the functorch level of the forward. Take the "
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
