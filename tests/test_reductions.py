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


# -- dim=() and mixed tuples (issue 11, item 7) ----------------------------------------------
# JAX 0.4.30, x = jnp.array([[1., -2., 3.], [4., 5., -6.]]):
#   jnp.sum/mean/prod/max/min(x, axis=()) -> x;  jnp.var/std(x, axis=()) -> zeros (ddof=0),
#   jnp.std(x, axis=(), ddof=1) -> nan;  jnp.all/any(x, axis=()) -> x != 0;
#   jax.nn.logsumexp(x, axis=()) -> x;  jax.nn.softmax(x, axis=()) -> ones;
#   jax.nn.log_softmax(x, axis=()) -> zeros;  jnp.argmax(x, axis=()) -> TypeError.
# nx.var/std keep torch's default correction=1 (JAX's ddof=1): nan.

E = torch.tensor([[1., -2., 3.], [4., 5., -6.]])
EN = nx.named(E, {0: "b"})


@pytest.mark.parametrize("name, want", [
    ("sum", E), ("mean", E), ("prod", E), ("amax", E), ("amin", E), ("logsumexp", E),
    ("all", E != 0), ("any", E != 0), ("softmax", torch.ones(2, 3)),
    ("log_softmax", torch.zeros(2, 3)), ("var", torch.full((2, 3), float("nan"))),
    ("std", torch.full((2, 3), float("nan"))),
])
@pytest.mark.parametrize("named", [False, True])
def test_nx_reduction_over_no_axis_is_per_entry(name, want, named):
    x = EN if named else E
    with pytest.warns(UserWarning) if name in ("var", "std") else _nothing():
        out = getattr(nx, name)(x, ())
    if named:
        assert out.named_shape == {"b": 2}
        out = nx.positional(out, {0: "b"})
    torch.testing.assert_close(out, want, equal_nan=True)
    if name not in ("var", "std"):   # axis=[] is the same
        torch.testing.assert_close(getattr(nx, name)(E, axis=[]), want)


def test_nx_norm_over_no_axis_is_the_absolute_value():
    torch.testing.assert_close(nx.positional(nx.norm(EN, dim=()), {0: "b"}), E.abs())
    torch.testing.assert_close(nx.norm(E, 1, dim=()), E.abs())


@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin"])
def test_nx_single_dim_reductions_refuse_no_axis(name):
    # (jnp.argmax(x, axis=()) raises a TypeError in JAX)
    with pytest.raises(nx.AxisSpecError, match=r"takes a single dimension, got \(\)"):
        getattr(nx, name)(EN, ())


def test_torch_spellings_of_dim_empty_keep_torch_meaning_per_instance():
    # torch.sum(t, ()) sums every dim (and torch.all(t, ()) none): per named index
    torch.testing.assert_close(nx.positional(torch.sum(X, ()), {0: "batch", 1: "classes"}),
                               T.sum(2))
    torch.testing.assert_close(nx.positional(X.mean(()), {0: "batch", 1: "classes"}), T.mean(2))
    out = torch.all(nx.named(E, {0: "b"}), ())
    assert torch.equal(nx.positional(out, {0: "b"}), E != 0)
    s = nx.named(torch.tensor([1., 2.]), {0: "b"})   # named scalars: the value itself
    assert torch.equal(nx.positional(s.sum(()), {0: "b"}), torch.tensor([1., 2.]))


def _loop(fn, full, k):
    """``fn`` per index of the leading ``k`` dims of ``full``, stacked back."""
    if k == 0:
        return fn(full)
    return torch.stack([_loop(fn, full[i], k - 1) for i in range(full.shape[0])])


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin", "logsumexp", "var",
                                  "std", "all", "any", "norm"])
@pytest.mark.parametrize("dims, flat", [(("batch", 0), (0, 2)), ((1, "classes"), (1, 3)),
                                        (("classes",), (1,)), ((0, 1), (2, 3))])
