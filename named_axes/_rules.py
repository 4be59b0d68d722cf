"""Rule tables: which torch functions take which fast path.

Each table lists functions; :func:`install` registers a rule for every entry
(torch function, Tensor method and ``torch.nn.functional`` spelling alike).  Adding
an op is adding a name to a table; tests are parametrized from these tables.
Functions not listed run under the vmap fallback (:mod:`named_axes._dispatch`).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ._dispatch import check_conflicts, op_name, pointwise, register, result, wrap
from ._env import _state as _env_state
from ._env import bound_axes, current_frame
from ._errors import AxisSpecError, AxisTypeError, UnboundAxisError, unbound_message
from ._layout import align_plan, apply_align, expand_to
from ._plancache import PlanCache
from ._switches import FASTPATH
from ._tensor import NamedTensor

_NT = NamedTensor
_T = torch.Tensor
_wrap_nt = NamedTensor._wrap


def _get(owner, name):
    return getattr(owner, name, None)


def _spellings(name: str) -> list:
    """torch.name, Tensor.name, F.name and torch.special/linalg spellings, where they exist."""
    return [_get(torch, name), _get(_T, name), _get(F, name), _get(torch.special, name)]


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------

UNARY_POINTWISE = """
abs absolute acos arccos acosh arccosh angle asin arcsin asinh arcsinh atan arctan atanh
arctanh bitwise_not ceil clamp clip conj conj_physical cos cosh deg2rad digamma erf erfc
erfinv exp exp2 expm1 fix floor frac lgamma log log10 log1p log2 logit i0 isnan isinf
isfinite isposinf isneginf isreal nan_to_num neg negative positive rad2deg reciprocal
round rsqrt sigmoid sign sgn signbit sin sinc sinh sqrt square tan tanh trunc
relu relu6 gelu silu mish elu selu celu leaky_relu hardtanh hardsigmoid hardswish
hardshrink softshrink tanhshrink softplus softsign logsigmoid threshold rrelu
expit erfcx log_ndtr ndtr ndtri xlog1py entr i0e i1 i1e polygamma multigammaln
bernoulli
zeros_like ones_like empty_like full_like rand_like randn_like randint_like
clone detach contiguous float double half bfloat16 int long short bool byte char cpu cuda to
type type_as requires_grad_ detach_ zero_ fill_ normal_ uniform_ bernoulli_ exponential_
geometric_ log_normal_ cauchy_ random_ clamp_ clamp_min clamp_max nan_to_num_ sign_ abs_
neg_ exp_ log_ sqrt_ relu_ sigmoid_ tanh_ round_ floor_ ceil_ trunc_ frac_ reciprocal_
pin_memory cfloat cdouble resolve_conj resolve_neg
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


def _inplace_name(name: str) -> bool:
    return (name.endswith("_") and not name.endswith("__")) or (
        name.startswith("__i") and name != "__invert__")


def _same_layout(a: _NT, d0: torch.Tensor, names: tuple) -> bool:
    """Does NamedTensor ``a`` line up with ``d0`` (named ``names``) dim for dim?"""
    an = a._names
    if an is not names and an != names:
        return False
    ad = a._data
    # equal names need equal sizes: a shared names tuple doesn't promise that (vmap's
    # chunk_size narrows a named dim and keeps the tuple), so the sizes are compared too
    return ad.shape == d0.shape or (ad.dim() == d0.dim()
                                    and ad.shape[:len(names)] == d0.shape[:len(names)])


_NO = object()   # "this operand does not line up": take the general path


def _inline_operand(b, d0: torch.Tensor, names: tuple):
    """The physical operand to pair with ``d0`` (named ``names``) dim for dim: a scalar,
    a NamedTensor with the same layout, or a plain tensor no wider than the positional
    part; ``_NO`` for anything else."""
    t = type(b)
    if t is _NT:
        return b._data if _same_layout(b, d0, names) else _NO
    if t is float or t is int or t is bool:
        return b
    if isinstance(b, _T) and b.dim() <= d0.dim() - len(names):
        return b
    return _NO


