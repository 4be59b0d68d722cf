"""What the rule modules share: dim spelling and positional-dim checks."""
from __future__ import annotations

from .._errors import AxisSpecError
from .._registry import op_name
from .._tensor import NamedTensor

_NT = NamedTensor


def _spelled(op) -> str:
    """``op`` as users spell it; rules pass the torch function itself so that the spelling
    (a dict lookup keyed by the function, which dynamo on torch 2.9 cannot trace) happens
    only when an error is raised."""
    return op if isinstance(op, str) else op_name(op)


def _norm_pos(d: int, p: int, op) -> int:
    if not -max(p, 1) <= d < max(p, 1):
        raise _AxisIndexError(
            f"{_spelled(op)}: dimension {d} is out of range for a value with {p} positional "
            f"dimension(s) (expected one in [{-max(p, 1)}, {max(p, 1) - 1}], or an axis name)"
        )
    return d + p if d < 0 else d


class _AxisIndexError(AxisSpecError, IndexError):
    """A positional dim out of range (a ValueError subclass, and an IndexError like torch's)."""
