"""Machinery of the OpInfo sweep (tests/test_opinfo_sweep.py): every op of PyTorch's OpInfo
database on named values, checked against the op looped over the named indices.

This is functorch's vmap check (``loop`` / ``get_fallback_and_vmap_exhaustive`` in
pytorch's test/functorch/common_utils.py) with ``nx.named`` in place of ``vmap``:

* a *sample* is one ``SampleInput`` of an OpInfo; it is flattened into tensor and
  non-tensor *leaves* (``(input, *args)`` and ``kwargs`` as one pytree);
* a *naming* picks leaves and, per leaf, the dim that becomes the named axis ``'n'``
  (``NAMINGS`` says which);
* a *variant* is how the op is called: ``function``, ``method``, ``inplace``, or ``out=``
  with a plain out (``out_plain``), a named out of the expected named shape
  (``out_named``) or one whose ``'n'`` has the wrong size (``out_wrong``);
* the *reference* runs the plain op once per index ``i`` of ``'n'`` (every named leaf
  ``select``-ed at ``i``, plain leaves shared) and stacks the results on a leading ``'n'``.
  Programs the loop cannot express as a named value (per-instance Python values, ragged
  per-instance shapes, one plain tensor written by every instance, a wrongly sized named
  out) expect a :class:`named_axes.NamedAxisError`.

Each case ends in one outcome (``OUTCOMES``).  The named call must match the reference
(values, positional shape, named shape, dtype, storage aliasing where every looped
result is a view of a named input, the arguments as the loop's writes leave them) or
raise a ``NamedAxisError``; anything else is a silent mismatch or a raw torch error.
Ops that need another comparison are listed, with the reason, in the tables below.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import os
import warnings
from typing import Any, Callable, Iterator

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_unflatten

import named_axes as nx
from named_axes import NamedAxisError
from named_axes._tensor import NamedTensor

NAME = "n"
FULL = os.environ.get("NX_OPINFO_FULL") == "1"
DTYPE_PREFERENCE = (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64)

# -- outcomes ---------------------------------------------------------------------------
MATCH = "matched"                 # the named call equals the loop
REFUSED = "refused"               # NamedAxisError although the loop runs
REFUSED_OK = "refused_expected"   # NamedAxisError where the loop raises or is not a named value
BOTH_RAISE = "both_raise_raw"     # the loop raises; the named call raises a raw (non-nx) error
RAW_ERROR = "raw_error"           # a raw error where a value or a NamedAxisError was due
SILENT = "silent_mismatch"        # a value that differs from the loop, or none of the raise due
OUTCOMES = (MATCH, REFUSED, REFUSED_OK, BOTH_RAISE, RAW_ERROR, SILENT)

# -- the explicit tables ----------------------------------------------------------------
# Ops left out of the sweep, with the reason.  Ops none of whose samples give a tensor to
# name, and ops with no CPU dtype among DTYPE_PREFERENCE, are skipped automatically
# (``skip_reason``) with the reason recorded in the report.
SKIP_OPS = {
    "to_sparse": "returns a sparse tensor (sparse layouts are not named)",
    "sparse.sampled_addmm": "sparse inputs",
    "sparse.mm.reduce": "sparse inputs",
    **{name: "storage-level op: size/stride/offset address the physical storage, so a "
             "loop over select() views is not its named meaning" for name in (
        "as_strided", "as_strided.partial_views", "as_strided_copy", "as_strided_scatter")},
    "lu_unpack": "CRASHES the interpreter (heap corruption in torch's kernel): a named LU "
                 "reaches torch.lu_unpack with its named dim as a matrix row",
}
# Ops whose values are random or uninitialized: only shapes, named shapes and dtypes are
# compared (each instance of a random op draws its own numbers).
SHAPE_ONLY_OPS = {
    **{name: "random draws" for name in (
        "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
        "normal", "normal.in_place", "normal.number_mean", "uniform", "rand_like",
        "randn_like", "randint_like", "nn.functional.dropout", "nn.functional.dropout2d",
        "nn.functional.dropout3d", "nn.functional.alpha_dropout",
        "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu",
        "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
        "svd_lowrank", "pca_lowrank")},
    **{name: "unsafe=True samples whose lengths overrun the data once a dim is named "
             "away: the loop reads out of bounds" for name in (
        "_segment_reduce.lengths", "_segment_reduce.offsets")},
    **{name: "uninitialized memory" for name in (
        "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty",
        "empty_permuted", "resize_", "resize_as_")},
}
# Ops whose samples with dropout are compared by shape only (``draws_dropout``).
DROPOUT_OPS = ("nn.functional.multi_head_attention_forward",
               "nn.functional.scaled_dot_product_attention")
# Ops whose named rule makes a plain tensor although the loop stacks NAME: accepted when
# the plain value equals every instance (it broadcasts to the stacked one by name).
PLAIN_RESULT_OPS = {name: "new_* make plain tensors (named_axes/rules/queries.py _query)"
                    for name in ("new_zeros", "new_ones", "new_empty", "new_full")}
# OpInfo variants that are lambdas calling ``torch.Tensor.<method>(x, ...)`` unbound, which
# Python lets only a torch.Tensor take (NamedTensor is no subclass): called as
# ``x.<method>(...)`` instead, the same call spelled so that a NamedTensor can take it.
UNBOUND_CALLS = {
    ("item", "function"): "item", ("cauchy", "function"): "cauchy_",
    ("exponential", "function"): "exponential_", ("geometric", "function"): "geometric_",
    ("log_normal", "function"): "log_normal_", ("normal.in_place", "function"): "normal_",
    ("uniform", "function"): "uniform_", ("bernoulli", "method"): "bernoulli",
    ("multinomial", "method"): "multinomial",
}
# Ops returning one Python value about whole arguments: their named rule compares whole
# values, names included (named shapes equal, positional shapes equal, values aligned by
# name equal / close) instead of refusing.
WHOLE_VALUE_OPS = {"equal", "allclose"}

# dtype -> (rtol, atol); other dtypes compare exactly
TOLERANCES = {
    torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (1e-4, 1e-4), torch.complex64: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7), torch.complex128: (1e-7, 1e-7),
}


def op_id(op) -> str:
    """``name`` or ``name.variant_test_name``: unique in op_db, used as the test id."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


