"""PyTorch's ``test/test_namedtensor.py`` translated through ``docs/migrating.md``.

Each test is named after the PyTorch test it translates (``test_<original>``, with a
suffix where one original is split) and cites it.  PyTorch's named tensors label the
*dims* of one tensor; here a NamedTensor has positional dims (``.shape``) and an
order-free set of named axes (``.named_shape``), ops act once per index of the named
axes (vmap semantics) and broadcast by name.  Where that model deliberately differs
from PyTorch's, the test asserts *our* documented behaviour, carries a
``# DIFFERENCE: <reason>`` comment and is listed in ``DIFFERENCES`` below.  Library
bugs found by the translation are ``xfail(strict=True, reason="BUG: ...")``.

Values are checked against plain-torch references: a named value is compared through
``nx.positional(x, order)`` (named axes placed as leading dims), never through
``torch.testing.assert_close`` on the NamedTensor itself (see DIFFERENCES).

Original: https://github.com/pytorch/pytorch/blob/main/test/test_namedtensor.py
Not translated (no counterpart): ``test_no_jit_tracer_support`` and
``test_no_jit_script_support`` (TorchScript is deprecated in torch; docs/migrating.md),
``test_align_tensors`` / ``test_align_tensors_two_inputs`` (``@unittest.skip`` upstream).
"""
from __future__ import annotations

import copy
import io
import pickle
import sys
import warnings
from collections import OrderedDict
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

# PyTorch's own named tensors (Dimname overloads, has_names, ...) exist before torch 2.13,
# where the function forms with a str dim reach them instead of failing in the parser
_BEFORE_2_13 = pytest.mark.skipif(
    tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13),
    reason="translated for torch 2.13, where PyTorch's named tensors are gone")
from named_axes import (AxisSizeError, AxisSpecError, AxisTypeError, NamedAxisError,
                        NamedTensor, ShapeError, UnboundAxisError)

# (test name, reason): where our model deliberately differs from PyTorch's named tensors.
DIFFERENCES = [
    ("test_aaa_must_run_first_check_experimental_warning",
     "naming a value emits no 'experimental feature' warning"),
    ("test_has_names",
     "no Tensor.has_names(): write bool(x.named_shape)"),
    ("test_py3_ellipsis",
     "x.names lists the named axes first (storage order), then None per positional dim; "
     "names are an order-free set, not dim labels"),
    ("test_refine_names_named_input",
     "refine_names lists positional dims only: axes already named are not dims, so "
     "re-listing them (PyTorch's no-op refine) is an entry-count error"),
    ("test_index_fill",
     "x.index_fill('C', ...) is refused by torch 2.13's argument parser (TypeError, no "
     "Dimname overloads); index_fill acts on positional dims and keeps the named axes"),
    ("test_squeeze",
     "squeeze('C') by name is refused (named axes have no order/position); x[{'C': 0}] "
     "drops a size-1 named axis; squeeze() acts on positional dims only"),
    ("test_repr",
     "repr is 'NamedTensor(shape=..., named_shape=...)' plus the values, not "
     "'tensor(..., names=(...))'"),
    ("test_diagonal_by_name",
     "diagonal(outdim=, dim1=name, dim2=name) is refused: diagonal acts on positional "
     "dims (named axes have no order)"),
    ("test_no_save_support",
     "torch.save / torch.load(weights_only=True) of a NamedTensor is supported"),
    ("test_no_pickle_support",
     "pickling a NamedTensor is supported"),
    ("test_no_multiprocessing_support",
     "ForkingPickler (multiprocessing) of a NamedTensor is supported"),
    ("test_copy_transpose_into_unnamed",
     "copy_ of a named value into a plain tensor is refused (AxisSizeError): in-place "
     "writes never add named axes to their target"),
    ("test_rename_",
     "no rename_ (names are not mutable state): x = x.rename(...)"),
    ("test_rename_positional_and_none",
     "rename(None) is refused (named axes are placed with align_to/nx.positional, not "
     "dropped); positional rename('H', 'W') is refused (use refine_names / keywords)"),
    ("test_rename_globber",
     "positional renaming with '...' globs is refine_names(...) on positional dims"),
    ("test_set_names_property",
     "x.names has no setter: x = x.rename(...) / x.refine_names(...)"),
    ("test_factory_edge_cases_string_names",
     "a string spec 'N' is a prefix ['N', ...] (names the leading dim) where PyTorch's "
     "names='N' was a TypeError"),
    ("test_factory_edge_cases_65_names",
     "no 64-name limit"),
    ("test_tensor_from_named_tensor",
     "torch.tensor(named) is refused (TypeError: torch.tensor has no extension point and "
     "a NamedTensor is not a torch.Tensor); copy with x.clone()"),
    ("test_size_none",
     "x.size(None) is x.size() (the positional shape), as for plain torch tensors; "
     "PyTorch's named tensors raised"),
    ("test_transpose_variants",
     "transpose of named axes is refused (named axes have no order); transpose / t act on "
     "positional dims"),
    ("test_resize_as_into_unnamed",
     "unnamed.resize_as_(named) is refused (in-place ops never add named axes to their "
     "target)"),
    ("test_cdist_size_one_name",
     "a named axis has one size: no size-1 broadcasting between same-named axes "
     "(AxisSizeError); PyTorch broadcast N:1 against N:5"),
    ("test_info_smoke_item",
     ".item() needs a value with no named axes (AxisTypeError), even when all sizes are 1"),
    ("test_info_smoke",
     "is_nonzero() needs a value with no named axes (AxisTypeError), as .item() and bool()"),
    ("test_split_fns_propagates_names_named_dim",
     "split/chunk along a named axis are refused (a named axis has one size); split the "
     "positional dims, or align_to(name, ...) first"),
    ("test_any_all_no_dim",
     "x.any()/x.all() without dim reduce the positional dims only (per instance, vmap "
     "semantics); named axes stay"),
    ("test_binary_ops_name_mismatch",
     "operands broadcast by name: different names give the union, reordered names align "
     "(PyTorch: 'do not match')"),
    ("test_binary_ops_wildcard",
     "no None wildcard: a positional dim never matches a named axis; [None, 'C'] is a "
     "positional dim plus named axis C"),
    ("test_binary_ops_mixed_unnamed_named",
     "plain operands broadcast against the positional dims only; their dims stay "
     "positional (names are never inferred for them)"),
    ("test_pow_special",
     "out= for a named result must be a NamedTensor with the result's named shape "
     "(a plain out is refused)"),
    ("test_out_fn_semantics_plain_out",
     "a plain out= tensor cannot receive a named result (AxisSizeError); PyTorch named "
     "the out tensor"),
    ("test_logcumsumexp",
     "torch.logcumsumexp(x, 'D') is refused by torch 2.13's argument parser; the method "
     "x.logcumsumexp('D') is used"),
    ("test_flatten_not_consecutive",
     "any named axes may be merged, in the order listed (named axes have no order); "
     "PyTorch required consecutive dims"),
    ("test_flatten_str_overload",
     "flatten('D', 'W', 'features') (start/end names) is refused: named axes have no "
     "order, so no range; list them: flatten(['D', 'H', 'W'], 'features')"),
    ("test_unsupported_op_error_msg",
     "pdist works per instance of the named axes (vmap semantics) instead of 'not yet "
     "supported with named tensors'"),
    ("test_reduction_fns_function_form",
     "function forms with a name (torch.sum(x, 'C')) are refused by torch 2.13's argument "
     "parser (TypeError); method forms x.sum('C') / nx.sum(x, 'C') are used"),
    ("test_reduction_fns_unbind",
     "unbind('C') along a named axis is refused; x.align_to('C', ...).unbind(0)"),
    ("test_reduction_fns_std_mean_var_mean",
     "torch.std_mean / var_mean have no method form and the function form refuses a str "
     "dim; compute std and mean by name separately"),
    ("test_reduction_fns_complete_reduce",
     "op(x) / op(x, None) reduce the positional dims only (per instance); reducing every "
     "axis lists the names"),
    ("test_reduction_fns_keepdim",
     "keepdim=True drops a reduced named axis (JAX's keepdims under xmap); reduced "
     "positional dims stay as size 1"),
    ("test_reduction_fns_out_variant",
     "out= for a named result must be a NamedTensor with the result's named shape"),
    ("test_masked_select",
     "masked_select is per instance: the mask must select the same count in every "
     "instance (ShapeError otherwise); the named axes stay"),
    ("test_cat_names_union",
     "cat of values with different named axes broadcasts them by name (union)"),
    ("test_masked_fill_broadcast",
     "masked_fill broadcasts by name: a mask with more named axes widens the result, a "
     "mask with another name adds it (PyTorch: errors)"),
    ("test_using_unseen_uninterned_string_refcounts",
     "names are not interned; plan caches keep a bounded number of references to the "
     "name objects they saw"),
    ("test_select_by_name",
     "select('C', i) by name is refused: x[{'C': i}] is the named form"),
    ("test_as_strided",
     "as_strided acts per instance: the named axes stay (PyTorch dropped all names)"),
    ("test_align_to_partial",
     "align_to places only the names listed: unlisted named axes stay named (not "
     "'Cannot find dim'), listed names the value lacks become size-1 dims"),
    ("test_align_to_ellipsis_named_glob",
     "'...' in align_to stands for the positional dims, not for the unlisted named axes"),
    ("test_mm_name_inference",
     "matmul-family ops contract positional dims; named axes batch. Contracting a named "
     "axis is nx.lax.pdot / nx.einsum"),
    ("test_bmm_batch_names_mismatch",
     "named batch axes broadcast by name (union) instead of 'do not match'"),
    ("test_tensor_grad_is_unnamed",
     "gradients keep the named axes of their input (x.grad is named)"),
    ("test_autograd_warns_named_grad",
     "backward(named_grad) is supported without a warning; the gradient is aligned by "
     "name"),
    ("test_comparison_ops_out",
     "out= for a named result must be a NamedTensor with the result's named shape"),
    ("test_assertTensorDataAndNamesEqual",
     "torch.testing.assert_close cannot take NamedTensors (not a torch.Tensor subclass, "
     "no extension point): compare nx.positional(...) or use torch.allclose"),
]


pytestmark = [
    _BEFORE_2_13,
    # torch.vmap's batching fallback notes (resize_as_, polygamma_, addmm_, ...)
    pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning"),
    pytest.mark.filterwarnings("ignore:To copy construct from a tensor:UserWarning"),
]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def nt(t, spec):
    return nx.named(t, spec)


def P(x, spec):
    """The values of ``x`` with its named axes placed per ``spec``, as a torch.Tensor."""
    return nx.positional(x, spec)


def close(a, b, **kw):
    torch.testing.assert_close(a, b, **kw)


def test_differences_list_names_real_tests():
    # every DIFFERENCES entry is a test here carrying the comment marker, and back
    import inspect

    tests = {n: f for n, f in globals().items() if n.startswith("test_") and callable(f)}
    names = [n for n, _ in DIFFERENCES]
    assert len(names) == len(set(names))
    assert not set(names) - set(tests), set(names) - set(tests)
    marked = {n for n, f in tests.items()
              if "# DIFFERENCE" + ":" in inspect.getsource(f)}
    assert marked == set(names), (marked ^ set(names))


# -- basics ---------------------------------------------------------------------------------

def test_aaa_must_run_first_check_experimental_warning():
    # test_namedtensor.py::test_aaa_must_run_first_check_experimental_warning
    # DIFFERENCE: no 'experimental feature' warning.
    with warnings.catch_warnings(record=True) as warns:
        warnings.simplefilter("always")
        x = nt(torch.randn(3, 3), "N C")
    assert warns == []
    assert x.named_shape == {"N": 3, "C": 3}


def test_trivial():
    # test_namedtensor.py::test_trivial
    pass


def test_none_names_refcount():
    # test_namedtensor.py::test_none_names_refcount
    def scope():
        unnamed = nt(torch.empty(2, 3), {})
        assert unnamed.names == (None, None)

    before = sys.getrefcount(None)
    for _ in range(10):
        scope()
    assert sys.getrefcount(None) - before < 5


def test_has_names():
    # test_namedtensor.py::test_has_names
    # DIFFERENCE: no has_names(); bool(x.named_shape).
    unnamed = nt(torch.empty(2, 3), {})
    none_named = nt(torch.empty(2, 3), [None, None])
    partially_named = nt(torch.empty(2, 3), ["N", None])
    fully_named = nt(torch.empty(2, 3), ["N", "C"])
    assert not unnamed.named_shape
    assert not none_named.named_shape
    assert partially_named.named_shape == {"N": 2}
    assert fully_named.named_shape == {"N": 2, "C": 3}
    with pytest.raises(AttributeError):
        fully_named.has_names()


def test_py3_ellipsis():
    # test_namedtensor.py::test_py3_ellipsis
    # DIFFERENCE: .names lists the named axes first, then None per positional dim.
    tensor = torch.randn(2, 3, 5, 7)
    output = nt(tensor, {}).refine_names("N", ..., "C")
    assert output.named_shape == {"N": 2, "C": 7}
    assert output.shape == (3, 5)
    assert output.names == ("N", "C", None, None)
    assert torch.equal(output.align_to("N", ..., "C"), tensor)


