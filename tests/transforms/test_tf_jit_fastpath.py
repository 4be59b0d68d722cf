"""nx.jit's cached-call fast path: the direct inductor call, the generated output
rebuild, and the cases that must fall back (aliasing outputs, repeated inputs, strides,
constants that require grad) — all against eager."""
from __future__ import annotations

from collections import namedtuple

import pytest
import torch

import named_axes as nx

BACKENDS = ("eager", "inductor")


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_aliasing_inputs(backend):
    f = nx.jit(lambda x, y: (x, x * y, y.view(-1)), backend=backend)
    x, y = torch.randn(3), torch.randn(3)
    a, b, c = f(x, y)
    assert torch.equal(a, x) and torch.equal(b, x * y) and torch.equal(c, y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_tensor_twice_then_different(backend):
    h = nx.jit(lambda a, b: a - b, backend=backend)
    t = torch.ones(3)
    assert torch.equal(h(t, t), torch.zeros(3))
    assert torch.equal(h(t, torch.zeros(3)), torch.ones(3))   # same cache entry


@pytest.mark.parametrize("backend", BACKENDS)
def test_strides_are_part_of_the_key(backend):
    k = nx.jit(lambda a: a.sin() + 1, backend=backend)
    m = torch.randn(4, 4)
    torch.testing.assert_close(k(m), m.sin() + 1)
    torch.testing.assert_close(k(m.t()), m.t().sin() + 1)
    assert k.cache_size() == 2


def test_constant_requiring_grad():
    w = torch.randn(3, requires_grad=True)
    q = nx.jit(lambda a: (a * w).sum())
    torch.testing.assert_close(q(torch.ones(3)), w.sum())


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_structures(backend):
    z = nx.jit(lambda v: {"s": v.sum("b"), "n": 3, "t": [v * 2, None]}, backend=backend)
    v = nx.named(torch.randn(2, 3), {0: "b"})
    for _ in range(2):   # the trace, then a cached call
        o = z(v)
        assert type(o["s"]) is torch.Tensor   # no named axis left: a plain tensor
        torch.testing.assert_close(o["s"], v._data.sum(0))
        assert o["n"] == 3 and o["t"][1] is None
        assert o["t"][0].named_shape == {"b": 2}
    Pair = namedtuple("Pair", "a b")
    u = nx.jit(lambda x: Pair(x + 1, x * 2), backend=backend)
    for _ in range(2):
        r = u(torch.ones(2))
        assert isinstance(r, Pair) and torch.equal(r.b, torch.full((2,), 2.0))


def test_inline_under_transforms_and_grad():
    f = nx.jit(lambda v: (v.sin() ** 2).sum())
    x = torch.randn(3)
    torch.testing.assert_close(torch.func.grad(f)(x), 2 * x.sin() * x.cos())
    torch.testing.assert_close(torch.func.vmap(f)(x[:, None]), x.sin() ** 2)
    y = x.clone().requires_grad_()
    assert f.cache_size() == 0 and f.stats()["inline"] == 2
    f(y).backward()   # compiled (forward and backward), not inline
    torch.testing.assert_close(y.grad, 2 * x.sin() * x.cos())
    assert f.cache_size() == 1 and f.stats()["compiled"] == 1
    with torch.no_grad():
        torch.testing.assert_close(f(torch.nn.Parameter(x)), (x.sin() ** 2).sum())
    assert f.cache_size() == 2


def test_small_matmuls_fused_match_eager():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g)
    big_a, big_b = torch.randn(64, 128, generator=g), torch.randn(128, 64, generator=g)
    f = nx.jit(lambda x, y: (x @ y).relu().sum(-1))
    torch.testing.assert_close(f(a, b), (a @ b).relu().sum(-1))
    torch.testing.assert_close(f(big_a, big_b), (big_a @ big_b).relu().sum(-1),
                               rtol=1e-4, atol=1e-4)