OPS = {op_id(op): op for op in op_db}


def seed_of(key: str) -> int:
    """A stable seed per op (str hash is salted per process)."""
    return sum((i + 1) * ord(ch) for i, ch in enumerate(key)) % (2**31)


def pick_dtype(op) -> torch.dtype | None:
    supported = op.supported_dtypes("cpu")
    return next((d for d in DTYPE_PREFERENCE if d in supported), None)


# -- samples as leaves -----------------------------------------------------------------

@dataclasses.dataclass
class Sample:
    """One SampleInput flattened: ``leaves`` of ``((input, *args), kwargs)`` and its spec."""

    index: int
    leaves: list
    spec: Any
    input_is_tensor: bool

    @classmethod
    def of(cls, index: int, sample) -> "Sample":
        leaves, spec = tree_flatten(((sample.input, *sample.args), sample.kwargs))
        return cls(index, leaves, spec, isinstance(sample.input, torch.Tensor))

    def tensor_indices(self) -> list[int]:
        return [i for i, v in enumerate(self.leaves) if isinstance(v, torch.Tensor)]

    def describe(self) -> str:
        def one(v):
            if isinstance(v, torch.Tensor):
                return f"T{tuple(v.shape)}:{str(v.dtype).replace('torch.', '')}"
            return repr(v)
        return ("[" + ", ".join(one(v) for v in self.leaves) + "]")[:240]


def samples_of(op, limit: int | None) -> Iterator[Sample]:
    """The first ``limit`` (None: all) samples with a dense tensor dim to name."""
    torch.manual_seed(seed_of(op_id(op)))
    gen = op.sample_inputs("cpu", pick_dtype(op), requires_grad=False)
    samples = (Sample.of(i, s) for i, s in enumerate(gen))
    return itertools.islice((s for s in samples if is_dense(s) and namings(s)), limit)