def test_refine_names():
    # test_namedtensor.py::test_refine_names (unnamed, partially named, errors, glob)
    t = torch.randn(1, 2, 3)
    out = nt(t, {}).refine_names("N", "C", "H")
    assert out.named_shape == {"N": 1, "C": 2, "H": 3} and out.shape == ()
    assert torch.equal(P(out, "N C H"), t)

    # partially named -> named: only positional dims are listed
    out = nt(t, {1: "C"}).refine_names(None, "H")
    assert out.named_shape == {"C": 2, "H": 3} and out.shape == (1,)
    assert torch.equal(out.align_to(..., "C", "H"), t)

    # too few dims
    with pytest.raises(AxisSpecError, match="entries for 2 dim"):
        nt(torch.randn(2, 3), {}).refine_names("N", "C", "H")

    # globbing
    t4 = torch.randn(1, 1, 2, 3)
    out = nt(t4, {}).refine_names("...", "C", "H")
    assert out.named_shape == {"C": 2, "H": 3} and out.shape == (1, 1)
    assert torch.equal(out.align_to(..., "C", "H"), t4)

    # invalid identifiers and two globs
    with pytest.raises(AxisTypeError):
        nt(torch.randn(3), {}).refine_names("1")
    with pytest.raises(AxisSpecError, match="once"):
        nt(torch.randn(3, 3), {}).refine_names(..., "a", ...)


def test_refine_names_named_input():
    # test_namedtensor.py::test_refine_names (named -> named; 'D' -> 'N'; 'D' -> None)
    # DIFFERENCE: named axes are not dims; refine_names lists positional dims only.
    x = nt(torch.randn(1, 2, 3), "N C H")
    with pytest.raises(AxisSpecError, match="entries for 0 dim"):
        x.refine_names("N", "C", "H")
    d = nt(torch.randn(3), "D")
    with pytest.raises(AxisSpecError):
        d.refine_names("N")
    with pytest.raises(AxisSpecError):
        d.refine_names(None)
    # naming an axis the value already has is an error too
    with pytest.raises(AxisSpecError, match="already has"):
        nt(torch.randn(3, 2), "D ...").refine_names("D")


def test_detach():
    # test_namedtensor.py::test_detach
    base = torch.randn(3, requires_grad=True)
    x = nt(base, "N")
    out = x.detach()
    assert out.named_shape == {"N": 3} and not out.requires_grad
    assert torch.equal(P(out, "N"), base.detach())
    y = nt(torch.randn(3, requires_grad=True), "N")
    out = y.detach_()
    assert out.named_shape == {"N": 3} and not y.requires_grad


def test_index_fill():
    # test_namedtensor.py::test_index_fill
    # DIFFERENCE: torch's parser refuses a str dim; index_fill acts on positional dims.
    t = torch.randn(3, 5)
    x = nt(t, "N C")
    with pytest.raises(TypeError):
        x.index_fill("C", torch.tensor([0, 1]), 5)
    idx = torch.tensor([0, 1])
    xp = nt(t, "N ...")
    for value in (5, torch.tensor(4.0)):
        out = xp.index_fill(0, idx, value)
        assert out.named_shape == {"N": 3}
        assert torch.equal(P(out, "N ..."), t.index_fill(1, idx, value))
        y = nt(t.clone(), "N ...")
        out = y.index_fill_(0, idx, value)
        assert out.named_shape == {"N": 3}
        assert torch.equal(P(y, "N ..."), t.index_fill(1, idx, value))
    # filling along a named axis: assign through a named slice
    y = x.clone()
    y[{"C": slice(0, 2)}] = 5.0
    assert torch.equal(P(y, "N C"), t.index_fill(1, idx, 5))


def test_equal():
    # test_namedtensor.py::test_equal
    tensor = torch.randn(2, 3)
    other = tensor.clone()
    assert torch.equal(nt(tensor, "N C"), nt(other, "N C"))
    assert not torch.equal(nt(tensor, "M C"), nt(other, "N C"))
    assert not torch.equal(nt(tensor, [None, "C"]), nt(other, "N C"))
    # names are an order-free set: the same value stored in another layout is equal
    assert torch.equal(nt(tensor, "N C"), nt(other.t(), "C N"))
    assert torch.allclose(nt(tensor, "N C"), nt(other.t(), "C N"))
    assert not torch.equal(nt(tensor, "N C"), nt(other.t().contiguous(), "N C"))


def test_squeeze():
    # test_namedtensor.py::test_squeeze
    # DIFFERENCE: squeeze by name refused; x[{'C': 0}] drops a size-1 named axis.
    t = torch.randn(3, 1, 1, 1)
    x = nt(t, "N C H W")
    with pytest.raises(AxisSpecError):
        x.squeeze("C")
    out = x[{"C": 0}]
    assert out.named_shape == {"N": 3, "H": 1, "W": 1}
    assert torch.equal(P(out, "N H W"), t.squeeze(1))
    xp = nt(t, "N ...")
    out = xp.squeeze()
    assert out.named_shape == {"N": 3} and out.shape == ()
    assert torch.equal(P(out, "N"), t.squeeze())
    assert xp.squeeze(0).shape == (1, 1)


def test_repr():
    # test_namedtensor.py::test_repr
    # DIFFERENCE: NamedTensor's own repr.
    named_tensor = nt(torch.zeros(2, 3), "N C")
    r = repr(named_tensor)
    assert r.startswith("NamedTensor(shape=(), named_shape={'N': 2, 'C': 3})")
    assert "0., 0., 0." in r
    unnamed_tensor = torch.zeros(2, 3)
    assert repr(unnamed_tensor) == "tensor([[0., 0., 0.],\n        [0., 0., 0.]])"


def test_diagonal():
    # test_namedtensor.py::test_diagonal (positional dims; named axes kept)
    t = torch.randn(2, 3, 5, 7)
    x = nt(t, "A B ...")
    out = x.diagonal()
    assert out.named_shape == {"A": 2, "B": 3} and out.shape == (5,)
    assert torch.equal(P(out, "A B ..."), t.diagonal(dim1=2, dim2=3))
    y = nt(t, "A ...")
    out = y.diagonal(1, 0, 2)
    assert out.named_shape == {"A": 2} and out.shape == (5, 3)
    assert torch.equal(P(out, "A ..."), t.diagonal(1, 1, 3))


def test_diagonal_by_name():
    # test_namedtensor.py::test_diagonal (outdim=, dim1=name, dim2=name)
    # DIFFERENCE: diagonal acts on positional dims only.
    x = nt(torch.zeros(2, 3, 5, 7), "A B ...")
    with pytest.raises(NamedAxisError):
        x.diagonal(outdim="E", dim1="B", dim2="D")


def test_max_pooling():
    # test_namedtensor.py::test_max_pooling
    t1 = torch.randn(2, 3, 5)
    t2 = torch.randn(2, 3, 5, 7)
    t3 = torch.randn(2, 3, 5, 7, 9)
    for fn, t, k in ((F.max_pool1d, t1, 2), (F.max_pool2d, t2, [2, 2]),
                     (F.max_pool3d, t3, [2, 2, 2])):
        out = fn(nt(t, "A ..."), k)
        assert out.named_shape == {"A": 2}
        assert torch.equal(P(out, "A ..."), fn(t, k))
    for fn, t, k in ((F.max_pool1d_with_indices, t1, 2),
                     (F.max_pool2d_with_indices, t2, [2, 2]),
                     (F.max_pool3d_with_indices, t3, [2, 2, 2])):
        values, indices = fn(nt(t, "A ..."), k)
        ref_v, ref_i = fn(t, k)
        assert values.named_shape == indices.named_shape == {"A": 2}
        assert torch.equal(P(values, "A ..."), ref_v)
        assert torch.equal(P(indices, "A ..."), ref_i)


def test_max_pooling_without_names_does_not_warn():
    # test_namedtensor.py::test_max_pooling_without_names_does_not_warn (named input too)
    base = torch.randn(2, 3, 5, 7, requires_grad=True)
    with warnings.catch_warnings(record=True) as warns:
        warnings.simplefilter("always")
        result = F.max_pool2d(nt(base, "A ..."), [2, 2])
        result.sum().sum("A").backward()
    assert [str(w.message) for w in warns] == []
    ref = base.detach().clone().requires_grad_()
    F.max_pool2d(ref, [2, 2]).sum().backward()
    assert torch.equal(base.grad, ref.grad)


def test_no_save_support():
    # test_namedtensor.py::test_no_save_support
    # DIFFERENCE: torch.save works.
    x = nt(torch.randn(2, 3), "N C")
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    y = torch.load(buf, weights_only=True)
    assert isinstance(y, NamedTensor) and torch.equal(x, y)


def test_no_pickle_support():
    # test_namedtensor.py::test_no_pickle_support
    # DIFFERENCE: pickle works.
    x = nt(torch.randn(2, 3), "N C")
    y = pickle.loads(pickle.dumps(x))
    assert torch.equal(x, y)
    assert torch.equal(copy.deepcopy(x), x)


def test_no_multiprocessing_support():
    # test_namedtensor.py::test_no_multiprocessing_support
    # DIFFERENCE: ForkingPickler works.
    x = nt(torch.randn(2, 3), "N C")
    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(x)
    y = pickle.loads(buf.getvalue())
    assert torch.equal(x, y)


def test_big_tensor_repr_has_names():
    # test_namedtensor.py::test_big_tensor_repr_has_names
    x = nt(torch.randn(128, 3, 64, 64), "N C H W")
    r = repr(x)
    assert "named_shape={'N': 128, 'C': 3, 'H': 64, 'W': 64}" in r
    assert len(r) < 20000   # summarized, not 1.5M values


def test_noncontig_contiguous():
    # test_namedtensor.py::test_noncontig_contiguous
    t = torch.randn(2, 3).t()
    x = nt(t, "N C")
    out = x.contiguous()
    assert out.named_shape == {"N": 3, "C": 2}
    assert torch.equal(P(out, "N C"), t)
    t3 = torch.randn(2, 3, 4).transpose(1, 2)
    y = nt(t3, "N ...")
    out = y.contiguous()
    assert out.named_shape == {"N": 2} and out.is_contiguous()
    assert torch.equal(P(out, "N ..."), t3)


def test_copy_transpose():
    # test_namedtensor.py::test_copy_transpose (named target)
    src = torch.randn(5, 2).t()
    x = nt(torch.empty(2, 5), "N C")
    y = nt(src, "N C")
    x.copy_(y)
    assert x.named_shape == {"N": 2, "C": 5}
    assert torch.equal(P(x, "N C"), src)
    # names align by name, whatever the storage order
    z = nt(torch.empty(5, 2), "C N")
    z.copy_(y)
    assert torch.equal(P(z, "N C"), src)


def test_copy_transpose_into_unnamed():
    # test_namedtensor.py::test_copy_transpose (_test(None, ('N', 'C'), ('N', 'C')))
    # DIFFERENCE: in-place writes never add named axes to a plain target.
    x = torch.empty(2, 5)
    y = nt(torch.randn(5, 2).t(), "N C")
    with pytest.raises(AxisSizeError):
        x.copy_(y)


# -- rename / names --------------------------------------------------------------------------

def test_rename_():
    # test_namedtensor.py::test_rename_
    # DIFFERENCE: no rename_; rebinding x = x.rename(...) never copies data.
    x = nt(torch.empty(1, 1), "N C")
    with pytest.raises(AttributeError):
        x.rename_("H", "W")
    y = x.rename(N="H", C="W")
    assert y.named_shape == {"H": 1, "W": 1} and y.data_ptr() == x.data_ptr()


def test_rename():
    # test_namedtensor.py::test_rename (keyword / dict forms, view, no mutation, duplicates)
    t = torch.randn(1, 2)
    tensor = nt(t, "N C")
    out = tensor.rename(N="H", C="W")
    assert out.named_shape == {"H": 1, "W": 2}
    assert torch.equal(P(out, "H W"), t)
    assert tensor.rename({"N": "H"}).named_shape == {"H": 1, "C": 2}
    # tensor itself unchanged
    assert tensor.named_shape == {"N": 1, "C": 2}
    with pytest.raises(AxisSpecError, match="two axes named"):
        tensor.rename(N="C")
    # swapping names is fine
    sw = tensor.rename(N="C", C="N")
    assert sw.named_shape == {"C": 1, "N": 2}
    assert torch.equal(P(sw, "C N"), t)
    # rename returns a view
    assert tensor.rename(N="H").data_ptr() == tensor.data_ptr()
    with pytest.raises(AxisTypeError):
        tensor.rename(N="1")


def test_rename_positional_and_none():
    # test_namedtensor.py::test_rename (rename(None), rename('H', 'W'), rename(None, N=...))
    # DIFFERENCE: named axes are placed, not dropped; positional names via refine_names.
    t = torch.randn(1, 2)
    tensor = nt(t, "N C")
    with pytest.raises(AxisTypeError, match="align_to"):
        tensor.rename(None)
    with pytest.raises(AxisTypeError, match="refine_names"):
        tensor.rename("H", "W")
    with pytest.raises(AxisTypeError):
        tensor.rename(None, N="batch")
    # what rename(None) was for:
    plain = tensor.align_to("N", "C")
    assert type(plain) is torch.Tensor and torch.equal(plain, t)
    assert plain.data_ptr() == tensor.data_ptr()


