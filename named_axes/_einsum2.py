"""Two-operand einsums as one ``mm`` / ``bmm`` between views: the lowering a person
would write for ``x @ w`` (used by einsum and ``pdot``).

>>> import torch
>>> from named_axes._einsum2 import einsum2_eager
>>> einsum2_eager('ik,kj->ij', torch.ones(2, 3), torch.ones(3, 4)).shape
torch.Size([2, 4])
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ._errors import AxisTypeError
from ._modes import building_graph
from ._plancache import PlanCache

__all__ = ["einsum2_eager", "einsum_physical"]


def einsum_physical(eq: str, datas: list) -> torch.Tensor:
    """``torch.einsum``, two operands in eager mode as :func:`einsum2_eager`; an
    AxisTypeError for operands torch cannot contract (mixed dtypes, bool ones)."""
    try:
        if len(datas) == 2 and not building_graph():
            return einsum2_eager(eq, *datas)
        return torch.einsum(eq, *datas)
    except RuntimeError as e:
        dts = [d.dtype for d in datas]
        if len(set(dts)) == 1 and torch.bool not in dts:
            raise
        raise AxisTypeError(f"einsum: torch.einsum cannot contract operands of dtypes "
                            f"{', '.join(map(str, dts))} ({e}); cast them to one "
                            f"integer or floating dtype") from None


def einsum2_eager(eq: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``torch.einsum(eq, x, y)`` as one ``mm`` / ``bmm`` between views where it can (for
    eager code: torch.einsum plans on every call and leaves several autograd nodes)."""
    plan = _matmul_plan(eq)
    if plan is not None:
        dt = x.dtype
        if dt is y.dtype and dt.is_floating_point:
            if plan.plain_mm and x.shape[1] == y.shape[0]:   # x [M, K] @ y [K, N]
                return torch.mm(x, y)
            out = _matmul_einsum(plan, x, y)
            if out is not None:
                return out
    return torch.einsum(eq, x, y)


class MatmulPlan(NamedTuple):
    """A two-operand einsum as one ``mm``/``bmm``: x -> [batch, x-free, contracted],
    y -> [batch, contracted, y-free]."""
    xsum: tuple         # dims of x summed away first
    ysum: tuple         # dims of y summed away first
    pairs: tuple        # (x dim, y dim) pairs whose sizes must agree
    x_perm: tuple | None
    y_perm: tuple | None
    nbatch: int
    nxfree: int
    ncontract: int
    out_perm: tuple | None
    plain_mm: bool      # x [M, K] @ y [K, N] as they are


def _build_matmul_plan(eq: str):
    """``eq`` as a :class:`MatmulPlan`, or None unless it has two operands, no ellipsis
    and no letter repeated in a term."""
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2 or "." in eq or not _:
        return None
    tx, ty = terms
    if any(len(set(t)) != len(t) for t in (tx, ty, out)):
        return None
    batch = [c for c in out if c in tx and c in ty]
    xfree = [c for c in out if c in tx and c not in ty]
    yfree = [c for c in out if c in ty and c not in tx]
    contract = [c for c in tx if c in ty and c not in out]
    pairs = tuple((tx.index(c), ty.index(c)) for c in batch + contract)
    xsum = tuple(i for i, c in enumerate(tx) if c not in ty and c not in out)
    ysum = tuple(i for i, c in enumerate(ty) if c not in tx and c not in out)
    kx = [c for c in tx if c in ty or c in out]
    ky = [c for c in ty if c in tx or c in out]
    px = [kx.index(c) for c in batch + xfree + contract]
    py = [ky.index(c) for c in batch + contract + yfree]
    mid = batch + xfree + yfree
    po = [mid.index(c) for c in out]
    ident = lambda p: None if p == sorted(p) else tuple(p)  # noqa: E731
    mm = (not xsum and not ysum and not batch and len(tx) == len(ty) == len(out) == 2
          and len(xfree) == len(yfree) == len(contract) == 1
          and ident(px) is None and ident(py) is None and ident(po) is None)
    return MatmulPlan(xsum, ysum, pairs, ident(px), ident(py), len(batch), len(xfree),
                      len(contract), ident(po), mm)


_matmul_plan = PlanCache("einsum matmul", _build_matmul_plan, maxsize=1024)


def _matmul_einsum(plan: tuple, x: torch.Tensor, y: torch.Tensor):
    """Run a ``_matmul_plan``; None where sizes broadcast (then torch.einsum does it)."""
    xsum, ysum, pairs, px, py, nb, nm, nk, po, _ = plan
    sx, sy = x.shape, y.shape
    for a, b in pairs:
        if sx[a] != sy[b]:
            return None
    if xsum:
        x = x.sum(xsum)
    if ysum:
        y = y.sum(ysum)
    if px is not None:
        x = x.permute(px)
    if py is not None:
        y = y.permute(py)
    sx, sy = x.shape, y.shape
    bs, ms, ks, ns = sx[:nb], sx[nb:nb + nm], sx[nb + nm:], sy[nb + nk:]
    lead = (math.prod(bs),) if nb else ()
    M, K, N = math.prod(ms), math.prod(ks), math.prod(ns)
    if nb > 1 or nm != 1 or nk != 1:   # (else already [batch?, M, K])
        x = x.reshape(lead + (M, K))
    if nb > 1 or nk != 1 or len(ns) != 1:
        y = y.reshape(lead + (K, N))
    out = torch.bmm(x, y) if nb else torch.mm(x, y)
    if nb > 1 or nm != 1 or len(ns) != 1:
        out = out.reshape(tuple(bs) + tuple(ms) + tuple(ns))
    return out if po is None else out.permute(po)
