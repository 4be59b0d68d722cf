"""Every op on NamedTensors equals the op looped over the named-axis indices (SPEC §1).

Cases come from the rule tables (:mod:`named_axes.rules`: a new table entry is tested
automatically) plus explicit lists for the shape/nn rules and for ops no table covers
(those run through the vmap fallback and must be right too).  Each case draws 1-3
named axes of random sizes, lays every operand out in a random physical order, leaves
some names off some operands, and keeps weights and index tensors plain.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import bools, check_op, const, ints, real
from named_axes.rules import dimwise as _rules_dimwise
from named_axes.rules import pointwise as _pointwise_tables
from named_axes.rules import reductions as _reductions

# torch.nn.GRU itself: importing torch_xla swaps nn.GRU for its scan-based ScanGRU
_GRU = torch.nn.modules.rnn.GRU

T = torch.Tensor
CASES: list = []


def case(id_, fn, *inputs, named=None, all_on=(), rtol=1e-5, atol=1e-6, min_axes=1):
    CASES.append(pytest.param(fn, inputs, dict(named=named, all_on=all_on, rtol=rtol,
                                               atol=atol, min_axes=min_axes), id=id_))


# -- elementwise, from the tables -------------------------------------------------------

UNIT = {"acos", "arccos", "asin", "arcsin", "atanh", "arctanh", "erfinv", "logit", "ndtri"}
POSITIVE = {"log", "log10", "log1p", "log2", "sqrt", "rsqrt", "lgamma", "digamma", "entr",
            "log_", "sqrt_"}
ABOVE_ONE = {"acosh", "arccosh"}
INTEGER = {"bitwise_not"}
EXTRA = {"clamp": (-0.5, 0.5), "clip": (-0.5, 0.5), "clamp_": (-0.5, 0.5),
         "clamp_min": (0.1,), "clamp_max": (0.1,), "threshold": (0.1, 20.0),
         "full_like": (2.5,), "to": (torch.float32,), "type": (torch.float32,), "fill_": (1.5,),
         "leaky_relu": (0.2,), "round": ()}
# random draws (tests/test_random.py), devices this machine lacks, values torch leaves
# undefined, and entries that need a second operand (tested as binary below)
SKIP = {"dropout", "alpha_dropout", "bernoulli", "rand_like", "randn_like", "randint_like",
        "normal_", "uniform_", "bernoulli_", "exponential_", "geometric_", "log_normal_",
        "cauchy_", "random_", "empty_like", "cuda", "pin_memory", "xlogy", "xlog1py",
        "polygamma", "multigammaln", "type_as", "requires_grad_", "detach_"}


def _unary_input(name):
    if name in UNIT:
        return real(3, 4, lo=0.05, hi=0.95)
    if name in POSITIVE or name.rstrip("_") in POSITIVE:
        return real(3, 4, lo=0.2, hi=3.0)
    if name in ABOVE_ONE:
        return real(3, 4, lo=1.1, hi=3.0)
    if name in INTEGER:
        return ints(3, 4, lo=-5, hi=9)
    return real(3, 4)


def _spellings(name):
    out = []
    for owner, label in ((torch, "torch"), (F, "F"), (torch.special, "special")):
        f = getattr(owner, name, None)
        if callable(f):
            out.append((label, lambda *a, _f=f, **k: _f(*a, **k)))
    if callable(getattr(T, name, None)):
        out.append(("Tensor", lambda x, *a, _n=name, **k: getattr(x, _n)(*a, **k)))
    return out


for _name in _pointwise_tables.UNARY_POINTWISE:
    if _name in SKIP:
        continue
    _extra = EXTRA.get(_name, ())
    for _label, _f in _spellings(_name):
        if _name.endswith("_"):
            _fn = (lambda _f, _e: lambda x: _f(x.clone(), *_e))(_f, _extra)
        else:
            _fn = (lambda _f, _e: lambda x: _f(x, *_e))(_f, _extra)
        case(f"{_label}.{_name}", _fn, _unary_input(_name))

INT_BINARY = {"bitwise_and", "bitwise_or", "bitwise_xor", "gcd", "lcm"}
SHIFTS = {"bitwise_left_shift", "bitwise_right_shift"}
TERNARY = {"lerp": lambda f: (lambda x, y, w: f(x, y, w)),
           "lerp_": lambda f: (lambda x, y, w: f(x.clone(), y, w)),
           "addcmul": lambda f: (lambda x, y, z: f(x, y, z, value=0.5)),
           "addcmul_": lambda f: (lambda x, y, z: f(x.clone(), y, z, value=0.5)),
           "addcdiv": lambda f: (lambda x, y, z: f(x, y, z, value=0.5)),
           "addcdiv_": lambda f: (lambda x, y, z: f(x.clone(), y, z, value=0.5))}
BIN_SKIP = {"logical_not"}  # unary, covered below


for _name in _pointwise_tables.BINARY_POINTWISE:
    if _name in BIN_SKIP:
        continue
    for _label, _f in _spellings(_name):
        inplace = _name.endswith("_")
        key = f"{_label}.{_name}"
        if _name in TERNARY:
            case(key, TERNARY[_name](_f), real(3, 4), real(4), real(3, 1), all_on=(0,) if inplace else ())
        elif _name in ("where",):
            if _label == "torch":
                case(key, lambda c, x, y, _f=_f: _f(c, x, y), bools(3, 4), real(4), real(3, 4))
            else:
                case(key, lambda x, c, y, _f=_f: _f(x, c, y), real(3, 4), bools(3, 4), real(4))
        elif _name in ("masked_fill", "masked_fill_"):
            fn = (lambda x, m, _f=_f: _f(x.clone(), m, -1.5)) if inplace else (
                lambda x, m, _f=_f: _f(x, m, -1.5))
            case(key, fn, real(3, 4), bools(4), all_on=(0,) if inplace else ())
        elif _name in INT_BINARY:
            case(key, lambda x, y, _f=_f: _f(x, y), ints(3, 4, lo=1, hi=30), ints(4, lo=1, hi=30))
        elif _name in SHIFTS:
            case(key, lambda x, y, _f=_f: _f(x, y), ints(3, 4, lo=1, hi=30), ints(4, lo=0, hi=3))
        elif _name == "ldexp":
            case(key, lambda x, y, _f=_f: _f(x, y), real(3, 4), ints(4, lo=-2, hi=3))
        elif _name in ("pow", "pow_", "float_power"):
            fn = (lambda x, y, _f=_f: _f(x.clone(), y)) if inplace else (lambda x, y, _f=_f: _f(x, y))
            case(key, fn, real(3, 4, lo=0.2, hi=2.0), real(4), all_on=(0,) if inplace else ())
        elif _name in ("xlogy",):
            case(key, lambda x, y, _f=_f: _f(x, y), real(3, 4), real(4, lo=0.2, hi=3.0))
        elif inplace:
            case(key, lambda x, y, _f=_f: _f(x.clone(), y), real(3, 4), real(4), all_on=(0,))
        else:
            case(key, lambda x, y, _f=_f: _f(x, y), real(3, 4), real(4))
        if not inplace and _name not in TERNARY and _name not in ("where", "masked_fill") \
                and _label == "torch":
            # a plain-tensor operand mixed in, and a Python scalar
            case(key + "-plain", lambda x, y, _f=_f: _f(x, y), real(3, 4, lo=0.2, hi=2.0)
                 if _name not in INT_BINARY | SHIFTS else ints(3, 4),
                 const(torch.full((4,), 2.0, dtype=torch.float64) if _name not in INT_BINARY | SHIFTS | {"ldexp"}
                       else torch.full((4,), 2)), named=[0])

INT_DUNDERS = {"__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__",
               "__rlshift__", "__rshift__", "__rrshift__", "__invert__", "__iand__", "__ior__",
               "__ixor__", "__ilshift__", "__irshift__"}
for _name in _pointwise_tables.DUNDERS:
    if not hasattr(T, _name):
        continue
    inplace = _name.startswith("__i") and _name != "__invert__"
    maker = ints(3, 4, lo=1, hi=4) if _name in INT_DUNDERS else real(3, 4, lo=0.3, hi=2.0)
    other = ints(4, lo=1, hi=3) if _name in INT_DUNDERS else real(4, lo=0.3, hi=2.0)
    if _name in ("__neg__", "__pos__", "__abs__", "__invert__"):
        case(f"Tensor.{_name}", lambda x, _n=_name: getattr(x, _n)(), maker)
    elif inplace:
        case(f"Tensor.{_name}", lambda x, y, _n=_name: getattr(x.clone(), _n)(y), maker, other,
             all_on=(0,))
    else:
        case(f"Tensor.{_name}", lambda x, y, _n=_name: getattr(x, _n)(y), maker, other)
        case(f"Tensor.{_name}-scalar", lambda x, _n=_name: getattr(x, _n)(2), maker)

case("torch.logical_not", torch.logical_not, real(3, 4))
case("torch.polygamma", lambda x: torch.polygamma(1, x), real(3, 4, lo=0.5, hi=3.0))
case("Tensor.polygamma", lambda x: x.polygamma(1), real(3, 4, lo=0.5, hi=3.0))
case("special.multigammaln", lambda x: torch.special.multigammaln(x, 2), real(3, 4, lo=2, hi=4))
case("special.xlog1py", torch.special.xlog1py, real(3, 4), real(4, lo=0.2, hi=2.0))
case("Tensor.type_as", lambda x, y: x.type_as(y), real(3, 4), ints(4))
case("torch.clamp-tensor-bounds", lambda x, lo, hi: torch.clamp(x, lo, hi), real(3, 4),
     real(4, lo=-1.0, hi=-0.1), real(3, 1, lo=0.1, hi=1.0))
case("F.dropout-p0", lambda x: F.dropout(x, 0.0), real(3, 4))
case("F.dropout-eval", lambda x: F.dropout(x, 0.5, training=False), real(3, 4))
case("Tensor.float-int-input", lambda x: x.float(), ints(3, 4))
case("torch.where-scalar", lambda c, x: torch.where(c, x, 0.0), bools(3, 4), real(3, 4))

# -- reductions, from the table ---------------------------------------------------------

BOOL_RED = {"all", "any"}
for _name, (_idx, _multi) in _reductions.REDUCTIONS.items():
    make = bools(3, 4, 5) if _name in BOOL_RED else real(3, 4, 5)
    pre = (2,) if _name == "norm" else ()
    for _label, _f in [(lbl, f) for lbl, f in _spellings(_name) if lbl in ("torch", "Tensor")]:
        key = f"{_label}.{_name}"
        call = (lambda _f, _pre: lambda x, *a, **k: _f(x, *_pre, *a, **k))(_f, pre)
        if _name not in ("mode", "logsumexp"):  # torch needs a dim for these
            case(key + "-all", lambda x, call=call: call(x), make)
        case(key + "-dim1", lambda x, call=call: call(x, 1), make)
        if _name != "count_nonzero":  # no keepdim argument
            case(key + "-dim-1-keepdim", lambda x, call=call: call(x, -1, keepdim=True), make)
        case(key + "-kwdim", lambda x, call=call: call(x, dim=0), make)
        if _multi:
            case(key + "-dims", lambda x, call=call: call(x, (0, 2)), make)
            if _name != "count_nonzero":
                case(key + "-dims-keepdim", lambda x, call=call: call(x, (2, -3), keepdim=True), make)
case("torch.var-correction0", lambda x: torch.var(x, 1, correction=0), real(3, 4))
case("torch.std-unbiased-keepdim", lambda x: torch.std(x, 1, True, True), real(3, 4))
case("torch.max-binary", lambda x, y: torch.max(x, y), real(3, 4), real(4))
case("torch.prod-dims", lambda x: torch.prod(x, 1), real(3, 4))
case("torch.aminmax", lambda x: torch.aminmax(x, dim=1), real(3, 4))
case("torch.quantile", lambda x: torch.quantile(x, 0.3, dim=1), real(3, 4))
case("torch.count_nonzero-ints", lambda x: torch.count_nonzero(x, 1), ints(3, 4, lo=0, hi=2))
case("linalg.vector_norm", lambda x: torch.linalg.vector_norm(x, 3, dim=(0, 1)), real(3, 4, 2))
case("special.logsumexp", lambda x: torch.special.logsumexp(x, 1), real(3, 4))

# -- dim-wise ops, from the table -------------------------------------------------------

DIMWISE_CALLS = {
    "softmax": lambda f: lambda x: f(x, 1), "log_softmax": lambda f: lambda x: f(x, -1),
    "softmin": lambda f: lambda x: f(x, 0), "cumsum": lambda f: lambda x: f(x, 1),
    "cumprod": lambda f: lambda x: f(x, -1), "logcumsumexp": lambda f: lambda x: f(x, 0),
    "cummax": lambda f: lambda x: f(x, 1), "cummin": lambda f: lambda x: f(x, 1),
    "sort": lambda f: lambda x: f(x, 0), "argsort": lambda f: lambda x: f(x, 1),
    "normalize": lambda f: lambda x: f(x, 2.0, 0), "glu": lambda f: lambda x: f(x, 1),
    "narrow": lambda f: lambda x: f(x, 1, 1, 2), "select": lambda f: lambda x: f(x, -1, 2),
    "unbind": lambda f: lambda x: f(x, 1), "split": lambda f: lambda x: f(x, 3, 1),
    "chunk": lambda f: lambda x: f(x, 2, 1), "tensor_split": lambda f: lambda x: f(x, 3, 0),
    "topk": lambda f: lambda x: f(x, 2, 1), "kthvalue": lambda f: lambda x: f(x, 2, 0),
    "diff": lambda f: lambda x: f(x, 1, 1),
    "index_select": lambda f: lambda x: f(x, 1, torch.tensor([3, 0, 0])),
    "repeat_interleave": lambda f: lambda x: f(x, 2, 1),
    "unflatten": lambda f: lambda x: f(x, 1, (2, 2)),
    "msort": lambda f: lambda x: f(x),
}
for _name in _rules_dimwise.DIMWISE:
    for _label, _f in _spellings(_name):
        case(f"{_label}.{_name}", DIMWISE_CALLS[_name](_f), real(3, 4))
case("torch.softmax-kwdim", lambda x: torch.softmax(x, dim=0), real(3, 4))
case("F.softmax-dtype", lambda x: F.softmax(x, -1, dtype=torch.float32), real(3, 4))
case("torch.split-sizes", lambda x: torch.split(x, [1, 3], dim=1), real(3, 4))
case("torch.sort-descending", lambda x: torch.sort(x, 1, descending=True), real(3, 4))
case("torch.cumsum-dim-kw", lambda x: torch.cumsum(x, dim=-1), real(3, 4))
case("torch.unbind-default", torch.unbind, real(3, 4))
case("Tensor.split-default-dim", lambda x: x.split(2), real(3, 4))

# -- shape ops ---------------------------------------------------------------------------

for key, fn in {
    "Tensor.view": lambda x: x.view(4, 3), "Tensor.view-1": lambda x: x.view(-1),
    "Tensor.view-tuple": lambda x: x.view((2, 6)), "Tensor.view-dtype": lambda x: x.view(torch.int64),
    "Tensor.reshape": lambda x: x.reshape(2, -1), "torch.reshape": lambda x: torch.reshape(x, (12,)),
    "Tensor.expand": lambda x: x[:, :1].expand(3, 5), "Tensor.expand-new": lambda x: x.expand(2, 3, 4),
    "Tensor.expand-minus1": lambda x: x.expand(2, -1, -1),
    "torch.broadcast_to": lambda x: torch.broadcast_to(x, (2, 3, 4)),
    "Tensor.permute": lambda x: x.permute(1, 0), "torch.permute": lambda x: torch.permute(x, (1, 0)),
    "Tensor.transpose": lambda x: x.transpose(0, 1), "torch.transpose": lambda x: torch.transpose(x, -1, 0),
    "Tensor.swapaxes": lambda x: x.swapaxes(0, 1), "torch.swapdims": lambda x: torch.swapdims(x, 0, 1),
    "Tensor.t": lambda x: x.t(), "torch.t": torch.t, "Tensor.T": lambda x: x.T, "Tensor.mT": lambda x: x.mT,
    "Tensor.flatten": lambda x: x.flatten(), "torch.flatten": lambda x: torch.flatten(x, 0, 1),
    "Tensor.squeeze": lambda x: x[:, None, :1].squeeze(), "Tensor.squeeze-dim": lambda x: x[None].squeeze(0),
    "torch.squeeze-dims": lambda x: torch.squeeze(x[:, None, :, None], (1, 3)),
    "Tensor.unsqueeze": lambda x: x.unsqueeze(1), "torch.unsqueeze": lambda x: torch.unsqueeze(x, -1),
    "Tensor.movedim": lambda x: x.movedim(0, 1), "torch.moveaxis": lambda x: torch.moveaxis(x, [0, 1], [1, 0]),
    "Tensor.flip": lambda x: x.flip(0), "torch.flip": lambda x: torch.flip(x, (0, 1)),
    "Tensor.roll": lambda x: x.roll(1, 1), "torch.roll-nodim": lambda x: torch.roll(x, 2),
    "torch.roll-multi": lambda x: torch.roll(x, (1, 2), (0, 1)),
    "Tensor.repeat": lambda x: x.repeat(2, 1), "Tensor.repeat-more": lambda x: x.repeat(2, 1, 2),
    "torch.tile": lambda x: torch.tile(x, (2,)), "Tensor.tile": lambda x: x.tile(2, 2),
    "Tensor.diagonal": lambda x: x.diagonal(), "torch.diagonal": lambda x: torch.diagonal(x, 1, 1, 0),
    "torch.tril": lambda x: torch.tril(x), "Tensor.triu": lambda x: x.triu(1),
    "Tensor.tril_": lambda x: x.clone().tril_(), "torch.rot90": lambda x: torch.rot90(x, 1, (0, 1)),
    "torch.fliplr": torch.fliplr, "torch.atleast_3d": torch.atleast_3d,
    "torch.narrow_copy": lambda x: torch.narrow_copy(x, 1, 0, 2), "torch.diag": torch.diag,
    "torch.diag_embed": torch.diag_embed, "torch.trace": torch.trace,
    "Tensor.unfold": lambda x: x.unfold(1, 2, 1), "torch.ravel": torch.ravel,
    "Tensor.contiguous-after-t": lambda x: x.t().contiguous(),
    "torch.hsplit": lambda x: torch.hsplit(x, 2), "torch.vsplit": lambda x: torch.vsplit(x, [1]),
    "torch.cumulative_trapezoid": lambda x: torch.cumulative_trapezoid(x, dim=1),
    "torch.trapezoid": torch.trapezoid, "torch.fft.fft": torch.fft.fft, "torch.fft.rfft2": torch.fft.rfft2,
    "torch.sum-then-view": lambda x: (x * 2).view(12).sum(0),
}.items():
    case(key, fn, real(3, 4))
case("Tensor.view_as", lambda x, y: x.view_as(y), real(3, 4), const(torch.zeros(2, 6)), named=[0])
case("Tensor.reshape_as", lambda x, y: x.reshape_as(y), real(3, 4), const(torch.zeros(12)), named=[0])
case("Tensor.expand_as", lambda x, y: x.expand_as(y), real(1, 4), const(torch.zeros(2, 3, 4)), named=[0])
case("torch.flatten-0d", lambda x: torch.flatten(x), real())
case("Tensor.unsqueeze-0d", lambda x: x.unsqueeze(0), real())

# -- linear algebra ---------------------------------------------------------------------

def spd(n):
    def make(gen, lead):
        a = torch.rand(lead + (n, n), generator=gen, dtype=torch.float64)
        return a @ a.mT + n * torch.eye(n, dtype=torch.float64)
    return make


LINALG = {
    "linalg.det": torch.linalg.det, "torch.det": torch.det, "Tensor.det": lambda x: x.det(),
    "linalg.inv": torch.linalg.inv, "torch.inverse": torch.inverse, "linalg.slogdet": torch.linalg.slogdet,
    "torch.logdet": torch.logdet, "linalg.matrix_exp": torch.linalg.matrix_exp,
    "linalg.cholesky": torch.linalg.cholesky, "linalg.eigvalsh": torch.linalg.eigvalsh,
    "linalg.svdvals": torch.linalg.svdvals, "linalg.pinv": torch.linalg.pinv,
    "linalg.matrix_norm": torch.linalg.matrix_norm,
    "linalg.matrix_norm-nuc": lambda x: torch.linalg.matrix_norm(x, "nuc"),
    "linalg.matrix_power": lambda x: torch.linalg.matrix_power(x, 3),
    "linalg.svd-reconstruct": lambda x: (lambda u, s, vh: u @ torch.diag_embed(s) @ vh)(*torch.linalg.svd(x)),
    "linalg.qr-reconstruct": lambda x: (lambda q, r: q @ r)(*torch.linalg.qr(x)),
    "linalg.eigh-reconstruct": lambda x: (lambda l, v: v @ torch.diag_embed(l) @ v.mT)(*torch.linalg.eigh(x)),
    "linalg.norm": torch.linalg.norm, "linalg.cond": torch.linalg.cond,
    "linalg.matrix_rank": torch.linalg.matrix_rank, "linalg.cholesky_ex": torch.linalg.cholesky_ex,
    "linalg.lu_factor": torch.linalg.lu_factor, "torch.cov": torch.cov,
}
for key, fn in LINALG.items():
    case(key, fn, spd(3), rtol=1e-4, atol=1e-6)
case("linalg.solve", torch.linalg.solve, spd(3), real(3, 2))
case("linalg.solve-vec", torch.linalg.solve, spd(3), real(3))
case("linalg.cross", torch.linalg.cross, real(2, 3), real(1, 3))
case("torch.cross", lambda a, b: torch.cross(a, b, dim=-1), real(2, 3), real(2, 3))
case("linalg.vecdot", torch.linalg.vecdot, real(2, 3), real(3))
case("linalg.multi_dot", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), real(2, 3), real(3, 4), real(4, 2))
case("torch.kron", torch.kron, real(2, 2), real(2, 3))
case("torch.cdist", torch.cdist, real(3, 2), real(4, 2))
case("torch.tensordot", lambda a, b: torch.tensordot(a, b, dims=([1], [0])), real(2, 3), real(3, 4))
case("torch.addmm", torch.addmm, real(4), real(2, 3), real(3, 4))
case("torch.baddbmm", torch.baddbmm, real(2, 1, 4), real(2, 2, 3), real(2, 3, 4))
case("torch.addmv", torch.addmv, real(2), real(2, 3), real(3))
case("torch.addr", torch.addr, real(2, 3), real(2), real(3))
case("torch.chain_matmul", lambda a, b: torch.linalg.multi_dot([a, b]), real(2, 3), real(3, 2))
case("torch.renorm", lambda x: torch.renorm(x, 2, 0, 1.0), real(3, 4))
case("Tensor.renorm", lambda x: x.renorm(1, 1, 0.5), real(3, 4))
case("torch.inner-3d", torch.inner, real(2, 2, 3), real(4, 3))
case("torch.einsum-plain-spec", lambda a, b: torch.einsum("ij,jk->ik", a, b), real(2, 3), real(3, 4))

# -- matmul family: ranks 1-3, named and plain operands ------------------------------------

MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((5, 2, 3), (5, 3, 4)),
                 ((5, 2, 3), (3,)), ((3,), (5, 3, 4)), ((1, 2, 3), (5, 3, 4))]
for sa, sb in MATMUL_SHAPES:
    tag = f"{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"
    case(f"torch.matmul-{tag}", torch.matmul, real(*sa), real(*sb))
    case(f"operator@-{tag}", lambda a, b: a @ b, real(*sa), real(*sb))
    case(f"torch.matmul-{tag}-plain-rhs", torch.matmul, real(*sa), const(torch.rand(sb, dtype=torch.float64)), named=[0])
    case(f"operator@-{tag}-plain-lhs", lambda a, b: a @ b, const(torch.rand(sa, dtype=torch.float64)), real(*sb), named=[1])
for key, fn, sa, sb in [("torch.mm", torch.mm, (2, 3), (3, 4)), ("Tensor.mm", lambda a, b: a.mm(b), (2, 3), (3, 4)),
                        ("torch.bmm", torch.bmm, (5, 2, 3), (5, 3, 4)), ("torch.mv", torch.mv, (2, 3), (3,)),
                        ("torch.dot", torch.dot, (3,), (3,)), ("Tensor.dot", lambda a, b: a.dot(b), (3,), (3,)),
                        ("torch.vdot", torch.vdot, (3,), (3,)), ("torch.inner", torch.inner, (2, 3), (4, 3)),
                        ("torch.inner-1d", torch.inner, (3,), (3,)), ("torch.outer", torch.outer, (2,), (3,)),
                        ("torch.ger", torch.ger, (2,), (3,)), ("Tensor.matmul", lambda a, b: a.matmul(b), (2, 3), (3,))]:
    case(key, fn, real(*sa), real(*sb))
case("torch.mm-plain-lhs", torch.mm, const(torch.rand(2, 3, dtype=torch.float64)), real(3, 4), named=[1])
case("torch.outer-plain-lhs", torch.outer, const(torch.rand(2, dtype=torch.float64)), real(3), named=[1])
case("torch.bmm-plain-rhs", torch.bmm, real(5, 2, 3), const(torch.rand(5, 3, 4, dtype=torch.float64)), named=[0])

# -- concatenation and indexing ------------------------------------------------------------

for key, fn in {"torch.cat": lambda a, b: torch.cat([a, b]), "torch.cat-dim1": lambda a, b: torch.cat((a, b), 1),
                "torch.concat": lambda a, b: torch.concat([a, b], dim=-1),
                "torch.stack": lambda a, b: torch.stack([a, b]), "torch.stack-dim-1": lambda a, b: torch.stack([a, b], -1),
                "torch.hstack": lambda a, b: torch.hstack([a, b]), "torch.vstack": lambda a, b: torch.vstack([a, b]),
                "torch.dstack": lambda a, b: torch.dstack([a, b])}.items():
    case(key, fn, real(3, 4), real(3, 4))
case("torch.cat-plain", lambda a, b: torch.cat([a, b], 1), real(3, 4), const(torch.ones(3, 2, dtype=torch.float64)), named=[0])
case("torch.stack-plain-first", lambda a, b: torch.stack([a, b]), const(torch.ones(3, 4, dtype=torch.float64)), real(3, 4), named=[1])

_IDX = torch.tensor([2, 0, 2])
_MASK = torch.tensor([True, False, True, True])
for key, fn in {"getitem-int": lambda x: x[1], "getitem-neg": lambda x: x[-1, 2], "getitem-slice": lambda x: x[:, 1:3],
                "getitem-step": lambda x: x[::2], "getitem-none": lambda x: x[None, :, None],
                "getitem-ellipsis": lambda x: x[..., 0], "getitem-long": lambda x: x[_IDX],
                "getitem-long-dim1": lambda x: x[:, _IDX], "getitem-list": lambda x: x[[0, 2]],
                "getitem-mask": lambda x: x[:, _MASK], "getitem-two-adv": lambda x: x[_IDX, _IDX + 1],
                "getitem-split-adv": lambda x: x[_IDX, :, _IDX],
                "getitem-ellipsis-none": lambda x: x[..., None, 1:]}.items():
    case(key, fn, real(3, 4) if "split" not in key else real(3, 4, 3))
case("getitem-named-index", lambda x, i: x[i], real(5, 4), ints(lo=0, hi=5))
case("getitem-named-index-tensor", lambda x, i: x[:, i], real(3, 4), ints(2, lo=0, hi=4))


def _set(index):
    def fn(x, v):
        y = x.clone()
        y[index] = v
        return y
    return fn


case("setitem-scalar", _set((0, slice(1, 3))), real(3, 4), const(7.0), named=[0])
case("setitem-value", _set(slice(None, 2)), real(3, 4), real(4), all_on=(0,))
case("setitem-long", _set(_IDX[:2]), real(3, 4), real(2, 4), all_on=(0,))
case("torch.gather", lambda x, i: torch.gather(x, 1, i), real(3, 4), ints(3, 2, lo=0, hi=4))
case("torch.take_along_dim", lambda x, i: torch.take_along_dim(x, i, 1), real(3, 4), ints(3, 2, lo=0, hi=4))
case("torch.scatter", lambda x, i, s: torch.scatter(x, 1, i, s), real(3, 4),
     const(torch.tensor([[0], [3], [1]])), real(3, 1), named=[0, 2])
case("torch.scatter_add", lambda x, i, s: torch.scatter_add(x, 0, i, s), real(3, 4),
     const(torch.tensor([[0, 1, 2, 0]])), real(1, 4), named=[0, 2])
case("torch.index_add", lambda x, s: torch.index_add(x, 0, torch.tensor([0, 2]), s), real(3, 4), real(2, 4))
case("torch.index_fill", lambda x: torch.index_fill(x, 1, torch.tensor([1]), -1.0), real(3, 4))
case("torch.masked_scatter", lambda x, m: torch.masked_scatter(x, m, torch.full((3, 4), 9.0, dtype=torch.float64)),
     real(3, 4), bools(3, 4))
case("torch.searchsorted", lambda s, v: torch.searchsorted(s, v), const(torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64)),
     real(5), named=[1])
case("torch.bucketize", lambda v: torch.bucketize(v, torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64)), real(5))
case("torch.select_scatter", lambda x, s: torch.select_scatter(x, s, 0, 1), real(3, 4), real(4))

# -- nn.functional --------------------------------------------------------------------------

W = torch.Generator().manual_seed(1)


def param(*shape):
    return torch.rand(shape, generator=W, dtype=torch.float64) - 0.5


def labels(*shape, n=5, ignore=False):
    def make(gen, lead):
        t = torch.randint(0, n, lead + shape, generator=gen)
        if ignore:
            t = torch.where(torch.rand(t.shape, generator=gen) < 0.3, torch.full_like(t, -100), t)
            t.view(-1)[0] = 1  # at least one counted target per named index is not guaranteed; keep one
        return t
    return make


_w, _b = param(5, 4), param(5)
case("F.linear", lambda x: F.linear(x, _w, _b), real(3, 4))
case("F.linear-nobias", lambda x: F.linear(x, _w), real(4))
case("F.linear-named-weight", lambda x, w: F.linear(x, w), real(3, 4), real(5, 4))
_bil, _ct1, _ct2 = param(2, 3, 4), param(2, 3, 2), param(2, 3, 2, 2)
case("F.bilinear", lambda a, b: F.bilinear(a, b, _bil), real(2, 3), real(2, 4))
_g, _beta = param(4) + 1, param(4)
case("F.layer_norm", lambda x: F.layer_norm(x, (4,), _g, _beta), real(3, 4))
case("F.layer_norm-2d", lambda x: F.layer_norm(x, (3, 4)), real(3, 4))
case("F.rms_norm", lambda x: F.rms_norm(x, (4,), _g), real(3, 4))
_emb = param(7, 3)
case("F.embedding", lambda i: F.embedding(i, _emb), ints(4, lo=0, hi=7))
case("F.embedding-0d", lambda i: F.embedding(i, _emb), ints(lo=0, hi=7))
case("F.embedding-named-weight", lambda i, w: F.embedding(i, w), ints(4, lo=0, hi=7), real(7, 3))
case("F.one_hot", lambda i: F.one_hot(i, 7), ints(4, lo=0, hi=7))
case("F.pad", lambda x: F.pad(x, (1, 2)), real(3, 4))
case("F.pad-reflect", lambda x: F.pad(x, (1, 1), mode="reflect"), real(2, 3, 4))
case("F.pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), real(4, 2, 3))
case("F.pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), real(1, 4, 2))
_c1, _c2, _c3 = param(4, 2, 3), param(4, 2, 3, 3), param(3, 2, 2, 2, 2)
case("F.conv1d", lambda x: F.conv1d(x, _c1, padding=1), real(3, 2, 6))
case("F.conv1d-unbatched", lambda x: F.conv1d(x, _c1), real(2, 6))
case("F.conv2d", lambda x: F.conv2d(x, _c2, stride=2), real(2, 2, 5, 5))
case("F.conv2d-unbatched", lambda x: F.conv2d(x, _c2), real(2, 4, 4))
case("F.conv3d", lambda x: F.conv3d(x, _c3), real(1, 2, 3, 3, 3))
case("F.conv_transpose1d", lambda x: F.conv_transpose1d(x, _ct1), real(2, 2, 4))
case("F.conv_transpose2d", lambda x: F.conv_transpose2d(x, _ct2, stride=2), real(2, 2, 3, 3))
case("F.conv2d-named-weight", lambda x, w: F.conv2d(x, w), real(1, 2, 4, 4), real(3, 2, 2, 2))
for key, fn, shape in [("F.max_pool1d", lambda x: F.max_pool1d(x, 2), (2, 3, 6)),
                       ("F.max_pool2d", lambda x: F.max_pool2d(x, 2), (2, 2, 4, 4)),
                       ("F.max_pool2d-unbatched", lambda x: F.max_pool2d(x, 2), (2, 4, 4)),
                       ("F.max_pool2d-indices", lambda x: F.max_pool2d(x, 2, return_indices=True), (2, 1, 4, 4)),
                       ("F.max_pool3d", lambda x: F.max_pool3d(x, 2), (1, 1, 2, 4, 4)),
                       ("F.avg_pool1d", lambda x: F.avg_pool1d(x, 3), (2, 3, 6)),
                       ("F.avg_pool2d", lambda x: F.avg_pool2d(x, 2, stride=1), (2, 2, 3, 3)),
                       ("F.avg_pool3d", lambda x: F.avg_pool3d(x, 2), (1, 1, 2, 2, 2)),
                       ("F.adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 2), (2, 3, 5)),
                       ("F.adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 1)), (2, 3, 5, 4)),
                       ("F.adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, 2), (2, 3, 5, 4)),
                       ("F.lp_pool1d", lambda x: F.lp_pool1d(x, 2, 2), (2, 3, 6)),
                       ("F.group_norm", lambda x: F.group_norm(x, 2), (2, 4, 3)),
                       ("F.instance_norm", lambda x: F.instance_norm(x), (2, 3, 4)),
                       ("F.local_response_norm", lambda x: F.local_response_norm(x, 2), (2, 3, 4)),
                       ("F.interpolate", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (2, 1, 2, 3)),
                       ("F.interpolate-bilinear", lambda x: F.interpolate(x, size=(3, 4), mode="bilinear"), (1, 2, 2, 3)),
                       ("F.unfold", lambda x: F.unfold(x, 2), (2, 1, 3, 3)),
                       ("F.batch_norm-eval", lambda x: F.batch_norm(x, torch.zeros(3, dtype=torch.float64),
                                                                    torch.ones(3, dtype=torch.float64)), (2, 3, 4)),
                       ("F.cosine_similarity", lambda x: F.cosine_similarity(x, x.flip(-1), dim=-1), (2, 3, 4)),
                       ("F.prelu", lambda x: F.prelu(x, torch.tensor([0.25], dtype=torch.float64)), (2, 3))]:
    case(key, fn, real(*shape))
case("F.pairwise_distance", F.pairwise_distance, real(3, 4), real(3, 4))
for key, fn in {"F.softmax": lambda x: F.softmax(x, -1), "F.log_softmax": lambda x: F.log_softmax(x, 0),
                "F.softmin": lambda x: F.softmin(x, 1), "F.gumbel_softmax-tau-eval": lambda x: F.softmax(x / 0.5, -1),
                "F.normalize": lambda x: F.normalize(x, dim=-1), "F.glu": lambda x: F.glu(x),
                "F.hardtanh": lambda x: F.hardtanh(x, -0.5, 0.5), "F.elu-alpha": lambda x: F.elu(x, 0.5),
                "F.gelu-tanh": lambda x: F.gelu(x, approximate="tanh"), "F.softplus-beta": lambda x: F.softplus(x, 2.0),
                "F.relu-inplace": lambda x: F.relu(x.clone(), inplace=True)}.items():
    case(key, fn, real(3, 4))


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


case("F.sdpa", _sdpa, real(2, 3, 4), real(2, 5, 4), real(2, 5, 6))
case("F.sdpa-plain-kv", _sdpa, real(3, 4), const(torch.rand(5, 4, dtype=torch.float64)),
     const(torch.rand(5, 2, dtype=torch.float64)), named=[0])
case("F.sdpa-causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     real(3, 4), real(3, 4), real(3, 4))
case("F.sdpa-mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     real(3, 4), real(5, 4), real(5, 2), bools(3, 5), named=[0, 1, 2])
case("F.sdpa-named-mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     real(3, 4), real(5, 4), real(5, 2), real(3, 5))

for key, fn in {"F.mse_loss": F.mse_loss, "F.l1_loss": F.l1_loss, "F.smooth_l1_loss": F.smooth_l1_loss,
                "F.huber_loss": F.huber_loss, "F.soft_margin_loss": F.soft_margin_loss,
                "F.mse_loss-sum": lambda a, b: F.mse_loss(a, b, reduction="sum"),
                "F.l1_loss-none": lambda a, b: F.l1_loss(a, b, reduction="none"),
                "F.binary_cross_entropy_with_logits": F.binary_cross_entropy_with_logits,
                "F.kl_div": lambda a, b: F.kl_div(a, b, reduction="batchmean", log_target=True),
                "F.poisson_nll_loss": F.poisson_nll_loss}.items():
    case(key, fn, real(3, 4), real(3, 4))
case("F.mse_loss-broadcast-names", F.mse_loss, real(3, 4), real(3, 4), min_axes=2)
case("F.binary_cross_entropy", F.binary_cross_entropy, real(3, 4, lo=0.05, hi=0.95), real(3, 4, lo=0.0, hi=1.0))
case("F.gaussian_nll_loss", F.gaussian_nll_loss, real(3, 4), real(3, 4), real(3, 4, lo=0.2, hi=2.0))
case("F.cosine_embedding_loss", F.cosine_embedding_loss, real(3, 4), real(3, 4), const(torch.tensor([1, -1, 1])), named=[0, 1])
case("F.margin_ranking_loss", F.margin_ranking_loss, real(3), real(3), real(3))
case("F.triplet_margin_loss", F.triplet_margin_loss, real(3, 4), real(3, 4), real(3, 4))

_cw = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.7], dtype=torch.float64)
for key, fn, x, t in [
        ("F.cross_entropy", F.cross_entropy, real(4, 5), labels(4)),
        ("F.cross_entropy-unbatched", F.cross_entropy, real(5), labels()),
        ("F.cross_entropy-weight", lambda x, t: F.cross_entropy(x, t, weight=_cw), real(4, 5), labels(4)),
        ("F.cross_entropy-ignore", lambda x, t: F.cross_entropy(x, t, ignore_index=-100), real(4, 5), labels(4, ignore=True)),
        ("F.cross_entropy-weight-ignore", lambda x, t: F.cross_entropy(x, t, weight=_cw, ignore_index=2), real(4, 5), labels(4)),
        ("F.cross_entropy-sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"), real(4, 5), labels(4)),
        ("F.cross_entropy-none", lambda x, t: F.cross_entropy(x, t, reduction="none"), real(4, 5), labels(4)),
        ("F.cross_entropy-smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), real(4, 5), labels(4)),
        ("F.cross_entropy-weight-smoothing", lambda x, t: F.cross_entropy(x, t, weight=_cw, label_smoothing=0.2),
         real(4, 5), labels(4)),
        ("F.cross_entropy-probs", F.cross_entropy, real(4, 5), real(4, 5, lo=0.0, hi=1.0)),
        ("F.cross_entropy-spatial", F.cross_entropy, real(2, 5, 3), labels(2, 3)),
        ("F.nll_loss", F.nll_loss, real(4, 5), labels(4)),
        ("F.nll_loss-weight", lambda x, t: F.nll_loss(x, t, weight=_cw), real(4, 5), labels(4)),
        ("F.nll_loss-ignore", lambda x, t: F.nll_loss(x, t, ignore_index=3), real(4, 5), labels(4))]:
    case(key, fn, x, t)
case("F.cross_entropy-plain-target", lambda x, t: F.cross_entropy(x, t), real(4, 5),
     const(torch.tensor([0, 4, 2, 1])), named=[0])

# -- nn.Module layers ---------------------------------------------------------------------

def _first(call, module):
    return lambda x: call(module, x)[0]


torch.manual_seed(0)
_MODULES = {
    "nn.Linear": (torch.nn.Linear(4, 3).double(), real(2, 4)),
    "nn.Sequential-mlp": (torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).double(), real(3, 4)),
    "nn.Conv2d": (torch.nn.Conv2d(2, 3, 3, padding=1).double(), real(2, 2, 4, 4)),
    "nn.Conv1d": (torch.nn.Conv1d(2, 3, 2).double(), real(2, 5)),
    "nn.LayerNorm": (torch.nn.LayerNorm(4).double(), real(3, 4)),
    "nn.Embedding": (torch.nn.Embedding(6, 3).double(), ints(4, lo=0, hi=6)),
    "nn.Dropout-p0": (torch.nn.Dropout(0.0), real(3, 4)),
    "nn.Dropout-eval": (torch.nn.Dropout(0.5).eval(), real(3, 4)),
    "nn.BatchNorm1d-eval": (torch.nn.BatchNorm1d(3).double().eval(), real(2, 3)),
    "nn.GroupNorm": (torch.nn.GroupNorm(2, 4).double(), real(2, 4, 3)),
    "nn.MaxPool2d": (torch.nn.MaxPool2d(2), real(1, 2, 4, 4)),
    "nn.Softmax": (torch.nn.Softmax(dim=-1), real(3, 4)),
    "nn.Flatten": (torch.nn.Flatten(), real(2, 3, 4)),
    "nn.Unflatten": (torch.nn.Unflatten(1, (2, 2)), real(3, 4)),
    "nn.Identity": (torch.nn.Identity(), real(3, 4)),
    "nn.RMSNorm": (torch.nn.RMSNorm(4).double(), real(3, 4)),
    "nn.MultiheadAttention": (_first(lambda m, x: m(x, x, x, need_weights=False),
                                     torch.nn.MultiheadAttention(4, 2, batch_first=True).double().eval()),
                              real(2, 3, 4)),
    "nn.TransformerEncoderLayer": (torch.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True).double().eval(),
                                   real(2, 3, 4)),
    "nn.GRU": (_first(lambda m, x: m(x), _GRU(3, 2, batch_first=True).double()), real(2, 4, 3)),
    "nn.CrossEntropyLoss": (lambda x: torch.nn.CrossEntropyLoss()(x, torch.tensor([0, 2, 1])), real(3, 4)),
}
for key, (mod, make) in _MODULES.items():
    case(key, mod, make, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fn, inputs, opts", CASES)
def test_op_matches_named_index_loop(request, fn, inputs, opts):
    check_op(fn, list(inputs), key=request.node.callspec.id, **opts)


def test_enough_ops_are_covered():
    assert len(CASES) >= 150