def test_rename_globber():
    # test_namedtensor.py::test_rename_globber
    # DIFFERENCE: positional renaming with globs is refine_names.
    scalar = nt(torch.randn([]), {})
    assert scalar.refine_names("...").names == ()
    unnamed = nt(torch.empty(1, 2, 3, 4), {})
    assert unnamed.refine_names("...").named_shape == {}
    out = unnamed.refine_names("...", "H", "W")
    assert out.named_shape == {"H": 3, "W": 4} and out.shape == (1, 2)
    out = unnamed.refine_names("N", "...", "W")
    assert out.named_shape == {"N": 1, "W": 4} and out.shape == (2, 3)
    out = unnamed.refine_names("N", "C", "...")
    assert out.named_shape == {"N": 1, "C": 2} and out.shape == (3, 4)
    # empty glob
    assert unnamed.refine_names("...", None, None, None, None).named_shape == {}
    out = unnamed.refine_names("N", "C", "H", "...", "W")
    assert out.named_shape == {"N": 1, "C": 2, "H": 3, "W": 4}
    # named tensor: renaming with a glob is keywords on the named axes
    named = nt(torch.empty(1, 2, 3, 4), "N C H W")
    out = named.rename(N="batch", C="channels", W="width")
    assert out.named_shape == {"batch": 1, "channels": 2, "H": 3, "width": 4}
    with pytest.raises(AxisSpecError, match="once"):
        unnamed.refine_names("...", "channels", "...")


def test_rename_rename_map():
    # test_namedtensor.py::test_rename_rename_map
    scalar = nt(torch.randn([]), {})
    unnamed = nt(torch.empty(1, 1, 1, 1), {})
    named = nt(torch.empty(1, 2, 3, 4), "N C H W")
    with pytest.raises(AxisSpecError, match="no named axis 'N'"):
        scalar.rename(N="batch")
    with pytest.raises(AxisSpecError, match="no named axis 'N'"):
        unnamed.rename(N="batch")
    with pytest.raises(AxisSpecError, match="no named axis 'B'"):
        named.rename(B="batch")
    with pytest.raises(AxisSpecError, match="no named axis 'B'"):
        named.rename(H="height", B="batch")
    assert named.rename(N="batch").data_ptr() == named.data_ptr()
    assert named.rename(N="batch").named_shape == {"batch": 1, "C": 2, "H": 3, "W": 4}
    assert named.rename(N="batch", H="height").named_shape == {
        "batch": 1, "C": 2, "height": 3, "W": 4}


def test_set_names_property():
    # test_namedtensor.py::test_set_names_property
    # DIFFERENCE: .names is read-only.
    x = nt(torch.empty(1, 1), "N C")
    with pytest.raises(AttributeError):
        x.names = ("N", "W")
    assert x.names == ("N", "C")


# -- factories -----------------------------------------------------------------------------

def test_factory_edge_cases():
    # test_namedtensor.py::test_factory_edge_cases / _test_factory (torch.empty)
    assert nt(torch.empty([]), []).names == ()
    assert nt(torch.empty(1, 2, 3), {}).names == (None, None, None)
    x = nt(torch.empty(1, 2, 3), ("N", "T", "D"))
    assert x.named_shape == {"N": 1, "T": 2, "D": 3}
    x = nt(torch.empty(1, 2, 3), ["N", None, "D"])
    assert x.named_shape == {"N": 1, "D": 3} and x.shape == (2,)
    x = nt(torch.empty(1, 2, 3), ["_1", "batch9", "BATCH_5"])
    assert x.named_shape == {"_1": 1, "batch9": 2, "BATCH_5": 3}
    with pytest.raises(AxisTypeError, match="identifier"):
        nt(torch.empty(2), ["1"])
    with pytest.raises(AxisTypeError, match="identifier"):
        nt(torch.empty(2), ["?"])
    with pytest.raises(AxisSpecError, match="rank"):
        nt(torch.empty(2, 1), ["N"])
    with pytest.raises(AxisSpecError, match="more than once"):
        nt(torch.empty(2, 1, 1), ["N", "C", "N"])
    names64 = ["A" * i for i in range(1, 65)]
    x = nt(torch.empty([1] * 64), names64)
    assert list(x.named_shape) == names64


def test_factory_edge_cases_string_names():
    # test_namedtensor.py::_test_factory (factory(2, 1, names='N') -> TypeError)
    # DIFFERENCE: a string spec is a prefix: 'N' reads as ['N', ...].
    t = torch.randn(2, 1)
    x = nt(t, "N")
    assert x.named_shape == {"N": 2} and x.shape == (1,)
    assert torch.equal(P(x, "N ..."), t)


def test_factory_edge_cases_65_names():
    # test_namedtensor.py::_test_factory ('only support up to 64 dims')
    # DIFFERENCE: no 64-name limit.
    names65 = ["A" * i for i in range(1, 66)]
    x = nt(torch.empty([1] * 65), names65)
    assert len(x.named_shape) == 65


@pytest.mark.parametrize("factory", [torch.ones, torch.rand, torch.randn, torch.zeros])
def test_factory_coverage(factory):
    # test_namedtensor.py::test_factory_coverage
    torch.manual_seed(0)
    result = nt(factory(1, 2, 3), ("N", "T", "D"))
    torch.manual_seed(0)
    expected = factory(1, 2, 3)
    assert result.named_shape == {"N": 1, "T": 2, "D": 3}
    assert torch.equal(P(result, "N T D"), expected)


def test_factory_coverage_full():
    # test_namedtensor.py::test_factory_coverage (torch.full)
    result = nt(torch.full([1, 2, 3], 2.0), "N T D")
    assert result.named_shape == {"N": 1, "T": 2, "D": 3}
    assert torch.equal(P(result, "N T D"), torch.full([1, 2, 3], 2.0))


def test_tensor_from_lists():
    # test_namedtensor.py::test_tensor_from_lists
    x = nt(torch.tensor([[1]]), ["N", "C"])
    assert x.named_shape == {"N": 1, "C": 1}
    x = nt(torch.tensor([1]), ["N"])
    assert x.named_shape == {"N": 1}
    with pytest.raises(AxisSpecError, match="rank"):
        nt(torch.tensor([1]), ["N", "C"])


def test_tensor_from_numpy():
    # test_namedtensor.py::test_tensor_from_numpy
    arr = np.array([[1]])
    x = nt(torch.tensor(arr), ["N", "C"])
    assert x.named_shape == {"N": 1, "C": 1}
    # nx.named takes a numpy array directly too
    y = nt(arr, ["N", "C"])
    assert torch.equal(x, y)


def test_tensor_from_tensor():
    # test_namedtensor.py::test_tensor_from_tensor
    t = torch.randn(1, 1)
    x = nt(torch.tensor(t), ["N", "C"])
    assert x.named_shape == {"N": 1, "C": 1}
    assert torch.equal(P(x, "N C"), t)


def test_tensor_from_named_tensor():
    # test_namedtensor.py::test_tensor_from_named_tensor
    # DIFFERENCE: torch.tensor(named) is refused; x.clone() copies with the names.
    x = nt(torch.randn(1, 1), "N D")
    with pytest.raises(TypeError):
        torch.tensor(x)
    y = x.clone()
    assert torch.equal(x, y) and y.data_ptr() != x.data_ptr()


# -- size / stride -------------------------------------------------------------------------

def test_size():
    # test_namedtensor.py::test_size
    t = nt(torch.empty(2, 3, 5), ["N", None, "C"])
    assert t.size("N") == 2
    assert t.size("C") == 5
    assert t.size(0) == 3 and t.size() == (3,)
    with pytest.raises(AxisSpecError, match="no named axis 'channels'"):
        t.size("channels")
    with pytest.raises(TypeError):
        torch.empty(2, 3, 4).size("N")


def test_size_none():
    # test_namedtensor.py::test_size (t.size(None))
    # DIFFERENCE: size(None) is size(), as for plain torch tensors.
    t = nt(torch.empty(2, 3, 5), ["N", None, "C"])
    assert t.size(None) == t.size() == (3,)
    assert torch.empty(2, 3).size(None) == (2, 3)


def test_stride():
    # test_namedtensor.py::test_stride
    t = nt(torch.empty(2, 3, 5), ["N", None, "C"])
    assert t.stride("N") == 3 * 5
    assert t.stride("C") == 1
    assert t.stride() == (5,) and t.stride(0) == 5
    with pytest.raises(AxisSpecError, match="no named axis 'channels'"):
        t.stride("channels")
    with pytest.raises(TypeError):
        torch.empty(2, 3, 4).stride("N")


def test_transpose_variants():
    # test_namedtensor.py::test_transpose_variants
    # DIFFERENCE: named axes have no order; transpose/t act on positional dims.
    t = torch.randn(2, 3, 5, 7)
    x = nt(t, "N C H W")
    with pytest.raises(AxisSpecError):
        x.transpose("N", "C")
    y = nt(t, "N ...")
    out = y.transpose(0, 2)
    assert out.named_shape == {"N": 2} and out.shape == (7, 5, 3)
    assert torch.equal(P(out, "N ..."), t.transpose(1, 3))
    t2 = torch.randn(4, 2, 3)
    out = nt(t2, "N ...").t()
    assert out.named_shape == {"N": 4} and out.shape == (3, 2)
    assert torch.equal(P(out, "N ..."), t2.transpose(1, 2))


# -- resize ----------------------------------------------------------------------------------

def test_resize():
    # test_namedtensor.py::test_resize (same-size resize_, resize_as_ a same-named value)
    t = torch.randn(2)
    named = nt(t.clone(), "N")
    named.resize_([])
    assert named.named_shape == {"N": 2} and named.shape == ()
    assert torch.equal(P(named, "N"), t)
    other = nt(torch.randn(2), "N")
    named.resize_as_(other)
    assert named.named_shape == {"N": 2} and torch.equal(P(named, "N"), t)


def test_resize_changes_shape():
    # test_namedtensor.py::test_resize (named.resize_([3]) -> error)
    t = torch.tensor([1.0, 2.0])
    named = nt(t.clone(), "N")
    try:
        named.resize_([3])
    except (NamedAxisError, RuntimeError):
        return
    # otherwise each instance must keep its own element
    assert named.named_shape == {"N": 2} and named.shape == (3,)
    assert torch.equal(P(named, "N ...")[:, 0], t)


def test_resize_as_unnamed():
    # test_namedtensor.py::test_resize (named.resize_as_(unnamed) -> error)
    named = nt(torch.randn(2), "N")
    try:
        out = named.resize_as_(torch.randn(3))
    except (NamedAxisError, RuntimeError):
        return
    assert out.shape == (3,) and named.shape == (3,)


def test_resize_as_into_unnamed():
    # test_namedtensor.py::test_resize (unnamed.resize_as_(named) -> names propagate)
    # DIFFERENCE: in-place ops never add named axes to their target.
    named = nt(torch.randn(2), "N")
    with pytest.raises(AxisSizeError):
        torch.randn(1).resize_as_(named)


def test_cdist():
    # test_namedtensor.py::test_cdist
    a = torch.randn(3, 1, 2, 7)
    b = torch.randn(1, 11, 7)
    x = nt(a, "M N ...")
    y = nt(b, "N ...")
    out = torch.cdist(x, y)
    assert out.named_shape == {"M": 3, "N": 1} and out.shape == (2, 11)
    close(P(out, "M N ..."), torch.cdist(a, b.unsqueeze(0)))


def test_cdist_size_one_name():
    # test_namedtensor.py::test_cdist (N:1 broadcast against N:5)
    # DIFFERENCE: a named axis has one size (no size-1 broadcasting by name).
    x = nt(torch.randn(3, 1, 2, 7), "M N ...")
    y = nt(torch.randn(5, 11, 7), "N ...")
    with pytest.raises(AxisSizeError):
        torch.cdist(x, y)


def test_info_smoke():
    # test_namedtensor.py::test_info_smoke
    tensor = nt(torch.empty(1, 1), "N D")
    tensor.device
    tensor.dtype
    assert tensor.get_device() == -1
    assert not tensor.is_complex()
    assert tensor.is_floating_point()
    assert torch.is_same_size(tensor, tensor)
    assert torch.is_signed(tensor)
    assert tensor.layout == torch.strided
    assert tensor.numel() == 1
    assert tensor.dim() == 0 and tensor.ndimension() == 0 and tensor.ndim == 0
    assert tensor.element_size() == 4
    assert tensor.is_contiguous()
    assert not tensor.is_cuda
    assert tensor.is_leaf
    assert not tensor.is_pinned()
    assert not tensor.is_shared()
    assert not tensor.is_sparse
    assert tensor.nelement() == 1
    assert tensor.shape == () and tensor.size() == ()
    assert tensor.storage_offset() == 0
    assert tensor.stride() == ()
    assert tensor.data.named_shape == {"N": 1, "D": 1}
    assert tensor.data_ptr() != 0
    assert tensor.untyped_storage().nbytes() == 4
    assert tensor.type() == "torch.FloatTensor"
    assert tensor.is_signed()
    # positional dims: size(1) / stride(1) as torch
    p = nt(torch.full((1, 1), 2.0), {})
    assert p.size(1) == 1 and p.stride(1) == 1 and p.item() == 2.0
    with pytest.raises(nx.AxisTypeError):   # DIFFERENCE: as .item(), even when all sizes are 1
        tensor.is_nonzero()


