"""Forward mode on named values: ``jvp`` and ``linearize``; Jacobians and Hessians per
named index: ``jacrev``, ``jacfwd``, ``hessian``.

Named axes are instances, as in reverse mode (``_grad.py``); a tangent may carry named
axes its primal lacks (as JAX's jvp inside xmap: the primal is broadcast along them).
With named values the Jacobians push or pull one basis vector per positional entry,
mapped over a fresh named axis (docs/architecture.md); on plain tensors they are
``torch.func``'s own.

>>> import torch, named_axes as nx
>>> nx.jvp(torch.sin, (torch.zeros(2),), (torch.ones(2),))[1]
tensor([1., 1.])
>>> nx.jacrev(torch.sin)(torch.zeros(2))
tensor([[1., 0.],
        [0., 1.]])
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import torch

from .._env import bind, bound_axes
from .._errors import AxisSpecError, AxisTypeError
from .._tensor import NamedTensor
from .._levels import ORIGINAL as _functorch
from .._torch_private import tree_flatten, tree_map, tree_unflatten
from ._custom import forward_begin, forward_end
from ._grad import _argnums, flat_result, vjp
from ._instances import fold_copies, static_tape
from ._tree import Hidden, align_like, expand_over, mapped_over, named_axes_of, rebox, unbox

__all__ = ["jvp", "linearize", "jacrev", "jacfwd", "hessian"]

_NT = NamedTensor


def jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False, *,
        _batch: dict | None = None):
    """``(fun(*primals), tangent_out)`` by forward mode (``torch.func.jvp``), names kept.

    (``_batch``: named axes -> sizes the tangents carry and the primals not, mapped over.)

    >>> import torch, named_axes as nx
    >>> nx.jvp(torch.sin, (torch.zeros(2),), (torch.ones(2),))[1]
    tensor([1., 1.])
    """
    what = f"jvp({getattr(fun, '__name__', 'fun')})"
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise AxisTypeError(f"{what}: primals and tangents must be tuples")
    if len(primals) != len(tangents):
        raise AxisSpecError(f"{what}: {len(primals)} primals but {len(tangents)} tangents")
    boxes = [unbox(p) for p in primals]
    extra = _tangent_axes(boxes, tangents) if _batch is None else {}
    tape = static_tape(tuple(extra))
    if extra:   # per instance: see _tangent_axes
        boxes = [unbox(tree_map(lambda v: _cloned(expand_over(v, extra)), p)) for p in primals]
    lead, lead_sizes = tuple(_batch or ()), tuple((_batch or {}).values())
    tan_phys = []
    for k, ((leaves, _, names), t) in enumerate(zip(boxes, tangents)):
        tl = tree_flatten(t)[0]
        if len(tl) != len(leaves):
            raise AxisSpecError(f"{what}: tangent {k} has {len(tl)} leaves, primal {len(leaves)}")
        tan_phys.append([align_like(v, p, n, f"{what} tangent {k}", lead, lead_sizes)
                         for v, p, n in zip(tl, leaves, names)])
    box: list = []

    def target(*phys):
        args = [rebox(leaves, spec, names) for leaves, (_, spec, names) in zip(phys, boxes)]
        for a, g in zip(args, primals):
            tape.roots(a, g)
        res = fun(*args)
        out, leaves = flat_result(res, has_aux, what, box)
        tape.decide(out, res[1] if has_aux else None, grads=False)
        return leaves

    primal_phys = tuple(b[0] for b in boxes)
    forward_begin()   # (custom_jvp asks: refused under torch.compile; its reverse mode)
    try:
        if lead:   # mapped over the batch axes; the primal output is the same in each
            out, t_out = mapped_over(
                lambda *tans: _functorch["jvp"](target, primal_phys, tans),
                len(lead))(*tan_phys)
            out = tree_map(lambda o: o[(0,) * len(lead)], out)
        else:
            with tape:
                out, t_out = _functorch["jvp"](target, primal_phys, tuple(tan_phys))
    finally:
        forward_end()
    spec, names, aux_box = box
    t_names = [lead + (n or ()) for n in names] if lead else names
    out, aux = fold_copies([rebox(out, spec, names), rebox(*aux_box) if has_aux else None],
                           tape)
    result = out, rebox(t_out, spec, t_names)
    return result + (aux,) if has_aux else result


def _tangent_axes(boxes: list, tangents: Sequence) -> dict:
    """The named axes (name -> size) of the tangents that their primals lack: the
    primals are broadcast along them, so collectives and axis_index see every instance."""
    extra: dict = {}
    for (_, _, pn), t in zip(boxes, tangents):
        for v, n in zip(tree_flatten(t)[0], pn):
            if isinstance(v, _NT):
                for a, size in zip(v._names, v._data.shape):
                    if a not in (n or ()):
                        extra.setdefault(a, size)
    return extra


def linearize(fun: Callable, *primals: Any):
    """``(fun(*primals), jvp_fn)`` where ``jvp_fn(*tangents)`` is the linearized ``fun``.

    ``jvp_fn`` is :func:`jvp` at ``primals`` (torch.func's own linearize gives zero
    tangents on the torch-xla engine).

    >>> import torch, named_axes as nx
    >>> out, f_jvp = nx.linearize(torch.sin, torch.zeros(2))
    >>> f_jvp(torch.ones(2))
    tensor([1., 1.])
    """
    what = f"linearize({getattr(fun, '__name__', 'fun')})"
    out = fun(*primals)

    def jvp_fn(*tangents):
        if len(tangents) != len(primals):
            raise AxisSpecError(f"{what}: {len(tangents)} tangents for {len(primals)} primals")
        return jvp(fun, primals, tangents)[1]

    return out, jvp_fn


def _jac(kind: str, fun: Callable, argnums, has_aux: bool) -> Callable:
    """Jacobian of ``fun``: ``out.shape + in.shape`` positionally, per named index."""
    what = f"jac{kind}({getattr(fun, '__name__', 'fun')})"

    @functools.wraps(fun)
    def run(*args):
        nums = _argnums(argnums, len(args), what)
        if not named_axes_of(args) and not bound_axes():   # torch.func's own
            args = tree_map(lambda a: a._data if type(a) is NamedTensor else a, args)
            if kind == "rev":
                return _functorch["jacrev"](fun, argnums=argnums, has_aux=has_aux)(*args)
            forward_begin()
            try:
                return _functorch["jacfwd"](fun, argnums=argnums, has_aux=has_aux)(*args)
            finally:
                forward_end()

        def of(*primals):   # fun of the differentiated arguments only
            full = list(args)
            for i, p in zip(nums, primals):
                full[i] = p
            return fun(*full)

        build = _jacrev_named if kind == "rev" else _jacfwd_named
        (rows, out_spec), aux = build(of, [args[i] for i in nums], has_aux)
        # torch.func's layout: the output's structure, each leaf one Jacobian per argnum;
        # a clone makes forward mode's ZeroTensors (the Hessian of abs) ordinary ones
        single = isinstance(argnums, int)
        tree = tree_map(_cloned, tree_unflatten([row[0] if single else tuple(row)
                                                 for row in rows], out_spec))
        return (tree, aux) if has_aux else tree

    return run


def _cloned(t: Any) -> Any:
    if type(t) is _NT:
        return NamedTensor._wrap(t._data.clone(), t._names)
    return t.clone() if isinstance(t, torch.Tensor) else t


def _pos_shape(x: Any) -> tuple:
    return tuple(x.shape) if type(x) is _NT or isinstance(x, torch.Tensor) else ()


def _basis(x: Any, identity: bool = True) -> torch.Tensor:
    """The one-hot entries of ``x``'s positional shape stacked on a leading dim (or, not
    ``identity``, zeros shaped like ``x``)."""
    data = x._data if type(x) is _NT else torch.as_tensor(x)
    shape = _pos_shape(x)
    if not identity:
        return torch.zeros(shape, dtype=data.dtype, device=data.device)
    m = math.prod(shape)
    return torch.eye(m, dtype=data.dtype, device=data.device).reshape((m,) + shape)


def _jacrev_named(of: Callable, primals: list, has_aux: bool) -> tuple:
    """The ``vjp`` pullback of each output's basis cotangents, mapped over a fresh named
    axis (a pullback maps over cotangent axes bound after its forward)."""
    res = vjp(of, *primals, has_aux=has_aux)
    outs, spec = tree_flatten(res[0])
    rows = []
    for j, o in enumerate(outs):
        basis, name = _basis(o), Hidden(f"<jacobian basis {j}>")
        with bind({name: basis.shape[0]}, kind="vmap"):
            e = NamedTensor._wrap(basis, (name,))
            grads = res[1](tree_unflatten([e if k == j else _basis(x, False)
                                           for k, x in enumerate(outs)], spec))
        # the basis axis moved first: out.shape + in.shape
        rows.append([_moved(g, name, 0, _pos_shape(o), _pos_shape(p))
                     for g, p in zip(grads, primals)])
    return (rows, spec), (res[2] if has_aux else None)


def _jacfwd_named(of: Callable, primals: list, has_aux: bool) -> tuple:
    """The ``jvp`` of each input's basis tangents, mapped over a fresh named axis."""
    per_input, aux, spec = [], None, None
    for i, p in enumerate(primals):
        basis, name = _basis(p), Hidden(f"<jacobian basis {i}>")
        with bind({name: basis.shape[0]}, kind="vmap"):
            e = NamedTensor._wrap(basis, (name,))
            tangents = tuple(e if k == i else _basis(q, False) for k, q in enumerate(primals))
            res = jvp(of, tuple(primals), tangents, has_aux=has_aux,
                      _batch={name: basis.shape[0]})
        leaves, spec = tree_flatten(res[1])
        aux = res[2] if has_aux else None
        # the basis axis moved last: out.shape + in.shape
        per_input.append([_moved(t, name, -1, (), _pos_shape(p)) for t in leaves])
    return ([[cols[j] for cols in per_input] for j in range(spec.num_leaves)], spec), aux