def is_dense(sample: Sample) -> bool:
    return all(sample.leaves[i].layout == torch.strided for i in sample.tensor_indices())


def call(fn: Callable, leaves: list, spec, **extra):
    """``fn(*args, **kwargs, **extra)`` rebuilt from leaves; a torch.Tensor method
    descriptor (``torch.Tensor.add_``) is looked up on its first argument, so a
    NamedTensor ``self`` gets its own method."""
    args, kwargs = tree_unflatten(leaves, spec)
    name = getattr(fn, "__name__", None)
    if isinstance(args[0], NamedTensor) and name and getattr(torch.Tensor, name, None) is fn:
        return getattr(args[0], name)(*args[1:], **kwargs, **extra)
    return fn(*args, **kwargs, **extra)


def clone_leaves(leaves: list) -> list:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in leaves]


# -- namings ----------------------------------------------------------------------------

NAMINGS = {
    "a": "dim 0 of the main input named",
    "b": "the last dim of the main input named",
    "c": "dim 0 of the main input and of every tensor whose dim 0 has that size named",
    "d": "the main input plain, dim 0 of the first other tensor named",
}


def namings(sample: Sample) -> dict[str, dict[int, int]]:
    """naming letter -> {leaf index: dim named NAME} for this sample (``NAMINGS``)."""
    tensors = sample.tensor_indices()
    if not tensors:
        return {}
    main, others = tensors[0], tensors[1:]
    m = sample.leaves[main]
    out = {}
    if m.dim() >= 1:
        out["a"] = {main: 0}
        shared = [i for i in others if sample.leaves[i].dim() >= 1
                  and sample.leaves[i].shape[0] == m.shape[0]]
        if shared:
            out["c"] = {main: 0, **{i: 0 for i in shared}}
    if m.dim() >= 2:
        out["b"] = {main: m.dim() - 1}
    other = next((i for i in others if sample.leaves[i].dim() >= 1), None)
    if other is not None:
        out["d"] = {other: 0}
    return {k: out[k] for k in sorted(out) if _size(sample, out[k]) > 0}


def _size(sample: Sample, dims: dict[int, int]) -> int:
    i, d = next(iter(dims.items()))
    return sample.leaves[i].shape[d]


def instance(leaves: list, dims: dict[int, int], i: int) -> list:
    return [v.select(dims[j], i) if j in dims else v for j, v in enumerate(leaves)]


def name_leaves(leaves: list, dims: dict[int, int]) -> list:
    return [nx.named(v, {dims[j]: NAME}) if j in dims else v for j, v in enumerate(leaves)]


# -- variants ---------------------------------------------------------------------------

OUT_VARIANTS = ("out_plain", "out_named", "out_wrong")


def variants_of(op, sample: Sample) -> list[str]:
    """The variants the OpInfo has (method and in-place need a tensor ``self``)."""
    out = ["function"]
    if op.method_variant is not None and sample.input_is_tensor:
        out.append("method")
    if op.inplace_variant is not None and sample.input_is_tensor:
        out.append("inplace")
    if op.supports_out:
        out.extend(OUT_VARIANTS)
    return out


def variant_fn(op, variant: str) -> Callable:
    """The callable a variant runs (out= variants run the function with ``out=``)."""
    method = UNBOUND_CALLS.get((op_id(op), variant))
    if method:
        return lambda x, *args, **kwargs: getattr(x, method)(*args, **kwargs)
    if variant == "method":
        return op.method_variant
    return op.inplace_variant if variant == "inplace" else op.op


# -- the reference ----------------------------------------------------------------------

@dataclasses.dataclass
class Expect:
    """What the loop says the named call must give.

    ``raises``: the loop raises (``named_error=False``: any exception will do) or its
    result is no named value (``named_error=True``: a NamedAxisError is due).  Otherwise
    ``values``: the stacked outputs (flat, NAME leading), ``spec`` their structure,
    ``aliases`` per output whether every looped result is a view of a named input, and
    ``states`` the tensor arguments after the loop (leaf index -> value, NAME leading);
    or ``python``: the one Python value of a whole-value op.
    """

    raises: str | None = None
    named_error: bool = False
    values: list | None = None
    spec: Any = None
    aliases: list | None = None
    states: dict | None = None
    python: Any = None

    @classmethod
    def error(cls, why: str, named_error: bool) -> "Expect":
        return cls(raises=why, named_error=named_error)


def storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and values, NaN equal to NaN."""
    return a.shape == b.shape and bool(((a == b) | (a != a) & (b != b)).all())


def loop_reference(op, sample: Sample, variant: str, dims) -> Expect | None:
    """Run the op once per index of NAME on clones of the leaves (named leaves selected at
    the index, plain ones shared) and stack what it returns; the in-place variant leaves
    its results (per-index views of the target) in the target.  None: no reference (an
    in-place op that grows its target)."""
    inplace = variant == "inplace"
    if inplace and 0 not in dims:
        return Expect.error("a plain target written by every instance", True)
    fn = variant_fn(op, variant)
    leaves = clone_leaves(sample.leaves)
    try:
        outs = [call(fn, instance(leaves, dims, i), sample.spec)
                for i in range(_size(sample, dims))]
    except Exception as e:  # noqa: BLE001 - any error of the loop is the reference
        return Expect.error(f"loop raises {type(e).__name__}: {first_line(e)}", False)
    tensors = sample.tensor_indices()
    written = [j for j in tensors if j not in dims
               and not same_values(leaves[j], sample.leaves[j])]
    if written:
        return Expect.error(f"plain argument (leaf {written[0]}) written by every instance",
                            True)
    flats = [tree_flatten(o) for o in outs]
    columns = list(zip(*(f for f, _ in flats)))
    if any(not isinstance(v, (torch.Tensor, type(None))) for col in columns for v in col):
        if op.name in WHOLE_VALUE_OPS:
            return Expect(python=whole_value_reference(op, sample, dims))
        return Expect.error("instances return Python values", True)
    if any(len({(c.shape, c.dtype) for c in col}) > 1 for col in columns if col[0] is not None):
        return Expect.error("instances return tensors of different shapes", True)
    if inplace and grows_target(op, sample, dims, columns[0]):
        return None
    named_inputs = storages(leaves[j] for j in dims)
    return Expect(
        values=[None if col[0] is None else torch.stack(col) for col in columns],
        spec=flats[0][1],
        aliases=[col[0] is not None and all(
            c.numel() > 0 and c.untyped_storage().data_ptr() in named_inputs for c in col)
            for col in columns],
        states={j: leaves[j].movedim(dims[j], 0) if j in dims else leaves[j]
                for j in tensors if not (inplace and j == 0)})


def grows_target(op, sample: Sample, dims, results) -> bool:
    """An in-place op that resized its per-index target to more elements (torch's
    deprecated resize of a non-empty out; resize_ itself is compared by shape)."""
    per_index = sample.leaves[0].numel() // _size(sample, dims)
    return op_id(op) not in SHAPE_ONLY_OPS and any(r.numel() > per_index for r in results)


def whole_value_reference(op, sample: Sample, dims) -> Any:
    """equal / allclose on whole values: named shapes, positional shapes, then values."""
    first, second = sample.tensor_indices()[:2]
    named = [dims.get(i) for i in (first, second)]
    full = [sample.leaves[i] if d is None else sample.leaves[i].movedim(d, 0)
            for i, d in zip((first, second), named)]
    if (named[0] is None) != (named[1] is None) or full[0].shape != full[1].shape:
        return False
    leaves = list(sample.leaves)
    leaves[first], leaves[second] = full
    return call(op.op, leaves, sample.spec)


def reference(op, sample: Sample, variant: str, dims, cache: dict) -> Expect | None:
    """The loop for ``variant`` (function, method and out= share the function's loop);
    None where the variant does not apply (out= of a loop that gives no tensors or of an
    op that takes no such out, an in-place op that grows its target)."""
    if variant == "inplace":
        return loop_reference(op, sample, variant, dims)
    key = tuple(sorted(dims.items()))
    if key not in cache:
        cache[key] = loop_reference(op, sample, "function", dims)
    expect = cache[key]
    if variant not in OUT_VARIANTS:
        return expect
    if not expect.values or any(v is None for v in expect.values):
        return None
    if ("out", key) not in cache:
        cache["out", key] = takes_out(op, sample, dims, expect)
    if not cache["out", key]:
        return None
    if variant == "out_plain":
        return dataclasses.replace(expect, raises="a plain out written by every instance",
                                   named_error=True)
    if variant == "out_wrong":
        return dataclasses.replace(expect, raises=f"an out whose {NAME!r} has the wrong size",
                                   named_error=True)
    return expect


# -- the named call -----------------------------------------------------------------------

def make_out(expect: Expect, variant: str):
    """The out= argument: per-instance plain tensors, or named ones (NAME leading)."""
    def one(v: torch.Tensor):
        if variant == "out_plain":
            return torch.empty(v.shape[1:], dtype=v.dtype)
        size = v.shape[0] + (1 if variant == "out_wrong" else 0)
        return nx.named(torch.empty((size, *v.shape[1:]), dtype=v.dtype), {0: NAME})
    outs = [one(v) for v in expect.values]
    return outs[0] if len(outs) == 1 else tuple(outs)


def takes_out(op, sample: Sample, dims, expect: Expect) -> bool:
    """Whether the plain op, at index 0, takes an out= shaped like its result (some ops'
    results, e.g. nonzero(as_tuple=True), have no out= of that structure)."""
    leaves = instance(clone_leaves(sample.leaves), dims, 0)
    try:
        call(op.op, leaves, sample.spec, out=make_out(expect, "out_plain"))
    except Exception:  # noqa: BLE001 - no out= of this structure
        return False
    return True


@dataclasses.dataclass
class NamedRun:
    """The named call's result, the leaves it got (named ones as NamedTensors), its out."""

    result: Any
    leaves: list
    out: Any = None


def run_named(op, sample: Sample, variant: str, dims, expect: Expect) -> NamedRun:
    leaves = name_leaves(clone_leaves(sample.leaves), dims)
    fn = variant_fn(op, variant)
    if variant in OUT_VARIANTS:
        out = make_out(expect, variant)
        return NamedRun(call(fn, leaves, sample.spec, out=out), leaves, out)
    return NamedRun(call(fn, leaves, sample.spec), leaves)


# -- comparing ---------------------------------------------------------------------------

def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:160]