def _finish(out, names: tuple, func):
    """Wrap a pointwise result; the resource-conflict check only when a rule is in force."""
    if _env_state.conflicts and len(names) > 1:
        check_conflicts(names, op_name(func))
    return _wrap_nt(out, names) if type(out) is _T else wrap(out, names)


class ByNamePlan(NamedTuple):
    """How ``_by_name`` lays out a and b."""
    names: tuple        # the union of their names, a's first
    pairs: tuple        # (i, j): a's dim i and b's dim j carry the same name
    align_a: tuple | None   # align_plan of a into the common layout (None: as it is)
    align_b: tuple | None


def _by_name_plan(na: tuple, ndim_a: int, nb: tuple, ndim_b: int) -> ByNamePlan:
    pa, pb = ndim_a - len(na), ndim_b - len(nb)
    U = na + tuple(n for n in nb if n not in na)
    P = max(pa, pb)
    return ByNamePlan(U, tuple((i, nb.index(n)) for i, n in enumerate(na) if n in nb),
                      align_plan(na, pa, U, P), align_plan(nb, pb, U, P))


_BY_NAME = PlanCache("by_name", _by_name_plan)


def _by_name(func, a: _NT, b: _NT):
    """``func(a, b)`` broadcast by name (the dispatcher's general path, planned once per
    layout); None when the shared names' sizes differ, to let that path raise."""
    da, db = a._data, b._data
    plan = _BY_NAME(a._names, da.dim(), b._names, db.dim())
    U, pairs, plan_a, plan_b = plan
    sa, sb = da.shape, db.shape
    for i, j in pairs:
        if sa[i] != sb[j]:
            return None
    if plan_a is not None:
        da = apply_align(da, plan_a)
    if plan_b is not None:
        db = apply_align(db, plan_b)
    return _finish(func(da, db), U, func)


def _pointwise(func, args, kwargs):
    """The RULES entry of out-of-place elementwise ops: the 1- and 2-argument cases
    inline, everything else through :func:`named_axes._dispatch.pointwise`."""
    n = len(args)
    if n and n <= 2 and not kwargs and FASTPATH:
        a0 = args[0]
        if type(a0) is _NT:
            d0 = a0._data
            names = a0._names
            if n == 1:
                return _finish(func(d0), names, func)
            b = args[1]
            phys = _inline_operand(b, d0, names)
            if phys is not _NO:
                return _finish(func(d0, phys), names, func)
            t = type(b)
            if t is _NT:
                if names and b._names and not torch.compiler.is_compiling():
                    out = _by_name(func, a0, b)
                    if out is not None:
                        return out
            elif not isinstance(b, _T) and t is not list and t is not tuple:
                return _finish(func(d0, b), names, func)   # other scalars (complex, ...)
    return pointwise(func, args, kwargs)


def _pointwise_inplace(func, args, kwargs):
    """``_pointwise`` for in-place ops: the target keeps its names and is returned."""
    if len(args) == 2 and not kwargs and FASTPATH:
        a0, b = args
        if type(a0) is _NT:
            phys = _inline_operand(b, a0._data, a0._names)
            if phys is not _NO:
                func(a0._data, phys)
                return a0
    return pointwise(func, args, kwargs, True)


def _pointwise_rule(inplace: bool):
    return _pointwise_inplace if inplace else _pointwise


def _where(func, args, kwargs):
    """``torch.where(cond, x, y)`` is pointwise; ``torch.where(cond)`` alone is
    ``nonzero(as_tuple=True)``, whose length depends on the values: that one runs per
    instance of the named axes (the dispatcher's loop, which refuses unequal lengths)."""
    if len(args) + len(kwargs) == 1:
        return NotImplemented
    return _pointwise(func, args, kwargs)


def install_pointwise() -> None:
    for name in UNARY_POINTWISE + BINARY_POINTWISE:
        register(_spellings(name), _pointwise_rule(_inplace_name(name)))
    for name in DUNDERS:
        f = getattr(_T, name, None)
        if f is not None:
            register([f], _pointwise_rule(_inplace_name(name)))
    register(_spellings("where"), _where)


