"""Forward mode on named values: ``jvp`` and ``linearize``.

Named axes are instances, as in the reverse-mode family (``_grad.py``): primals and
tangents are laid out alike physically and differentiated by ``torch.func.jvp``;
tangents may carry extra named axes a caller maps the jvp over (``jacfwd``'s basis,
a ``linearize`` jvp_fn called on a batch of tangents).

>>> import torch, named_axes as nx
>>> nx.jvp(torch.sin, (torch.zeros(2),), (torch.ones(2),))[1]
tensor([1., 1.])
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .._errors import AxisSpecError, AxisTypeError
from .._tensor import NamedTensor
from .._levels import ORIGINAL as _functorch
from .._torch_private import tree_flatten, tree_map
from ._vjp import _align_like, _phys_outputs, _rebuild, _unbox_primals, mapped_over
from ._custom import forward_begin, forward_end
from ._tree import rebox, unbox

__all__ = ["jvp", "linearize"]

_NT = NamedTensor


def jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False, *,
        _batch: dict | None = None):
    """``(fun(*primals), tangent_out)`` by forward mode (``torch.func.jvp``), names kept.

    (``_batch``: named axes -> sizes that the tangents may carry and the primals not: the
    jvp is mapped over them, as ``jacfwd`` maps it over its basis tangents.)

    >>> import torch, named_axes as nx
    >>> nx.jvp(torch.sin, (torch.zeros(2),), (torch.ones(2),))[1]
    tensor([1., 1.])
    """
    what = f"jvp({getattr(fun, '__name__', 'fun')})"
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise AxisTypeError(f"{what}: primals and tangents must be tuples")
    if len(primals) != len(tangents):
        raise AxisSpecError(f"{what}: {len(primals)} primals but {len(tangents)} tangents")
    boxes = _unbox_primals(tuple(primals))
    _batch = _batch or {}
    lead, lead_sizes = tuple(_batch), tuple(_batch.values())
    tan_phys = []
    for k, ((leaves, _, names), t) in enumerate(zip(boxes, tangents)):
        tl = tree_flatten(t)[0]
        if len(tl) != len(leaves):
            raise AxisSpecError(f"{what}: tangent {k} has {len(tl)} leaves, primal {len(leaves)}")
        tan_phys.append([_align_like(v, p, n, f"{what} tangent {k}", lead, lead_sizes)
                         for v, p, n in zip(tl, leaves, names)])
    out_box: list = []
    aux_box: list = []
    inner = _rebuild(fun, boxes)

    def split(*phys):
        out = inner(*phys)
        if has_aux:
            out, aux = out
            aux_box[:] = [unbox(aux)]
        return out

    target = _phys_outputs(split, out_box)
    primal_phys = tuple(b[0] for b in boxes)
    forward_begin()   # (custom_jvp asks: refused under torch.compile; its reverse mode)
    try:
        if lead:   # mapped over the batch axes; the primal output is the same in each
            out, t_out = mapped_over(
                lambda *tans: _functorch["jvp"](target, primal_phys, tans),
                len(lead))(*tan_phys)
            out = tree_map(lambda o: o[(0,) * len(lead)], out)
        else:
            out, t_out = _functorch["jvp"](target, primal_phys, tuple(tan_phys))
    finally:
        forward_end()
    spec, names = out_box
    t_names = [lead + (n or ()) for n in names] if lead else names
    result = rebox(out, spec, names), rebox(t_out, spec, t_names)
    if has_aux:
        return result + (rebox(*aux_box[0]),)
    return result


def linearize(fun: Callable, *primals: Any):
    """``(fun(*primals), jvp_fn)`` where ``jvp_fn(*tangents)`` is the linearized ``fun``.

    ``jvp_fn`` is :func:`jvp` at ``primals`` (one path for forward mode: torch.func's own
    linearize gives zero tangents on the torch-xla engine).  Tangents may carry named
    axes the primals lack (``jvp_fn`` mapped over a batch of tangents, e.g. by an
    enclosing xmap): the linear map runs once per index.

    >>> import torch, named_axes as nx
    >>> out, f_jvp = nx.linearize(torch.sin, torch.zeros(2))
    >>> f_jvp(torch.ones(2))
    tensor([1., 1.])
    """
    what = f"linearize({getattr(fun, '__name__', 'fun')})"
    boxes = _unbox_primals(tuple(primals))
    out = fun(*primals)

    def jvp_fn(*tangents):
        if len(tangents) != len(boxes):
            raise AxisSpecError(f"{what}: {len(tangents)} tangents for {len(boxes)} primals")
        extra: dict = {}
        for (_, _, pn), t in zip(boxes, tangents):
            for v, n in zip(tree_flatten(t)[0], pn):
                if isinstance(v, _NT):
                    for a, size in zip(v._names, v._data.shape):
                        if a not in (n or ()):
                            extra.setdefault(a, size)
        return jvp(fun, primals, tangents, _batch=extra)[1]

    return out, jvp_fn
