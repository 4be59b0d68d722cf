"""Make ``named @ tensor`` trace correctly under ``torch.compile``.

Dynamo handles a binary operator whose left operand is not a tensor but has
``__torch_function__`` by swapping the operands and calling the *reverse* Tensor
method — but its reverse table has no entry for ``matmul`` (it is skipped when the
table is built), so ``n @ w`` was traced as ``w @ n`` (torch 2.9–2.13).  We add the
missing entries (``Tensor.__rmatmul__``), which our dispatcher handles like any
reverse operator; and ``n @ m`` between two NamedTensors, which dynamo refused to
trace at all, gets the binop-table entry that routes it to ``__matmul__``.  Nothing changes when dynamo is not used.
"""
from __future__ import annotations

import operator

import torch


def _patch() -> None:
    try:
        from torch._dynamo.variables import builtin
    except Exception:  # pragma: no cover - dynamo unavailable on this platform
        return
    populate = getattr(builtin, "populate_builtin_to_tensor_fn_map", None)
    table = getattr(builtin, "BUILTIN_TO_TENSOR_RFN_MAP", None)
    if populate is None or table is None:  # pragma: no cover - other torch layouts
        return
    populate()
    table.setdefault(operator.matmul, torch.Tensor.__rmatmul__)
    table.setdefault(operator.imatmul, torch.Tensor.__rmatmul__)
    # Between two non-tensors (two NamedTensors) dynamo calls the dunder methods only for
    # operators listed in its binop table, where matmul is missing too.
    binops = getattr(builtin.BuiltinVariable, "_binops", None)
    if binops is not None:
        binops().setdefault(operator.matmul,
                            (["__matmul__", "__rmatmul__", "__imatmul__"], operator.imatmul))


_patch()