# ---------------------------------------------------------------------------
# dims: translating an int or a name into a physical dim
# ---------------------------------------------------------------------------

def _spelled(op) -> str:
    """``op`` as users spell it; rules pass the torch function itself so that the spelling
    (a dict lookup keyed by the function, which dynamo on torch 2.9 cannot trace) happens
    only when an error is raised."""
    return op if isinstance(op, str) else op_name(op)


def _norm_pos(d: int, p: int, op) -> int:
    if not -max(p, 1) <= d < max(p, 1):
        raise _AxisIndexError(
            f"{_spelled(op)}: dimension {d} is out of range for a value with {p} positional "
            f"dimension(s) (expected one in [{-max(p, 1)}, {max(p, 1) - 1}], or an axis name)"
        )
    return d + p if d < 0 else d


class _AxisIndexError(AxisSpecError, IndexError):
    """A positional dim out of range (a ValueError subclass, and an IndexError like torch's)."""


def _with_names(x: _NT, wanted, op) -> _NT:
    """``x`` broadcast along every wanted name it lacks but the environment binds."""
    for n in wanted:
        if n not in x._names:
            try:
                if type(n) is not str:     # dynamo (torch 2.9) can't trace hash(str)
                    hash(n)
            except TypeError:
                raise AxisTypeError(
                    f"{_spelled(op)}: {n!r} is neither a dimension nor an axis name") from None
            if n not in bound_axes():
                raise UnboundAxisError(
                    unbound_message(n, bound_axes(), op=_spelled(op), carried=x._names))
            x = expand_to(x, n, op=_spelled(op))
    return x


def _check_engines(names, op) -> None:
    """An engine that splits an axis (e.g. SerialLoop chunks) vets ops that mix values along it."""
    for frame in _env_state.stack:
        if frame.engine is not None:
            break
    else:
        return  # no engine in scope (plain xmap): nothing to ask
    for n in names:
        frame = current_frame(n)
        check = getattr(frame.engine, "check_named_op", None) if frame is not None else None
        if check is not None:
            check(_spelled(op), tuple(names))


def translate_dims(x: _NT, dims, op):
    """Map a dim spec (int, name, or tuple mixing both) to physical dims.

    Returns ``(x', physical dims list, named dims list)`` where ``x'`` may be ``x``
    broadcast along bound names it lacked.
    """
    items = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    names = [d for d in items if not isinstance(d, int)]
    if names:
        x = _with_names(x, names, op)
        _check_engines(names, op)
    k = len(x._names)
    p = x._data.dim() - k
    phys, named = [], []
    for d in items:
        if isinstance(d, int) and not isinstance(d, bool):
            phys.append(k + _norm_pos(d, p, op))
        else:
            i = x._names.index(d)
            phys.append(i)
            named.append(i)
    if len(set(phys)) != len(phys):
        raise AxisSpecError(f"{_spelled(op)}: dimension spec {dims!r} names one dimension twice")
    return x, phys, named


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------

# name -> (index of the dim argument, whether it accepts several dims)
REDUCTIONS = {
    "sum": (1, True), "nansum": (1, True), "mean": (1, True), "nanmean": (1, True),
    "amax": (1, True), "amin": (1, True), "logsumexp": (1, True), "var": (1, True),
    "std": (1, True), "var_mean": (1, True), "std_mean": (1, True), "all": (1, True),
    "any": (1, True), "count_nonzero": (1, True), "prod": (1, False),
    "argmax": (1, False), "argmin": (1, False), "max": (1, False), "min": (1, False),
    "median": (1, False), "nanmedian": (1, False), "mode": (1, False), "norm": (2, True),
}
# where positional `keepdim` sits, relative to the dim argument
_KEEPDIM_AFTER = {"var": 2, "std": 2, "var_mean": 2, "std_mean": 2}
# reductions whose dim defaults to -1 rather than "everything"
_DEFAULT_DIM = {"mode": -1}
# with no dim, these return values only (torch.max(x) vs torch.max(x, 0))
_VALUES_ONLY = {"max", "min", "median", "nanmedian"}