def _moved(t: NamedTensor, name: Any, where: int, before: tuple, after: tuple) -> Any:
    """``t``'s named axis ``name`` made its first (``where=0``: unflattened to ``before``)
    or last (``-1``: unflattened to ``after``) positional dims."""
    i = t._names.index(name)
    rest = t._names[:i] + t._names[i + 1:]
    data = t._data.movedim(i, len(rest) if where == 0 else -1)
    body = tuple(data.shape[len(rest):])
    pos = before + body[1:] if where == 0 else body[:-1] + after
    data = data.reshape(tuple(data.shape[:len(rest)]) + pos)
    return NamedTensor._wrap(data, rest) if rest else data


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """Jacobian by reverse mode (``torch.func.jacrev``), per named index for named inputs.

    >>> import torch, named_axes as nx
    >>> nx.jacrev(torch.sin)(torch.zeros(2))
    tensor([[1., 0.],
            [0., 1.]])
    """
    return _jac("rev", fun, argnums, has_aux)


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """Jacobian by forward mode (``torch.func.jacfwd``), per named index for named inputs.

    >>> import torch, named_axes as nx
    >>> nx.jacfwd(torch.sin)(torch.zeros(2))
    tensor([[1., 0.],
            [0., 1.]])
    """
    return _jac("fwd", fun, argnums, has_aux)


def hessian(fun: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """Hessian (``jacfwd(jacrev(fun))``), per named index for named inputs.

    >>> import torch, named_axes as nx
    >>> nx.hessian(lambda x: (x ** 3).sum())(torch.tensor([1., 2.]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    return _jac("fwd", _jac("rev", fun, argnums, False), argnums, False)
