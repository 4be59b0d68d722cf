"""The exceptions named_axes raises, and the helpers that spell names and sizes in them.

Every error names the axis, the sizes and the argument or operation involved
(docs/guide.md §6). Size, spec and resource problems are ``ValueError`` subclasses, wrong
types ``TypeError`` subclasses, an unbound axis name an :class:`UnboundAxisError`
(a ``NameError``).
"""
from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping

__all__ = ["NamedAxisError", "AxisSizeError", "ShapeError", "AxisSpecError",
           "AxisResourceError", "AxisTypeError", "UnboundAxisError", "RandomnessError",
           "fmt_spec", "fmt_names", "fmt_named_shape", "unbound_message", "size_clash_message",
           "resource_clash_message"]


class NamedAxisError(Exception):
    """Base class of every error named_axes raises on bad input."""


class AxisSizeError(NamedAxisError, ValueError):
    """One axis name used with two different sizes, or a size that does not fit."""


class ShapeError(AxisSizeError, RuntimeError):
    """A positional shape problem inside an op on NamedTensors (also a RuntimeError, like torch's)."""


class AxisSpecError(NamedAxisError, ValueError):
    """A malformed axis mapping, einsum spec, pytree prefix or out_axes placement."""


class AxisResourceError(NamedAxisError, ValueError):
    """A problem with ``axis_resources``, the mesh, or a resource conflict."""


class AxisTypeError(NamedAxisError, TypeError):
    """An argument of the wrong type (a non-hashable name, a non-tensor where one is needed)."""


class UnboundAxisError(NamedAxisError, NameError):
    """A named axis that no enclosing xmap/vmap/pmap binds."""


class RandomnessError(NamedAxisError, RuntimeError):
    """A random op that ``nx.vmap``'s ``randomness`` refuses (a RuntimeError, like torch's)."""


def fmt_spec(obj: Any) -> str:
    """``repr(obj)`` of a spec or name from the user, but an array in it (a tensor passed
    where a spec or a name belongs) shown by its type and shape, never its values.

    >>> fmt_spec(['i', ...])
    "['i', Ellipsis]"
    >>> import torch; fmt_spec(({0: torch.zeros(20, 30)}, 'i'))
    "({0: <Tensor of shape (20, 30)>}, 'i')"
    """
    if not _has_array(obj):
        return repr(obj)
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{fmt_spec(k)}: {fmt_spec(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(map(fmt_spec, obj)) + "]"
    if isinstance(obj, tuple):
        head = type(obj).__name__ if hasattr(obj, "_fields") else ""
        tail = "," if len(obj) == 1 and not head else ""
        return f"{head}(" + ", ".join(map(fmt_spec, obj)) + f"{tail})"
    return f"<{type(obj).__name__} of shape {tuple(obj.shape)}>"


def _has_array(obj: Any) -> bool:
    if isinstance(obj, (list, tuple)):
        return any(map(_has_array, obj))
    if isinstance(obj, dict):
        return any(_has_array(k) or _has_array(v) for k, v in obj.items())
    return hasattr(obj, "shape") and hasattr(obj, "dtype") and len(obj.shape) > 0


def fmt_names(names: Iterable[Hashable]) -> str:
    """Spell several names: ``'a', 'b'`` (or ``none`` when empty)."""
    return ", ".join(fmt_spec(n) for n in names) or "none"


def fmt_named_shape(named_shape: Mapping[Hashable, int]) -> str:
    """Spell a named shape as a dict literal: ``{'batch': 8, 'hidden': 16}``."""
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in named_shape.items()) + "}"


def unbound_message(name: Hashable, bound: Iterable[Hashable], *, op: str | None = None,
                    carried: Iterable[Hashable] | None = None) -> str:
    """The one spelling of "this name is not bound" (docs/guide.md §6), for every raiser to share.

    >>> unbound_message('foo', {'batch': 2, 'hidden': 3})
    "axis 'foo' is not bound here (bound: 'batch', 'hidden')"
    >>> unbound_message('foo', {}, op='Tensor.sum', carried=('a',))
    "Tensor.sum: axis 'foo' is not bound here (bound: none); the value's named axes are 'a'"
    """
    msg = f"axis {fmt_spec(name)} is not bound here (bound: {fmt_names(bound)})"
    if op:
        msg = f"{op}: {msg}"
    if carried is not None:
        msg += f"; the value's named axes are {fmt_names(carried)}"
    return msg


def size_clash_message(name: Hashable, size_a: int, where_a: str, size_b: int,
                       where_b: str) -> str:
    """The one spelling of "one name, two sizes" (docs/guide.md §6).

    >>> size_clash_message('i', 5, 'argument 0, dim 0', 7, 'argument 1, dim 0')
    "inconsistent sizes for axis 'i': 5 (argument 0, dim 0) vs 7 (argument 1, dim 0)"
    """
    return f"inconsistent sizes for axis {name!r}: {size_a} ({where_a}) vs {size_b} ({where_b})"


def resource_clash_message(where: str, a: Hashable, b: Hashable, resources: Mapping, *,
                           how: str = "", kind: str = "resource") -> str:
    """The one spelling of "two axes mapped to one resource would meet in one value"
    (docs/guide.md §5); ``resources`` maps each axis to its resource or tuple of them.

    >>> resource_clash_message('Tensor.__mul__', 'b', 'a', {'a': 'x', 'b': ('y', 'x')})
    "Tensor.__mul__: axes 'a' and 'b' are both mapped to resource 'x' and would meet in one value; reduce one of them first, or map them to different mesh axes"
    """
    a, b = sorted((a, b), key=repr)
    ra, rb = (r if isinstance(r, (tuple, list)) else (r,) for r in (resources[a], resources[b]))
    shared = next((r for r in ra if r in rb), ra[0])
    how = f" ({how})" if how else ""
    return (f"{where}: axes {a!r} and {b!r} are both mapped to {kind} {shared!r} and would meet "
            f"in one value{how}; reduce one of them first, or map them to different mesh axes")