class DimsPlan(NamedTuple):
    """What ``translate_dims`` works out for a dim argument."""
    phys: tuple         # physical dims
    named: tuple        # the dims of named axes among them
    names_left: tuple   # names after reducing the named dims
    asked: tuple        # names the argument asked for


# (names, physical ndim, dim spec) -> DimsPlan, for values that lack none of the names
# (stored by _dims_of: a plan for a value broadcast along a bound name depends on the
# environment, so it is not kept)
_DIMS = PlanCache("dims")


def _plain_spec(dims) -> bool:
    """Only ints and strings key the cache (True == 1 and 1.0 == 1 would collide)."""
    t = type(dims)
    if t is int or t is str:
        return True
    if t is tuple:
        for d in dims:
            if type(d) is not int and type(d) is not str:
                return False
        return True
    return False


def _dims_of(x: _NT, dims, op):
    """``translate_dims`` plus the names left after reducing the named dims, memoised.

    Returns ``(x', (phys, named, names_left, asked))``.  ``op`` is a name or the torch
    function (spelled only when needed).  Values that get broadcast along a bound name
    they lack are not memoised (that depends on the environment), nor is anything
    while dynamo traces (a global dict it would guard on).
    """
    key = None
    if _plain_spec(dims):
        key = (x._names, x._data.dim(), dims)
        hit = _DIMS.lookup(key)
        if hit is not None:
            if hit.asked:
                _check_engines(hit.asked, op)
            return x, hit
    x2, phys, named = translate_dims(x, dims, op)
    items = dims if isinstance(dims, (tuple, list)) else (dims,)
    entry = DimsPlan(tuple(phys), tuple(named),
                     tuple(n for i, n in enumerate(x2._names) if i not in named),
                     tuple(d for d in items if not isinstance(d, int)))
    if key is not None and x2 is x:
        _DIMS.store(key, entry)
    return x2, entry


def _reduction(name: str, dim_index: int, multi: bool):
    pos = dim_index - 1
    keep_pos = pos + _KEEPDIM_AFTER.get(name, 1)
    has_keepdim = name != "count_nonzero"

    def rule(func, args, kwargs):
        x = args[0]
        if type(x) is not _NT:
            return NotImplemented
        if len(args) == 2 and not kwargs and pos == 0:
            # x.sum(dims): the default keepdim=False is the layout we want
            dims = args[1]
            if dims is not None and not isinstance(dims, (_NT, _T)):
                x2, (phys, named, names_left, _) = _dims_of(x, dims, func)
                if phys and (multi or len(phys) == 1):
                    return _finish(func(x2._data, phys if multi else phys[0]), names_left, func)
        rest = list(args[1:])
        kw = dict(kwargs) if kwargs else {}
        if "axis" in kw:
            if "dim" in kw:
                raise AxisTypeError(f"{op_name(func)}: give dim= or axis=, not both")
            kw["dim"] = kw.pop("axis")
        if _any_tensor(rest, kw):
            if name in ("max", "min") and rest and isinstance(rest[0], (_NT, _T)):
                return pointwise(torch.maximum if name == "max" else torch.minimum,
                                 (x, rest[0]), {})
            return NotImplemented
        if len(rest) > pos:
            dims = rest.pop(pos)
        else:
            dims = kw.pop("dim", _DEFAULT_DIM.get(name))
        if len(rest) > keep_pos - 1 and keep_pos - 1 >= pos:
            keepdim = bool(rest.pop(keep_pos - 1))
        else:
            keepdim = bool(kw.pop("keepdim", False))
        k = len(x._names)
        if dims is None:
            p = x._data.dim() - k
            if p == 0:
                return NotImplemented
            # reduce every positional dim: flatten them into one
            flat = x._data.reshape(tuple(x._data.shape[:k]) + (-1,))
            out = _call_at(func, flat, k, rest, kw, pos, False, has_keepdim)
            if name in _VALUES_ONLY:
                out = out[0]
            if keepdim:
                out = _reshape_out(out, tuple(x._data.shape[:k]) + (1,) * p)
            return result(out, x._names, func)
        x, (phys, named, names_left, _) = _dims_of(x, dims, func)
        if not phys:   # dim=(): what torch does with it, per instance of the named axes
            if not multi:
                raise AxisSpecError(f"{op_name(func)}: takes a single dimension, got {dims!r}")
            if name not in ("all", "any"):   # (those two reduce nothing, the others all)
                p = x._data.dim() - k
                if p:
                    phys = tuple(range(k, k + p))
                else:   # a scalar: reduce a size-1 axis, and keep no dim for it
                    x, phys, keepdim = _wrap_nt(x._data.unsqueeze(-1), x._names), (k,), False
        if name == "norm" and len(phys) > 2:
            # Frobenius over any set of dims is the vector 2-norm (torch.norm takes <= 2)
            if rest and rest[0] == "fro":
                rest[0] = 2
            elif kw.get("p", "fro") == "fro" and not rest:
                kw["p"] = 2
        if not multi and len(phys) > 1:
            if name != "prod":
                raise AxisSpecError(f"{op_name(func)}: takes a single dimension, got {dims!r}")
            # prod of several dims: one at a time, highest first
            data = x._data
            k = len(x._names)
            for d in sorted(phys, reverse=True):
                data = _call_at(func, data, d, rest, kw, pos, keepdim or d < k, has_keepdim)
            data = data.squeeze(named) if named else data
            return result(data, names_left, func)
        dim_arg = phys if multi else phys[0]
        if named and keepdim:
            # keepdim keeps the positional dims only: the reduced named dims go
            out = _call_at(func, x._data, dim_arg, rest, kw, pos, True, has_keepdim)
            out = _squeeze_out(out, named)
        else:
            # named dims lead and reduced dims vanish: keepdim=False gives the layout
            out = _call_at(func, x._data, dim_arg, rest, kw, pos, keepdim, has_keepdim)
        return _finish(out, names_left, func)
    return rule