def test_info_smoke_storage():
    # test_namedtensor.py::test_info_smoke (tensor.storage(), tensor.storage_type())
    tensor = nt(torch.empty(1, 1), "N D")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tensor.storage().size() == 1
    tensor.storage_type()


def test_info_smoke_item():
    # test_namedtensor.py::test_info_smoke (tensor.item())
    # DIFFERENCE: .item() needs no named axes.
    tensor = nt(torch.full((1, 1), 3.0), "N D")
    with pytest.raises(AxisTypeError):
        tensor.item()
    assert tensor.sum(["N", "D"]).item() == 3.0


def test_autograd_smoke():
    # test_namedtensor.py::test_autograd_smoke
    base = torch.randn(3, 3, requires_grad=True)
    x = nt(base, "N D")
    y = x.clone()
    y.retain_grad()
    seen = []
    y.register_hook(lambda g: seen.append(g) or g)
    y.sum(["N", "D"]).backward()
    assert len(seen) == 1
    assert y.grad.named_shape == {"N": 3, "D": 3}
    assert torch.equal(P(y.grad, "N D"), torch.ones(3, 3))
    assert torch.equal(base.grad, torch.ones(3, 3))

    tensor = nt(torch.empty(1, 1, requires_grad=True), "N D").relu()
    assert tensor.output_nr == 0
    assert tensor.grad_fn is not None
    assert tensor.requires_grad


def test_split_fns_propagates_names():
    # test_namedtensor.py::test_split_fns_propagates_names (positional dims)
    t = torch.randn(2, 2, 2)
    x = nt(t, "N ...")
    for fn, ref in ((lambda v: v.split(1, 0), lambda v: v.split(1, 1)),
                    (lambda v: v.split([1, 1], 1), lambda v: v.split([1, 1], 2)),
                    (lambda v: v.chunk(2, 0), lambda v: v.chunk(2, 1))):
        splits = fn(x)
        refs = ref(t)
        assert len(splits) == len(refs)
        for s, r in zip(splits, refs):
            assert s.named_shape == {"N": 2}
            assert torch.equal(P(s, "N ..."), r)


def test_split_fns_propagates_names_named_dim():
    # test_namedtensor.py::test_split_fns_propagates_names (split along dim 'N')
    # DIFFERENCE: a named axis has one size; split after align_to.
    x = nt(torch.randn(2, 2), "N D")
    with pytest.raises(AxisSpecError):
        x.split(1, "N")
    parts = x.align_to("N", ...).split(1, 0)
    assert [p.named_shape for p in parts] == [{"D": 2}, {"D": 2}]


def test_any_all():
    # test_namedtensor.py::test_any_all (by name)
    t = torch.zeros(3, dtype=torch.bool)
    x = nt(t, "C")
    assert x.any("C").item() is False
    assert x.all("C").item() is False
    y = nt(torch.tensor([True, True, False]), "C")
    assert y.any("C").item() is True and y.all("C").item() is False


def test_any_all_no_dim():
    # test_namedtensor.py::test_any_all (x.any().names == [])
    # DIFFERENCE: no-dim reductions reduce positional dims only.
    t = torch.tensor([[True, False], [False, False]])
    x = nt(t, "C ...")
    out = x.any()
    assert out.named_shape == {"C": 2}
    assert torch.equal(P(out, "C"), t.any(1))
    out = x.all()
    assert torch.equal(P(out, "C"), t.all(1))


def test_addcmul_addcdiv():
    # test_namedtensor.py::test_addcmul_addcdiv
    ta, tb, tc = torch.rand(3), torch.rand(3), torch.rand(3).clamp_min_(0.1)
    a, b, c = nt(ta, "N"), nt(tb, "N"), nt(tc, "N")
    out = nt(torch.randn(3), "N")
    for name in ("addcmul", "addcdiv"):
        ref = getattr(torch, name)(ta, tb, tc)
        r = getattr(torch, name)(a, b, c)
        assert r.named_shape == {"N": 3}
        close(P(r, "N"), ref)
        getattr(torch, name)(a, b, c, out=out)
        close(P(out, "N"), ref)
        a2 = a.clone()
        assert getattr(a2, name + "_")(b, c).named_shape == {"N": 3}
        close(P(a2, "N"), ref)


# -- binary ops ------------------------------------------------------------------------------

_BINARY = ["add", "div", "mul", "sub", "pow", "atan2"]


def _named_out(r):
    """An empty named out= for result ``r``: its named shape, 0-size positional dim."""
    names = list(r.named_shape)
    return nt(torch.empty(list(r.named_shape.values()) + [0], dtype=r.dtype), names + [...])


def _binary_variants():
    """(label, fn(a, b) -> result) for method, in-place and out= forms."""
    out = []
    for name in _BINARY:
        out.append((name, lambda a, b, n=name: getattr(a, n)(b)))
        out.append((name + "_", lambda a, b, n=name: getattr(a.clone(), n + "_")(b)))
        out.append((name + "_out", lambda a, b, n=name: getattr(torch, n)(
            a, b, out=_named_out(getattr(torch, n)(a, b)))))
    out.append(("copy_", lambda a, b: a.clone().copy_(b)))
    out.append(("floor_divide", lambda a, b: torch.floor_divide(a, b)))
    out.append(("true_divide", lambda a, b: torch.true_divide(a, b)))
    return out


def _binary_ref(label, a, b):
    if label == "copy_":
        return b.expand_as(a).clone()
    return getattr(torch, label.removesuffix("_out").rstrip("_"))(a, b)


_BINARY_VARIANTS = _binary_variants()
_BINARY_IDS = [v[0] for v in _BINARY_VARIANTS]


@pytest.mark.parametrize("label,op", _BINARY_VARIANTS, ids=_BINARY_IDS)
def test_binary_ops(label, op):
    # test_namedtensor.py::test_binary_ops (test_basic: op(a, a), op(a, c); method,
    # in-place, out= (named out), copy_, floor_divide, true_divide)
    ta = torch.rand(2, 3) + 0.5
    tc = torch.rand(3) + 0.5
    a, c = nt(ta, "N C"), nt(tc, "C")
    r = op(a, a)
    assert r.named_shape == {"N": 2, "C": 3} and r.shape == ()
    close(P(r, "N C"), _binary_ref(label, ta, ta))
    r = op(a, c)
    assert r.named_shape == {"N": 2, "C": 3}
    close(P(r, "N C"), _binary_ref(label, ta, tc))


@pytest.mark.parametrize("name", _BINARY)
def test_binary_ops_name_mismatch(name):
    # test_namedtensor.py::test_binary_ops (op(a, d), op(a, b) raise 'do not match')
    # DIFFERENCE: broadcast by name: union of names, reordered names align.
    ta = torch.rand(2, 3) + 0.5
    td = torch.rand(5) + 0.5
    a, d = nt(ta, "N C"), nt(td, "W")
    b = nt(ta.t().contiguous(), "C N")
    r = getattr(a, name)(d)
    assert r.named_shape == {"N": 2, "C": 3, "W": 5}
    close(P(r, "N C W"), getattr(torch, name)(ta[:, :, None], td))
    r = getattr(a, name)(b)
    assert r.named_shape == {"N": 2, "C": 3}
    close(P(r, "N C"), getattr(torch, name)(ta, ta))
    # in place: the target lacks W, so writing every W instance into it is refused
    with pytest.raises(AxisSizeError):
        getattr(a.clone(), name + "_")(d)
    # one name, one size
    with pytest.raises(AxisSizeError):
        getattr(a, name)(nt(torch.rand(4), "C"))


@pytest.mark.parametrize("name", _BINARY)
def test_binary_ops_wildcard(name):
    # test_namedtensor.py::test_binary_ops (test_wildcard)
    # DIFFERENCE: no None wildcard; positional dims never match named axes.
    ta = torch.rand(2, 3) + 0.5
    tc = torch.rand(2, 3) + 0.5
    a = nt(ta, "N C")
    c = nt(tc, [None, "C"])          # positional (2,), named {'C': 3}
    r = getattr(a, name)(c)
    assert r.named_shape == {"N": 2, "C": 3} and r.shape == (2,)
    # r[n, c, i] = a[n, c] op c[i, c]
    close(P(r, "N C ..."), getattr(torch, name)(ta[:, :, None], tc.t()[None]))
    tb = torch.rand(2, 3) + 0.5
    r = getattr(a, name)(tb)         # a plain operand is positional
    assert r.named_shape == {"N": 2, "C": 3} and r.shape == (2, 3)
    close(P(r, "N C ..."), getattr(torch, name)(ta[:, :, None, None], tb))
    d = nt(torch.rand(2, 3), ["C", None])   # C of size 2 vs c's 3
    with pytest.raises(AxisSizeError):
        getattr(d, name)(c)


@pytest.mark.parametrize("label,op", _BINARY_VARIANTS, ids=_BINARY_IDS)
def test_binary_ops_mixed_unnamed_named(label, op):
    # test_namedtensor.py::test_binary_ops (test_mixed_unnamed_named)
    # DIFFERENCE: plain operands broadcast against positional dims; never get names.
    tn = torch.rand(1, 1) + 0.5
    named2 = nt(tn, "N C")
    for shape in ([1], [1, 1], [1, 1, 1]):
        tu = torch.rand(shape) + 0.5
        if label.endswith("_"):
            # in place: a named value cannot be written into a plain one ...
            with pytest.raises(AxisSizeError):
                op(tu, named2)
            # ... but a named value is updated in place by a plain one
            tv = torch.rand([1] + shape) + 0.5
            r = op(nt(tv, "N ..."), tu)
            assert r.named_shape == {"N": 1} and r.shape == tuple(shape)
            close(P(r, "N ..."), _binary_ref(label, tv, tu))
            continue
        if label.endswith("_out"):
            # out=: a plain out cannot receive the named result
            with pytest.raises(AxisSizeError):
                getattr(torch, label[:-4])(tu, named2, out=torch.empty(0))
        tnb = tn.reshape([1, 1] + [1] * len(shape))
        for x, y, tx, ty in ((named2, tu, tnb, tu), (tu, named2, tu, tnb)):
            r = op(x, y)
            assert r.named_shape == {"N": 1, "C": 1} and r.shape == tuple(shape)
            close(P(r, "N C ..."), _binary_ref(label, tx, ty))


def test_logical_ops():
    # test_namedtensor.py::test_logical_ops
    ta = torch.rand(2, 3) > 0.5
    tb = torch.rand(2, 3) > 0.5
    for op in ("logical_xor", "logical_and", "logical_or"):
        ref = getattr(torch, op)(ta, tb)
        r = getattr(torch, op)(nt(ta, "N C"), nt(tb, "N C"))
        assert r.named_shape == {"N": 2, "C": 3} and torch.equal(P(r, "N C"), ref)
        x = nt(ta.clone(), "N C")
        r = getattr(x, op + "_")(nt(tb, "N C"))
        assert r.named_shape == {"N": 2, "C": 3} and torch.equal(P(x, "N C"), ref)
        out = nt(torch.zeros(2, 3, dtype=torch.bool), "N C")
        getattr(torch, op)(nt(ta, "N C"), nt(tb, "N C"), out=out)
        assert out.named_shape == {"N": 2, "C": 3} and torch.equal(P(out, "N C"), ref)


def test_pow_special():
    # test_namedtensor.py::test_pow_special
    # DIFFERENCE: a named result needs a named out= (a plain empty out is refused).
    t = torch.randn(2, 3)
    named = nt(t, "N C")
    with pytest.raises(AxisSizeError):
        torch.pow(named, 0, out=torch.empty(0))
    for args, ref in (((named, 0), torch.pow(t, 0)), ((named, 1), torch.pow(t, 1)),
                      ((1, named), torch.pow(1, t))):
        out = nt(torch.empty(2, 3, 0), "N C ...")
        result = torch.pow(*args, out=out)
        assert result.named_shape == {"N": 2, "C": 3}
        close(P(out, "N C"), ref)
        assert torch.equal(P(torch.pow(*args), "N C"), ref)


def test_out_fn_semantics():
    # test_namedtensor.py::test_out_fn_semantics (the cases where PyTorch matches)
    unnamed = torch.randn(3, 2)
    none_named = nt(torch.randn(3, 2), [None, None])
    named = nt(torch.randn(3, 2), "N C")
    partially = nt(torch.randn(3, 2), ["N", None])
    with pytest.raises(AxisSizeError):
        torch.abs(partially, out=nt(torch.randn(3, 2), "N C"))
    with pytest.raises(AxisSizeError):
        torch.abs(named, out=nt(torch.randn(3, 2), ["N", None]))
    with pytest.raises(AxisSizeError):
        torch.abs(none_named, out=nt(torch.randn(3, 2), "N C"))
    with pytest.raises(AxisSizeError):
        torch.abs(unnamed, out=nt(torch.randn(3, 2), "N C"))
    output = torch.randn(3, 2)
    torch.abs(unnamed, out=output)
    assert type(output) is torch.Tensor and torch.equal(output, unnamed.abs())
    output = nt(torch.randn(3, 2), [None, None])
    torch.abs(unnamed, out=output)
    assert output.named_shape == {} and torch.equal(P(output, ...), unnamed.abs())
    # a named out with the result's names, in another storage order
    output = nt(torch.randn(2, 3), "C N")
    torch.abs(named, out=output)
    assert torch.equal(P(output, "N C"), P(named, "N C").abs())