def test_nx_reductions_over_mixed_tuples(name, dims, flat):
    # x laid out [batch, classes, p0, p1]; reference: the torch reduction over the
    # corresponding dims of the full tensor (positional dims of every instance)
    full = torch.rand(2, 3, 4, 5, dtype=torch.float64) + 0.5
    x = nx.named(full, {0: "batch", 1: "classes"})
    ref = {"norm": lambda t, d: torch.linalg.vector_norm(t, dim=d),
           "prod": lambda t, d: t.prod(d[1]).prod(d[0]) if len(d) == 2 else t.prod(d[0])}.get(
        name, lambda t, d: getattr(torch, name)(t, d))
    out = getattr(nx, name)(x, dim=dims) if name == "norm" else getattr(nx, name)(x, dims)
    left = [n for i, n in enumerate(("batch", "classes")) if i not in flat]
    assert set(out.named_shape if isinstance(out, nx.NamedTensor) else {}) == set(left)
    if isinstance(out, nx.NamedTensor):
        out = nx.positional(out, {i: n for i, n in enumerate(left)})
    torch.testing.assert_close(out, ref(full, flat))


@pytest.mark.parametrize("fn, ref", [(nx.softmax, torch.softmax), (nx.log_softmax, torch.log_softmax)])
@pytest.mark.parametrize("dims", [("batch", 0), (0, "batch"), ("batch", "classes"), (0, 1),
                                  ("classes", 1, "batch")])
def test_softmax_over_a_tuple_of_axes(fn, ref, dims):
    # reference: loop over the instances of the names not normalized over; within one,
    # softmax over the flattened normalized dims (jax.nn.softmax(x, axis=(0, 1)) does this)
    full = torch.randn(2, 3, 4, 5, dtype=torch.float64)   # batch, classes, p0, p1
    x = nx.named(full, {0: "batch", 1: "classes"})
    phys = sorted({"batch": 0, "classes": 1}.get(d, d + 2 if isinstance(d, int) else d)
                  for d in dims)
    rest = [d for d in range(4) if d not in phys]
    moved = full.permute(rest + phys)
    lead = moved.shape[:len(rest)]
    want = ref(moved.reshape(*lead, -1), -1).reshape(moved.shape)
    want = want.permute([(rest + phys).index(d) for d in range(4)])
    out = fn(x, dims)
    assert out.named_shape == {"batch": 2, "classes": 3}
    torch.testing.assert_close(nx.positional(out, {0: "batch", 1: "classes"}), want)
    # the method and F spellings agree
    meth = getattr(x, fn.__name__)(dims)
    torch.testing.assert_close(nx.positional(meth, {0: "batch", 1: "classes"}), want)


def test_softmax_over_a_tuple_gradient_and_dtype():
    full = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    x = nx.named(full, {0: "b"})
    out = torch.nn.functional.softmax(x, dim=("b", 0), dtype=torch.float32)
    assert out.dtype == torch.float32
    w = torch.randn(2, 3, dtype=torch.float32)
    (nx.positional(out, {0: "b"}) * w).sum().backward()
    ref = full.detach().clone().requires_grad_()
    (torch.softmax(ref.reshape(-1), 0, dtype=torch.float32).reshape(2, 3) * w).sum().backward()
    torch.testing.assert_close(full.grad, ref.grad)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "prod", "all", "argmax", "nansum"])
def test_full_reduction_with_a_named_axis_of_size_zero(op):
    """Zero instances: the result has the named axis of size 0, as the per-instance loop
    (and JAX's xmap) give -- the flattening once asked torch to infer a size from 0
    elements and failed."""
    z = nx.named(torch.zeros(0, 3), "N")
    out = getattr(z, op)()
    assert out.named_shape == {"N": 0} and out.shape == ()
    keep = getattr(z, op)(0, keepdim=True) if op != "argmax" else z.argmax(0, keepdim=True)
    assert keep.named_shape == {"N": 0} and keep.shape == (1,)
    got = nx.xmap(lambda x: getattr(x, op)(), in_axes=["N", ...], out_axes=["N", ...])(
        torch.zeros(0, 3))
    assert got.shape == (0,)
