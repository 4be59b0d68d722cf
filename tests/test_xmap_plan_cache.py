"""xmap's per-structure call plans: the cached path must give the results and the
errors of the reference (first-call) path, whatever changes between calls."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def _fresh_error(make, *args):
    """The message a fresh xmap (no cached plan) raises for ``args``."""
    with pytest.raises(Exception) as info:
        make()(*args)
    return type(info.value), str(info.value)


def _agree(f, make, *args):
    """``f`` (plans cached) and a fresh xmap give the same result, or the same error."""
    try:
        want = make()(*args)
    except Exception as e:  # noqa: BLE001 - compared below
        with pytest.raises(type(e)) as info:
            f(*args)
        assert str(info.value) == str(e)
        return
    _same(f(*args), want)


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, nx.NamedTensor):
        assert a._names == b._names
        torch.testing.assert_close(a._data, b._data)
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
        assert a.shape == b.shape and a.stride() == b.stride()
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    else:
        assert a == b


def _prog(x, y, scale):
    return {"s": x * y * scale, "t": (x.sum(), y)}


def _make():
    return nx.xmap(_prog, in_axes=({1: "c"}, ["b", ...], None),
                   out_axes={"s": {0: "c", 1: "b"}, "t": (["c", ...], {-1: "b"})})


@pytest.mark.parametrize("shapes", [[(3, 4), (4, 3)], [(2, 5, 6), (5, 2, 6)], [(3, 1), (1, 3)]])
def test_cached_plan_matches_fresh_across_shapes(shapes):
    f = _make()
    g = torch.Generator().manual_seed(0)
    for sx in shapes * 2:
        x = torch.randn(*sx, generator=g)
        y = torch.randn(x.shape[1], x.shape[0], *x.shape[2:], generator=g)
        for _ in range(3):
            _same(f(x, y, 2.0), _make()(x, y, 2.0))
    assert len(f._plans) == 1   # one structure: one plan, whatever the sizes


def test_cached_plan_across_structures_and_named_inputs():
    def make():
        return nx.xmap(lambda a, b: (a, b), in_axes=(["i", ...], ["i", ...]), out_axes=["i", ...])

    f = make()
    x = torch.randn(3, 4)
    nt = nx.named(torch.randn(2, 3, 4), {0: "o"})
    args = [(x, x), ({"u": x, "v": x}, x), ((x, [x, x]), x), (nt, x), (x, nt), (x[:2], x[:2]),
            ({"v": x, "u": x}, x), (x, x.T), (x, x.T.contiguous().T), ([x, x[:1]], x)]
    for a, b in args * 2:
        _agree(f, make, a, b)

    def make2():
        return nx.xmap(lambda a, b: (a, b), in_axes=(["i", ...], None), out_axes=(["i", ...], None))

    f2 = make2()
    for b in [1.5, None, "s", (x, 2), 1.5, None, "s", (x, 2), torch.ones(2), [1, 2]]:
        _agree(f2, make2, x, b)
    g = nx.xmap(lambda t, y: {k: v * y for k, v in t.items()},
                in_axes=({"u": ["i", ...], "v": {1: "i"}}, ["i", ...]), out_axes=["i", ...])
    for n in (3, 5, 3):
        t = {"u": torch.randn(n, 2), "v": torch.randn(2, n)}
        y = torch.randn(n)
        _same(g(t, y), {"u": t["u"] * y[:, None], "v": t["v"].T * y[:, None]})


def test_output_structure_changes_between_calls():
    f = nx.xmap(lambda x, k: (x,) * k if k else x, in_axes=(["b", ...], None),
                out_axes={-1: "b"})
    x = torch.randn(4, 3)
    for k in (0, 2, 0, 3, 2):
        want = x.T if not k else (x.T,) * k
        _same(f(x, k), want)


def test_errors_identical_after_plan_is_cached():
    def make():
        return nx.xmap(lambda x, y: x + y, in_axes=(["i", ...], ["i", ...]), out_axes=["i", ...])

    f = make()
    f(torch.ones(3, 2), torch.ones(3, 2))
    bad = (torch.ones(5, 2), torch.ones(7, 2))
    want = _fresh_error(make, *bad)
    with pytest.raises(want[0]) as info:
        f(*bad)
    assert str(info.value) == want[1]
    assert "inconsistent sizes for axis 'i': 5 (argument 0, dim 0) vs 7 (argument 1, dim 0)" in want[1]
    # and the plan still serves good calls afterwards
    _same(f(torch.ones(4, 2), torch.ones(4, 2)), torch.full((4, 2), 2.0))


def test_axis_sizes_error_identical_after_cache():
    def make():
        return nx.xmap(lambda x: x, in_axes=["i", ...], out_axes=["i", "j", ...],
                       axis_sizes={"i": 3, "j": 2})

    f = make()
    assert f(torch.ones(3)).shape == (3, 2)
    want = _fresh_error(make, torch.ones(4))
    with pytest.raises(want[0]) as info:
        f(torch.ones(4))
    assert str(info.value) == want[1] and "(axis_sizes) vs 4 (argument 0, dim 0)" in want[1]


def test_already_bound_error_identical_after_cache():
    inner = nx.xmap(lambda v: v * 2, in_axes=["i", ...], out_axes=["i", ...])
    assert inner(torch.ones(2, 3)).shape == (2, 3)   # cache the plan outside any map
    outer = nx.xmap(lambda v: inner(v), in_axes={1: "i"}, out_axes={1: "i"})
    fresh = nx.xmap(lambda v: nx.xmap(lambda v: v * 2, in_axes=["i", ...], out_axes=["i", ...])(v),
                    in_axes={1: "i"}, out_axes={1: "i"})
    with pytest.raises(nx.AxisSpecError) as want:
        fresh(torch.ones(2, 3, 4))
    with pytest.raises(nx.AxisSpecError) as got:
        outer(torch.ones(2, 3, 4))
    assert "already bound by an enclosing xmap/vmap" in str(got.value)
    assert str(got.value).split(": ", 1)[1] == str(want.value).split(": ", 1)[1]


def test_output_error_identical_after_cache():
    def make():
        return nx.xmap(lambda x, keep: x if keep else x.sum("j"), in_axes=(["i", "j", ...], None),
                       out_axes=["i", ...])

    f = make()
    want = _fresh_error(make, torch.ones(2, 3), True)
    f(torch.ones(2, 3), False)
    with pytest.raises(want[0]) as info:
        f(torch.ones(2, 3), True)
    assert str(info.value) == want[1]


def test_nested_xmap_cached_inner_plan():
    inner = nx.xmap(lambda v: v - v.mean(), in_axes=["j", ...], out_axes=["j", ...])
    outer = nx.xmap(lambda v: inner(v), in_axes=["i", ...], out_axes=["i", ...])
    for shape in [(2, 3, 4), (5, 3, 4), (2, 3, 4)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(outer(x), x - x.mean(-1, keepdim=True))


def test_cached_plan_under_vmap_and_grad():
    f = nx.xmap(lambda x, w: (x * w).sin(), in_axes=(["b", ...], None), out_axes=["b", ...])
    x, w = torch.randn(4, 3), torch.randn(3)
    ref = (x * w).sin()
    torch.testing.assert_close(f(x, w), ref)   # warm the plan
    xs = torch.stack([x, 2 * x])
    torch.testing.assert_close(torch.func.vmap(f, in_dims=(0, None))(xs, w), (xs * w).sin())
    g = torch.func.grad(lambda w: f(x, w).sum())(w)
    torch.testing.assert_close(g, (x * (x * w).cos()).sum(0))


def test_cached_plan_then_torch_compile_fullgraph():
    f = nx.xmap(lambda x, w: (x * w).sin(), in_axes=(["b", ...], None), out_axes=["b", ...])
    x, w = torch.randn(4, 3), torch.randn(3)
    ref = (x * w).sin()
    torch.testing.assert_close(f(x, w), ref)   # warm the plan; dynamo takes the slow path
    c = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(c(x, w), ref)
    torch.testing.assert_close(c(2 * x, w), (2 * x * w).sin())
    torch.testing.assert_close(f(x, w), ref)


def test_cached_plan_under_make_graph():
    f = nx.xmap(lambda x, w: (x @ w).relu(), in_axes=({1: "b"}, None), out_axes=["b", ...])
    x, w = torch.randn(3, 4), torch.randn(3, 2)
    ref = (x.T @ w).relu()
    torch.testing.assert_close(f(x, w), ref)   # warm the plan
    g = nx.make_graph(f)(x, w)
    out = g(x, w)
    torch.testing.assert_close(out[0] if isinstance(out, (tuple, list)) else out, ref)
    torch.testing.assert_close(f(x, w), ref)


def test_plan_cache_is_bounded():
    f = nx.xmap(lambda d: d, in_axes=["i", ...], out_axes=["i", ...])
    for k in range(300):
        d = {f"k{k}": torch.ones(2)}
        assert f(d)[f"k{k}"].shape == (2,)
    assert 0 < len(f._plans) <= 256


def test_environment_inside_cached_call_matches_reference():
    from named_axes import _env

    seen = []

    def prog(x):
        seen.append((dict(_env.bound_axes()), _env.current_frame("j"), _env.conflicts(),
                     len(_env.frames())))
        return x

    inner = nx.xmap(prog, in_axes=["j", ...], out_axes=["j", ...])
    outer = nx.xmap(lambda v: inner(v), in_axes=["i", ...], out_axes=["i", ...])
    x = torch.randn(2, 3, 4)
    for _ in range(3):   # reference call, then cached calls
        torch.testing.assert_close(outer(x), x)
    assert seen[0] == seen[1] == seen[2]
    assert seen[0][0] == {"i": 2, "j": 3} and seen[0][1].sizes == {"j": 3} and seen[0][3] == 2
    assert _env.bound_axes() == {} and _env.frames() == []


def test_symbolic_trace_of_cached_plan():
    from torch.fx.experimental.proxy_tensor import make_fx

    f = nx.xmap(lambda x, y: x * y, in_axes=(["b", ...], {1: "b"}), out_axes=["b", ...])
    x, y = torch.randn(4, 3), torch.randn(3, 4)
    ref = x * y.T
    torch.testing.assert_close(f(x, y), ref)   # warm the plan
    gm = make_fx(f, tracing_mode="symbolic")(x, y)
    torch.testing.assert_close(gm(x, y), ref)
    x5, y5 = torch.randn(5, 3), torch.randn(3, 5)
    torch.testing.assert_close(gm(x5, y5), x5 * y5.T)