def as_stacked(v, want: torch.Tensor, plain_ok: bool = False) -> torch.Tensor | str:
    """A NamedTensor carrying exactly NAME -> plain with NAME leading; else why not.
    ``plain_ok``: a plain tensor of the loop's per-index shape stands for the same value
    at every index of NAME."""
    if plain_ok and isinstance(v, torch.Tensor) and v.shape == want.shape[1:]:
        return v.expand(want.shape)
    if not isinstance(v, NamedTensor):
        return f"result is a plain {type(v).__name__}, expected named {{{NAME!r}}}"
    if set(v.named_shape) != {NAME}:
        return f"result named_shape {v.named_shape}, expected only {NAME!r}"
    return nx.positional(v, {0: NAME})


def tensor_mismatch(got: torch.Tensor, want: torch.Tensor, shape_only: bool) -> str | None:
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} != loop {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != loop {want.dtype}"
    if shape_only or want.numel() == 0:
        return None
    if want.dtype in TOLERANCES:
        rtol, atol = TOLERANCES[want.dtype]
        try:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            return "values differ: " + " ".join(str(e).split())[:200]
        return None
    return None if same_values(got, want) else "values differ (exact dtype)"


def value_mismatch(got, want: torch.Tensor, shape_only: bool, plain_ok: bool) -> str | None:
    """``got`` (named result) against ``want`` (stacked loop, NAME leading)."""
    stacked = as_stacked(got, want, plain_ok)
    if isinstance(stacked, str):
        return stacked
    return tensor_mismatch(stacked, want, shape_only)


def physical(v) -> torch.Tensor:
    return v._data if isinstance(v, NamedTensor) else v


def shares_storage(a, b_list) -> bool:
    a = physical(a)
    return a.numel() == 0 or a.untyped_storage().data_ptr() in storages(map(physical, b_list))


def returned_mismatch(result, targets: tuple) -> str | None:
    """In-place and out= calls return their target(s): the object itself, or at least a
    value over the same storage."""
    got = result if isinstance(result, (tuple, list)) else (result,)
    if len(got) != len(targets):
        return f"returned {len(got)} values for {len(targets)} targets"
    for g, t in zip(got, targets):
        if g is not t and not (isinstance(g, NamedTensor) and shares_storage(g, [t])):
            return "returned a new value, not its target"
    return None


def outputs_mismatch(got_flat: list, expect: Expect, run: NamedRun, shape_only: bool,
                     check_alias: bool, plain_ok: bool = False) -> str | None:
    if len(got_flat) != len(expect.values):
        return f"{len(got_flat)} outputs, loop gives {len(expect.values)}"
    for j, (g, w) in enumerate(zip(got_flat, expect.values)):
        if w is None:
            why = None if g is None else f"{type(g).__name__}, loop gives None"
        else:
            why = value_mismatch(g, w, shape_only, plain_ok)
        if why is None and check_alias and expect.aliases[j] and not shares_storage(g, run.leaves):
            why = "the loop's results are views of a named input; the named result is a copy"
        if why:
            return f"output {j}: {why}"
    return None


def states_mismatch(expect: Expect, run: NamedRun, shape_only: bool) -> str | None:
    """The tensor arguments after the call against the loop's (in-place writes)."""
    for j, want in expect.states.items():
        got = run.leaves[j]
        why = (value_mismatch(got, want, shape_only, False) if isinstance(got, NamedTensor)
               else tensor_mismatch(got, want, shape_only))
        if why:
            return f"argument (leaf {j}) after the call: {why}"
    return None


def draws_dropout(sample: Sample) -> bool:
    """Whether the sample asks an attention op for dropout (``dropout_p > 0``, or
    multi_head_attention_forward's ``training=True``): a random mask, drawn per instance
    by the loop and once by the named call, so only shapes compare."""
    kwargs = tree_unflatten(sample.leaves, sample.spec)[1]
    return kwargs.get("dropout_p", 0.0) > 0 or kwargs.get("training") is True


def mismatch(op, variant: str, expect: Expect, run: NamedRun, sample: Sample) -> str | None:
    """Why the named call's result differs from the reference (None: it matches)."""
    name = op_id(op)
    shape_only = name in SHAPE_ONLY_OPS or (name in DROPOUT_OPS and draws_dropout(sample))
    if expect.python is not None:
        return None if run.result is expect.python else (
            f"returned {run.result!r}, the whole-value rule gives {expect.python!r}")
    if variant == "inplace":
        targets = (run.leaves[0],)
        why = outputs_mismatch([run.leaves[0]], expect, run, shape_only, check_alias=False)
    elif variant == "out_named":
        targets = run.out if isinstance(run.out, tuple) else (run.out,)
        why = outputs_mismatch(list(targets), expect, run, shape_only, check_alias=False)
    else:
        targets = None
        got_flat, got_spec = tree_flatten(run.result)
        why = outputs_mismatch(got_flat, expect, run, shape_only, check_alias=not shape_only,
                               plain_ok=name in PLAIN_RESULT_OPS)
        # structure against the function's loop: only the function (Tensor.lu returns a
        # plain tuple where torch.lu returns a structseq)
        if why is None and variant == "function" and got_spec != expect.spec:
            why = " ".join(f"output structure {got_spec} != loop {expect.spec}".split())
    if why is None and targets is not None:
        why = returned_mismatch(run.result, targets)
    return why or states_mismatch(expect, run, shape_only)


# -- one case, one op ---------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    """One case: where (op, sample, naming, variant), its outcome and why."""

    op: str
    sample: int
    naming: str
    variant: str
    outcome: str
    detail: str = ""
    shapes: str = ""

    def line(self) -> str:
        return (f"{self.op} [{self.variant}, naming {self.naming}, sample {self.sample} "
                f"{self.shapes}]: {self.detail}")


def run_case(op, sample: Sample, naming: str, variant: str, cache: dict) -> Outcome | None:
    """One case's outcome (None: the variant does not apply to this sample)."""
    dims = namings(sample)[naming]
    expect = reference(op, sample, variant, dims, cache)
    if expect is None:
        return None
    here = dict(op=op_id(op), sample=sample.index, naming=naming, variant=variant,
                shapes=sample.describe())
    try:
        run = run_named(op, sample, variant, dims, expect)
    except NamedAxisError as e:
        return Outcome(**here, outcome=REFUSED_OK if expect.raises else REFUSED,
                       detail=f"{type(e).__name__}: {first_line(e)}")
    except Exception as e:  # noqa: BLE001 - sorted into an outcome
        raised = f"{type(e).__name__}: {first_line(e)}"
        if expect.raises and not expect.named_error:
            return Outcome(**here, outcome=BOTH_RAISE, detail=raised)
        due = f"({expect.raises}) " if expect.raises else ""
        return Outcome(**here, outcome=RAW_ERROR, detail=due + raised)
    if expect.raises:
        return Outcome(**here, outcome=SILENT,
                       detail=f"returned a value; {expect.raises}, a NamedAxisError is due")
    why = mismatch(op, variant, expect, run, sample)
    return Outcome(**here, outcome=SILENT if why else MATCH, detail=why or "")


def skip_reason(op) -> str | None:
    if op_id(op) in SKIP_OPS:
        return SKIP_OPS[op_id(op)]
    if pick_dtype(op) is None:
        return "no CPU dtype among float32/float64/int64/bool/complex64"
    return None


# Default mode: the first DEFAULT_SAMPLES samples (with a dim to name) of every op, every
# naming and variant of them; NX_OPINFO_FULL=1: every sample.
DEFAULT_SAMPLES = 4


def sweep(name: str, full: bool = FULL) -> list[Outcome] | str:
    """Every case of the op called ``name``, or the reason it is skipped."""
    op = OPS[name]
    why = skip_reason(op)
    if why:
        return why
    outcomes = []
    with quiet():
        for sample in samples_of(op, None if full else DEFAULT_SAMPLES):
            cache: dict = {}
            for naming in namings(sample):
                for variant in variants_of(op, sample):
                    outcomes.append(run_case(op, sample, naming, variant, cache))
    return [o for o in outcomes if o is not None] or "no sample with a tensor dim to name"


@contextlib.contextmanager
def quiet():
    """Ops warn (out= resizes, deprecated overloads); the sweep only looks at results."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# -- the report -----------------------------------------------------------------------------

def format_report(results: dict[str, list[Outcome] | str], full: bool = FULL) -> str:
    """Counts over ``results`` (op name -> outcomes or skip reason), the skipped ops with
    their reasons, then every silent mismatch and raw error."""
    counts: collections.Counter = collections.Counter()
    skipped = {k: v for k, v in results.items() if isinstance(v, str)}
    ran = [outs for outs in results.values() if not isinstance(outs, str)]
    counts["ops"] = len(ran)
    for outs in ran:
        counts["samples"] += len({o.sample for o in outs})
        counts["cases"] += len(outs)
        counts.update(o.outcome for o in outs)
    lines = [f"mode: {'full' if full else 'default'}"]
    lines += [f"{k}: {counts[k]}" for k in ("ops", "samples", "cases", *OUTCOMES)]
    lines.append(f"skipped ops: {len(skipped)}")
    lines += [f"  {k}: {v}" for k, v in sorted(skipped.items())]
    for kind in (SILENT, RAW_ERROR):
        found = [o for outs in ran for o in outs if o.outcome == kind]
        lines.append(f"{kind} ({len(found)}):")
        lines += ["  " + o.line() for o in found]
    return "\n".join(lines)