def test_small_integer_matmul_keeps_dtype():
    a = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    b = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    out = nx.jit(lambda x, y: x @ y)(a, b)
    assert out.dtype == torch.int32 and torch.equal(out, a @ b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_entry_guard_switches_correctly(backend):
    f = nx.jit(lambda a, b: (a * b).sum(-1), backend=backend)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    u, v = torch.randn(2, 5), torch.randn(2, 5)
    for _ in range(2):   # alternate between two entries: each call must use its own
        torch.testing.assert_close(f(x, y), (x * y).sum(-1))
        torch.testing.assert_close(f(u, v), (u * v).sum(-1))
        torch.testing.assert_close(f(x.t(), y.t()), (x.t() * y.t()).sum(-1))
        torch.testing.assert_close(f(x.double(), y.double()), (x.double() * y.double()).sum(-1))
    assert f.cache_size() == 4
    torch.testing.assert_close(f(x, x), (x * x).sum(-1))        # repeated, pure program
    xr = x.clone().requires_grad_()
    out = f(xr, y)                                              # inline: autograd sees it
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(xr.grad, y)
    g = torch.func.grad(lambda a: f(a, y).sum())(x)             # inline under torch.func
    torch.testing.assert_close(g, y)
    with pytest.raises(nx.AxisSpecError, match="static_argnums/donate_argnums"):
        nx.jit(lambda a: a, donate_argnums=2, backend=backend)(x)


def test_last_entry_guard_not_used_for_mutating_programs():
    def g(a, b):
        a.add_(1.0)
        return a * b

    f = nx.jit(g)
    x, y = torch.zeros(3), torch.ones(3)
    f(x, y)
    f(x, y)
    s = torch.zeros(3)
    f(s, s)          # (the first call of an entry also runs the program while tracing)
    f(x, y)          # the guard holds the distinct-arguments entry again
    t = torch.zeros(3)
    torch.testing.assert_close(f(t, t), torch.full((3,), 1.0))   # eager: (0 + 1) * 1
    torch.testing.assert_close(t, torch.full((3,), 1.0))


def test_jit_inside_xmap_with_bound_axes():
    w = torch.randn(3)
    f = nx.jit(lambda a: (a * 2).sum())
    f(w)   # the last-entry guard now holds plain (3,) tensors
    got = nx.xmap(lambda x: f(w) + x.sum(), in_axes=["b", ...], out_axes=["b", ...])(
        torch.ones(2, 4))
    torch.testing.assert_close(got, (w * 2).sum() + torch.full((2,), 4.0))


def test_first_call_mutates_inputs_once():
    """Tracing runs on fake tensors, so an in-place update happens once per call."""
    def bump(x):
        x.add_(1)
        return x * 2
    j = nx.jit(bump)
    x = torch.zeros(3)
    torch.testing.assert_close(j(x), torch.full((3,), 2.0))
    torch.testing.assert_close(x, torch.ones(3))
    torch.testing.assert_close(j(x), torch.full((3,), 4.0))
    torch.testing.assert_close(x, torch.full((3,), 2.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_direct_call_only_where_it_changes_nothing(backend):
    """Programs on both sides of the direct call's rule (an input written, outputs
    sharing memory, views of an intermediate, the results of one multi-result op)
    give eager's values, on the compiling call and on cached ones."""
    programs = [
        lambda x: x.add_(1).mul(2),                              # writes its input
        lambda x: (lambda y: (y, y.view(-1)))(x * 2),            # outputs share memory
        lambda x: (x * 2).expand(2, 3, 4),                       # a view of an intermediate
        lambda x: tuple(torch.max(x.sin(), dim=1)),              # one op's two results
        lambda x: x.t(),                                         # a view of the input
    ]
    for k, fn in enumerate(programs):
        f = nx.jit(fn, backend=backend)
        for _ in range(3):
            x = torch.randn(3, 4)
            x_eager = x.clone()
            want = fn(x_eager)
            got = f(x)
            torch.testing.assert_close(got, want, msg=f"program {k}")
            torch.testing.assert_close(x, x_eager, msg=f"program {k}: the input")
        if k == 4:   # still a view of the input, as in eager
            assert got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
