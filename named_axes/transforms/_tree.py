"""Crossing the torch.func boundary with named values.

torch.func only sees plain tensors, so a NamedTensor crosses it as its physical
tensor; its names travel beside it (they are static) and are put back on the far side.

>>> import torch, named_axes as nx
>>> from named_axes.transforms._tree import unbox, rebox
>>> leaves, spec, names = unbox({'w': nx.named(torch.ones(2, 3), {0: 'b'})})
>>> leaves[0].shape, names
(torch.Size([2, 3]), [('b',)])
>>> rebox(leaves, spec, names)['w'].named_shape
{'b': 2}
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable

import torch

from .._engine import handed
from .._errors import AxisSpecError, ShapeError
from .._layout import align
from .._levels import ORIGINAL as _functorch
from .._tensor import NamedTensor
from .._torch_private import tree_flatten, tree_unflatten

__all__ = ["unbox", "rebox", "box_leaf", "named_axes_of", "expand_over",
           "align_like", "mapped_over", "Hidden"]

_NT = NamedTensor


class Hidden:
    """An axis name no user can write: unique per object, shown as ``label``."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return self.label


def unbox(tree: Any) -> tuple[list, Any, list]:
    """Flatten ``tree``; NamedTensor leaves become physical tensors.

    Returns ``(leaves, spec, names)`` where ``names[i]`` is the names tuple of leaf i,
    or None for a leaf that was not a NamedTensor.
    """
    leaves, spec = tree_flatten(tree)
    names = [leaf._names if type(leaf) is _NT else None for leaf in leaves]
    return [leaf._data if type(leaf) is _NT else leaf for leaf in leaves], spec, names


def box_leaf(leaf: Any, names: tuple | None) -> Any:
    """One leaf back: a NamedTensor when it had names (even an empty tuple)."""
    if names is None or not isinstance(leaf, torch.Tensor):
        return leaf
    return NamedTensor._wrap(leaf, names)


def rebox(leaves: Iterable, spec: Any, names: list) -> Any:
    """Inverse of :func:`unbox`."""
    return tree_unflatten([box_leaf(x, n) for x, n in zip(leaves, names)], spec)


_PLAIN = (torch.Tensor, torch.nn.Parameter, int, float, bool, complex, str, type(None))


def named_axes_of(tree: Any) -> dict:
    """Union of the named shapes of the NamedTensor leaves of ``tree`` (first seen order;
    a tuple's tensor and scalar members need no pytree walk)."""
    sizes: dict = {}
    for a in tree if type(tree) is tuple else (tree,):
        if type(a) in _PLAIN:
            continue
        for leaf in (a,) if type(a) is _NT else tree_flatten(a)[0]:
            if type(leaf) is _NT:
                for n, s in zip(leaf._names, leaf._data.shape):
                    sizes.setdefault(n, s)
    return sizes


def expand_over(leaf: Any, sizes: dict, skip: Iterable[Hashable] = ()) -> Any:
    """``leaf`` broadcast along the axes of ``sizes`` it lacks (except ``skip``).

    This is how a value replicated along a named axis gets a per-example gradient: the
    copy made here is what torch.func differentiates, one slice per named index.
    """
    skip = set(skip)
    if type(leaf) is _NT:
        data, names = leaf._data, leaf._names
    elif isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
        data, names = leaf, ()
    else:
        return leaf
    extra = tuple(n for n in sizes if n not in names and n not in skip)
    if not extra:
        return leaf
    data = handed(data, names, extra + names)   # (a mesh engine's sums, :mod:`.._engine`)
    data = data.expand(tuple(sizes[n] for n in extra) + tuple(data.shape))
    return NamedTensor._wrap(data, extra + names)


def align_like(value: Any, like: torch.Tensor, names: tuple | None, what: str,
               lead: tuple = (), lead_sizes: tuple = ()) -> Any:
    """A (co)tangent laid out like the physical tensor ``like`` named ``names`` (behind
    the batch axes ``lead`` of sizes ``lead_sizes``, when mapped over); None stays None."""
    if value is None:
        return None
    names = names or ()
    shape = tuple(lead_sizes) + tuple(like.shape)
    if isinstance(value, NamedTensor):
        extra = [n for n in value._names if n not in names and n not in lead]
        if extra:
            raise AxisSpecError(f"{what}: the value has named axis {extra[0]!r} that the "
                                f"primal/output (named axes {names}) lacks")
        own = tuple(value._names)
        data = align(value._data, own, value.ndim, tuple(lead) + names, like.dim() - len(names))
    else:
        data, own = torch.as_tensor(value, dtype=like.dtype, device=like.device), ()
    # on a mesh, a (co)tangent lacking an axis split over ranks meets the primal's split
    # instances here: its own gradient (an outer derivative) sums their parts over the
    # ranks (Engine.broadcast)
    data = handed(data, own, tuple(lead) + names)
    if data.shape == shape:
        return data
    try:
        return data.expand(shape)
    except RuntimeError:
        pos = tuple(getattr(value, "shape", ()))
        raise ShapeError(f"{what}: positional shape {pos} does not broadcast to the "
                         f"primal/output's {tuple(like.shape)[len(names):]}") from None


def mapped_over(fn: Callable, depth: int) -> Callable:
    """``fn`` mapped (``torch.func.vmap``) over ``depth`` leading dims of every argument:
    the batch axes a pullback or a jvp is mapped over (one level per axis)."""
    for _ in range(depth):
        fn = _functorch["vmap"](fn)
    return fn