def test_out_fn_semantics_plain_out():
    # test_namedtensor.py::test_out_fn_semantics (abs(named, out=plain) names out)
    # DIFFERENCE: a plain out cannot receive named axes.
    named = nt(torch.randn(3, 2), "N C")
    with pytest.raises(AxisSizeError):
        torch.abs(named, out=torch.randn(3, 2))


# -- unary ops -------------------------------------------------------------------------------

def _unary_cases():
    cases = []

    def fmi(name, *args, **kw):
        cases.append((name, lambda t, n=name: getattr(t, n)(*args, **kw), True, False))
        cases.append((name + "_", lambda t, n=name: getattr(t, n + "_")(*args, **kw), True,
                      False))
        cases.append((name + "_out", "out", True, False))

    def m(name, *args, det=True, by_name=False, **kw):
        cases.append((name, lambda t, n=name: getattr(t, n)(*args, **kw), det, by_name))

    def fn(name, *args, det=True, by_name=False, **kw):
        cases.append((name, lambda t, n=name: getattr(torch, n)(t, *args, **kw), det,
                      by_name))

    for n in ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "digamma", "erf", "erfc",
              "erfinv", "exp", "expm1", "floor", "frac", "lgamma", "log", "log10", "log1p",
              "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh",
              "sqrt", "tan", "tanh", "trunc"]:
        fmi(n)
    fmi("clamp", -1, 1)
    fmi("clamp_min", -2)
    fmi("clamp_max", 2)
    m("cauchy_", det=False)
    m("clone")
    m("contiguous")
    m("exponential_", det=False)
    m("geometric_", p=0.5, det=False)
    m("log_normal_", det=False)
    m("normal_", det=False)
    cases.append(("polygamma", lambda t: torch.polygamma(1, t), True, False))
    m("polygamma_", 1)
    m("random_", 0, 1, det=False)
    m("random_", 1, det=False)
    m("random_", det=False)
    m("relu_")
    m("requires_grad_")
    m("relu")
    fn("threshold", 0.5, 1)
    fn("threshold_", 0.5, 1)
    m("uniform_", det=False)
    m("zero_")
    m("fill_", 1)
    m("fill_", torch.tensor(3.14))
    m("to", dtype=torch.long)
    m("to", device="cpu")
    m("to", torch.empty([], dtype=torch.float64))
    for n in ["bool", "byte", "char", "cpu", "double", "float", "long", "half", "int", "short"]:
        m(n)
    m("type", dtype=torch.long)
    fn("cumsum", 0)
    m("cumsum", "D", by_name=True)
    m("cumprod", "D", by_name=True)
    fn("cumprod", 0)
    m("narrow", 0, 0, 1)
    fn("empty_like", det=False)
    fn("zeros_like")
    fn("ones_like")
    fn("full_like", 3.14)
    fn("rand_like", det=False)
    fn("randn_like", det=False)
    m("bernoulli_", 0.5, det=False)
    m("bernoulli_", torch.tensor(0.5), det=False)
    m("softmax", dim=0)
    m("softmax", "D", by_name=True)
    m("log_softmax", dim=0)
    m("log_softmax", "D", by_name=True)
    cases.append(("F.dropout(inplace)", lambda t: F.dropout(t, p=0.5, inplace=True), False,
                  False))
    cases.append(("F.dropout(outplace)", lambda t: F.dropout(t, p=0.5), False, False))
    return cases


_UNARY = _unary_cases()


@pytest.mark.parametrize("case", _UNARY, ids=[f"{c[0]}-{i}" for i, c in enumerate(_UNARY)])
def test_unary_propagate_names_fns(case):
    # test_namedtensor.py::test_unary_propagate_names_fns
    # Positional-dim forms run on nx.named(t, 'N ...') (dim 0 is the positional dim that
    # was PyTorch's dim 1); name forms (cumsum('D'), softmax('D')) on 'N D'.
    label, f, det, by_name = case
    t = torch.rand(2, 2) * 0.8 + 0.1
    spec = "N D" if by_name else "N ..."
    x = nt(t.clone(), spec)
    if f == "out":
        name = label[:-4]
        extra = {"clamp": (-1, 1), "clamp_min": (-2,), "clamp_max": (2,)}.get(name, ())
        out = nt(torch.empty(2, 0), "N ...")
        r = getattr(torch, name)(x, *extra, out=out)
        assert r.named_shape == out.named_shape == {"N": 2} and out.shape == (2,)
        close(P(out, "N ..."), getattr(torch, name)(t, *extra))
        return
    r = f(x)
    assert isinstance(r, NamedTensor), type(r)
    assert r.named_shape == x.named_shape and r.shape == x.shape or label == "narrow"
    if label == "narrow":
        assert r.named_shape == {"N": 2} and r.shape == (1,)
    if det:
        if by_name:
            # the named form over D is the plain op over dim 1
            ref = getattr(t.clone(), label)(1)
            close(P(r, "N D"), ref)
        else:
            # positional dim 0 of x is dim 1 of the plain tensor
            tt = t.clone()
            if label in ("cumsum", "cumprod"):
                ref = getattr(torch, label)(tt, 1)
            elif label in ("softmax", "log_softmax"):
                ref = getattr(tt, label)(dim=1)
            elif label == "narrow":
                ref = tt.narrow(1, 0, 1)
            else:
                ref = f(tt)
            close(P(r, "N ..."), ref, equal_nan=True, check_dtype=True)


_SCALAR_DIM_OPS = ["cumsum", "cumprod", "softmax", "sum", "mean", "amax", "logsumexp", "flip"]


def _scalar_dim_ref(t, name, d):
    # torch accepts dim 0 / -1 on 0-d tensors: the op on each scalar instance
    f = (lambda u: u.flip(d)) if name == "flip" else (lambda u: getattr(u, name)(d))
    return torch.stack([torch.stack([f(t[i, j]) for j in range(t.shape[1])])
                        for i in range(t.shape[0])])


@pytest.mark.parametrize("name", _SCALAR_DIM_OPS)
def test_unary_propagate_names_fns_negative_dim_on_scalar_instances(name):
    # test_namedtensor.py::test_unary_propagate_names_fns (fn('cumsum', 0) etc. on a 2x2
    # tensor whose dims are all named: here both are named axes, no positional dim left)
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    ref = _scalar_dim_ref(t, name, -1)
    for x in (nt(t, "N D"), nt(t.t(), "D N")):
        r = getattr(x, name)(-1) if name != "flip" else x.flip(-1)
        assert r.named_shape == {"N": 2, "D": 2}
        close(P(r, "N D"), ref)


@pytest.mark.parametrize("name", _SCALAR_DIM_OPS)
def test_unary_propagate_names_fns_dim0_on_scalar_instances(name):
    # test_namedtensor.py::test_unary_propagate_names_fns (fn('cumsum', 0) on a 2x2
    # tensor whose dims are all named)
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    x = nt(t, "N D")
    r = getattr(x, name)(0) if name != "flip" else x.flip(0)
    assert r.named_shape == {"N": 2, "D": 2}
    close(P(r, "N D"), _scalar_dim_ref(t, name, 0))


def test_cummax_cummin():
    # test_namedtensor.py::test_cummax_cummin
    t = torch.rand(2, 3)
    for op in ("cummax", "cummin"):
        ref = getattr(torch, op)(t, 0)
        # over the named axis N (PyTorch's dim 0)
        res = getattr(nt(t, "N D"), op)("N")
        assert res[0].named_shape == res[1].named_shape == {"N": 2, "D": 3}
        assert torch.equal(P(res[0], "N D"), ref[0])
        assert torch.equal(P(res[1], "N D"), ref[1])
        # over a positional dim, N named
        res = getattr(torch, op)(nt(t.t().contiguous(), "D ..."), 0)
        assert res.values.named_shape == {"D": 3}
        assert torch.equal(res.values.align_to(..., "D"), ref[0])
        assert torch.equal(res.indices.align_to(..., "D"), ref[1])


def test_logcumsumexp():
    # test_namedtensor.py::test_logcumsumexp
    # DIFFERENCE: function form with a name refused by torch's parser; method form.
    t = torch.rand(2, 3)
    x = nt(t, "N D")
    with pytest.raises(TypeError):
        torch.logcumsumexp(x, "D")
    r = x.logcumsumexp("D")
    assert r.named_shape == {"N": 2, "D": 3}
    close(P(r, "N D"), torch.logcumsumexp(t, 1))


def test_bitwise_not():
    # test_namedtensor.py::test_bitwise_not
    t = torch.rand(2, 3) > 0.5
    x = nt(t.clone(), "N D")
    assert torch.equal(P(x.bitwise_not(), "N D"), ~t)
    result = nt(torch.empty(2, 3, dtype=torch.bool), "N D")
    assert torch.bitwise_not(x, out=result).named_shape == {"N": 2, "D": 3}
    assert torch.equal(P(result, "N D"), ~t)
    assert x.bitwise_not_().named_shape == {"N": 2, "D": 3}
    assert torch.equal(P(x, "N D"), ~t)


def test_logical_not():
    # test_namedtensor.py::test_logical_not
    t = torch.rand(2, 3) > 0.5
    x = nt(t.clone(), "N D")
    assert torch.equal(P(x.logical_not(), "N D"), ~t)
    result = nt(torch.empty(3, 2, dtype=torch.bool), "D N")
    torch.logical_not(x, out=result)
    assert torch.equal(P(result, "N D"), ~t)
    x.logical_not_()
    assert torch.equal(P(x, "N D"), ~t)


def test_bernoulli():
    # test_namedtensor.py::test_bernoulli
    x = nt(torch.rand(2, 3), "N D")
    r = x.bernoulli()
    assert r.named_shape == {"N": 2, "D": 3}
    assert set(P(r, "N D").unique().tolist()) <= {0.0, 1.0}
    result = nt(torch.empty(2, 3), "N D")
    torch.bernoulli(x, out=result)
    assert result.named_shape == {"N": 2, "D": 3}
    assert set(P(result, "N D").unique().tolist()) <= {0.0, 1.0}
    # p = 0 and p = 1 are deterministic
    ones = nt(torch.ones(2, 3), "N D").bernoulli()
    assert torch.equal(P(ones, "N D"), torch.ones(2, 3))


# -- flatten / unflatten ---------------------------------------------------------------------

def test_flatten():
    # test_namedtensor.py::test_flatten (list overload, int overload, non-contiguous, missing)
    t = torch.randn(2, 3, 5, 7, 11)
    tensor = nt(t, "N C D H W")
    out = tensor.flatten(["D", "H", "W"], "features")
    assert out.named_shape == {"N": 2, "C": 3, "features": 385}
    assert torch.equal(P(out, "N C features"), t.view(2, 3, -1))
    # int overload: positional dims (here D H W positional)
    out = nt(t, "N C ...").flatten(0, 2)
    assert out.named_shape == {"N": 2, "C": 3} and out.shape == (385,)
    assert torch.equal(P(out, "N C ..."), t.view(2, 3, -1))
    # non-contiguous: N and H not adjacent in memory
    s = torch.randn(2, 3, 5, 7)
    sentences = nt(s, "N T H D")
    out = sentences.flatten(["N", "H"], "N_H")
    assert out.named_shape == {"N_H": 10, "T": 3, "D": 7}
    assert torch.equal(P(out, "N_H T D"), s.transpose(1, 2).reshape(10, 3, 7))
    with pytest.raises(AxisSpecError, match="no named axis 'L'"):
        tensor.flatten(["D", "L"], "features")


def test_flatten_not_consecutive():
    # test_namedtensor.py::test_flatten ('must be consecutive in')
    # DIFFERENCE: any named axes merge, row-major in the order listed.
    t = torch.randn(2, 3, 5, 7, 11)
    tensor = nt(t, "N C D H W")
    out = tensor.flatten(["D", "W"], "features")
    assert out.named_shape == {"N": 2, "C": 3, "H": 7, "features": 55}
    assert torch.equal(P(out, "N C H features"),
                       t.permute(0, 1, 3, 2, 4).reshape(2, 3, 7, 55))
    out = tensor.flatten(["H", "D", "W"], "features")
    assert torch.equal(P(out, "N C features"),
                       t.permute(0, 1, 3, 2, 4).reshape(2, 3, 385))


def test_flatten_str_overload():
    # test_namedtensor.py::test_flatten (tensor.flatten('D', 'W', 'features'))
    # DIFFERENCE: no name range (named axes have no order).
    tensor = nt(torch.randn(2, 3, 5, 7, 11), "N C D H W")
    with pytest.raises(AxisSpecError):
        tensor.flatten("D", "W", "features")


def test_flatten_nodims():
    # test_namedtensor.py::test_flatten_nodims
    tensor = nt(torch.empty(2, 3), {})
    with pytest.raises(AxisSpecError):
        tensor.flatten((), "abcd")
    with pytest.raises(AxisSpecError):
        nt(torch.empty(2, 3), "a b").flatten([], "abcd")


