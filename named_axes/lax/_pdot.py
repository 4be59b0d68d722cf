"""``nx.lax.pdot``: ``psum(dot_general(x, y), axis_name)`` in one op (see :func:`pdot`).

The contraction is planned once per layout (an einsum equation over the physical dims,
cached in ``_PDOT_PLANS``) and run as the registered op ``named_axes::pdot``.  Inside a
derivative taken within a named program its gradient follows JAX's pdot transpose,
which has no psum (``_contracted_size``).
"""
from __future__ import annotations

import string
from typing import Any, NamedTuple

import torch

from . import _ops
from .._dispatch import result
from .._engine import handed
from .._env import INNER, axis_size, bound_axes
from .._env import _state as _env_state
from .._errors import AxisSizeError, AxisSpecError, AxisTypeError
from .._layout import union_names
from .._plancache import PlanCache
from .._tensor import RECORDERS, NamedTensor
from ._common import (_as_named, _axis_names, _check_bound_size, _engine_method, _norm_dims,
                      _shows_axes)
from ._reductions import _size

__all__ = ["pdot"]

_NT = NamedTensor


@_shows_axes(2)
def pdot(x: Any, y: Any, axis_name: Any, *, pos_contract=((), ()), pos_batch=((), ()),
         precision: Any = None) -> Any:
    """``psum(dot_general(x, y, (pos_contract, pos_batch)), axis_name)`` in one op.

    Contracts the named axes ``axis_name`` and the positional pairs ``pos_contract``;
    ``pos_batch`` pairs are batch axes.  Other named axes broadcast by name.  Output
    positional axes: batch, then ``x``'s free axes, then ``y``'s.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.ones(2, 3), 'b k ...')
    >>> w = nx.named(torch.ones(3, 4), 'k h ...')
    >>> nx.lax.pdot(x, w, 'k').named_shape
    {'b': 2, 'h': 4}
    """
    op = "pdot"
    names = (axis_name,) if type(axis_name) is str else _axis_names(axis_name, op)
    x, y = _one_dtype(_as_named(x, op), _as_named(y, op))
    method = _engine_method(op, names)
    if method is not None:
        _SCALED.append(set())
        try:
            out = method(x, y, names, pos_contract=pos_contract, pos_batch=pos_batch)
        finally:   # (the names a pdot the engine ran for its chunk scaled already)
            done = _SCALED.pop()
        rest = tuple(n for n in names if n not in done)
        if RECORDERS and _contracted_size(rest) != 1:   # (a result without names is plain)
            out = (NamedTensor._wrap(_transposed_as_jax(out._data, rest), out._names)
                   if isinstance(out, _NT) else _transposed_as_jax(out, rest))
        return out
    key = (axis_name if type(axis_name) is str else names, x._names, y._names, x._data.dim(),
           y._data.dim(), pos_contract, pos_batch)
    plan = _PDOT_PLANS.plan(key, x, y, names, pos_contract, pos_batch)
    return _pdot_run(plan, x, y, names)


def _one_dtype(x: NamedTensor, y: NamedTensor) -> tuple:
    """``x`` and ``y`` in their promoted dtype, as JAX's ``dot_general`` promotes (torch's
    matmul refuses mixed dtypes); two bool operands refused, as JAX's xmap cannot lower them."""
    dt = x._data.dtype
    if dt is y._data.dtype and dt is not torch.bool:
        return x, y
    dt = torch.result_type(x._data, y._data)
    if dt == torch.bool:
        raise AxisTypeError("pdot: both operands are bool; cast them to an integer or "
                            "floating dtype first")
    return tuple(v if v._data.dtype == dt else NamedTensor._wrap(v._data.to(dt), v._names)
                 for v in (x, y))


def _pdot_run(plan: tuple, x: NamedTensor, y: NamedTensor, names: tuple) -> Any:
    eq, out_names, _, _, missing = plan
    xd, yd = x._data, y._data
    if _env_state.engine:   # the engine running the product's axes hands the operands
        every = x._names + tuple(n for n in y._names if n not in x._names)
        xd, yd = handed(xd, x._names, every), handed(yd, y._names, every)
    data = _ops.collective("pdot", xd, yd, eq)
    factor = _size(missing, "pdot")
    if factor != 1:
        data = data * factor
    if RECORDERS:
        data = _transposed_as_jax(data, names)
    return result(data, out_names, pdot)


# one set per engine pdot call in progress: the names whose gradient scaling a pdot run
# inside it (the engine's chunk-local product, nx.lax.pdot again) applied
_SCALED: list = []


