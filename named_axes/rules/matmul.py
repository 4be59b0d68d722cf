"""Rules for the matmul family (``@``, ``mm``, ``bmm``, ``mv``, ``dot``, ``vdot``),
``F.linear`` and ``outer``: positional dims contract as in torch; named dims never
broadcast through ``torch.matmul`` (which would materialize the expanded operand), they
fold into batch / row / column dims of one ``matmul`` (:func:`_matmul_folded`).

>>> import torch, named_axes as nx
>>> h = nx.named(torch.ones(2, 3, 4), {0: 'b'})
>>> w = nx.named(torch.ones(5, 4, 6), {0: 'k'})
>>> out = h @ w
>>> out.shape, out.named_shape
(torch.Size([3, 6]), {'b': 2, 'k': 5})
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .._dispatch import ShapeError, result
from .pointwise import pointwise
from .._registry import op_name, register
from .._layout import union_names
from .._plancache import PlanCache
from .._tensor import NamedTensor
from ._common import given, instance_invalid

_NT = NamedTensor

_MATMUL_RANKS = {"mm": (2, 2), "bmm": (3, 3), "mv": (2, 1), "dot": (1, 1), "vdot": (1, 1)}


def _matmul(func, args, kwargs):
    if kwargs and set(kwargs) - {"other", "input", "vec", "mat2", "tensor"}:
        return NotImplemented
    a, b = (list(args) + list(kwargs.values()))[:2]
    name = getattr(func, "__name__", "matmul")
    if name == "__rmatmul__":
        a, b = b, a
    elif (torch.compiler.is_dynamo_compiling()
          and (func is torch.Tensor.matmul or func is torch.Tensor.__matmul__)):
        _refuse_swapped_matmul()   # (both operands may be NamedTensors: `n @ m` too)
    if name == "vdot":
        a = a.conj()
    pa = a.ndim if type(a) is _NT else a.dim()
    pb = b.ndim if type(b) is _NT else b.dim()
    want = _MATMUL_RANKS.get(name)
    if want and (pa, pb) != want or pa == 0 or pb == 0:
        raise ShapeError(f"{op_name(func)}: positional ranks {pa} and {pb} do not fit "
                         f"({'expected ' + str(want) if want else 'matmul needs at least 1-D operands'}); "
                         f"shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if type(b) is not _NT:
        if b.dim() <= 2 or b.dim() <= pa:
            return result(torch.matmul(a._data, b), a._names, func)
    elif type(a) is not _NT:
        if pb >= 2 and a.dim() <= pb:
            return result(torch.matmul(a, b._data), b._names, func)
    return _matmul_folded(func, a, b, pa, pb)


def _refuse_swapped_matmul() -> None:
    """Under dynamo, ``named @ x`` arrives as ``Tensor.matmul(x, named)`` (operands
    swapped: see ``_compile_compat``) unless the user opted into the fix."""
    from .._compile_compat import matmul_is_fixed

    if not matmul_is_fixed():
        raise ShapeError(
            "a.matmul(b) under torch.compile: dynamo traces `b @ a` on named values as "
            "`a.matmul(b)`, its operands swapped (its reverse-operator table lacks matmul), "
            "so the two cannot be told apart. Call nx.enable_dynamo_matmul() once before "
            "compiling, or write torch.matmul(a, b)")


def _matmul_folded(func, a, b, pa: int, pb: int):
    """``a @ b`` as one ``matmul`` that never broadcasts over a named dim: names shared by
    ``a`` and ``b`` become leading batch dims; names only on ``a`` fold into its row dim
    M, names only on ``b`` into its column dim N."""
    na = a._names if type(a) is _NT else ()
    nb = b._names if type(b) is _NT else ()
    da = a._data if type(a) is _NT else a
    db = b._data if type(b) is _NT else b
    plan = _MATMUL_PLANS(na, nb, pa, pb)
    U, shared, perm_a, perm_b, only_a, only_b, B, out_perm = plan
    sa, sb = da.shape, db.shape
    for i, j in shared:
        if sa[i] != sb[j]:
            operands = [(n, v) for n, v in (("args[0]", a), ("args[1]", b)) if type(v) is _NT]
            union_names(operands, op=func)  # raises the usual size error
    ka, kb, S = len(na), len(nb), len(shared)
    ba, bb = max(pa - 2, 0), max(pb - 2, 0)
    a_pos, b_pos = sa[ka:], sb[kb:]
    fa = 1
    for i in only_a:
        fa *= sa[i]
    fb = 1
    for j in only_b:
        fb *= sb[j]
    m = a_pos[-2] if pa >= 2 else 1
    n = b_pos[-1] if pb >= 2 else 1
    lead = tuple(sa[i] for i, _ in shared)
    if perm_a is not None:
        da = da.permute(perm_a)
    if perm_b is not None:
        db = db.permute(perm_b)
    shape_a = lead + (1,) * (B - ba) + tuple(a_pos[:ba]) + (fa * m, a_pos[-1])
    shape_b = lead + (1,) * (B - bb) + tuple(b_pos[:bb]) + (b_pos[-2] if pb >= 2 else b_pos[-1],
                                                           fb * n)
    out = torch.matmul(_reshape(da, shape_a), _reshape(db, shape_b))
    unfold = (tuple(out.shape[:S + B]) + tuple(sa[i] for i in only_a) + ((m,) if pa >= 2 else ())
              + tuple(sb[j] for j in only_b) + ((n,) if pb >= 2 else ()))
    out = _reshape(out, unfold)
    return result(out if out_perm is None else out.permute(out_perm), U, func)


def _reshape(t: torch.Tensor, shape: tuple) -> torch.Tensor:
    """``t.reshape(shape)``; a DTensor's copies to a contiguous layout first, forward and
    backward: it picks view or copy by its global strides, then views its local shard,
    which need not be viewable so (a shard of size 1, a gradient laid out transposed)."""
    if type(t) is torch.Tensor or type(t).__name__ != "DTensor":
        return t.reshape(shape)
    return _CopyReshape.apply(t, shape)


class _CopyReshape(torch.autograd.Function):
    """``reshape`` that copies input and gradient to a contiguous layout, then views."""

    @staticmethod
    def forward(ctx, t, shape):
        ctx.shape = t.shape
        return _contiguous(t).view(shape)

    @staticmethod
    def backward(ctx, g):
        return _contiguous(g).view(ctx.shape), None


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    if type(t) is torch.Tensor:
        return t.contiguous()
    return t.clone(memory_format=torch.contiguous_format)   # the shard too, not the wrapper


def _matmul_plan(na: tuple, nb: tuple, pa: int, pb: int) -> tuple:
    """Permutations for :func:`_matmul_folded`, per ``(names of a, names of b, pa, pb)``.

    a is laid out ``[shared, batch, only_a, M, K]`` and b ``[shared, batch, K, only_b, N]``
    (M / N absent for 1-D operands); the product ``[shared, batch, only_a, M, only_b, N]``
    is permuted to ``[U, batch, M, N]``."""
    ka, kb = len(na), len(nb)
    ba, bb = max(pa - 2, 0), max(pb - 2, 0)
    B = max(ba, bb)
    shared = tuple((i, nb.index(x)) for i, x in enumerate(na) if x in nb)
    only_a = tuple(i for i, x in enumerate(na) if x not in nb)
    only_b = tuple(j for j, x in enumerate(nb) if x not in na)
    perm_a = tuple([i for i, _ in shared] + list(range(ka, ka + ba)) + list(only_a)
                   + list(range(ka + ba, ka + pa)))
    perm_b = tuple([j for _, j in shared] + list(range(kb, kb + bb)) + [kb + bb]
                   + list(only_b) + list(range(kb + bb + 1, kb + pb)))
    # where each dim of U / batch / M / N sits in the unfolded product
    S, A, m = len(shared), len(only_a), int(pa >= 2)
    at_a = {na[i]: t for t, (i, _) in enumerate(shared)}
    at_a.update((na[i], S + B + t) for t, i in enumerate(only_a))
    U = tuple(na) + tuple(nb[j] for j in only_b)
    out_perm = tuple([at_a[x] for x in na] + [S + B + A + m + t for t in range(len(only_b))]
                     + list(range(S, S + B)) + [S + B + A] * m
                     + [S + B + A + m + len(only_b)] * int(pb >= 2))
    return (U, shared, _unless_identity(perm_a), _unless_identity(perm_b), only_a, only_b, B,
            _unless_identity(out_perm))


def _unless_identity(perm: tuple):
    return None if perm == tuple(range(len(perm))) else perm


_MATMUL_PLANS = PlanCache("matmul", _matmul_plan)


def _linear(func, args, kwargs):
    x, w, bias = given(args, kwargs, 0, input=None, weight=None, bias=None)
    if type(x) is _NT and type(w) is not _NT and type(bias) is not _NT:
        if x.ndim == 0:
            raise ShapeError(f"F.linear: the input has no positional dims (named shape "
                             f"{x.named_shape}); linear contracts the last positional dim")
        if w.dim() != 2 or bias is not None and bias.dim() > 1:
            instance_invalid(func, args, kwargs)
        return result(F.linear(x._data, w, bias), x._names, func)
    if w.ndim != 2 or bias is not None and bias.ndim > 1 or x.ndim == 0:
        instance_invalid(func, args, kwargs)
    out = torch.matmul(x, w.mT)
    return out if bias is None else out + bias


def _outer(func, args, kwargs):
    a, b = args[0], args[1]
    if a.ndim != 1 or b.ndim != 1:
        instance_invalid(func, args, kwargs)
    return pointwise(torch.mul, (a.unsqueeze(-1), b.unsqueeze(-2)), {}) if type(a) is _NT else \
        pointwise(torch.Tensor.__rmul__, (b.unsqueeze(-2), a.unsqueeze(-1)), {})


_declare = functools.partial(register, kind="matmul")


def install() -> None:
    T = torch.Tensor
    _declare([torch.matmul, T.matmul, T.__matmul__, T.__rmatmul__, torch.mm, T.mm,
              torch.bmm, T.bmm, torch.mv, T.mv, torch.dot, T.dot, torch.vdot, T.vdot], _matmul)
    _declare([F.linear], _linear)
    _declare([torch.outer, T.outer, torch.ger, T.ger], _outer)