def _any_tensor(rest: list, kw: dict) -> bool:
    for a in rest:
        if isinstance(a, (_NT, _T)):
            return True
    if kw:
        for v in kw.values():
            if isinstance(v, (_NT, _T)):
                return True
    return False


def _call_at(func, data, dim_arg, rest, kw, pos, keepdim, has_keepdim=True):
    if not rest and not kw and pos == 0 and has_keepdim:
        return func(data, dim_arg, keepdim=keepdim)
    args = list(rest)
    if len(args) >= pos:
        args.insert(pos, dim_arg)
    else:  # the arguments before dim came as keywords (torch.norm(x, p=2, dim=1))
        kw = {**kw, "dim": dim_arg}
    if not has_keepdim:  # count_nonzero
        out = func(data, *args, **kw)
        if keepdim:
            dims = dim_arg if isinstance(dim_arg, tuple) else (dim_arg,)
            for d in sorted(dims):
                out = out.unsqueeze(d)
        return out
    return func(data, *args, keepdim=keepdim, **kw)


def _squeeze_out(out, dims, also_positional=()):
    """Remove the reduced named dims (and, when keepdim was forced, the positional ones)."""
    drop = tuple(sorted(set(dims) | set(also_positional)))
    if isinstance(out, _T):
        return out.squeeze(drop) if out.dim() else out
    return type(out)([_squeeze_out(o, dims, also_positional) for o in out])


def _reshape_out(out, shape):
    if isinstance(out, _T):
        return out.reshape(shape)
    return type(out)([_reshape_out(o, shape) for o in out])


def install_reductions() -> None:
    for name, (idx, multi) in REDUCTIONS.items():
        if idx is None:
            continue
        rule = _reduction(name, idx, multi)
        register([_get(torch, name), _get(_T, name)], rule)
    register([torch.linalg.vector_norm], _reduction("vector_norm", 2, True))
    register([torch.special.logsumexp], _reduction("logsumexp", 1, True))


def install() -> None:
    install_pointwise()
    install_reductions()
    from . import _rules_dimwise, _rules_matmul, _rules_nn, _rules_shape

    _rules_dimwise.install()
    _rules_shape.install()
    _rules_matmul.install()
    _rules_nn.install()
    from ._bindings import bind_all

    bind_all()