def test_unflatten():
    # test_namedtensor.py::test_unflatten
    t4 = torch.arange(4.0)
    for spec in ((("A", 2), ("B", 2)), [("A", 2), ("B", 2)], (["A", 2], ["B", 2])):
        assert torch.equal(nt(t4, "A").unflatten("A", spec), nt(t4.view(2, 2), "A B"))
    t = torch.arange(20.0).view(2, 10)
    assert torch.equal(nt(t, "A B").unflatten("B", (["B1", -1],)), nt(t, "A B1"))
    t = torch.arange(2.0 * 3 * 4 * 5 * 6).view(2, 360)
    assert torch.equal(
        nt(t, "A B").unflatten("B", (["B1", 3], ["B2", 4], ["B3", -1], ["B4", 6])),
        nt(t.view(2, 3, 4, 5, 6), "A B1 B2 B3 B4"))
    assert torch.equal(
        nt(torch.ones(2, 0), "A B").unflatten("B", (["B1", 3], ["B2", -1], ["B3", 4])),
        nt(torch.ones(2, 3, 0, 4), "A B1 B2 B3"))
    t = torch.arange(8.0).view(2, 4)
    assert torch.equal(nt(t, "A B").unflatten("B", (("B1", 2), ("B2", 2))),
                       nt(t.view(2, 2, 2), "A B1 B2"))
    # invalid: sizes without names on a named axis
    with pytest.raises(AxisSpecError):
        nt(torch.tensor([1]), "A").unflatten("A", (1, 1))
    # invalid: an int dim when the value has no positional dims
    with pytest.raises(NamedAxisError):
        nt(torch.tensor([1]), "A").unflatten(0, (1, 1))
    with pytest.raises(AxisSizeError, match="cannot be split"):
        nt(torch.ones(2, 4), "A B").unflatten("B", (("B1", 3), ("B2", -1)))
    with pytest.raises(AxisSizeError, match="cannot be split"):
        nt(torch.ones(2, 0), "A B").unflatten("B", (("B1", 0), ("B2", -1)))

    t = torch.randn(7, 2 * 3 * 5, 11)
    tensor = nt(t, "N D K")
    out = tensor.unflatten("D", OrderedDict((("C", 2), ("H", 3), ("W", 5))))
    assert out.named_shape == {"N": 7, "C": 2, "H": 3, "W": 5, "K": 11}
    assert torch.equal(P(out, "N C H W K"), t.view(7, 2, 3, 5, 11))
    out = tensor.unflatten("N", (("N", 7), ("H", 1)))
    assert out.named_shape == {"N": 7, "H": 1, "D": 30, "K": 11}
    assert torch.equal(P(out, "N H D K"), t.view(7, 1, 30, 11))
    out = tensor.unflatten("K", (("K", 11), ("H", 1)))
    assert torch.equal(P(out, "N D K H"), t.view(7, 30, 11, 1))
    with pytest.raises(AxisSizeError, match="cannot be split"):
        tensor.unflatten("D", (("H", 3), ("W", 5)))
    with pytest.raises(NamedAxisError):
        tensor.unflatten("D", None)
    with pytest.raises(AxisSizeError):
        tensor.unflatten("D", OrderedDict())
    # positional unflatten keeps the named axes
    out = nt(t, "N ...").unflatten(0, (5, 6))
    assert out.named_shape == {"N": 7} and out.shape == (5, 6, 11)
    assert torch.equal(P(out, "N ..."), t.view(7, 5, 6, 11))


def test_unflatten_missing_name():
    # test_namedtensor.py::test_unflatten (error paths; 'Name ... not found')
    tensor = nt(torch.randn(7, 30, 11), "N D K")
    with pytest.raises(AxisSpecError, match="no named axis 'Q'"):
        tensor.unflatten("Q", (("H", 3), ("W", 10)))


def test_unsupported_op_error_msg():
    # test_namedtensor.py::test_unsupported_op_error_msg (torch.pdist)
    # DIFFERENCE: pdist runs per instance.
    t = torch.randn(2, 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch.vmap's 'performance drop' fallback note
        r = torch.pdist(nt(t, "N ..."))
    assert r.named_shape == {"N": 2}
    close(P(r, "N ..."), torch.stack([torch.pdist(t[i]) for i in range(2)]))


def test_unsupported_op_error_msg_as_strided_():
    # test_namedtensor.py::test_unsupported_op_error_msg (named.as_strided_((3, 3), (3, 1)))
    q = torch.arange(18.0).reshape(2, 3, 3)
    x = nt(q.clone(), "N ...")
    ref = torch.stack([q[i].clone().as_strided_((3, 3), (1, 3)) for i in range(2)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = x.as_strided_((3, 3), (1, 3))
        except (NamedAxisError, RuntimeError):
            return
    assert torch.equal(P(r, "N ..."), ref)
    assert torch.equal(P(x, "N ..."), ref)


# -- reductions ------------------------------------------------------------------------------

def _values(r):
    return r.values if hasattr(r, "values") and not isinstance(r, (NamedTensor, torch.Tensor)) \
        else r


_REDUCTIONS = {
    "sum": (lambda x, d: x.sum(d), lambda t, d: t.sum(d)),
    "prod": (lambda x, d: x.prod(d), lambda t, d: t.prod(d)),
    "mean": (lambda x, d: x.mean(d), lambda t, d: t.mean(d)),
    "var": (lambda x, d: x.var(d, correction=1), lambda t, d: t.var(d, correction=1)),
    "std": (lambda x, d: x.std(d, correction=1), lambda t, d: t.std(d, correction=1)),
    "min": (lambda x, d: x.min(d), lambda t, d: t.min(d)),
    "max": (lambda x, d: x.max(d), lambda t, d: t.max(d)),
    "amin": (lambda x, d: x.amin(d), lambda t, d: t.amin(d)),
    "amax": (lambda x, d: x.amax(d), lambda t, d: t.amax(d)),
    "argmin": (lambda x, d: x.argmin(d), lambda t, d: t.argmin(d)),
    "argmax": (lambda x, d: x.argmax(d), lambda t, d: t.argmax(d)),
    "logsumexp": (lambda x, d: x.logsumexp(d), lambda t, d: t.logsumexp(d)),
    "mode": (lambda x, d: x.mode(d), lambda t, d: t.mode(d)),
    "median": (lambda x, d: x.median(d), lambda t, d: t.median(d)),
    "nanmedian": (lambda x, d: x.nanmedian(d), lambda t, d: t.nanmedian(d)),
}


def _check_reduce(r, ref, names, order):
    if isinstance(ref, torch.Tensor):
        assert r.named_shape == names, (r.named_shape, names)
        close(P(r, order), ref)
    else:
        for a, b in zip(r, ref):
            assert a.named_shape == names
            close(P(a, order), b)


@pytest.mark.parametrize("name", list(_REDUCTIONS))
def test_reduction_fns_simple_reduce(name):
    # test_namedtensor.py::test_reduction_fns (test_simple_reduce: op(t, 1), op(t, -1),
    # op(t, 'C'), op(t, 'H') raises)
    op, ref = _REDUCTIONS[name]
    t = torch.randn(2, 3, 5)
    x = nt(t, "N C L")
    _check_reduce(op(x, "C"), ref(t, 1), {"N": 2, "L": 5}, "N L")
    with pytest.raises(UnboundAxisError, match="'H'"):
        op(x, "H")
    # int dims are positional dims: N named, (3, 5) positional
    xp = nt(t, "N ...")
    _check_reduce(op(xp, 0), ref(t, 1), {"N": 2}, "N ...")
    _check_reduce(op(xp, -1), ref(t, -1), {"N": 2}, "N ...")


def test_reduction_fns_kthvalue():
    # test_namedtensor.py::test_reduction_fns (kthvalue_wrapper)
    t = torch.randn(2, 3, 5)
    r = nt(t, "N C L").kthvalue(1, "C")
    ref = t.kthvalue(1, 1)
    _check_reduce(r, ref, {"N": 2, "L": 5}, "N L")


def test_reduction_fns_function_form():
    # test_namedtensor.py::test_reduction_fns (torch.sum(t, 'C') etc.)
    # DIFFERENCE: torch 2.13's parser refuses a str dim in function forms.
    t = torch.randn(2, 3, 5)
    x = nt(t, "N C L")
    for fn in (torch.sum, torch.prod, torch.mean, torch.max, torch.logsumexp):
        with pytest.raises(TypeError):
            fn(x, "C")
    for fn in (nx.sum, nx.mean, nx.prod, nx.amax, nx.logsumexp):
        r = fn(x, "C")
        assert r.named_shape == {"N": 2, "L": 5}
    close(P(nx.sum(x, "C"), "N L"), t.sum(1))
    close(P(nx.var(x, "C"), "N L"), t.var(1))


def test_reduction_fns_unbind():
    # test_namedtensor.py::test_reduction_fns (Case(torch.unbind ...))
    # DIFFERENCE: unbind along a named axis refused; align_to then unbind.
    t = torch.randn(2, 3, 5)
    x = nt(t, "N C L")
    with pytest.raises(AxisSpecError):
        x.unbind("C")
    parts = x.align_to("C", ...).unbind(0)
    assert len(parts) == 3
    for i, p in enumerate(parts):
        assert p.named_shape == {"N": 2, "L": 5}
        assert torch.equal(P(p, "N L"), t[:, i])
    # positional unbind keeps the named axes
    parts = nt(t, "N ...").unbind(0)
    assert [p.named_shape for p in parts] == [{"N": 2}] * 3


def test_reduction_fns_std_mean_var_mean():
    # test_namedtensor.py::test_reduction_fns (std_mean / var_mean by name)
    # DIFFERENCE: no method form, and the function form refuses a str dim.
    t = torch.randn(2, 3, 5)
    x = nt(t, "N C L")
    with pytest.raises(TypeError):
        torch.std_mean(x, "C", correction=1)
    with pytest.raises(TypeError):
        torch.var_mean(x, "C", correction=1)
    std, mean = x.std("C", correction=1), x.mean("C")
    close(P(std, "N L"), t.std(1))
    close(P(mean, "N L"), t.mean(1))
    # positional dims: torch.std_mean works per instance
    s, m = torch.std_mean(nt(t, "N ..."), 0, correction=1)
    close(P(s, "N ..."), t.std(1))
    close(P(m, "N ..."), t.mean(1))


@pytest.mark.parametrize("name", list(_REDUCTIONS))
def test_reduction_fns_autograd(name):
    # test_namedtensor.py::test_reduction_fns (test_autograd_supports_dimname_overload)
    op, ref = _REDUCTIONS[name]
    if name in ("argmin", "argmax"):
        return  # integer results: no gradient (as in torch)
    base = torch.randn(2, 3, 5, requires_grad=True)
    r = _values(op(nt(base, "N C L"), "C"))
    r.sum(["N", "L"]).backward()
    base2 = base.detach().clone().requires_grad_()
    _values(ref(base2, 1)).sum().backward()
    assert base.grad is not None
    close(base.grad, base2.grad)


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "var", "std", "min", "max", "median",
                                  "nanmedian", "amax", "logsumexp"])
def test_reduction_fns_complete_reduce(name):
    # test_namedtensor.py::test_reduction_fns (test_complete_reduce: op(t).names == [])
    # DIFFERENCE: op(x) reduces positional dims only; list the names to reduce them.
    t = torch.randn(2, 3, 5)
    x = nt(t, "N ...")
    method = getattr(x, name)
    if name == "logsumexp":
        r = x.logsumexp([0, 1])
        ref = t.logsumexp([1, 2])
    else:
        r = method()
        ref = torch.stack([getattr(t[i], name)() for i in range(2)])
    assert r.named_shape == {"N": 2} and r.shape == ()
    close(P(r, "N"), ref)
    if name in ("sum", "mean"):
        r = method(None)
        assert r.named_shape == {"N": 2} and r.shape == ()
        close(P(r, "N"), ref)
    # every axis: the names and the positional dims
    if name in ("sum", "mean", "amax", "logsumexp"):
        full = getattr(x, name)(["N", 0, 1])
        assert type(full) is torch.Tensor
        close(full, getattr(t, name)([0, 1, 2]))


@pytest.mark.parametrize("name", ["sum", "mean", "var", "std", "logsumexp", "amax", "prod"])
def test_reduction_fns_multidim(name):
    # test_namedtensor.py::test_reduction_fns (test_multidim_reduce)
    t = torch.randn(2, 3, 5)
    x = nt(t, "N C L")
    kw = {"correction": 1} if name in ("var", "std") else {}
    if name == "prod":
        # torch.prod has no multi-dim form; by name it reduces both axes
        r = x.prod(["C", "L"])
        close(P(r, "N"), t.prod(2).prod(1))
        return
    r = getattr(x, name)(["C", "L"], **kw)
    assert r.named_shape == {"N": 2}
    close(P(r, "N"), getattr(t, name)([1, 2], **kw))
    # positional lists and mixed name/positional lists
    xp = nt(t, "N ...")
    r = getattr(xp, name)([0, -1], **kw)
    close(P(r, "N"), getattr(t, name)([1, 2], **kw))
    r = getattr(xp, name)(("N", 0), **kw)
    assert type(r) is torch.Tensor
    close(r, getattr(t, name)([0, 1], **kw))
    with pytest.raises(NamedAxisError):
        getattr(x, name)([None, "C"], **kw)


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "var", "std", "logsumexp", "min", "max",
                                  "median", "nanmedian", "mode"])
