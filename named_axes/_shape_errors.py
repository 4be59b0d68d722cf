"""Positional failures of an op on named values, told in the user's shapes.

torch's message names the physical shapes (named axes leading), which the user never
wrote: :func:`positional_failure` re-runs the op on *meta* tensors of one instance's
shapes for torch's message on the user's shapes, and adds each operand's shapes and a fix.

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x: x.reshape(8, 5), in_axes=['batch', ...], out_axes=['batch', ...])
>>> try:
...     f(torch.randn(8, 5))
... except nx.ShapeError as e:
...     print(str(e).splitlines()[0])
Tensor.reshape failed on the positional shapes: shape '[8, 5]' is invalid for input of size 5
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ._errors import AxisSizeError, AxisTypeError, fmt_named_shape
from ._registry import op_name
from ._torch_private import tensor_version

__all__ = ["fmt_at", "fmt_operand", "positional_failure", "on_positional_shapes", "READS_VALUES",
           "refuse_python_values", "refuse_shared_writes"]

_MATMUL_FIX = ("the contracted (last / second-to-last) positional dims must match; named axes "
               "are not positional dims: contract a named axis with lax.pdot or an einsum "
               "with {braces}")
_BROADCAST_FIX = ("positional dims broadcast as in torch, right-aligned; a named axis is matched "
                  "by name, never by position: check the positional shapes, or name the dim "
                  "(nx.named)")
_DIMS_FIX = "dims count positional axes only (x.ndim); name a named axis by its name"
# (substring of torch's message, the fix to suggest)
_FIXES = (
    ("is invalid for input of size",
     "reshape/view see only the positional shape of one instance; named axes are not part "
     "of it. To reshape a named axis, make it positional first (nx.positional(x, name))"),
    ("same reduction dim", _MATMUL_FIX),
    ("cannot be multiplied", _MATMUL_FIX),
    ("broadcast a dimension", _BROADCAST_FIX),
    ("must match the size of tensor", _BROADCAST_FIX),
    ("Sizes of tensors must match",
     "concatenation needs equal positional sizes in every other dim (named axes are matched "
     "by name and need not be listed)"),
    ("out of range", _DIMS_FIX),
    ("which will be updated in place",   # (functorch's, on running statistics)
     "training mode updates the running statistics in place, and every instance of the "
     "named axes shares these plain ones: give them the named axes (one copy per instance, "
     "nx.nn.functional_call with named buffers), or run the module in eval mode"),
)
_DEFAULT_FIX = ("positional shapes are per instance: the named axes are not dims of x.shape. "
                "Check the positional shapes, or make a named axis positional with "
                "nx.positional / lax.all_gather")


def positional_failure(op: str, func: Callable, args: tuple, kwargs: dict,
                       error: BaseException | str) -> str:
    """The message for ``func`` failing on the positional axes of named operands (``error``
    as a str: torch's complaint about one instance, already known)."""
    operands = []
    for key, v in (*enumerate(args), *kwargs.items()):
        for j, leaf in _tensors(v):
            where = f"args[{key}]" if type(key) is int else key
            operands.append(f"  {where}{f'[{j}]' if j is not None else ''}: {fmt_operand(leaf)}")
    torch_says = error if isinstance(error, str) else _unless_named(func, args, kwargs)
    if torch_says is None:   # the positional shapes alone are fine: the named layout is not
        torch_says = f"{_first_line(error)} (on the internal layout, named axes leading)"
    fix = next((f for key, f in _FIXES if key in torch_says), _DEFAULT_FIX)
    return (f"{op} failed on the positional shapes: {torch_says}\n"
            f"operands (positional shape, named shape):\n" + "\n".join(operands)
            + f"\nfix: {fix}")


def fmt_operand(value: Any) -> str:
    """A tensor or named value's positional shape, and its named shape or that it has none."""
    named = getattr(value, "named_shape", None)
    if named is None:
        return f"positional shape {tuple(value.shape)}, unnamed tensor"
    return f"positional shape {tuple(value.shape)}, named shape {fmt_named_shape(named)}"


def _is_tensor(value: Any) -> bool:
    """A tensor or a named value."""
    return isinstance(value, torch.Tensor) or hasattr(value, "named_shape")


def _tensors(value: Any):
    """(index or None, tensor) for a tensor argument or the tensors of a list of them."""
    if _is_tensor(value):
        yield None, value
    elif isinstance(value, (list, tuple)):
        for j, v in enumerate(value):
            if _is_tensor(v):
                yield j, v


def _meta(value: Any) -> Any:
    if _is_tensor(value):
        return torch.empty(tuple(value.shape), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)) and any(_is_tensor(v) for v in value):
        return type(value)(_meta(v) for v in value)
    return value


