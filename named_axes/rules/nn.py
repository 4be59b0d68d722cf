"""Rules for nn.functional ops: normalization, convolution/pooling, attention, losses.

Batch-like ops fold the named dims into their batch dim and call once; losses run
with ``reduction='none'`` on operands expanded to the full named sizes, then reduce
per named index (so each named index gets exactly the loss torch would give it).

>>> import torch, torch.nn.functional as F, named_axes as nx
>>> x = nx.named(torch.zeros(2, 3, 4), {0: 'b'})
>>> F.layer_norm(x, (4,)).named_shape
{'b': 2}
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from .._dispatch import ShapeError, result
from .._registry import op_name, register
from .._errors import AxisSpecError
from .._shape_errors import refuse_shared_writes
from .._layout import union_names
from . import named_ints
from ._common import first_only, given, instance_invalid, on_data, per_tensor
from .shape import _full_layout, _named_sizes
from .._tensor import NamedTensor
from .._torch_private import native_batch_norm_legit

_NT = NamedTensor
_T = torch.Tensor


def _layer_norm(func, args, kwargs):
    x, shape = given(args, kwargs, 0, input=None, normalized_shape=None)
    if not first_only(args, kwargs):
        return NotImplemented
    n = 1 if isinstance(shape, int) else len(shape)
    if n > x.ndim or n and tuple(x._data.shape[-n:]) != (
            (shape,) if isinstance(shape, int) else tuple(shape)):
        instance_invalid(func, args, kwargs)
    return on_data(func, args, kwargs)


def _refuse_write(func, target, x, what: str) -> None:
    """An op that writes ``target`` (plain, shared by every instance of ``x``'s named axes)."""
    refuse_shared_writes(op_name(func), [(target, None, -1)], x.named_shape,
                         f"{what}, a plain tensor")


def _first_named_only(func, args, kwargs):
    x = args[0]
    if func is F.embedding:
        named_ints.check_embedding(func, args, kwargs)
    if not first_only(args, kwargs):
        return NotImplemented
    if func is F.embedding:
        max_norm = args[3] if len(args) > 3 else kwargs.get("max_norm")
        if max_norm is not None:   # renormalizes the rows it reads, in place
            _refuse_write(func, args[1] if len(args) > 1 else kwargs["weight"], x,
                          "the weight (max_norm renormalizes it in place)")
    elif func is F.one_hot:
        n = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        if n == -1:   # inferred per instance: the vmap fallback's loop checks they agree
            return NotImplemented
    return on_data(func, args, kwargs)


def _pad(func, args, kwargs):
    """F.pad pads the last positional dims; modes other than constant want the batch folded."""
    x, pad, mode = given(args, kwargs, 0, input=None, pad=None, mode="constant")
    if not first_only(args, kwargs) or pad is None:
        return NotImplemented
    n, p = len(pad) // 2, x.ndim
    if n > p:
        raise ShapeError(f"F.pad: padding {tuple(pad)} pads {n} dims of a value with {p} "
                         f"positional dims (shape {tuple(x.shape)}, named shape {x.named_shape})")
    if mode == "constant":
        return on_data(func, args, kwargs)
    if not n + 1 <= p <= n + 2:   # torch pads (C, ...) or (N, C, ...) values in these modes
        instance_invalid(func, args, kwargs,
                         f"Padding size {2 * n} is not supported for {p}D input tensor.")
    lead = _named_sizes(x) + tuple(x.shape[:p - n - 1])
    data = _fold(x._data, len(lead))
    out = func(data, *args[1:], **kwargs)
    return result(out.reshape(lead + tuple(out.shape[1:])), x._names, func)


def _fold(data: torch.Tensor, k: int) -> torch.Tensor:
    """``data``'s first ``k`` dims as one (a ``-1`` would be ambiguous where another dim
    is empty)."""
    return data.reshape((math.prod(data.shape[:k]),) + tuple(data.shape[k:]))


def _fold_batch(spatial: int, unbatched_ok: bool = True):
    """Conv/pool-like ops: fold the named dims into the batch dim, call once, unfold."""
    batched = spatial + 2

    def rule(func, args, kwargs):
        x = args[0]
        if not first_only(args, kwargs):
            return NotImplemented
        if func is F.instance_norm:
            _instance_norm_stats(func, x, args, kwargs)
        p = x.ndim
        lead = _named_sizes(x)
        if p == batched:
            data = _fold(x._data, len(lead) + 1)
            keep = lead + (x._data.shape[len(lead)],)
        elif p == batched - 1 and unbatched_ok:
            data = _fold(x._data, len(lead))
            keep = lead
        else:
            return NotImplemented
        out = func(data, *args[1:], **kwargs)
        return result(per_tensor(lambda o: o.reshape(keep + tuple(o.shape[1:])), out), x._names,
                      func)
    return rule


def _instance_norm_stats(func, x, args, kwargs):
    mean, var, _, _, use_input_stats = given(args, kwargs, 1, running_mean=None,
                                             running_var=None, weight=None, bias=None,
                                             use_input_stats=True)
    for k, v in (("running_mean", mean), ("running_var", var)):
        if use_input_stats and v is not None:
            _refuse_write(func, v, x, k)


def _batch_norm_shapes(func, args, kwargs):
    """native_batch_norm and _native_batch_norm_legit read weight, bias and the running
    statistics per channel without checking their sizes (a 0-d weight per instance reads
    past its end): check one instance's shapes, then the vmap fallback runs it."""
    x = args[0]
    names = ("weight", "bias", "running_mean", "running_var")
    c = tuple(x.shape)[1] if len(x.shape) > 1 else None
    for n, v in zip(names, given(args, kwargs, 1, **dict.fromkeys(names))):
        if isinstance(v, (_NT, _T)) and (c is None or tuple(v.shape) != (c,)):
            instance_invalid(func, args, kwargs,
                             f"expected {n} of shape ({c},), the input's channels, but got "
                             f"{tuple(v.shape)} for an input of shape {tuple(x.shape)}")
    return NotImplemented


def _sdpa(func, args, kwargs):
    names = ("query", "key", "value", "attn_mask")
    vals = given(args, kwargs, 0, **dict.fromkeys(names))
    rest = {k: v for k, v in kwargs.items() if k not in names}
    present = [(n, v) for n, v in zip(names, vals) if type(v) is _NT]
    if any(v.ndim < 2 for n, v in present if n != "attn_mask"):
        return NotImplemented
    U = union_names(present, op="F.scaled_dot_product_attention")
    # positional dims broadcast right-aligned, per instance
    _, laid = _full_layout(vals, "F.scaled_dot_product_attention", pad=True)
    return result(func(*laid[:3], attn_mask=laid[3], **rest), U, func)


def _sum_positional(t: _T, k: int) -> _T:
    """``t``'s dims after the ``k`` named ones summed (``t.sum(())`` would sum them all)."""
    dims = tuple(range(k, t.dim()))
    return t.sum(dims) if dims else t


def _legacy_reduction(kwargs) -> bool:
    """size_average= / reduce= given (F.* pass them as None when the caller did not)."""
    return kwargs.get("size_average") is not None or kwargs.get("reduce") is not None


def _losses(func, args, kwargs):
    """Losses with ``reduction=``: elementwise with reduction='none', then reduce per named index."""
    if _legacy_reduction(kwargs) or len(args) > (3 if func is F.gaussian_nll_loss else 2):
        return NotImplemented
    red = kwargs.get("reduction", "mean")
    kw = {k: v for k, v in kwargs.items() if k not in ("size_average", "reduce")}
    if any(type(v) is _NT for v in kw.values()):
        return NotImplemented
    # every operand expanded to the full named sizes: losses check input/target shapes
    tensors = [a for a in args if isinstance(a, (_NT, _T))]
    if any(tuple(t.shape) != tuple(tensors[0].shape) for t in tensors[1:]) or any(
            isinstance(v, _T) and v.dim() > tensors[0].dim() for v in kw.values()):
        if func is F.gaussian_nll_loss:   # var's broadcasting depends on the ranks
            return NotImplemented
        instance_invalid(func, args, kwargs)   # torch's per-instance size check
    U, laid = _full_layout(args, op_name(func), pad=True)
    out = result(func(*laid, **{**kw, "reduction": "none"}), U, func)
    if red == "none":
        return out
    k, data = len(out._names), out._data
    if red == "mean" and data.dim() > k:
        data = data.mean(tuple(range(k, data.dim())))
    elif red == "sum":
        data = _sum_positional(data, k)
    elif red == "batchmean":
        x = args[0]   # torch divides by the input's (not the result's) first size
        data = _sum_positional(data, k) / (x.shape[0] if x.dim() else 1)
    elif red != "mean":
        raise AxisSpecError(f"{op_name(func)}: unknown reduction {red!r}")
    return result(data, out._names, func)


def _class_loss(func, args, kwargs):
    """cross_entropy / nll_loss: fold named dims into the batch dim, reduce per named index."""
    x, t = given(args, kwargs, 0, input=None, target=None)
    if len(args) > 2 or _legacy_reduction(kwargs) or type(kwargs.get("weight")) is _NT:
        return NotImplemented
    op = op_name(func)
    red = kwargs.get("reduction", "mean")
    px = x.ndim if type(x) is _NT else x.dim()
    U, (xd, td) = _full_layout([x, t], op)
    k = len(U)
    b = k + (px > 1)   # the named dims, and the batch dim unless unbatched (C,)
    xf, tf = _fold(xd, b), _fold(td, b)
    kw = {key: v for key, v in kwargs.items()
          if key not in ("target", "reduction", "size_average", "reduce")}
    loss = func(xf, tf, reduction="none", **kw)
    loss = loss.reshape(tuple(xd.shape[:b]) + tuple(loss.shape[1:]))
    if red == "none":
        return result(loss, U, func)
    total = _sum_positional(loss, k)
    if red == "sum":
        return result(total, U, func)
    if red != "mean":
        raise AxisSpecError(f"{op}: unknown reduction {red!r}")
    if td.is_floating_point():   # class probabilities: mean over the batch elements
        return result(total / math.prod(loss.shape[k:]), U, func)
    ignore = kwargs.get("ignore_index", -100)
    valid = td != ignore
    w = kwargs.get("weight")
    denom = valid.to(loss.dtype) if w is None else w[torch.where(valid, td, 0)] * valid
    return result(total / _sum_positional(denom, k), U, func)


_declare = functools.partial(register, kind="nn")


def install() -> None:
    _declare([F.layer_norm, F.rms_norm], _layer_norm)
    _declare([F.pad], _pad)
    _declare([F.embedding, F.one_hot, F.dropout, F.alpha_dropout, torch.dropout,
              torch.alpha_dropout, torch.bucketize, F.pixel_shuffle, F.pixel_unshuffle],
             _first_named_only)
    for n in (1, 2, 3):
        _declare([getattr(F, f"conv{n}d"), getattr(F, f"conv_transpose{n}d"),
                  getattr(F, f"max_pool{n}d"), getattr(F, f"avg_pool{n}d"),
                  getattr(F, f"adaptive_avg_pool{n}d"), getattr(F, f"adaptive_max_pool{n}d"),
                  getattr(F, f"max_pool{n}d_with_indices", None),
                  getattr(F, f"adaptive_max_pool{n}d_with_indices", None),
                  getattr(F, f"lp_pool{n}d", None)], _fold_batch(n))
    _declare([F.group_norm, F.instance_norm, F.local_response_norm], _fold_batch(1, False))
    _declare([F.interpolate, F.upsample], _fold_batch(2, False))
    _declare([F.scaled_dot_product_attention], _sdpa)
    _declare([torch.native_batch_norm, native_batch_norm_legit], _batch_norm_shapes)
    _declare([F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy,
              F.binary_cross_entropy_with_logits, F.kl_div, F.soft_margin_loss,
              F.poisson_nll_loss, F.gaussian_nll_loss], _losses)
    _declare([F.cross_entropy, F.nll_loss], _class_loss)
