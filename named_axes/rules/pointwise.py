"""Elementwise ops: the tables of torch functions that are pointwise, and the one kernel
that runs them all, broadcast by name (docs/guide.md §1).

Adding an elementwise op is adding its name to a table: every spelling (torch, Tensor,
F, torch.special) is registered, and tests/test_ops.py is parametrized from the tables.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.ones(2, 3), 'a ...')
>>> y = nx.named(torch.ones(4, 3), 'b ...')
>>> (x + y).named_shape
{'a': 2, 'b': 4}
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from .._dispatch import ShapeError, check_instance, result
from .._layout import align, align_plan, apply_align, from_numpy, union_names
from .._plancache import PlanCache
from .._registry import is_inplace_name, op_name, register, spellings
from .._tensor import NamedTensor
from ._common import instance_invalid

__all__ = ["pointwise", "inline_operand", "by_name", "NO", "install"]

_NT = NamedTensor
_T = torch.Tensor
_ndarray = np.ndarray


NO = object()   # "this operand does not line up": take the general path


def inline_operand(b, d0: torch.Tensor, names: tuple):
    """The physical operand to pair with ``d0`` (named ``names``) dim for dim: a scalar,
    a NamedTensor with the same layout, or a plain tensor no wider than the positional
    part; ``NO`` for anything else (a sequence holding named values included)."""
    t = type(b)
    if t is _NT:
        bn, bd = b._names, b._data
        if bn is not names and bn != names:
            return NO
        # (one names tuple doesn't promise equal sizes: vmap's chunk_size narrows a dim)
        if bd.shape == d0.shape or (bd.dim() == d0.dim()
                                    and bd.shape[:len(names)] == d0.shape[:len(names)]):
            return bd
        return NO
    if t is float or t is int or t is bool:
        return b
    if isinstance(b, _T):   # (beside a value with no positional dims: promoted as a
        p = d0.dim() - len(names)   # zero-dim tensor, by the general path)
        return b if b.dim() <= p and (p or b.dtype == d0.dtype) else NO
    if t is _ndarray or (t is list or t is tuple) and any(type(e) is _NT for e in b):
        return NO
    return b   # other scalars (complex, None, ...) and plain sequences


class ByNamePlan(NamedTuple):
    """How ``_by_name`` lays out a and b."""
    names: tuple        # the union of their names, a's first
    pairs: tuple        # (i, j): a's dim i and b's dim j carry the same name
    align_a: tuple | None   # align_plan of a into the common layout (None: as it is)
    align_b: tuple | None
    zero_dim: bool      # one of them has no positional dims, the other has some


def _by_name_plan(na: tuple, ndim_a: int, nb: tuple, ndim_b: int) -> ByNamePlan:
    pa, pb = ndim_a - len(na), ndim_b - len(nb)
    U = na + tuple(n for n in nb if n not in na)
    P = max(pa, pb)
    return ByNamePlan(U, tuple((i, nb.index(n)) for i, n in enumerate(na) if n in nb),
                      align_plan(na, pa, U, P), align_plan(nb, pb, U, P), (pa == 0) != (pb == 0))


_BY_NAME = PlanCache("by_name", _by_name_plan)


def by_name(func, a: _NT, b: _NT):
    """``func(a, b)`` broadcast by name (the dispatcher's general path, planned once per
    layout); None when the shared names' sizes differ, to let that path raise (or the
    dtypes differ beside a value with no positional dims, for it to promote them)."""
    da, db = a._data, b._data
    plan = _BY_NAME(a._names, da.dim(), b._names, db.dim())
    U, pairs, plan_a, plan_b, zero_dim = plan
    if zero_dim and da.dtype != db.dtype:
        return None   # (promoted as per instance by the general path)
    sa, sb = da.shape, db.shape
    for i, j in pairs:
        if sa[i] != sb[j]:
            return None
    if plan_a is not None:
        da = apply_align(da, plan_a)
    if plan_b is not None:
        db = apply_align(db, plan_b)
    return result(func(da, db), U, func)


def _pointwise_inplace(func, args, kwargs):
    return pointwise(func, args, kwargs, True)


def pointwise(func: Callable, args: tuple, kwargs: dict, inplace: bool = False) -> Any:
    """Elementwise/broadcasting ops: the result has the union of the operands' names.
    Operands that line up pass as they are (:func:`inline_operand`), two named ones
    broadcast by name (:func:`by_name`), anything else is aligned to the union."""
    a0 = args[0] if args else None
    if type(a0) is _NT and not kwargs:
        d0 = a0._data
        names = a0._names
        n = len(args)
        if n == 1:
            out = func(d0)
            return a0 if inplace else result(out, names, func)
        if n == 2:
            b = args[1]
            p = inline_operand(b, d0, names)
            if p is not NO:
                out = func(d0, p)
                return a0 if inplace else result(out, names, func)
            if not inplace and names and type(b) is _NT and b._names \
                    and not torch.compiler.is_dynamo_compiling():
                out = by_name(func, a0, b)
                if out is not None:
                    return out
        else:
            phys = [d0]
            for b in args[1:]:
                p = inline_operand(b, d0, names)
                if p is NO:
                    break
                phys.append(p)
            else:
                out = func(*phys)
                return a0 if inplace else result(out, names, func)
    return _pointwise_general(func, args, kwargs, inplace)


def _as_instances(args: tuple, kwargs: dict, inplace: bool) -> tuple:
    """The operands as each instance promotes them: a named value with no positional dims
    is a zero-dim tensor to torch's type promotion (it yields to a dimensioned operand of
    its category, and ranks with a zero-dim one), but its physical tensor has the named
    dims; it is cast to the dtype the instance computes in (an in-place target: a copy,
    written back by the caller).  Bool operands (masks, conditions) take no part."""
    items = (*enumerate(args), *kwargs.items())
    zero = [k for k, v in items if type(v) is _NT and v._names and not v.ndim and
            v.dtype != torch.bool]
    if not zero:   # (the common case, cheaply: isinstance on torch.Tensor is not)
        return args, kwargs
    ops = [(k, v) for k, v in items if (type(v) is _NT or isinstance(v, _T)) and
           v.dtype != torch.bool]
    if len({v.dtype for _, v in ops}) < 2:
        return args, kwargs
    dims, zeros = [v.dtype for _, v in ops if v.ndim], [v.dtype for _, v in ops if not v.ndim]
    promoted = [functools.reduce(torch.promote_types, dts) for dts in (dims, zeros) if dts]
    to = _combine_categories(*promoted) if len(promoted) == 2 else promoted[0]

    def cast(k, v):   # (an in-place target computes in ``to`` too, if torch may cast back)
        return v.to(to) if k in zero and (k or not inplace or torch.can_cast(to, v.dtype)) else v
    return (tuple(cast(k, v) for k, v in enumerate(args)),
            {k: cast(k, v) for k, v in kwargs.items()})


_COMPLEX_OF = {torch.float16: torch.complex32, torch.bfloat16: torch.complex64,
               torch.float32: torch.complex64, torch.float64: torch.complex128}


def _combine_categories(higher: torch.dtype, lower: torch.dtype) -> torch.dtype:
    """torch's result dtype of dimensioned operands promoted to ``higher`` and zero-dim
    ones promoted to ``lower`` (c10's ``combine_categories``; in Python, as dynamo
    cannot trace ``torch.result_type``)."""
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return _COMPLEX_OF.get(higher, lower) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher == torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def _pointwise_general(func, args, kwargs, inplace):
    given = args[0] if inplace else None
    args, kwargs = _as_instances(args, kwargs, inplace)
    if kwargs.get("memory_format") in _CHANNELS_LAST and type(args[0]) is _NT and args[0]._names:
        return _channels_last(func, args, kwargs)
    for a in args:   # numpy operands act as tensors (torch's in-place ops ignore them)
        if type(a) is _ndarray:
            args = tuple(from_numpy(v) if type(v) is _ndarray else v for v in args)
            break
    operands = []
    P = 0
    for key, a in (*enumerate(args), *kwargs.items()):
        if type(a) is _NT:
            if key == "out":
                return NotImplemented
            operands.append((f"args[{key}]" if type(key) is int else key, a))
            P = max(P, a.ndim)
        elif isinstance(a, _T):
            P = max(P, a.dim())
        elif isinstance(a, (list, tuple)) and any(isinstance(e, _NT) for e in a):
            return NotImplemented
    U = union_names(operands, op=func)
    if inplace:
        target = args[0]
        if not isinstance(target, _NT):
            return NotImplemented
        U = target._names   # (dispatch ran check_inplace)
        if target.ndim < P:
            raise ShapeError(
                f"{op_name(func)}: in-place update of a value with positional shape "
                f"{tuple(target.shape)} by operands with {P} positional dims")

    def phys(a):
        if type(a) is _NT:
            return align(a._data, a._names, a._data.dim() - len(a._names), U, P)
        return a

    try:
        out = func(*[phys(a) for a in args], **{k: phys(v) for k, v in kwargs.items()})
    except RuntimeError as e:   # a zero-dim value per instance (fill_, masked_fill): the
        if "value tensor" in str(e) and any(   # physical one has the named dims
                type(v) is _NT and not v.ndim for v in (*args[1:], *kwargs.values())):
            return NotImplemented
        raise
    if inplace:
        if args[0] is not given:   # (computed in a copy of another dtype: _as_instances)
            given._data.copy_(args[0]._data)
        return given
    return result(out, U, func)


UNARY_POINTWISE = """
abs absolute acos arccos acosh arccosh angle asin arcsin asinh arcsinh atan arctan atanh
arctanh bitwise_not ceil clamp clip conj conj_physical cos cosh deg2rad digamma erf erfc
erfinv exp exp2 expm1 fix floor frac lgamma log log10 log1p log2 logit i0 isnan isinf
isfinite isposinf isneginf isreal nan_to_num neg negative positive rad2deg reciprocal
round rsqrt sigmoid sign sgn signbit sin sinc sinh sqrt square tan tanh trunc
relu relu6 gelu silu mish elu selu celu leaky_relu hardtanh hardsigmoid hardswish
hardshrink softshrink tanhshrink softplus softsign logsigmoid threshold rrelu
expit erfcx log_ndtr ndtr ndtri xlog1py entr i0e i1 i1e polygamma multigammaln
bessel_j0 bessel_j1 bessel_y0 bessel_y1 modified_bessel_i0 modified_bessel_k0
bernoulli
zeros_like ones_like empty_like full_like rand_like randn_like randint_like
clone detach contiguous cpu cuda
type type_as requires_grad_ detach_ zero_ fill_ normal_ uniform_ bernoulli_ exponential_
geometric_ log_normal_ cauchy_ random_ clamp_ clamp_min clamp_max nan_to_num_ sign_ abs_
neg_ exp_ log_ sqrt_ relu_ sigmoid_ tanh_ round_ floor_ ceil_ trunc_ frac_ reciprocal_
pin_memory resolve_conj resolve_neg
""".split()

BINARY_POINTWISE = """
add sub subtract mul multiply div divide true_divide floor_divide remainder fmod pow
float_power atan2 arctan2 hypot maximum minimum fmax fmin copysign nextafter ldexp
logaddexp logaddexp2 bitwise_and bitwise_or bitwise_xor bitwise_left_shift
bitwise_right_shift logical_and logical_or logical_xor logical_not eq ne lt le gt ge
greater greater_equal less less_equal not_equal heaviside isclose lerp addcmul addcdiv
masked_fill xlogy rsub gcd lcm
add_ sub_ mul_ div_ pow_ lerp_ addcmul_ addcdiv_ masked_fill_ copy_ clamp_min_ clamp_max_
remainder_ fmod_ atan2_ hypot_ logical_and_ logical_or_ eq_ ne_
""".split()

DUNDERS = """
__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__
__rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __and__ __rand__ __or__ __ror__ __xor__
__rxor__ __lshift__ __rlshift__ __rshift__ __rrshift__ __eq__ __ne__ __lt__ __le__ __gt__
__ge__ __neg__ __pos__ __abs__ __invert__ __div__ __rdiv__
__iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __imod__ __ipow__ __iand__ __ior__
__ixor__ __ilshift__ __irshift__ __idiv__
""".split()


_UNARY_DUNDERS = ("__neg__", "__pos__", "__abs__", "__invert__")


def _where(func, args, kwargs):
    """``torch.where(cond, x, y)`` is pointwise; ``torch.where(cond)`` alone is
    ``nonzero(as_tuple=True)``, whose length depends on the values: that one runs per
    instance of the named axes (the dispatcher's loop, which refuses unequal lengths)."""
    if len(args) + len(kwargs) == 1:
        return NotImplemented
    return pointwise(func, args, kwargs)


# Elementwise conversions that also take a memory_format (or, for ``to``, another tensor):
# their Tensor methods have their own rule (``_convert``), the kernel's otherwise.
CONVERSIONS = "to float double half bfloat16 int long short bool byte char cfloat cdouble".split()
_KEEP_FORMATS = (None, torch.preserve_format, torch.contiguous_format)
_CHANNELS_LAST = (torch.channels_last, torch.channels_last_3d)


def _channels_last(func, args, kwargs):
    """A channels-last ``memory_format`` (a layout of the positional dims) on a named
    value: torch's check of one instance's rank, then the op with the contiguous format
    on the view that moves each instance's channel dim (its positional dim 1) last, so
    that every instance is laid out channels-last (the named dims outermost)."""
    check_instance(func, args, kwargs)
    x = args[0]
    k, d = len(x._names), x._data
    perm = (*range(k + 1), *range(k + 2, d.dim()), k + 1)
    out = func(d.permute(perm), *args[1:], **{**kwargs, "memory_format": torch.contiguous_format})
    out = out.contiguous()   # (``to`` keeps a view it finds in the format torch suggests)
    return result(out.permute(sorted(range(d.dim()), key=perm.__getitem__)), x._names, func)


def _convert(func, args, kwargs):
    """``x.to(...)``, ``x.float(...)``: elementwise, except a memory format (a layout of
    the positional dims) and ``x.to(other)`` (other's dtype and device only): those run
    under the vmap fallback, after one instance's call is checked."""
    if len(args) == 1 and not kwargs:
        x = args[0]
        if type(x) is _NT and x._names:
            return result(func(x._data), x._names, func)
        return pointwise(func, args, kwargs)
    if kwargs.get("memory_format") not in _KEEP_FORMATS or any(
            isinstance(a, _UNUSUAL) for a in (*args[1:], *kwargs.values())):
        other = args[1] if len(args) > 1 else None
        if type(other) is torch.Tensor and func is _T.to:   # its dtype and device only
            args = (args[0], other.device, other.dtype, *args[2:])
        fmt = kwargs.get("memory_format")
        if fmt is None:
            fmt = next((a for a in args[1:] if isinstance(a, torch.memory_format)), None)
        if fmt not in (*_KEEP_FORMATS, *_CHANNELS_LAST) or any(isinstance(a, (_NT, torch.Tensor))
                                           for a in (*args[1:], *kwargs.values())):
            instance_invalid(func, args, kwargs)
    return pointwise(func, args, kwargs)


_UNUSUAL = (torch.Tensor, _NT, torch.memory_format)


_RULES = {False: pointwise, True: _pointwise_inplace}   # (in place: the target is returned)


def install() -> None:
    for name in CONVERSIONS:
        method = getattr(_T, name, None)
        register([method], _convert, kind="convert", arity=1)
        register([f for f in spellings(name) if f is not method], pointwise,
                 kind="pointwise", arity=1)
    for names, arity in ((UNARY_POINTWISE, 1), (BINARY_POINTWISE, 2)):
        for name in names:
            register(spellings(name), _RULES[is_inplace_name(name)],
                     kind="pointwise", arity=arity)
    for name in DUNDERS:
        register([getattr(_T, name, None)], _RULES[is_inplace_name(name)],
                 kind="pointwise", arity=1 if name in _UNARY_DUNDERS else 2)
    register(spellings("where"), _where, kind="where")
