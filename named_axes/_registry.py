"""The op registry: one :class:`OpRule` per torch function that has a named rule.

Rule modules (:mod:`named_axes.rules`) declare their ops with :func:`register` (a second
rule for a function is refused, and every remembered plan is forgotten); the dispatcher
looks them up here, and this is where an op's user-facing spelling is decided.

>>> import torch
>>> from named_axes import _registry
>>> rec = _registry.RECORDS[torch.Tensor.__add__]
>>> rec.kind, rec.arity, rec.spelled
('pointwise', 2, 'Tensor.__add__')
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F

from ._plancache import clear_caches

__all__ = ["OpRule", "RECORDS", "ENTRIES", "register", "spellings", "op_name", "is_inplace",
           "is_inplace_name", "rule_while_compiling"]


class OpRule(NamedTuple):
    """What the library knows about one torch function."""
    func: Callable
    impl: Callable      # impl(func, args, kwargs) -> result | NotImplemented
    kind: str           # "pointwise", "reduction", "dimwise", "shape", "matmul", "nn", ...
    inplace: bool       # writes into its first argument
    arity: int | None   # positional tensor operands of a pointwise op (None: any)
    spelled: str        # how users write it (error messages)


RECORDS: dict[Callable, OpRule] = {}   # func -> its record
# func -> (rule, writes into its first argument): the dispatcher's lookup, per op call
ENTRIES: dict[Callable, tuple] = {}
# function name -> ((function, impl, spelling), ...): how rules are found under dynamo
_BY_NAME: dict = {}


def spellings(name: str) -> list:
    """``torch.name``, ``Tensor.name``, ``F.name`` and ``torch.special.name`` (None where
    torch lacks one)."""
    return [getattr(owner, name, None) for owner in (torch, torch.Tensor, F, torch.special)]


def is_inplace(func: Callable) -> bool:
    """Whether ``func`` writes into its first argument (``add_``, ``__iadd__``)."""
    if torch.compiler.is_dynamo_compiling():
        # dynamo can't trace str methods on a function's name: a precomputed lookup
        return getattr(func, "__name__", None) in _INPLACE_NAMES
    return is_inplace_name(getattr(func, "__name__", "") or "")


def is_inplace_name(name: str) -> bool:
    return (name.endswith("_") and not name.endswith("__")) or (
        name.startswith("__i") and name.endswith("__") and name not in (
            "__index__", "__init__", "__iter__", "__int__", "__invert__"))


# The in-place names among torch's functions, Tensor methods and F (``is_inplace`` under
# dynamo): names only, so dynamo never hashes the function.
_INPLACE_NAMES = frozenset(
    n for owner in (torch.Tensor, torch, F) for n in dir(owner) if is_inplace_name(n))


def register(funcs, impl: Callable, *, kind: str = "op", arity: int | None = None) -> None:
    """Use ``impl`` for every function in ``funcs`` (skipping names torch lacks)."""
    for f in funcs:
        if f is None:
            continue
        old = RECORDS[f].impl if f in RECORDS else None
        if old is not None and old is not impl:
            raise ValueError(f"register: {_spell(f)} already has the rule {old!r}, not {impl!r}")
        spelled = _spell(f)   # once, here: dynamo can't trace str methods
        RECORDS[f] = OpRule(f, impl, kind, is_inplace(f), arity, spelled)
        ENTRIES[f] = (impl, RECORDS[f].inplace)
        name = getattr(f, "__name__", None)
        same = tuple(e for e in _BY_NAME.get(name, ()) if e[0] is not f)
        _BY_NAME[name] = same + ((f, impl, spelled),)
    clear_caches()


def rule_while_compiling(func: Callable):
    """``func``'s rule, for code dynamo traces: found by the function's name (a constant),
    as dynamo cannot hash some functions (a sourceless reverse operator such as
    ``Tensor.__rsub__``; a lazily tracked Tensor method)."""
    return _by_name(func)[1]


def _by_name(func: Callable) -> tuple:
    for entry in _BY_NAME.get(getattr(func, "__name__", None), ()):
        if func is entry[0]:
            return entry
    return None, None, None


def op_name(func: Any) -> str:
    """How a user spells ``func``: ``torch.add``, ``Tensor.sum``, ``F.softmax``."""
    if torch.compiler.is_dynamo_compiling():   # (see rule_while_compiling)
        spelled = _by_name(func)[2]
        if spelled is not None:
            return spelled
    rec = RECORDS.get(func)
    return rec.spelled if rec is not None else _spell(func)


def _spell(func: Any) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    qual = getattr(func, "__qualname__", "") or ""
    mod = getattr(func, "__module__", None) or ""
    if qual.startswith(("TensorBase.", "Tensor.")):
        return f"Tensor.{name}"
    if mod.startswith("torch.nn.functional"):
        return f"F.{name}"
    # (the spellings torch's public namespaces give it, before its defining module)
    if getattr(torch, name, None) is func:
        return f"torch.{name}"
    if getattr(F, name, None) is func:
        return f"F.{name}"
    return f"{mod}.{name}" if mod.startswith("torch") else f"torch.{name}"
