"""An opt-in fix for ``named @ tensor`` under ``torch.compile`` (a dynamo bug).

Dynamo traces ``n @ w`` (``n`` not a tensor but with ``__torch_function__``) by swapping
the operands and calling the reverse Tensor method, but its reverse table lacks
``matmul``: ``n @ w`` is traced as ``w @ n`` (which the dispatcher refuses, naming
:func:`enable_dynamo_matmul`) and ``n @ m`` is refused.  :func:`enable_dynamo_matmul` is
the explicit opt-in that adds the missing table entries; ``import named_axes`` changes
nothing in dynamo.  ``torch.matmul(n, w)`` needs no fix.

>>> import torch, named_axes as nx
>>> nx.enable_dynamo_matmul()
>>> f = nx.xmap(lambda x, w: x @ w, in_axes=(['b', ...], [...]), out_axes=['b', ...])
>>> torch.compile(f, fullgraph=True)(torch.ones(2, 3), torch.ones(3, 4)).shape
torch.Size([2, 4])
>>> nx.disable_dynamo_matmul()
"""
from __future__ import annotations

import operator
import threading

import torch

__all__ = ["enable_dynamo_matmul", "disable_dynamo_matmul", "matmul_is_fixed"]

_state = {"added": None}   # the entries we added: [(table, key)], None when not enabled
_lock = threading.RLock()


def matmul_is_fixed() -> bool:
    """Whether :func:`enable_dynamo_matmul` is in effect."""
    return _state["added"] is not None


def enable_dynamo_matmul() -> None:
    """Make dynamo trace ``named @ tensor`` and ``named @ named`` correctly (idempotent);
    :func:`disable_dynamo_matmul` removes exactly the table entries added."""
    with _lock:
        if _state["added"] is not None:
            return
        from ._torch_private import dynamo_operator_tables

        reverse, binops = dynamo_operator_tables()
        added = []
        for table, key, value in (
                (reverse, operator.matmul, torch.Tensor.__rmatmul__),
                (reverse, operator.imatmul, torch.Tensor.__rmatmul__),
                (binops, operator.matmul,
                 (["__matmul__", "__rmatmul__", "__imatmul__"], operator.imatmul))):
            if table is not None and key not in table:
                table[key] = value
                added.append((table, key))
        _state["added"] = added
        _forget()


def disable_dynamo_matmul() -> None:
    """Undo :func:`enable_dynamo_matmul` (dynamo's tables as they were)."""
    with _lock:
        for table, key in _state["added"] or ():
            table.pop(key, None)
        if _state["added"]:
            _forget()
        _state["added"] = None


def _forget() -> None:
    from ._torch_private import dynamo_forget_handlers

    dynamo_forget_handlers((operator.matmul, operator.imatmul))