def test_reduction_fns_out_variant(name):
    # test_namedtensor.py::test_reduction_fns (test_out_variant: op(t, 'C', out=out))
    # DIFFERENCE: out must be a NamedTensor with the result's named shape (any order).
    t = torch.randn(2, 3, 5)
    x = nt(t, "N C L")
    kw = {"correction": 1} if name in ("var", "std") else {}
    ref = getattr(t, name)(1, **kw)
    if isinstance(ref, torch.Tensor):
        out = nt(torch.empty(5, 2, 0), "L N ...")
        getattr(x, name)("C", out=out, **kw)
        assert out.named_shape == {"L": 5, "N": 2}
        close(P(out, "N L"), ref)
        with pytest.raises(AxisSizeError):
            getattr(x, name)("C", out=torch.empty(0), **kw)
    else:
        out = (nt(torch.empty(2, 5), "N L"), nt(torch.empty(2, 5, dtype=torch.long), "N L"))
        getattr(x, name)("C", out=out)
        close(P(out[0], "N L"), ref[0])
        close(P(out[1], "N L"), ref[1])


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "var", "std", "logsumexp", "min", "max",
                                  "median", "nanmedian", "mode", "amax", "argmax"])
def test_reduction_fns_keepdim(name):
    # test_namedtensor.py::test_reduction_fns (test_keepdim: names stay ['N', 'C', 'L'])
    # DIFFERENCE: a reduced named axis vanishes even with keepdim=True (JAX's keepdims);
    # reduced positional dims stay as size 1.
    t = torch.randn(2, 3, 5)
    kw = {"correction": 1} if name in ("var", "std") else {}
    r = _values(getattr(nt(t, "N C L"), name)("C", keepdim=True, **kw))
    assert r.named_shape == {"N": 2, "L": 5} and r.shape == ()
    close(P(r, "N L"), _values(getattr(t, name)(1, **kw)))
    r = _values(getattr(nt(t, "N ..."), name)(0, keepdim=True, **kw))
    assert r.named_shape == {"N": 2} and r.shape == (1, 5)
    close(P(r, "N ..."), _values(getattr(t, name)(1, keepdim=True, **kw)))


# -- masked ops, cat ---------------------------------------------------------------------------

def test_masked_select():
    # test_namedtensor.py::test_masked_select
    # DIFFERENCE: per instance; the named axes stay; ragged selections are an error.
    t = torch.randn(2, 3)
    m = torch.tensor([True, False, True])
    x = nt(t, "N ...")
    r = torch.masked_select(x, m)
    assert r.named_shape == {"N": 2} and r.shape == (2,)
    assert torch.equal(P(r, "N ..."), t[:, m])
    # a named mask that selects the same count everywhere
    mm = torch.tensor([[True, False, True], [False, True, True]])
    r = torch.masked_select(x, nt(mm, "N ..."))
    assert torch.equal(P(r, "N ..."), t[mm].view(2, 2))
    # ragged
    ragged = torch.tensor([[True, False, True], [False, False, True]])
    with pytest.raises(ShapeError, match="differs between instances"):
        torch.masked_select(x, nt(ragged, "N ..."))
    # out=
    out = nt(torch.empty(2, 0), "N ...")
    torch.masked_select(x, m, out=out)
    assert torch.equal(P(out, "N ..."), t[:, m])


def test_cat():
    # test_namedtensor.py::test_cat (simple, different number of dims, out=)
    a, b = torch.randn(2, 3), torch.randn(2, 4)
    r = torch.cat([nt(a, "N ..."), nt(b, "N ...")])
    assert r.named_shape == {"N": 2} and r.shape == (7,)
    assert torch.equal(P(r, "N ..."), torch.cat([a, b], 1))
    # names align whatever the storage order
    c = torch.randn(2, 3, 4)
    r = torch.cat([nt(c, "N C ..."), nt(c.transpose(0, 1), "C N ...")])
    assert torch.equal(P(r, "N C ..."), torch.cat([c, c], 2))
    with pytest.raises(ShapeError, match="same number of positional dims"):
        torch.cat([nt(torch.randn(2, 3), "N ..."), torch.randn(4, 3)])
    out = nt(torch.empty(2, 0), "N ...")
    torch.cat([nt(a, "N ..."), nt(b, "N ...")], out=out)
    assert torch.equal(P(out, "N ..."), torch.cat([a, b], 1))


def test_cat_zero_dim():
    # test_namedtensor.py::test_cat (error: zero dim)
    with pytest.raises(ShapeError, match="zero-dim"):
        torch.cat([nt(torch.randn(2), "N"), nt(torch.randn(2), "N")])


def test_cat_names_union():
    # test_namedtensor.py::test_cat (error: names don't match)
    # DIFFERENCE: named axes broadcast by name (union).
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    r = torch.cat([nt(a, "N ..."), nt(b, "M ...")])
    assert r.named_shape == {"N": 2, "M": 4} and r.shape == (6,)
    ref = torch.cat([a[:, None].expand(2, 4, 3), b[None].expand(2, 4, 3)], 2)
    assert torch.equal(P(r, "N M ..."), ref)


def test_masked_fill():
    # test_namedtensor.py::test_masked_fill (simple, right broadcast, in place, error)
    t = torch.randn(2, 3)
    m = torch.randn(2, 3) > 0
    mc = torch.randn(3) > 0
    r = nt(t, "N C").masked_fill(nt(m, "N C"), 3.14)
    assert r.named_shape == {"N": 2, "C": 3}
    assert torch.equal(P(r, "N C"), t.masked_fill(m, 3.14))
    r = nt(t, "N C").masked_fill(nt(mc, "C"), 3.14)
    assert torch.equal(P(r, "N C"), t.masked_fill(mc, 3.14))
    x = nt(t.clone(), "N C")
    assert x.masked_fill_(nt(m.t().contiguous(), "C N"), 3.14).named_shape == {"N": 2, "C": 3}
    assert torch.equal(P(x, "N C"), t.masked_fill(m, 3.14))
    # in place, computed names not those of the target
    with pytest.raises(AxisSizeError):
        nt(t.clone(), "N ...").masked_fill_(nt(m, "N C"), 3.14)


def test_masked_fill_broadcast():
    # test_namedtensor.py::test_masked_fill (left broadcast, names 'do not match')
    # DIFFERENCE: broadcast by name.
    tc = torch.randn(3)
    m = torch.randn(2, 3) > 0
    r = nt(tc, "C").masked_fill(nt(m, "N C"), 3.14)
    assert r.named_shape == {"C": 3, "N": 2}
    assert torch.equal(P(r, "N C"), tc.expand(2, 3).masked_fill(m, 3.14))
    t = torch.randn(2, 3)
    md = torch.randn(4) > 0
    r = nt(t, "N C").masked_fill(nt(md, "D"), 3.14)
    assert r.named_shape == {"N": 2, "C": 3, "D": 4}
    assert torch.equal(P(r, "N C D"), t[:, :, None].expand(2, 3, 4).masked_fill(md, 3.14))


# -- refcounts ---------------------------------------------------------------------------------

def _name_it(name):
    nt(torch.empty(2), [name])


def test_using_seen_interned_string_doesnt_bump_refcount():
    # test_namedtensor.py::test_using_seen_interned_string_doesnt_bump_refcount
    def see_name():
        _name_it("N")

    see_name()
    seen_name = "N"
    old = sys.getrefcount(seen_name)
    _name_it(seen_name)
    assert sys.getrefcount(seen_name) == old


def test_using_unseen_uninterned_string_refcounts():
    # test_namedtensor.py::test_using_unseen_uninterned_string_refcounts (and
    # test_using_unseen_interned_string_bumps_refcount_permanently)
    # DIFFERENCE: no interning; caches hold a bounded number of references.
    unseen = "".join(["abc", "def", "ghi", "jkl", "mno"])
    _name_it(unseen)
    after_first = sys.getrefcount(unseen)
    for _ in range(20):
        _name_it(unseen)
    assert sys.getrefcount(unseen) == after_first


# -- select / as_strided -------------------------------------------------------------------------

def test_select():
    # test_namedtensor.py::test_select / _test_select (positional; None refused)
    t = torch.randn(2, 3, 4, 5)
    x = nt(t, "N C ...")
    y = x.select(1, 1)
    assert y.named_shape == {"N": 2, "C": 3} and y.shape == (4,)
    assert torch.equal(P(y, "N C ..."), t.select(3, 1))
    with pytest.raises(TypeError):
        x.select(None, 1)


def test_select_by_name():
    # test_namedtensor.py::test_select (x.select('C', 1))
    # DIFFERENCE: select by name is x[{'C': 1}].
    t = torch.randn(2, 3, 4, 5)
    x = nt(t, "N C ...")
    with pytest.raises(AxisSpecError):
        x.select("C", 1)
    y = x[{"C": 1}]
    assert y.named_shape == {"N": 2} and y.shape == (4, 5)
    assert torch.equal(P(y, "N ..."), t.select(1, 1))


def test_as_strided():
    # test_namedtensor.py::test_as_strided / _test_as_strided
    # DIFFERENCE: per instance; named axes stay.
    t = torch.randn(2, 3, 4, 5)
    x = nt(t, "N C ...")
    y = x.as_strided([4 * 5], [1])
    assert y.named_shape == {"N": 2, "C": 3} and y.shape == (20,)
    assert torch.equal(P(y, "N C ..."), t.reshape(2, 3, 20))
    # a permuted physical layout: still per instance
    xt = nt(t.permute(2, 3, 0, 1), {2: "N", 3: "C"})
    y = xt.as_strided([20], [1])
    ref = torch.stack([torch.stack([t[n, c].contiguous().as_strided([20], [1])
                                    for c in range(3)]) for n in range(2)])
    assert torch.equal(P(y, "N C ..."), ref)


# -- align_to / align_as -----------------------------------------------------------------------

def test_align_to():
    # test_namedtensor.py::test_align_to (trivial, unsqueeze, transpose, both; errors)
    t3 = torch.randn(3)
    out = nt(t3, "N").align_to("N")
    assert type(out) is torch.Tensor and out.shape == (3,) and torch.equal(out, t3)
    out = nt(t3, "N").align_to("N", "D")
    assert out.shape == (3, 1) and torch.equal(out, t3[:, None])
    t = torch.randn(3, 2)
    out = nt(t, "N C").align_to("C", "N")
    assert out.shape == (2, 3) and torch.equal(out, t.t())
    t = torch.randn(2, 3, 5)
    out = nt(t, "C N H").align_to("N", "H", "W", "C")
    assert out.shape == (3, 5, 1, 2)
    assert torch.equal(out, t.permute(1, 2, 0)[:, :, None])
    # positional dims must be placed with '...'
    with pytest.raises(AxisSpecError, match=r"\.\.\."):
        nt(torch.randn(2, 3), [None, "C"]).align_to("N", "C")
    with pytest.raises(AxisSpecError, match="twice"):
        nt(t, "C N H").align_to("N", "N", "C", "H")


def test_align_to_partial():
    # test_namedtensor.py::test_align_to ("Cannot find dim 'N'", "Cannot find dim 'C'")
    # DIFFERENCE: unlisted named axes stay named; unknown names become size-1 dims.
    t = torch.randn(2, 3)
    out = nt(t, "N C").align_to("C")
    assert out.named_shape == {"N": 2} and out.shape == (3,)
    assert torch.equal(P(out, "N ..."), t)
    out = nt(t, "N C").align_to("D", "N")
    assert out.named_shape == {"C": 3} and out.shape == (1, 2)
    assert torch.equal(P(out, "C ..."), t.t()[:, None, :])


def test_align_to_ellipsis():
    # test_namedtensor.py::test_align_to_ellipsis (partially named input; None; duplicates)
    t = torch.randn(2, 3, 5, 7)
    partially_named = nt(t, {3: "C"})
    out = partially_named.align_to("C", "...")
    assert type(out) is torch.Tensor and out.shape == (7, 2, 3, 5)
    assert torch.equal(out, t.permute(3, 0, 1, 2))
    out = partially_named.align_to("...", "C")
    assert torch.equal(out, t)
    with pytest.raises(AxisSpecError, match="None"):
        partially_named.align_to("C", None, "...")
    tensor = nt(torch.randn(7, 3, 5, 2), "N H W C")
    with pytest.raises(AxisSpecError, match="None"):
        tensor.align_to("...", "N", None)
    with pytest.raises(AxisSpecError, match="twice"):
        tensor.align_to("...", "N", "N")


def test_align_to_ellipsis_named_glob():
    # test_namedtensor.py::test_align_to_ellipsis ('...' = the unlisted named dims)
    # DIFFERENCE: '...' stands for the positional dims only.
    t = torch.randn(7, 3, 5, 2)
    tensor = nt(t, "N H W C")
    out = tensor.align_to("...")
    assert out.named_shape == {"N": 7, "H": 3, "W": 5, "C": 2} and out.shape == ()
    out = tensor.align_to("...", "W", "N")
    assert out.named_shape == {"H": 3, "C": 2} and out.shape == (5, 7)
    assert torch.equal(P(out, "H C ..."), t.permute(1, 3, 2, 0))
    # listing every name gives PyTorch's result
    out = tensor.align_to("H", "C", "W", "N")
    assert torch.equal(out, t.permute(1, 3, 2, 0))
    out = tensor.align_to("N", "...", "C", "D", "H", "W")
    assert type(out) is torch.Tensor and out.shape == (7, 2, 1, 3, 5)
    assert torch.equal(out, t.permute(0, 3, 1, 2)[:, :, None])


