"""make_graph, named_call, jit (cache, static args, forward+backward in one graph),
torch.compile over xmap'd code, and the "named_axes" backend — all against eager."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

lax = pytest.importorskip("named_axes.lax")


# programs here write `x @ w`: dynamo needs the opt-in fix (tests/test_torch_untouched.py
# shows the refusal without it)
pytestmark = pytest.mark.usefixtures("dynamo_matmul")


def mlp_loss(params, x, y):
    h = (x @ params["w1"]).relu()
    logits = h @ params["w2"]
    return -(logits.log_softmax(-1) * y).sum()


def batch_loss(params, x, y):
    return nx.xmap(mlp_loss, in_axes=({}, ["b", ...], ["b", ...]), out_axes={0: "b"})(
        params, x, y).sum()


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    params = {"w1": torch.randn(6, 5, generator=g), "w2": torch.randn(5, 3, generator=g)}
    x = torch.randn(4, 6, generator=g)
    y = torch.nn.functional.one_hot(torch.arange(4) % 3, 3).float()
    return params, x, y


def test_make_graph_shows_collectives_by_name():
    f = nx.xmap(lambda v: lax.psum(v.sin(), "b") * v, in_axes=["b", ...], out_axes=["b", ...])
    x = torch.randn(4, 3)
    g = nx.make_graph(f)(x)
    assert isinstance(g, torch.fx.GraphModule)
    assert "named_axes.psum" in g.code and "aten.sin" in g.code
    torch.testing.assert_close(g(x)[0], f(x))
    assert "named_axes.psum" in str(g) and "<pre>" in g._repr_html_()


def test_make_graph_axis_env_and_names():
    x = nx.named(torch.randn(2, 3), {0: "i"})
    g = nx.make_graph(lambda v: lax.pmean(v, "i"), axis_env=[("i", 2)])(x)
    assert "named_axes.pmean" in g.code
    assert g.in_names == [("i",)] and g.out_names in ([None], [()])
    with pytest.raises(nx.AxisSpecError, match=r"axis_env entries are \(name, size\) pairs"):
        nx.make_graph(lambda v: v, axis_env=["i"])


def test_named_call_in_graph_and_profiler():
    f = nx.named_call(lambda v: v.sin() * 2, name="my_block")
    # torch 2.9's make_fx drops record_function's ops (docs/migrating.md)
    if torch.__version__ >= "2.10":
        assert "'my_block'" in nx.make_graph(f)(torch.ones(3)).code
    with torch.profiler.profile() as prof:
        f(torch.ones(3))
    assert any(e.name == "my_block" for e in prof.events())


def test_jit_value_and_grad_one_graph(data):
    params, x, y = data
    step = nx.value_and_grad(batch_loss)
    ref_v, ref_g = torch.func.grad_and_value(
        lambda p: sum(mlp_loss(p, x[i], y[i]) for i in range(4)))(params)[::-1]
    # the traced program holds forward and backward
    g = nx.make_graph(step)(params, x, y)
    # 2 matmuls forward + 3 backward (grads of h, w1, w2)
    assert g.code.count("aten.mm.default(") + g.code.count("aten.bmm.default(") >= 5
    for backend in ("eager", "inductor"):
        j = nx.jit(step, backend=backend)
        v, gr = j(params, x, y)
        torch.testing.assert_close(v, ref_v, atol=1e-5, rtol=1e-5)
        for k in params:
            torch.testing.assert_close(gr[k], ref_g[k], atol=1e-5, rtol=1e-5)
        j(params, x, y)
        assert j.cache_size() == 1
        j({k: v * 2 for k, v in params.items()}, x[:2], y[:2])
        assert j.cache_size() == 2


def test_jit_xmap_grad_per_example(data):
    params, x, y = data
    f = nx.jit(nx.xmap(nx.grad(mlp_loss), in_axes=({}, ["b", ...], ["b", ...]),
                       out_axes=["b", ...]), backend="eager")
    got = f(params, x, y)
    for k in params:
        ref = torch.stack([torch.func.grad(mlp_loss)(params, x[i], y[i])[k] for i in range(4)])
        torch.testing.assert_close(got[k], ref)


def test_jit_static_argnums_and_disable():
    calls = []

    def f(x, n):
        calls.append(n)
        return x * n

    j = nx.jit(f, static_argnums=1, backend="eager")
    assert torch.equal(j(torch.ones(2), 3), torch.full((2,), 3.0))
    j(torch.ones(2), 3)
    assert j.cache_size() == 1
    j(torch.ones(2), 4)
    assert j.cache_size() == 2
    with nx.disable_jit():
        n = len(calls)
        j(torch.ones(2), 3)
        assert len(calls) == n + 1
    with pytest.raises(nx.AxisSpecError, match=r"name argument 5, but the call has 2"):
        nx.jit(f, static_argnums=5)(torch.ones(2), 3)


def test_jit_named_inputs_keyed_on_named_shape():
    j = nx.jit(lambda v: v.sum("b"), backend="eager")
    a = nx.named(torch.randn(2, 3), {0: "b"})
    torch.testing.assert_close(nx.positional(j(a)), a._data.sum(0))
    t = torch.randn(2, 3)
    torch.testing.assert_close(nx.positional(j(nx.named(t, {1: "b"}))), t.sum(1))
    assert j.cache_size() == 2


def test_grad_of_jit_is_transparent():
    f = nx.jit(lambda v: (v.sin() ** 2).sum(), backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(nx.grad(f)(x), 2 * x.sin() * x.cos())


def test_jit_runs_a_second_derivative_through_zero_tensors():
    """grad of grad through maximum/abs meets torch's ZeroTensors, whose fallback finds a
    result's shape by running the op on meta tensors -- recorded by the trace, those dead
    ops raised when the graph ran ('float64 is not the expected dtype of float32'; JAX
    oracle fuzz, seed 2424, p2424_14738).  The graph keeps only what its outputs need."""
    def body(x1, x2):
        def inner(p):
            return lax.psum(torch.abs(torch.maximum(x2, p) * -1.5), "b")
        return nx.grad(lambda p: (nx.grad(inner)(p) * torch.sin(p)).sum())(x1)

    f = nx.xmap(body, in_axes=(["b", ...], ["b", ...]), out_axes=["b"])
    x1, x2 = torch.tensor([0.3, 0.9]), torch.tensor([0.7, 0.2])
    want = f(x1, x2)
    jitted = nx.jit(f, backend="eager")
    for _ in range(2):   # traced, then from the cache
        torch.testing.assert_close(jitted(x1, x2), want)
    graph = nx.make_graph(f)(x1, x2).graph
    assert not [n for n in graph.nodes if "meta" in str(n.kwargs.get("device", ""))]


def test_torch_compile_fullgraph_with_matmul_operator():
    w = torch.randn(3, 2)

    def f(x):
        return nx.xmap(lambda v: (v @ w).relu() @ w.T * 2.0, in_axes=["b", ...],
                       out_axes=["b", ...])(x)

    x = torch.randn(4, 3)
    c = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(c(x), f(x))
    torch.testing.assert_close(f(x), ((x @ w).relu() @ w.T) * 2.0)


def test_named_axes_backend_with_collective():
    f = nx.xmap(lambda v: v / lax.psum(v.exp(), "b"), in_axes=["b", ...], out_axes=["b", ...])
    x = torch.randn(4, 3)
    c = torch.compile(f, backend="named_axes", fullgraph=True)
    torch.testing.assert_close(c(x), x / x.exp().sum(0))
    j = nx.jit(f)   # inductor with the collectives inlined
    torch.testing.assert_close(j(x), x / x.exp().sum(0))


def test_make_graph_shows_each_collective_by_axis_name():
    from named_axes import lax

    f = nx.xmap(lambda x, w: lax.psum(x * 2, "b") + lax.pmean(x, ("b",))
                + lax.pdot(x, w, "b").sum(), in_axes=(["b", ...], ["b", ...]), out_axes=[...])
    text = str(nx.make_graph(f)(torch.ones(4, 3), torch.ones(4, 3)))
    assert "named_axes.psum.default(mul, [0]);  mul = None  # psum over 'b'" in text, text
    assert "# pmean over ('b',)" in text and "# pdot over 'b'" in text, text
    inner = str(nx.make_graph(lambda y: lax.pmax(y, "i"), axis_env=[("i", 4)])(torch.ones(3)))
    assert "# pmax over 'i'" in inner, inner
    # labels only while make_graph traces: torch.compile and eager code see no annotation
    assert lax._common.LABEL_AXES == [False]
