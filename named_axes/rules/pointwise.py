"""Elementwise ops: which torch functions are pointwise, one name per table entry.

Adding an elementwise op is adding its name to a table (every spelling -- torch.name,
Tensor.name, F.name, torch.special.name -- is registered); the kernel that runs them
all is :mod:`named_axes._pointwise`.  tests/test_ops.py is parametrized from these
tables.
"""
from __future__ import annotations

import torch

from .._dispatch import result
from .._pointwise import pointwise_rule
from .._registry import is_inplace_name, register, spellings
from .._tensor import NamedTensor as _NT
from ._common import instance_invalid

_T = torch.Tensor

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
    return pointwise_rule(False)(func, args, kwargs)


# Elementwise conversions that also take a memory_format (or, for ``to``, another tensor):
# their Tensor methods have their own rule (``_convert``), the kernel's otherwise.
CONVERSIONS = "to float double half bfloat16 int long short bool byte char cfloat cdouble".split()
_KEEP_FORMATS = (None, torch.preserve_format, torch.contiguous_format)


def _convert(func, args, kwargs):
    """``x.to(...)``, ``x.float(...)``: elementwise, except that a memory format is a
    layout of the positional dims (channels_last needs 4 of them; the physical tensor has
    more) and that ``x.to(other)`` takes only other's dtype and device (no broadcast; a
    named ``other`` gives every instance its own copy): those run under the vmap
    fallback, after one instance's call is checked."""
    if len(args) == 1 and not kwargs:
        x = args[0]
        if type(x) is _NT and x._names:
            return result(func(x._data), x._names, func)
        return _pointwise_rule(func, args, kwargs)
    unusual = False
    for a in args[1:]:
        if isinstance(a, _UNUSUAL):
            unusual = True
            break
    if kwargs and not unusual:
        fmt = kwargs.get("memory_format")
        unusual = fmt not in _KEEP_FORMATS or any(isinstance(v, _UNUSUAL)
                                                   for v in kwargs.values())
    if unusual:
        other = args[1] if len(args) > 1 else None
        if type(other) is torch.Tensor and func is _T.to:   # its dtype and device only
            args = (args[0], other.device, other.dtype, *args[2:])
        fmt = kwargs.get("memory_format")
        if fmt is None:
            fmt = next((a for a in args[1:] if isinstance(a, torch.memory_format)), None)
        if fmt not in _KEEP_FORMATS or any(isinstance(a, (_NT, torch.Tensor))
                                           for a in (*args[1:], *kwargs.values())):
            instance_invalid(func, args, kwargs)
    return _pointwise_rule(func, args, kwargs)


_UNUSUAL = (torch.Tensor, _NT, torch.memory_format)
_pointwise_rule = pointwise_rule(False)


def install() -> None:
    for name in CONVERSIONS:
        method = getattr(_T, name, None)
        register([method], _convert, kind="convert", arity=1)
        register([f for f in spellings(name) if f is not method], pointwise_rule(False),
                 kind="pointwise", arity=1)
    for names, arity in ((UNARY_POINTWISE, 1), (BINARY_POINTWISE, 2)):
        for name in names:
            register(spellings(name), pointwise_rule(is_inplace_name(name)),
                     kind="pointwise", arity=arity)
    for name in DUNDERS:
        register([getattr(_T, name, None)], pointwise_rule(is_inplace_name(name)),
                 kind="pointwise", arity=1 if name in _UNARY_DUNDERS else 2)
    register(spellings("where"), _where, kind="where")
