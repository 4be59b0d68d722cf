"""Which ``torch.func`` transforms are named_axes's own, and the refusal of the others.

A differentiating ``torch.func`` transform opened *inside* a named program would give a
named value it meets the sum of its instances' cotangents, not JAX's per-instance ones
(docs/guide.md §4): a different answer without an error.  So named values may be built
only under transforms the library opened itself (``nx.grad`` and the rest call torch's
through :func:`owned`, which records their levels), under ``torch.func``'s ``vmap``, or
under a transform opened outside the program.

>>> import torch, named_axes as nx
>>> w = torch.ones(3)
>>> def body(x):                      # x: named, closed over by torch's grad
...     return torch.func.grad(lambda w: (x * w).sum())(w)
>>> f = nx.xmap(body, in_axes=['b', ...], out_axes=['b', ...])
>>> try:
...     f(torch.ones(2, 3))
... except nx.NamedAxisError as e:
...     print(str(e).split(':')[0])
torch.func.grad on named values
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.func

from ._errors import AxisTypeError
from ._torch_private import functorch_level, functorch_transform_kind

__all__ = ["OWN_LEVELS", "owned", "check_foreign", "ORIGINAL", "TORCH_FUNC", "TORCH_VMAP"]

OWN_LEVELS: list = []   # functorch levels opened by the library's own transform calls


def frame_level() -> tuple:
    """``(whether a named frame is bound, the torch.func level when the innermost one
    was entered)``; replaced by ``_env`` (which sits above this module)."""
    return False, None

# transforms after which a named value would mean something else
_DIFFERENTIATING = {"Grad": "grad", "Jvp": "jvp"}


def owned(transform: Callable, direct: bool = False) -> Callable:
    """``transform`` (a ``torch.func`` transform) whose level counts as the library's
    own while the transformed call runs (its backward included: a custom rule's
    backward runs at the level after the function has returned)."""

    @functools.wraps(transform)
    def call(func: Callable, *t_args, **t_kwargs):
        @functools.wraps(func)
        def recorded(*args, **kwargs):
            OWN_LEVELS.append(functorch_level())
            return func(*args, **kwargs)

        if torch.compiler.is_dynamo_compiling():   # dynamo traces the transform itself
            return transform(func, *t_args, **t_kwargs)
        if direct:   # vjp(func, *primals) / jvp(func, primals, tangents): called now
            return _forgetting_levels(transform, recorded, *t_args, **t_kwargs)
        transformed = transform(recorded, *t_args, **t_kwargs)

        @functools.wraps(transformed)
        def run(*args, **kwargs):
            if torch.compiler.is_dynamo_compiling():
                return transformed(*args, **kwargs)
            return _forgetting_levels(transformed, *args, **kwargs)
        return run
    return call


def _forgetting_levels(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``; the levels it records are dropped when it returns."""
    mark = len(OWN_LEVELS)
    try:
        return fn(*args, **kwargs)
    finally:
        del OWN_LEVELS[mark:]


def check_foreign() -> None:
    """Refuse to build a named value under a differentiating ``torch.func`` transform
    the library did not open (called by ``NamedTensor._wrap`` while one is active)."""
    if torch.compiler.is_dynamo_compiling():
        return
    level = functorch_level()
    if level is None or level in OWN_LEVELS:
        return
    in_frame, entered = frame_level()
    if not in_frame or (entered is not None and level <= entered):
        return   # opened outside every named program: it differentiates plain values
    kind = _DIFFERENTIATING.get(functorch_transform_kind())
    if kind is None:
        return
    raise AxisTypeError(
        f"torch.func.{kind} on named values: torch differentiates positionally, so a "
        f"named value it meets would get the sum of its instances' cotangents instead "
        f"of one per instance (JAX's xmap convention). Use nx.{kind} (nx.grad, nx.vjp, "
        f"nx.jvp, nx.jacrev ... take torch.func's arguments), or call "
        f"nx.enable_torch_func() once to make torch.func's transforms do so")


# torch.func's transforms as torch defines them (nx.enable_torch_func may replace the
# attributes of torch.func later; these stay torch's own)
TORCH_FUNC: dict[str, Callable] = {n: getattr(torch.func, n) for n in (
    "grad", "grad_and_value", "vjp", "jvp", "vmap", "jacrev", "jacfwd", "hessian")}
TORCH_VMAP = torch.vmap
# torch's transforms as the library calls them: their levels are the library's own
ORIGINAL: dict[str, Callable] = {n: owned(f, direct=n in ("vjp", "jvp"))
                                 for n, f in TORCH_FUNC.items()}
