"""An einsum of three or more operands as a chain of two-operand einsums.

Each pair is contracted by an engine (``Engine.contract``: on a mesh, shard by shard or
by DTensor's two-operand einsum), where ``torch.einsum`` would run a chain of views of
its own that DTensor cannot always follow.

>>> import torch
>>> from named_axes._engine import EngineBase
>>> a, b, c = torch.ones(2, 3), torch.ones(3, 4), torch.ones(4)
>>> contract_pairwise("ij,jk,k->i", [a, b, c], EngineBase())
tensor([12., 12.])
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["contract_pairwise"]


def contract_pairwise(eq: str, datas: list, engine: Any) -> Any:
    """``einsum(eq, *datas)`` of DTensors as a chain of two-operand einsums, each
    contracted by ``engine`` (shard by shard, or DTensor's two-operand einsum): torch
    2.13's DTensor cannot run its own chain of views for three operands when an axis is
    split over two mesh dims (mesh oracle, seed 202, p202_00152).  None for an equation
    with an ellipsis (``torch.einsum`` runs it)."""
    if "." in eq:
        return None
    lhs, rhs = eq.split("->")
    subs = lhs.split(",")
    cur, acc = subs[0], datas[0]
    for i in range(1, len(subs)):
        later = set(rhs).union(*subs[i + 1:])
        keep = "".join(dict.fromkeys(c for c in cur + subs[i] if c in later))
        pair = f"{cur},{subs[i]}->{keep}"
        out = engine.contract(pair, acc, datas[i])
        acc = torch.einsum(pair, acc, datas[i]) if out is None else out
        cur = keep
    return acc if cur == rhs else torch.einsum(f"{cur}->{rhs}", acc)