def test_align_as():
    # test_namedtensor.py::test_align_as
    t = torch.randn(2, 3, 5)
    tensor = nt(t, "C N H")
    other = nt(torch.randn(1, 1, 1, 1), "N H W C")
    out = tensor.align_as(other)
    assert out.shape == (3, 5, 1, 2)
    assert torch.equal(out, t.permute(1, 2, 0)[:, :, None])
    # broadcasting against nx.positional(other) gives the same as broadcasting by name
    o = nt(torch.randn(3, 5, 4, 2), "N H W C")
    assert torch.equal(out + nx.positional(o), P(tensor + o, "N H W C"))


# -- matmul family --------------------------------------------------------------------------

def test_mm():
    # test_namedtensor.py::test_mm (positional mm; named axes batch; out=)
    a, b = torch.randn(7, 3, 2), torch.randn(2, 5)
    r = torch.mm(nt(a, "B ..."), b)
    assert r.named_shape == {"B": 7} and r.shape == (3, 5)
    close(P(r, "B ..."), a @ b)
    bb = torch.randn(7, 2, 5)
    r = torch.mm(nt(a, "B ..."), nt(bb, "B ..."))
    close(P(r, "B ..."), torch.bmm(a, bb))
    out = nt(torch.empty(7, 0), "B ...")
    torch.mm(nt(a, "B ..."), b, out=out)
    assert out.shape == (3, 5)
    close(P(out, "B ..."), a @ b)


def test_mm_name_inference():
    # test_namedtensor.py::test_mm (N:3,C:2 @ W:2,H:5 -> (N, H))
    # DIFFERENCE: named axes batch; contract a named axis with pdot / einsum.
    a, b = torch.randn(3, 2), torch.randn(2, 5)
    x, y = nt(a, "N C"), nt(b, "C H")
    with pytest.raises(ShapeError):
        torch.mm(x, y)
    r = nx.lax.pdot(x, y, "C")
    assert r.named_shape == {"N": 3, "H": 5}
    close(P(r, "N H"), a @ b)
    r = nx.einsum("{N,C},{C,H}->{N,H}", x, y)
    close(P(r, "N H"), a @ b)


def test_expand():
    # test_namedtensor.py::test_expand
    t = torch.randn(2, 1)
    r = nt(t, "D ...").expand(3)
    assert r.named_shape == {"D": 2} and r.shape == (3,)
    assert torch.equal(P(r, "D ..."), t.expand(2, 3))
    t = torch.randn(3, 2)
    r = nt(t, "H W").expand(10, 3)
    assert r.named_shape == {"H": 3, "W": 2} and r.shape == (10, 3)
    assert torch.equal(P(r, "H W ..."), t[:, :, None, None].expand(3, 2, 10, 3))
    r = nt(torch.randn(3, 2), {}).expand(10, 3, 3, 2)
    assert type(r) is torch.Tensor and r.shape == (10, 3, 3, 2)   # no named axis left


def test_addmm():
    # test_namedtensor.py::test_addmm (bias named/unnamed, out=, in place)
    bias, a, b = torch.randn(3, 5), torch.randn(7, 3, 2), torch.randn(2, 5)
    ref = bias + a @ b
    r = torch.addmm(bias, nt(a, "B ..."), b)
    assert r.named_shape == {"B": 7} and r.shape == (3, 5)
    close(P(r, "B ..."), ref)
    nbias = torch.randn(7, 3, 5)
    r = torch.addmm(nt(nbias, "B ..."), nt(a, "B ..."), b)
    close(P(r, "B ..."), nbias + a @ b)
    out = nt(torch.empty(7, 0), "B ...")
    torch.addmm(bias, nt(a, "B ..."), b, out=out)
    close(P(out, "B ..."), ref)
    x = nt(nbias.clone(), "B ...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch.vmap's 'performance drop' fallback note
        x.addmm_(nt(a, "B ..."), b)
    close(P(x, "B ..."), nbias + a @ b)


def test_bmm():
    # test_namedtensor.py::test_bmm (positional bmm with named batch; named 'N' as batch)
    a, b = torch.randn(7, 4, 3, 2), torch.randn(7, 4, 2, 5)
    r = torch.bmm(nt(a, "X ..."), nt(b, "X ..."))
    assert r.named_shape == {"X": 7} and r.shape == (4, 3, 5)
    close(P(r, "X ..."), a @ b)
    r = torch.bmm(nt(a, "X ..."), b[0])
    close(P(r, "X ..."), a @ b[0])
    # PyTorch's batch dim N as a named axis: mm per instance of N
    a3, b3 = torch.randn(7, 3, 2), torch.randn(7, 2, 5)
    r = torch.mm(nt(a3, "N ..."), nt(b3, "N ..."))
    close(P(r, "N ..."), torch.bmm(a3, b3))
    out = nt(torch.empty(7, 0), "X ...")
    torch.bmm(nt(a, "X ..."), nt(b, "X ..."), out=out)
    close(P(out, "X ..."), a @ b)


def test_bmm_batch_names_mismatch():
    # test_namedtensor.py::test_bmm (N vs M batch: 'do not match')
    # DIFFERENCE: different batch names broadcast (union).
    a, b = torch.randn(3, 3, 3), torch.randn(2, 3, 3)
    r = torch.mm(nt(a, "N ..."), nt(b, "M ..."))
    assert r.named_shape == {"N": 3, "M": 2}
    close(P(r, "N M ..."), a[:, None] @ b[None])


def test_matmul():
    # test_namedtensor.py::test_matmul (positional ranks, named batch)
    with pytest.raises(ShapeError, match="at least 1-D"):
        torch.matmul(nt(torch.randn(4), "X"), torch.randn(2))
    with pytest.raises(ShapeError, match="at least 1-D"):
        torch.matmul(torch.randn(2), nt(torch.randn(4), "X"))
    cases = [((4, 2), (2,)), ((4, 3, 2), (2,)), ((4, 5, 3, 2), (2,)), ((4, 2), (2, 3)),
             ((4, 2), (3, 2, 5)), ((4, 3, 2), (2, 3)), ((4, 5, 3, 2), (2, 3)),
             ((4, 5, 3, 2), (1, 2, 3)), ((4, 5, 3, 2), (2, 1, 2, 3))]
    for sa, sb in cases:
        a, b = torch.randn(sa), torch.randn(sb)
        r = torch.matmul(nt(a, "X ..."), b)
        ref = torch.stack([torch.matmul(a[i], b) for i in range(4)])
        assert r.named_shape == {"X": 4} and r.shape == ref.shape[1:]
        close(P(r, "X ..."), ref)
        r2 = nt(a, "X ...") @ b
        close(P(r2, "X ..."), ref)
    out = nt(torch.empty(7, 0), "N ...")
    a, b = torch.randn(7, 3, 2), torch.randn(7, 2, 5)
    torch.matmul(nt(a, "N ..."), nt(b, "N ..."), out=out)
    close(P(out, "N ..."), a @ b)


def test_mv():
    # test_namedtensor.py::test_mv
    a, v = torch.randn(7, 3, 2), torch.randn(2)
    r = torch.mv(nt(a, "N ..."), v)
    assert r.named_shape == {"N": 7} and r.shape == (3,)
    close(P(r, "N ..."), a @ v)
    vv = torch.randn(7, 2)
    r = torch.mv(nt(a, "N ..."), nt(vv, "N ..."))
    close(P(r, "N ..."), (a @ vv[:, :, None])[..., 0])
    out = nt(torch.empty(7, 0), "N ...")
    torch.mv(nt(a, "N ..."), v, out=out)
    close(P(out, "N ..."), a @ v)


def test_addmv():
    # test_namedtensor.py::test_addmv (bias named/unnamed, out=, in place)
    bias, a, v = torch.randn(3), torch.randn(7, 3, 2), torch.randn(2)
    r = torch.addmv(bias, nt(a, "N ..."), v)
    assert r.named_shape == {"N": 7} and r.shape == (3,)
    close(P(r, "N ..."), bias + a @ v)
    nbias = torch.randn(7, 3)
    r = torch.addmv(nt(nbias, "N ..."), nt(a, "N ..."), v)
    close(P(r, "N ..."), nbias + a @ v)
    out = nt(torch.empty(7, 0), "N ...")
    torch.addmv(bias, nt(a, "N ..."), v, out=out)
    close(P(out, "N ..."), bias + a @ v)
    x = nt(nbias.clone(), "N ...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x.addmv_(nt(a, "N ..."), v)
    close(P(x, "N ..."), nbias + a @ v)


def test_dot():
    # test_namedtensor.py::test_dot
    a, b = torch.randn(4, 2), torch.randn(2)
    r = torch.dot(nt(a, "X ..."), b)
    assert r.named_shape == {"X": 4} and r.shape == ()
    close(P(r, "X"), a @ b)
    # a dot product over a named axis
    x, y = torch.randn(2), torch.randn(2)
    r = nx.lax.pdot(nt(x, "C"), nt(y, "C"), "C")
    close(r, torch.dot(x, y))


# -- autograd ------------------------------------------------------------------------------

def test_autograd_ignores_names():
    # test_namedtensor.py::test_autograd_ignores_names
    base = torch.randn(3, 3, requires_grad=True)
    x = nt(base, "N C")
    x.sigmoid().sum(["N", "C"]).backward()
    s = torch.sigmoid(base.detach())
    close(base.grad, s * (1 - s))
    assert x.grad.named_shape == {"N": 3, "C": 3}


def test_tensor_grad_is_unnamed():
    # test_namedtensor.py::test_tensor_grad_is_unnamed
    # DIFFERENCE: gradients keep the named axes.
    tx = torch.randn(3, 3, requires_grad=True)
    ty = torch.randn(3, 3, requires_grad=True)
    x = nt(tx, [None, None])
    y = nt(ty, "N C")
    (x * y).sum().sum(["N", "C"]).backward()
    assert y.grad.named_shape == {"N": 3, "C": 3}
    assert x.grad.named_shape == {}
    close(P(y.grad, "N C"), tx.detach().sum().expand(3, 3))
    close(P(x.grad, ...), ty.detach().sum().expand(3, 3))


def test_autograd_warns_named_grad():
    # test_namedtensor.py::test_autograd_warns_named_grad
    # DIFFERENCE: a named grad is used (aligned by name), without a warning.
    t = torch.randn(3, 3)
    base = nt(t.clone(), "N C")
    g = torch.randn(3, 3)
    named_grad = nt(g.t().contiguous(), "C N")   # another storage order
    base.requires_grad_()
    with warnings.catch_warnings(record=True) as warns:
        warnings.simplefilter("always")
        base.clone().backward(named_grad)
    assert [str(w.message) for w in warns] == []
    assert torch.equal(P(base.grad, "N C"), g)


def test_nyi_dimname_overload_msg():
    # test_namedtensor.py::test_nyi_dimname_overload_msg
    with pytest.raises(TypeError):
        torch.randn(3, 3).squeeze_("N")
    with pytest.raises(AxisSpecError):
        nt(torch.randn(3, 1), "N ...").squeeze_("N")


def test_comparison_ops():
    # test_namedtensor.py::test_comparison_ops
    ta, tb = torch.randn(3, 3), torch.randn(3, 3)
    a = nt(ta, "N C")
    b = nt(tb.t().contiguous(), "C N")   # aligned by name
    scalar = torch.randn([])
    import operator
    for op in (operator.eq, operator.ne, operator.gt, operator.lt, operator.ge, operator.le):
        for other, tother in ((b, tb), (1, 1), (scalar, scalar)):
            r = op(a, other)
            assert r.named_shape == {"N": 3, "C": 3}
            assert torch.equal(P(r, "N C"), op(ta, tother))
    tn = ta.clone()
    tn[0, 0] = float("nan")
    tn[1, 1] = float("inf")
    assert torch.equal(P(torch.isnan(nt(tn, "N C")), "N C"), torch.isnan(tn))
    assert torch.equal(P(torch.isinf(nt(tn, "N C")), "N C"), torch.isinf(tn))


def test_comparison_ops_out():
    # test_namedtensor.py::test_comparison_ops (torch.eq(a, b, out=res) with plain res)
    # DIFFERENCE: out= must be named for a named result.
    ta, tb = torch.randn(3, 3), torch.randn(3, 3)
    a, b = nt(ta, "N C"), nt(tb, "N C")
    with pytest.raises(AxisSizeError):
        torch.eq(a, b, out=torch.empty(3, 3, dtype=torch.bool))
    for fn in (torch.eq, torch.ne, torch.lt, torch.gt, torch.le, torch.ge):
        res = nt(torch.empty(3, 3, dtype=torch.bool), "C N")
        fn(a, b, out=res)
        assert res.named_shape == {"C": 3, "N": 3}
        assert torch.equal(P(res, "N C"), fn(ta, tb))


def test_assertTensorDataAndNamesEqual():
    # assertTensorDataAndNamesEqual / self.assertEqual on named tensors (used throughout)
    # DIFFERENCE: torch.testing.assert_close takes torch.Tensors only.
    x = nt(torch.randn(2, 3), "N C")
    with pytest.raises(Exception, match="No comparison pair"):
        torch.testing.assert_close(x, x.clone())
    assert torch.allclose(x, x.clone())


def test_differences_are_documented_in_migrating_md():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "migrating.md").read_text()
    missing = [n for n, _ in DIFFERENCES if f"`{n[len('test_'):]}`" not in doc]
    assert not missing, missing