def _transposed_as_jax(data: torch.Tensor, names: tuple) -> torch.Tensor:
    """``data``, inside a derivative, with the gradient of JAX's pdot transpose (no psum)."""
    size = _contracted_size(names)
    if _SCALED:
        inner = RECORDERS[-1].get(INNER, ())
        _SCALED[-1].update(n for n in names if n not in inner)
    return _ops.scale_grad(data, 1 / size) if size != 1 else data


def _contracted_size(names: tuple) -> int:
    """How many instances the named contraction sums, as the innermost derivative taken
    around this call counts them: that derivative seeds a result lacking those axes once
    per instance (transforms/_instances), where JAX's pdot transpose counts it once.
    Axes bound inside it (an xmap within ``grad``) are ordinary sums there: 1."""
    inner = RECORDERS[-1].get(INNER, ())
    return _size([n for n in names if n not in inner], "pdot")


def _pdot_plan_holds(plan: tuple, x: NamedTensor, y: NamedTensor, *_) -> bool:
    """Whether the sizes checked when ``plan`` was built still agree."""
    shapes = (x._data.shape, y._data.shape)
    for i, a, j, b in plan.same:
        if shapes[i][a] != shapes[j][b]:
            return False
    bound = bound_axes()
    for i, a, n in plan.bound_checks:
        if n in bound and bound[n] != shapes[i][a]:
            return False
    return True


class PdotPlan(NamedTuple):
    """``pdot`` as one einsum over the physical dims (operand 0 is x, 1 is y)."""
    eq: str
    out_names: tuple
    same: tuple           # (operand, dim, operand, dim) pairs whose sizes must agree
    bound_checks: tuple   # (operand, dim, name): sizes that must equal the bound size
    missing: tuple        # contracted names no operand carries (scale by their size)


def _pdot_plan(x: NamedTensor, y: NamedTensor, names: tuple, pos_contract, pos_batch) -> tuple:
    """Check ``pdot``'s arguments and build its :class:`PdotPlan`."""
    op = "pdot"
    union_names([("x", x), ("y", y)], op=op)
    (cx, cy), (bx, by) = [tuple(map(tuple, pair)) for pair in (pos_contract, pos_batch)]
    if len(cx) != len(cy) or len(bx) != len(by):
        raise AxisSpecError(f"pdot: pos_contract={pos_contract!r} / pos_batch={pos_batch!r} "
                            f"must pair equally many axes of x and y")
    # a dim paired twice (contracted twice, or contracted and batched) is an error, as in JAX
    dx = _norm_dims(cx + bx, x.ndim, op, "pos_contract + pos_batch (x)")
    dy = _norm_dims(cy + by, y.ndim, op, "pos_contract + pos_batch (y)")
    cx, bx, cy, by = dx[:len(cx)], dx[len(cx):], dy[:len(cy)], dy[len(cy):]
    letters = iter(string.ascii_letters)
    named_letter = {}
    for n in x._names + y._names:
        if n not in named_letter:
            named_letter[n] = next(letters)
    tx = [named_letter[n] for n in x._names] + [None] * x.ndim
    ty = [named_letter[n] for n in y._names] + [None] * y.ndim
    kx, ky = len(x._names), len(y._names)
    same = [(0, i, 1, y._names.index(n)) for i, n in enumerate(x._names) if n in y._names]
    for a, b in list(zip(cx, cy)) + list(zip(bx, by)):
        if x.shape[a] != y.shape[b]:
            raise AxisSizeError(f"pdot: x positional dim {a} (size {x.shape[a]}) is paired "
                                f"with y positional dim {b} (size {y.shape[b]})")
        tx[kx + a] = ty[ky + b] = next(letters)
        same.append((0, kx + a, 1, ky + b))
    batch = "".join(tx[kx + a] for a in bx)
    for t, k in ((tx, kx), (ty, ky)):
        for i in range(k, len(t)):
            if t[i] is None:
                t[i] = next(letters)
    free_x = "".join(tx[kx + a] for a in range(x.ndim) if a not in cx and a not in bx)
    free_y = "".join(ty[ky + b] for b in range(y.ndim) if b not in cy and b not in by)
    out_names = tuple(n for n in named_letter if n not in names)
    missing, bound_checks = [], []
    for n in names:
        if n not in named_letter:
            axis_size(n, op=op)   # checks that the name is bound
            missing.append(n)
        else:
            for i, v in enumerate((x, y)):
                if n in v._names:
                    _check_bound_size(v, n, op)
                    bound_checks.append((i, v._names.index(n), n))
    eq = (f"{''.join(tx)},{''.join(ty)}->"
          f"{''.join(named_letter[n] for n in out_names)}{batch}{free_x}{free_y}")
    return PdotPlan(eq, out_names, tuple(same), tuple(bound_checks), tuple(missing))


_PDOT_PLANS = PlanCache("pdot", _pdot_plan, maxsize=1024, validate=_pdot_plan_holds)
