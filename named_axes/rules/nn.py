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

import torch
import torch.nn.functional as F

from .._dispatch import ShapeError, result
from .._registry import op_name, register
from .._errors import AxisSpecError
from .._layout import union_names
from .shape import _first_only, _full_layout, _named_sizes
from .._tensor import NamedTensor

_NT = NamedTensor
_T = torch.Tensor

# -- nn ops -------------------------------------------------------------------------

def _layer_norm(func, args, kwargs):
    x = args[0]
    shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
    if type(x) is not _NT or not _first_only(args, kwargs) or len(tuple(shape)) > x.ndim:
        return NotImplemented
    return result(func(x._data, *args[1:], **kwargs), x._names, func)


def _first_named_only(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT or not _first_only(args, kwargs):
        return NotImplemented
    return result(func(x._data, *args[1:], **kwargs), x._names, func)


def _pad(func, args, kwargs):
    """F.pad pads the last positional dims; modes other than constant want the batch folded."""
    x = args[0]
    pad = args[1] if len(args) > 1 else kwargs.get("pad")
    if type(x) is not _NT or not _first_only(args, kwargs) or pad is None:
        return NotImplemented
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    n, p = len(pad) // 2, x.ndim
    if n > p:
        raise ShapeError(f"F.pad: padding {tuple(pad)} pads {n} dims of a value with {p} "
                         f"positional dims (shape {tuple(x.shape)}, named shape {x.named_shape})")
    if mode == "constant":
        return result(func(x._data, *args[1:], **kwargs), x._names, func)
    lead = _named_sizes(x) + tuple(x.shape[:p - n - 1])
    data = x._data.reshape((-1,) + tuple(x.shape[p - n - 1:]))
    out = func(data, *args[1:], **kwargs)
    return result(out.reshape(lead + tuple(out.shape[1:])), x._names, func)


def _fold_batch(spatial: int, unbatched_ok: bool = True):
    """Conv/pool-like ops: fold the named dims into the batch dim, call once, unfold."""
    batched = spatial + 2

    def rule(func, args, kwargs):
        x = args[0]
        if type(x) is not _NT or not _first_only(args, kwargs):
            return NotImplemented
        p = x.ndim
        lead = _named_sizes(x)
        if p == batched:
            data = x._data.reshape((-1,) + tuple(x._data.shape[len(lead) + 1:]))
            keep = lead + (x._data.shape[len(lead)],)
        elif p == batched - 1 and unbatched_ok:
            data = x._data.reshape((-1,) + tuple(x.shape))
            keep = lead
        else:
            return NotImplemented
        out = func(data, *args[1:], **kwargs)

        def unfold(o):
            return o.reshape(keep + tuple(o.shape[1:])) if isinstance(o, _T) else type(o)(map(unfold, o))
        return result(unfold(out), x._names, func)
    return rule


def _sdpa(func, args, kwargs):
    names = ("query", "key", "value", "attn_mask")
    vals = list(args[:4]) + [kwargs.get(n) for n in names[len(args[:4]):]]
    rest = {k: v for k, v in kwargs.items() if k not in names}
    present = [(n, v) for n, v in zip(names, vals) if type(v) is _NT]
    if any(v is not None and v.ndim < 2 for _, v in present if _ != "attn_mask"):
        return NotImplemented
    U = union_names(present, op="F.scaled_dot_product_attention")
    _, phys = _full_layout([v for v in vals if v is not None], "F.scaled_dot_product_attention")
    it = iter(phys)
    laid = [next(it) if v is not None else None for v in vals]
    return result(func(*laid[:3], attn_mask=laid[3], **rest), U, func)


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
    U, phys = _full_layout(tensors, op_name(func), pad=True)
    it = iter(phys)
    laid = [next(it) if isinstance(a, (_NT, _T)) else a for a in args]
    out = result(func(*laid, **{**kw, "reduction": "none"}), U, func)
    if red == "none":
        return out
    k = len(out._names)
    dims = tuple(range(k, out._data.dim()))
    if red == "sum":
        data = out._data.sum(dims) if dims else out._data
    elif red == "mean":
        data = out._data.mean(dims) if dims else out._data
    elif red == "batchmean":
        data = out._data.sum(dims) / (out._data.shape[k] if dims else 1)
    else:
        raise AxisSpecError(f"{op_name(func)}: unknown reduction {red!r}")
    return result(data, out._names, func)


def _class_loss(func, args, kwargs):
    """cross_entropy / nll_loss: fold named dims into the batch dim, reduce per named index."""
    x = args[0]
    t = args[1] if len(args) > 1 else kwargs.get("target")
    if len(args) > 2 or _legacy_reduction(kwargs):
        return NotImplemented
    if type(kwargs.get("weight")) is _NT:
        return NotImplemented
    op = op_name(func)
    red = kwargs.get("reduction", "mean")
    px = x.ndim if type(x) is _NT else x.dim()
    U, (xd, td) = _full_layout([x, t], op)
    k = len(U)
    lead = tuple(xd.shape[:k])
    if px == 1:   # unbatched (C,)
        xf = xd.reshape((-1,) + tuple(xd.shape[k:]))
        tf = td.reshape((-1,) + tuple(td.shape[k:]))
        pos_shape = ()
    else:
        xf = xd.reshape((-1,) + tuple(xd.shape[k + 1:]))
        tf = td.reshape((-1,) + tuple(td.shape[k + 1:]))
        pos_shape = (xd.shape[k],)
    kw = {key: v for key, v in kwargs.items()
          if key not in ("target", "reduction", "size_average", "reduce")}
    loss = func(xf, tf, reduction="none", **kw)
    loss = loss.reshape(lead + pos_shape + tuple(loss.shape[1:]))
    if red == "none":
        return result(loss, U, func)
    dims = tuple(range(k, loss.dim()))
    total = loss.sum(dims) if dims else loss
    if red == "sum":
        return result(total, U, func)
    if red != "mean":
        raise AxisSpecError(f"{op}: unknown reduction {red!r}")
    if td.is_floating_point():   # class probabilities: mean over the batch elements
        n = 1
        for s in loss.shape[k:]:
            n *= s
        return result(total / n, U, func)
    ignore = kwargs.get("ignore_index", -100)
    valid = td != ignore
    w = kwargs.get("weight")
    denom = valid.to(loss.dtype) if w is None else w[torch.where(valid, td, 0)] * valid
    tdims = tuple(range(k, denom.dim()))
    denom = denom.sum(tdims) if tdims else denom
    return result(total / denom, U, func)


def _declare(funcs, impl) -> None:
    register(funcs, impl, kind="nn")


def install() -> None:
    _declare([F.layer_norm, F.rms_norm], _layer_norm)
    _declare([F.pad], _pad)
    _declare([F.embedding, F.one_hot, F.dropout, F.alpha_dropout, torch.dropout,
              torch.alpha_dropout,
              torch.bucketize, torch.nn.functional.pixel_shuffle,
              torch.nn.functional.pixel_unshuffle], _first_named_only)
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
    _declare([F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy,
              F.binary_cross_entropy_with_logits, F.kl_div, F.soft_margin_loss,
              F.poisson_nll_loss, F.gaussian_nll_loss], _losses)
    _declare([F.cross_entropy, F.nll_loss], _class_loss)
