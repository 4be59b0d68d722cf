"""Names where dims go (SPEC §1): Tensor methods and nx.* reductions over names and ints.

Reference: the same reduction on the plain tensor whose dims the names came from.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes._env import bind

torch.manual_seed(0)
T = torch.rand(4, 3, 5, dtype=torch.float64) + 0.1   # dims: batch, classes, positional
X = nx.named(T, {0: "batch", 1: "classes"})           # positional shape (5,)


def plain(v):
    """A result as a plain tensor (named results must have no names left)."""
    if isinstance(v, nx.NamedTensor):
        assert v.named_shape == {}, v.named_shape
        return nx.positional(v)
    return v


def close(a, b):
    torch.testing.assert_close(plain(a), b)


@pytest.mark.parametrize("name, ref", [
    ("sum", lambda t, d, k: t.sum(d, keepdim=k)), ("mean", lambda t, d, k: t.mean(d, keepdim=k)),
    ("amax", lambda t, d, k: t.amax(d, keepdim=k)), ("amin", lambda t, d, k: t.amin(d, keepdim=k)),
    ("logsumexp", lambda t, d, k: t.logsumexp(d, keepdim=k)), ("var", lambda t, d, k: t.var(d, keepdim=k)),
    ("std", lambda t, d, k: t.std(d, keepdim=k)), ("nansum", lambda t, d, k: t.nansum(d, keepdim=k)),
])
@pytest.mark.parametrize("keepdim", [False, True])
def test_method_mixed_name_and_int_dims(name, ref, keepdim):
    # ('batch', 'classes', 0) reduces physical dims (0, 1, 2); named ones vanish even with keepdim
    out = getattr(X, name)(("batch", "classes", 0), keepdim=keepdim)
    want = ref(T, (0, 1, 2), keepdim)
    if keepdim:
        want = want.reshape(1)   # only the positional dim stays, as size 1
    close(out, want)
    out = getattr(X, name)(("classes", -1), keepdim=keepdim)
    assert out.named_shape == {"batch": 4}
    want = ref(T, (1, 2), keepdim)
    torch.testing.assert_close(nx.positional(out, {0: "batch"}), want.reshape(4, *want.shape[2:]))


def test_sum_by_name_tutorial_spellings():
    close(X.sum(("batch", "classes", 0)), T.sum())
    s = X.sum("batch")
    assert s.named_shape == {"classes": 3} and s.shape == (5,)
    torch.testing.assert_close(nx.positional(s, {0: "classes"}), T.sum(0))
    torch.testing.assert_close(nx.positional(X.sum(("batch", 0)), {0: "classes"}), T.sum((0, 2)))


def test_max_by_name_returns_values_and_indices():
    out = X.max("batch")
    assert isinstance(out, tuple) and len(out) == 2
    ref = T.max(0)
    torch.testing.assert_close(nx.positional(out.values, {0: "classes"}), ref.values)
    torch.testing.assert_close(nx.positional(out.indices, {0: "classes"}), ref.indices)
    mn = X.min("classes", keepdim=True)
    ref = T.min(1)
    torch.testing.assert_close(nx.positional(mn[0], {0: "batch"}), ref.values)
    assert X.argmax("classes").named_shape == {"batch": 4}
    torch.testing.assert_close(nx.positional(X.argmax("classes"), {0: "batch"}), T.argmax(1))


def test_dimwise_by_name_keeps_the_axis():
    sm = X.softmax("classes")
    assert sm.named_shape == {"batch": 4, "classes": 3}
    torch.testing.assert_close(nx.positional(sm, {0: "batch", 1: "classes"}), T.softmax(1))
    ls = X.log_softmax("batch")
    torch.testing.assert_close(nx.positional(ls, {0: "batch", 1: "classes"}), T.log_softmax(0))
    cs = X.cumsum("classes")
    torch.testing.assert_close(nx.positional(cs, {0: "batch", 1: "classes"}), T.cumsum(1))
    lse = X.logsumexp("classes")
    torch.testing.assert_close(nx.positional(lse, {0: "batch"}), T.logsumexp(1))


NX_CASES = [
    ("sum", lambda t, d: t.sum(d)), ("mean", lambda t, d: t.mean(d)), ("amax", lambda t, d: t.amax(d)),
    ("amin", lambda t, d: t.amin(d)), ("logsumexp", lambda t, d: t.logsumexp(d)),
    ("var", lambda t, d: t.var(d)), ("std", lambda t, d: t.std(d)),
    ("norm", lambda t, d: torch.linalg.vector_norm(t, dim=d)),
]


@pytest.mark.parametrize("name, ref", NX_CASES)
@pytest.mark.parametrize("kw", ["dim", "axis"])
def test_nx_functions_take_dim_or_axis(name, ref, kw):
    f = getattr(nx, name)
    out = f(X, **{kw: ("batch", 0)})
    torch.testing.assert_close(nx.positional(out, {0: "classes"}), ref(T, (0, 2)))
    close(f(X, **{kw: ("batch", "classes", -1)}), ref(T, (0, 1, 2)))


@pytest.mark.parametrize("name", ["prod", "max", "min", "argmax", "argmin", "softmax", "log_softmax"])
@pytest.mark.parametrize("kw", ["dim", "axis"])
def test_nx_single_dim_functions(name, kw):
    out = getattr(nx, name)(X, **{kw: "classes"})
    ref = getattr(T, name)(1)
    if name in ("softmax", "log_softmax"):
        torch.testing.assert_close(nx.positional(out, {0: "batch", 1: "classes"}), ref)
    elif name in ("max", "min"):
        torch.testing.assert_close(nx.positional(out[0], {0: "batch"}), ref.values)
        torch.testing.assert_close(nx.positional(out[1], {0: "batch"}), ref.indices)
    else:
        torch.testing.assert_close(nx.positional(out, {0: "batch"}), ref)


def test_nx_all_any_and_prod_of_several_dims():
    b = nx.named(T > 0.5, {0: "batch"})
    torch.testing.assert_close(plain(nx.all(b, ("batch", 0, 1))), (T > 0.5).all())
    torch.testing.assert_close(plain(nx.any(b, axis=("batch", 0, 1))), (T > 0.5).any())
    torch.testing.assert_close(plain(nx.prod(X, ("batch", "classes", 0))), T.prod())
    torch.testing.assert_close(nx.positional(X.prod(("batch", 0)), {0: "classes"}),
                               T.prod(0).prod(1))


def test_nx_functions_on_plain_tensors_and_dim_axis_clash():
    torch.testing.assert_close(nx.sum(T, 1), T.sum(1))
    with pytest.raises(TypeError, match="dim= or axis=, not both"):
        nx.sum(X, dim=0, axis="batch")


@pytest.mark.parametrize("name, factor", [("sum", 3.0), ("mean", 1.0), ("amax", 1.0),
                                          ("logsumexp", None)])
def test_reducing_a_bound_name_the_value_lacks_is_replicated(name, factor):
    y = nx.named(T, {0: "batch"})             # no 'i'
    with bind({"i": 3}):
        out = getattr(y, name)("i")
        assert out.named_shape == {"batch": 4}
        ref = nx.positional(y, {0: "batch"})
        want = ref + torch.log(torch.tensor(3.0, dtype=ref.dtype)) if factor is None else ref * factor
        torch.testing.assert_close(nx.positional(out, {0: "batch"}), want)
        assert float(nx.sum(1.0, "i")) == 3.0
        torch.testing.assert_close(plain(nx.sum(y, ("i", "batch"))), 3 * T.sum(0))


def test_replicated_reduction_inside_xmap():
    f = nx.xmap(lambda v, w: v.sum("j") * w, in_axes=({0: "i"}, {0: "j"}),
                out_axes={0: "i", 1: "j"})
    x, w = torch.rand(3, 2), torch.rand(4, 2)
    out = f(x, w)                         # v lacks j: its sum over j is 4 * v
    torch.testing.assert_close(out, 4 * x[:, None, :] * w[None, :, :])


def test_unbound_name_raises_unbound_axis_error():
    with pytest.raises(nx.UnboundAxisError, match=r"axis 'zzz' is not bound here.*'batch', 'classes'"):
        X.sum("zzz")
    with pytest.raises(NameError, match="zzz"):
        nx.mean(X, axis=("batch", "zzz"))
    with pytest.raises(nx.UnboundAxisError, match="'zzz'"):
        X.softmax("zzz")


def test_positional_dim_out_of_range_names_the_op_and_rank():
    with pytest.raises(IndexError, match=r"Tensor.sum: dimension 3 is out of range .* 1 positional"):
        X.sum(3)
    with pytest.raises(ValueError, match="names one dimension twice"):
        X.sum(("batch", "batch"))
