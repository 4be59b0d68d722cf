"""Every spelling of an op (operator, Tensor method, torch function) takes the one
dispatch path and its rule's plans (same layout, broadcast by name, memoised reduction
dims): same results and errors whichever spelling and layout."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes import NamedTensor
from named_axes._env import bind


def _xy():
    g = torch.Generator().manual_seed(0)
    x = nx.named(torch.randn(3, 4, 5, generator=g), {0: "a", 1: "b"})
    y = nx.named(torch.randn(3, 4, 5, generator=g), {0: "a", 1: "b"})
    return x, y


SPELLINGS = [
    ("op", lambda x, y: x + y, torch.add),
    ("method", lambda x, y: x.add(y), torch.add),
    ("torch", lambda x, y: torch.add(x, y), torch.add),
    ("rsub", lambda x, y: 2.0 - x, lambda a, b: 2.0 - a),
    ("unary method", lambda x, y: x.tanh(), lambda a, b: a.tanh()),
    ("unary torch", lambda x, y: torch.sin(x), lambda a, b: torch.sin(a)),
    ("method with args", lambda x, y: x.clamp(-0.5, 0.5), lambda a, b: a.clamp(-0.5, 0.5)),
    ("plain operand", lambda x, y: x * y._data[0, 0], lambda a, b: a * b),
]


@pytest.mark.parametrize("how,f,ref", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_direct_spellings_match_physical(how, f, ref):
    x, y = _xy()
    out = f(x, y)
    assert out.named_shape == {"a": 3, "b": 4}
    b = y._data[0, 0] if how == "plain operand" else y._data
    torch.testing.assert_close(out._data, ref(x._data, b))


def test_shared_names_tuple_with_other_sizes_is_an_error():
    # a names tuple shared by values of different named sizes (vmap's chunk_size does
    # this) must not broadcast silently
    a = nx.named(torch.randn(1, 3), {0: "i"})
    b = NamedTensor._wrap(torch.randn(4, 3), a._names)
    for f in (lambda: a + b, lambda: a.add(b), lambda: torch.add(a, b), lambda: a.mul_(b)):
        with pytest.raises(nx.AxisSizeError):
            f()


def test_unnamed_operands_still_work():
    x, _ = _xy()
    w = NamedTensor._wrap(torch.randn(5), ())
    for out in (x + w, x.mul(w), torch.sub(x, w), w + x):
        assert out.named_shape == {"a": 3, "b": 4}
    torch.testing.assert_close((x + w)._data, x._data + w._data)
    torch.testing.assert_close(w.exp(), w._data.exp())   # no names: a plain tensor


def test_positional_errors_name_the_op():
    x, _ = _xy()
    bad = torch.randn(7)
    for f, op in ((lambda: x + bad, "Tensor.__add__"), (lambda: x.add(bad), "Tensor.add"),
                  (lambda: torch.add(x, bad), "torch.add")):
        with pytest.raises(RuntimeError, match=op) as e:
            f()
        assert isinstance(e.value, nx.AxisSizeError)


def test_inplace_operator_and_method_keep_identity():
    x, y = _xy()
    ref = x._data * 2 + y._data
    x2 = x
    x2 *= 2.0
    x2.add_(y)
    assert x2 is x
    torch.testing.assert_close(x._data, ref)


def test_conflicting_axes_refused_on_direct_paths():
    x, y = _xy()
    with bind({"a": 3, "b": 4}, resources={"a": "m", "b": "m"},
              conflicts=frozenset({frozenset({"a", "b"})})):
        for f in (lambda: x + y, lambda: x * 2.0, lambda: x.tanh(), lambda: torch.sin(x),
                  lambda: x.sum(-1)):
            with pytest.raises(nx.AxisResourceError, match="would meet in one value"):
                f()
        assert x.sum("a").named_shape == {"b": 4}


@pytest.mark.parametrize("dims,keepdim", [("b", False), ("b", True), (("b", -1), False),
                                          (("b", -1), True), (("a", 0), True), (0, True),
                                          ((-1, "a", "b"), False)])
def test_reduction_keepdim_layouts(dims, keepdim):
    x, _ = _xy()   # physically [a, b, 5]
    items = dims if isinstance(dims, tuple) else (dims,)
    phys = tuple({"a": 0, "b": 1}.get(d, 2) for d in items)
    named = tuple(i for i in phys if i < 2)
    ref = x._data.sum(phys, keepdim=True).squeeze(named)   # named dims always go
    if not keepdim and 2 in phys:
        ref = ref.squeeze(-1)
    left = {"a", "b"} - set(items)
    for out in (x.sum(dims, keepdim=keepdim), x.sum(dims, keepdim), nx.sum(x, dims, keepdim=keepdim)):
        if isinstance(out, NamedTensor):
            assert set(out.named_shape) == left
            out = out._data
        torch.testing.assert_close(out, ref)


def test_reduction_values_indices_and_single_dim():
    x, _ = _xy()
    v, i = x.max("b")
    torch.testing.assert_close(v._data, x._data.max(1).values)
    torch.testing.assert_close(i._data, x._data.max(1).indices)
    torch.testing.assert_close(x.argmax(-1)._data, x._data.argmax(2))
    torch.testing.assert_close(x.count_nonzero(("b", 0))._data, x._data.count_nonzero((1, 2)))


def test_reduction_memo_follows_layout_and_environment():
    t = torch.randn(3, 4)
    x = nx.named(t, {0: "a", 1: "b"})
    xt = nx.named(t.T.contiguous(), {0: "b", 1: "a"})   # same values, other physical order
    for _ in range(2):
        torch.testing.assert_close(x.sum("a")._data, t.sum(0))
        torch.testing.assert_close(xt.sum("a")._data, t.sum(0))
    # a name the value lacks: replicated by the bound size, which differs per binding
    v = nx.named(torch.ones(2), {})
    for n in (3, 5, 3):
        with bind({"i": n}):
            torch.testing.assert_close(nx.positional(v.sum("i")), torch.full((2,), float(n)))
    with pytest.raises(nx.UnboundAxisError):
        v.sum("i")


def test_bool_dim_is_not_served_as_int():
    # False == 0 as a dict key: the memo must not hand sum(0)'s plan to sum(False)
    x, _ = _xy()
    torch.testing.assert_close(x.sum(0)._data, x._data.sum(2))
    with pytest.raises(RuntimeError):
        x.sum(False)


@pytest.mark.usefixtures("dynamo_matmul")
def test_compiled_fullgraph_through_direct_paths():
    w = torch.randn(5)

    def prog(x, y):
        z = torch.tanh(x * 0.9 + y)
        z = torch.sin(z) * y
        z = 2.0 - z.tanh().exp()
        z += y
        s = z.softmax(-1) + z.sum("b") + z.mean(-1, keepdim=True) + z.logsumexp(("b", 0))
        return s.reshape(-1) @ w

    f = nx.xmap(prog, in_axes=["a", "b", ...], out_axes=["a", "b", ...])
    x, y = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    c = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(c(x, y), f(x, y))


def test_broadcast_by_name_paths():
    g = torch.Generator().manual_seed(1)
    x = nx.named(torch.randn(3, 4, 5, generator=g), {0: "a", 1: "b"})
    y = nx.named(torch.randn(4, 2, 1, generator=g), {0: "b"})     # more positional dims
    z = nx.named(torch.randn(6, 3, generator=g), {0: "c", 1: "a"})
    ref_xy = x._data[:, :, None, :] + y._data[None]
    for out in (x + y, x.add(y), torch.add(x, y)):
        assert out.named_shape == {"a": 3, "b": 4} and out.shape == (2, 5)
        torch.testing.assert_close(out._data, ref_xy)
    out = y * x
    torch.testing.assert_close(out._data, (y._data[:, None] * x._data.transpose(0, 1)[:, :, None]))
    out = x - z        # z's positional dims are all named: scalar per (c, a)
    assert out.named_shape == {"a": 3, "b": 4, "c": 6}
    torch.testing.assert_close(
        out._data, x._data[:, :, None, :] - z._data.T[:, None, :, None])
    bad = nx.named(torch.randn(7), {0: "a"})
    for f in (lambda: x + bad, lambda: torch.mul(x, bad), lambda: bad - x):
        with pytest.raises(nx.AxisSizeError, match="inconsistent sizes for axis 'a'"):
            f()
    with bind({"a": 3, "b": 4}, resources={"a": "m", "b": "m"},
              conflicts=frozenset({frozenset({"a", "b"})})):
        with pytest.raises(nx.AxisResourceError):
            nx.named(torch.randn(3), {0: "a"}) + nx.named(torch.randn(4), {0: "b"})


@pytest.mark.usefixtures("dynamo_matmul")
def test_compiled_fullgraph_with_unnamed_inputs():
    # in_axes={} inputs arrive as NamedTensors without names: operators and methods on
    # them must trace too (no dispatcher table lookup keyed by a Tensor method)
    def prog(x, w):
        return (x + w) * w.exp() + (w - x) + x.add(w) + (x @ w).sum("b")

    f = nx.xmap(prog, in_axes=(["a", "b", ...], {}), out_axes=["a", "b", ...])
    x, w = torch.randn(3, 4, 5), torch.randn(5, 5)
    c = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(c(x, w), f(x, w))
    xe = x[:, :, None, :]
    ref = (xe + w) * w.exp() + (w - xe) + (xe + w) + (x @ w).sum(1)[:, None, None, :]
    torch.testing.assert_close(f(x, w), ref)
