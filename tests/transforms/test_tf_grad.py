"""The grad family against torch.func and per-example loops, plain and named."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

torch.manual_seed(0)


def loss(w, x):
    return ((x @ w).tanh() - 0.5).square().sum()


def per_example(fn, w, x):
    return torch.stack([fn(w, x[i]) for i in range(x.shape[0])])


@pytest.fixture
def wx():
    return torch.randn(3, 2), torch.randn(5, 4, 3)


def test_plain_matches_torch_func(wx):
    w, x = wx
    for argnums in (0, 1, (0, 1)):
        got = nx.grad(loss, argnums=argnums)(w, x)
        ref = torch.func.grad(loss, argnums=argnums)(w, x)
        torch.testing.assert_close(got, ref)
    v, g = nx.value_and_grad(loss)(w, x)
    rv, rg = torch.func.grad_and_value(loss)(w, x)[::-1]
    torch.testing.assert_close((v, g), (rv, rg))


def test_per_example_inside_xmap_equals_loop(wx):
    w, x = wx
    f = nx.xmap(nx.grad(loss), in_axes=({}, ["b", ...]), out_axes=["b", ...])
    torch.testing.assert_close(f(w, x), per_example(torch.func.grad(loss), w, x))


def test_reduce_axes_sums_per_example(wx):
    w, x = wx
    f = nx.xmap(nx.grad(loss, reduce_axes=("b",)), in_axes=({}, ["b", ...]), out_axes=[...])
    torch.testing.assert_close(f(w, x), per_example(torch.func.grad(loss), w, x).sum(0))


def test_value_and_grad_argnums_tuple_inside_xmap(wx):
    w, x = wx
    f = nx.xmap(nx.value_and_grad(loss, argnums=(0, 1)), in_axes=({}, ["b", ...]),
                out_axes=({0: "b"}, (["b", ...], ["b", ...])))
    v, (gw, gx) = f(w, x)
    torch.testing.assert_close(v, torch.stack([loss(w, x[i]) for i in range(5)]))
    torch.testing.assert_close(gw, per_example(torch.func.grad(loss), w, x))
    torch.testing.assert_close(gx, per_example(torch.func.grad(loss, argnums=1), w, x))


def test_grad_of_xmap(wx):
    w, x = wx
    total = lambda w, x: nx.xmap(loss, in_axes=({}, ["b", ...]), out_axes={0: "b"})(w, x).sum()
    torch.testing.assert_close(nx.grad(total)(w, x),
                               per_example(torch.func.grad(loss), w, x).sum(0))


def test_has_aux_and_dict_params(wx):
    w, x = wx
    params = {"w": w, "s": torch.tensor(2.0)}

    def f(p, x):
        out = loss(p["w"] * p["s"], x)
        return out, {"out": out, "tag": "t"}

    g, aux = nx.xmap(nx.grad(f, has_aux=True, reduce_axes=("b",)), in_axes=({}, ["b", ...]),
                     out_axes=({"w": [...], "s": [...]}, {"out": {0: "b"}, "tag": {}}))(params, x)
    ref = torch.func.grad(lambda p, x: sum(f(p, x[i])[0] for i in range(5)))(params, x)
    torch.testing.assert_close(g, ref)
    assert aux["tag"] == "t" and aux["out"].shape == (5,)


def test_nn_module_params_via_functional_call():
    model = torch.nn.Linear(3, 2)
    params = dict(model.named_parameters())
    x = torch.randn(6, 3)

    def l(p, x):
        return torch.func.functional_call(model, p, (x,)).square().sum()

    # functional_call needs plain tensors as parameters: reduce over 'b' (no per-example copy)
    got = nx.xmap(nx.grad(l, reduce_axes=("b",)), in_axes=({}, ["b", ...]), out_axes=[...])(
        {k: v.detach() for k, v in params.items()}, x)
    ref = torch.func.grad(l)(params, x)
    for k in params:
        torch.testing.assert_close(got[k], ref[k])


def test_vjp_jvp_linearize_named():
    x = torch.randn(3, 4)
    xn = nx.named(x, {0: "b"})
    out, f_vjp = nx.vjp(torch.sin, xn)
    assert out.named_shape == {"b": 3}
    (g,) = f_vjp(torch.ones(4))
    torch.testing.assert_close(nx.positional(g, {0: "b"}), x.cos())
    _, t = nx.jvp(lambda v: v.exp() * 2, (xn,), (torch.ones(4),))
    torch.testing.assert_close(nx.positional(t, {0: "b"}), 2 * x.exp())
    _, f_jvp = nx.linearize(torch.sin, xn)
    torch.testing.assert_close(nx.positional(f_jvp(torch.ones(4)), {0: "b"}), x.cos())


def test_vjp_plain_matches_torch_func():
    x = torch.randn(4)
    out, f = nx.vjp(lambda a: (a.sin(), a * 3), x)
    rout, rf = torch.func.vjp(lambda a: (a.sin(), a * 3), x)
    ct = (torch.ones(4), torch.full((4,), 2.0))
    torch.testing.assert_close(f(ct), rf(ct))


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
def test_jacobians_plain_and_named(jac):
    f = lambda v: v.sin() * v.sum()
    x = torch.randn(3, 4)
    ours, ref = getattr(nx, jac), getattr(torch.func, jac)
    torch.testing.assert_close(ours(f)(x[0]), ref(f)(x[0]))
    got = nx.xmap(ours(f), in_axes=["b", ...], out_axes=["b", ...])(x)
    torch.testing.assert_close(got, torch.stack([ref(f)(r) for r in x]))


def test_hessian_of_named_function():
    f = lambda v: (v.sin() * v.roll(1)).sum()
    x = torch.randn(3, 4)
    got = nx.xmap(nx.hessian(f), in_axes=["b", ...], out_axes=["b", ...])(x)
    torch.testing.assert_close(got, torch.stack([torch.func.hessian(f)(r) for r in x]))


def test_linear_transpose():
    A = torch.randn(3, 4)
    t = nx.linear_transpose(lambda v: A @ v, torch.zeros(4))
    ct = torch.randn(3)
    torch.testing.assert_close(t(ct)[0], A.T @ ct)
    sds = nx.ShapeDtypeStruct((4,), torch.float32, {"b": 2})
    tn = nx.linear_transpose(lambda v: v * 3, sds)
    (g,) = tn(nx.named(torch.ones(2, 4), {0: "b"}))
    assert g.named_shape == {"b": 2} and torch.equal(g._data, torch.full((2, 4), 3.0))


def test_errors():
    with pytest.raises(nx.AxisSpecError, match=r"scalar loss .* positional shape \(4,\)"):
        nx.grad(lambda v: v * 2)(nx.named(torch.ones(2, 4), {0: "b"}))
    with pytest.raises(nx.AxisSpecError, match=r"argnums=3 names argument 3, but the call has 2"):
        nx.grad(loss, argnums=3)(torch.ones(3, 2), torch.ones(3))


_COLLECTIVES = {
    "psum": lambda v: nx.lax.psum(v, "i"),
    "pmean": lambda v: nx.lax.pmean(v, "i"),
    "pmax": lambda v: nx.lax.pmax(v, "i"),
    "pmin": lambda v: nx.lax.pmin(v, "i"),
    "all_gather": lambda v: nx.lax.all_gather(v, "i"),
    "psum_scatter": lambda v: nx.lax.psum_scatter(v, "i", tiled=True),
    "all_to_all": lambda v: nx.lax.all_to_all(v, "i", 0, 0),
    "ppermute": lambda v: nx.lax.ppermute(v, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]),
    "pdot": lambda v: nx.lax.pdot(v, v.sin(), "i"),
}


@pytest.mark.parametrize("op", sorted(_COLLECTIVES))
def test_forward_mode_through_traced_collectives(op):
    """Under a trace (nx.jit, make_graph) collectives are named autograd functions; each has
    a forward-mode rule, so jvp / jacfwd / hessian trace as they run eagerly (hessian of a
    psum under nx.jit raised "You must implement the jvp function": the JAX oracle run
    under nx.jit, cat_transform)."""
    f = _COLLECTIVES[op]

    def body(x):
        return nx.jvp(lambda v: f(v.sin() * v), (x,), (torch.cos(x),))[1]

    x = torch.linspace(-1, 1, 16).reshape(4, 4)
    spec = dict(in_axes=["i", ...], out_axes=[...] if op in ("psum", "pmean", "pmax", "pmin",
                                                             "all_gather", "pdot") else ["i", ...])
    want = nx.xmap(body, **spec)(x)
    got = nx.jit(nx.xmap(body, **spec), backend="eager")(x)
    torch.testing.assert_close(got, want)


def test_hessian_through_a_psum_under_jit():
    f = lambda v: nx.lax.psum((v ** 3).sum() * 0.5, "b")
    body = nx.hessian(f)
    spec = dict(in_axes=["b", ...], out_axes=["b", ...])
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    want = nx.xmap(body, **spec)(x)
    torch.testing.assert_close(nx.jit(nx.xmap(body, **spec), backend="eager")(x), want)


def test_vmap_over_a_pullback_batches_its_cotangents():
    """A pullback mapped over a batch of cotangents (``nx.vmap(vjp_fn)``, as JAX's jacrev
    does) gives one gradient per cotangent, each per instance, as a loop of pullbacks."""
    def body(x, w):
        out, pullback = nx.vjp(lambda v: (v * x).tanh() * v.sum(), w)
        cts = torch.stack([torch.cos(torch.arange(3.) + k) for k in range(5)])
        batched = nx.vmap(lambda c: pullback(c)[0])(cts)
        looped = torch.stack([pullback(c)[0] for c in cts])
        return batched, looped
    x, w = torch.randn(4, 3), torch.randn(3)
    batched, looped = nx.xmap(body, in_axes=(["b", ...], [...]),
                              out_axes=(["b", ...], ["b", ...]))(x, w)
    torch.testing.assert_close(batched, looped)


def test_a_jacobian_that_is_zero_everywhere_is_an_ordinary_tensor():
    """The Hessian of ``abs`` is forward mode's efficient zero (a ZeroTensor), which
    ``.numpy()`` refuses: the result is made ordinary zeros (JAX oracle, seed 424242,
    p424242_12498)."""
    for d in (1, 2):
        f = nx.xmap(lambda p, y: nx.hessian(lambda p: (p - y).abs())(p),
                    in_axes=(['d'], ['d']), out_axes={0: 'd', 1: 'b'}, axis_sizes={'b': 1})
        for g in (f, nx.jit(f, backend="eager")):   # traced too (seed 99991, p99991_00702)
            h = g(torch.linspace(0.5, -1.0, d), torch.linspace(0.2, 0.3, d))
            assert not h._is_zerotensor()
            assert h.numpy().tolist() == [[0.0]] * d
