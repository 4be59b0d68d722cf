"""The collectives' ``torch.library`` custom ops on physical tensors (``named_axes::psum`` …).

Each op here comes with its fake kernel (shapes only, for make_fx / torch.compile) and
its vmap rule (for torch.func.vmap).  Their gradients and the choice between the op
and its plain torch function (which is also the fake kernel, so all compute alike) live
in :mod:`._ops`.

>>> import torch
>>> from named_axes.lax._opdefs import _all_gather
>>> _all_gather(torch.arange(6.).reshape(2, 3), 0, 1, False).shape
torch.Size([3, 2])
"""
from __future__ import annotations

import string

import torch
from torch.library import custom_op

from .._einsum2 import einsum2_eager

__all__ = ["OPS", "PLAIN_CODE", "REDUCE_METHOD"]

# Each op's name (``psum`` for ``named_axes::psum``) -> the plain torch function it was
# made from: the eager path runs it, and the compile backend inlines it, so inductor
# sees ordinary tensor code.
PLAIN_CODE: dict = {}
OPS: dict = {}   # each op's name -> the registered op


def _named_op(name: str, vmap_dims: int | None = None, fake=None, out_dim: int = 0):
    """``torch.library.custom_op("named_axes::<name>")``, keeping the plain function.

    The plain function is also the fake kernel unless ``fake`` is given; ``vmap_dims``:
    the op's vmap rule is :func:`_batched_vmap` over that many dim arguments, the batch
    dim of its result at ``out_dim``."""
    def make(fn):
        PLAIN_CODE[name] = fn
        op = OPS[name] = custom_op(f"named_axes::{name}", mutates_args=())(fn)
        op.register_fake(fn if fake is None else fake)
        if vmap_dims is not None:
            op.register_vmap(_batched_vmap(op, vmap_dims, out_dim))
        return op
    return make


def _batched_vmap(op, n_dim_args, out_dim=0):
    """A vmap rule for ``op(x, *dim_args, *rest)``: move the batch dim to 0, shift dims;
    the result's batch dim is ``out_dim``."""
    def rule(info, in_dims, x, *args):
        bd = in_dims[0]
        if bd is None:
            return op(x, *args), None
        x = x.movedim(bd, 0)
        args = list(args)
        for i in range(n_dim_args):
            a = args[i]
            args[i] = [d + 1 for d in a] if isinstance(a, (list, tuple)) else a + 1
        return op(x, *args), out_dim
    return rule


# -- reductions over named dims -------------------------------------------------------

# each reduction's name -> the tensor method it is
REDUCE_METHOD = {"psum": "sum", "pmean": "mean", "pmax": "amax", "pmin": "amin"}


def _reduction(method: str):
    def reduce(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        return getattr(x, method)(dims) if dims else x.clone()   # (x.sum([]) sums all)
    return reduce


for _name, _method in REDUCE_METHOD.items():
    _named_op(_name, 1)(_reduction(_method))


# -- all_gather: a named dim becomes a positional one ------------------------------------

@_named_op("all_gather", 2)
def _all_gather(x: torch.Tensor, dim: int, axis: int, tiled: bool) -> torch.Tensor:
    y = x.movedim(dim, axis)
    return (y.flatten(axis, axis + 1) if tiled else y).clone()


# -- psum_scatter: sum a named dim, then split a positional dim into it -------------------

# (its result leads with the scattered dim, so the batch dim follows it)
@_named_op("psum_scatter", 2, out_dim=1)
def _psum_scatter(x: torch.Tensor, dim: int, scatter: int, tiled: bool) -> torch.Tensor:
    n = x.shape[dim]
    y = x.sum(dim)
    s = scatter - 1 if scatter > dim else scatter
    if tiled:
        y = y.unflatten(s, (n, -1))
    return y.movedim(s, 0).contiguous()


# -- all_to_all: swap a named dim with (blocks of) a positional dim ------------------------

@_named_op("all_to_all", 3)
def _all_to_all(x: torch.Tensor, dim: int, split: int, concat: int, tiled: bool) -> torch.Tensor:
    if not tiled:
        return x.transpose(dim, split).movedim(split, concat).clone()
    n = x.shape[dim]
    y = x.unflatten(split, (n, -1)).transpose(dim, split)
    return y.movedim(split, concat).flatten(concat, concat + 1).clone()


# -- ppermute: move slices of a named dim --------------------------------------------------

# (the fake is contiguous, as the real kernel's result: inductor checks strides)
@_named_op("ppermute", 1, fake=lambda x, dim, src, dst: x.new_empty(x.shape))
def _ppermute(x: torch.Tensor, dim: int, src: list[int], dst: list[int]) -> torch.Tensor:
    out = x.new_zeros(x.shape)   # contiguous, as index_copy's result and the fake kernel's
    if not src:
        return out
    s = torch.tensor(src, device=x.device)
    d = torch.tensor(dst, device=x.device)
    return out.index_copy(dim, d, x.index_select(dim, s))


# -- pdot: a two-operand einsum that contracts named dims ---------------------------------

# (the product a person would write, one mm / bmm between views, not torch.einsum's
# decomposition: the compile backend inlines it)
@_named_op("pdot")
def _pdot(x: torch.Tensor, y: torch.Tensor, equation: str) -> torch.Tensor:
    return einsum2_eager(equation, x, y)


def _pdot_vmap(info, in_dims, x, y, equation):
    bx, by = in_dims[0], in_dims[1]
    if bx is None and by is None:
        return _pdot(x, y, equation), None
    lhs, out = equation.split("->")
    tx, ty = lhs.split(",")
    b = next(c for c in string.ascii_letters if c not in equation)
    if bx is not None:
        x, tx = x.movedim(bx, 0), b + tx
    if by is not None:
        y, ty = y.movedim(by, 0), b + ty
    return _pdot(x, y, f"{tx},{ty}->{b}{out}"), 0


_pdot.register_vmap(_pdot_vmap)


@_named_op("axis_index", fake=lambda n, device: torch.empty(n, dtype=torch.int64, device=device))
def _axis_index(n: int, device: torch.device) -> torch.Tensor:
    return torch.arange(n, device=device)
