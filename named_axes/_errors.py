"""The exceptions named_axes raises, and the helpers that spell names and sizes in them.

Every error names the axis, the sizes and the argument or operation involved
(SPEC §6). Size, spec and resource problems are ``ValueError`` subclasses, wrong
types ``TypeError`` subclasses, an unbound axis name an :class:`UnboundAxisError`
(a ``NameError``).
"""
from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping

__all__ = [
    "NamedAxisError",
    "AxisSizeError",
    "AxisSpecError",
    "AxisResourceError",
    "AxisTypeError",
    "UnboundAxisError",
    "fmt_name",
    "fmt_names",
    "fmt_named_shape",
]


class NamedAxisError(Exception):
    """Base class of every error named_axes raises on bad input."""


class AxisSizeError(NamedAxisError, ValueError):
    """One axis name used with two different sizes, or a size that does not fit."""


class AxisSpecError(NamedAxisError, ValueError):
    """A malformed axis mapping, einsum spec, pytree prefix or out_axes placement."""


class AxisResourceError(NamedAxisError, ValueError):
    """A problem with ``axis_resources``, the mesh, or a resource conflict."""


class AxisTypeError(NamedAxisError, TypeError):
    """An argument of the wrong type (a non-hashable name, a non-tensor where one is needed)."""


class UnboundAxisError(NamedAxisError, NameError):
    """A named axis that no enclosing xmap/vmap/pmap binds."""


def fmt_name(name: Hashable) -> str:
    """Spell one axis name as the user wrote it: ``'batch'`` (repr)."""
    return repr(name)


def fmt_names(names: Iterable[Hashable]) -> str:
    """Spell several names: ``'a', 'b'`` (or ``none`` when empty)."""
    names = list(names)
    return ", ".join(repr(n) for n in names) if names else "none"


def fmt_named_shape(named_shape: Mapping[Hashable, int]) -> str:
    """Spell a named shape as a dict literal: ``{'batch': 8, 'hidden': 16}``."""
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in named_shape.items()) + "}"


def describe(value: Any) -> str:
    """A short description of an argument value for error messages."""
    shape = getattr(value, "shape", None)
    named = getattr(value, "named_shape", None)
    if named is not None:
        return f"NamedTensor(shape={tuple(shape)}, named_shape={fmt_named_shape(named)})"
    if shape is not None:
        return f"{type(value).__name__}(shape={tuple(shape)})"
    return type(value).__name__