def _unless_named(func: Callable, args: tuple, kwargs: dict) -> str | None:
    """:func:`on_positional_shapes`, but None for an op given axis names."""
    names = {n for a in (*args, *kwargs.values()) for _, t in _tensors(a)
             for n in getattr(t, "named_shape", ())}
    if names and any(_mentions(v, names) for v in (*args[1:], *kwargs.values())):
        return None
    return on_positional_shapes(func, args, kwargs, (TypeError,))


# what torch raises where an op reads a value that fake tensors do not have (under
# nx.eval_shape and nx.jit's tracing the meta tensors of the check are fake): no complaint
# about the shapes, the op itself decides (by name: the classes live in private modules)
READS_VALUES = ("DataDependentOutputException", "DynamicOutputShapeException",
                "GuardOnDataDependentSymNode")


def on_positional_shapes(func: Callable, args: tuple, kwargs: dict,
                         also: tuple = ()) -> str | None:
    """torch's complaint about one instance's call (meta tensors of the positional shapes;
    errors of the types in ``also`` too), or None: it runs, the op has no meta kernel, or
    it reads values a fake tensor lacks.  (A TypeError, torch's parser refusing the call,
    is otherwise left to the call itself.)"""
    try:
        func(*[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()})
    except (RuntimeError, IndexError, ValueError, *also) as e:
        if isinstance(e, NotImplementedError) or "meta" in str(e).lower() or \
                type(e).__name__ in READS_VALUES:
            return None
        return _first_line(e)
    except Exception:
        return None
    return None


def _mentions(value: Any, names: set) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_mentions(v, names) for v in value)
    return isinstance(value, str) and value in names


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def refuse_python_values(func, per_instance: list) -> None:
    """Refuse a loop whose instances returned different Python values (``torch.equal``
    per row): one value cannot stand for them all."""
    first = per_instance[0] if per_instance else None
    if any(repr(v) != repr(first) for v in per_instance[1:]):
        raise AxisTypeError(
            f"{op_name(func)}: returns a Python value that differs between instances of the "
            f"named axes ({first[0]!r} for the first, {per_instance[-1][0]!r} for the last "
            f"one shown); a Python value has no named axes. Compute a tensor instead (e.g. "
            f"(a == b).all() rather than torch.equal), or make the axes positional first")


def refuse_shared_writes(op: str, saved: list, sizes: dict,
                         what: str = "into a plain tensor argument") -> None:
    """After the first instance: did the op write into a tensor shared by all of them?
    (``saved``: (tensor, its values before or None, its version before) each.)"""
    for t, before, version in saved:
        if tensor_version(t) != version:
            if before is not None:
                with torch.no_grad():
                    t.copy_(before)
            raise AxisSizeError(
                f"{op}: writes {what} of shape {tuple(t.shape)} that every instance of the "
                f"named axes {fmt_named_shape(sizes)} shares; each instance would update it "
                f"in turn. Give that argument the named axes (one copy per instance), or "
                f"reduce them first")


def fmt_at(at: dict) -> str:
    return "[" + ", ".join(f"{n!r}={i}" for n, i in at.items()) + "]"
