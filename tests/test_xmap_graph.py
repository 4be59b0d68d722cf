"""torch.compile of an xmap whose body reads nothing from outside but constants,
functions and library modules: one call in dynamo's graph (named_axes/_xmap_graph.py),
with the values, gradients and recompilations of the program dynamo would trace."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo  # noqa: F401  (dynamo loaded before the xmaps are made)

import named_axes as nx
from named_axes import lax
from named_axes._xmap_graph import outside_reads

SCALE = 0.5


def _named_loss(w1, w2, images, labels):
    hidden = torch.relu(lax.pdot(images, w1, "inputs"))
    logits = lax.pdot(hidden, w2, "hidden") * SCALE
    predictions = logits - nx.logsumexp(logits, "classes")
    targets = nx.one_hot(labels, 4, dim="classes")
    return -lax.pmean(lax.psum(targets * predictions, "classes"), "batch")


IN_AXES = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...],
           ["batch", ...]]


def _graphs(fn, *args) -> list:
    """The FX graphs dynamo hands its backend for ``fn(*args)`` (fullgraph)."""
    seen = []

    def backend(gm, example):
        seen.append(gm)
        return gm

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return seen, out


def _data():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(16, 8, generator=g, requires_grad=True),
            torch.randn(8, 4, generator=g, requires_grad=True),
            torch.randn(6, 16, generator=g), torch.randint(0, 4, (6,), generator=g))


def test_the_call_is_one_node_and_trains_as_eager():
    f = nx.xmap(_named_loss, in_axes=IN_AXES, out_axes=[...])
    args = _data()
    graphs, _ = _graphs(f, *args)
    calls = [getattr(n.target, "__name__", "") for n in graphs[0].graph.nodes
             if n.op == "call_function"]
    # the xmap, nothing of the library traced (and dynamo's check for torch.func levels)
    assert len(graphs) == 1 and calls.count("xmap_call") == 1 and len(calls) <= 2, calls
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=backend, fullgraph=True)
        for step in range(2):
            w1, w2, x, y = _data()
            x = x + step
            want = f(w1, w2, x, y)
            gw = torch.autograd.grad(want, (w1, w2))
            got = compiled(w1, w2, x, y)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(torch.autograd.grad(got, (w1, w2)), gw)


def test_a_changed_constant_or_function_is_seen():
    global SCALE
    f = nx.xmap(_named_loss, in_axes=IN_AXES, out_axes=[...])
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    args = _data()
    torch._dynamo.reset()
    torch.testing.assert_close(compiled(*args), f(*args))
    old = SCALE
    try:
        SCALE = 3.0
        torch.testing.assert_close(compiled(*args), f(*args))
    finally:
        SCALE = old

    def double(v):
        return v * 2
    helpers = {"h": double}
    g = nx.xmap(lambda v: helpers_h(v), in_axes=["b", ...], out_axes=["b", ...])  # noqa: F821
    assert outside_reads(g.fun) is None   # (helpers_h is not defined: nothing known)
    x = torch.randn(3, 2)
    box = [double]

    def body(v):
        return box[0](v)
    h = nx.xmap(body, in_axes=["b", ...], out_axes=["b", ...])
    assert outside_reads(body) is None    # a list: it may change, dynamo traces it
    torch.testing.assert_close(torch.compile(h, backend="eager")(x), x * 2)
    del helpers


def test_bodies_that_read_state_are_traced_by_dynamo():
    """A closed-over parameter: its gradient flows (dynamo tracks it); a buffer updated
    in place: each call reads its new values."""
    w = torch.nn.Parameter(torch.randn(4))
    f = nx.xmap(lambda x: lax.psum((x * w).sum(), "b"), in_axes=["b", ...], out_axes=[...])
    assert outside_reads(f.fun) is None
    x = torch.randn(3, 4)
    torch._dynamo.reset()
    out = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    out.backward()
    torch.testing.assert_close(w.grad, x.sum(0))
    buf = torch.zeros(4)
    g = torch.compile(nx.xmap(lambda x: x + buf, in_axes=["b", ...], out_axes=["b", ...]),
                      backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(g(x), x)
    buf.add_(1)
    torch.testing.assert_close(g(x), x + 1)


def test_named_arguments_and_outer_programs_take_dynamos_path():
    inner = nx.xmap(lambda v: v * 2, in_axes=["c", ...], out_axes=["c", ...])
    outer = nx.xmap(lambda v: inner(v) + lax.axis_index("b"), in_axes=["b", ...],
                    out_axes=["b", ...])
    x = torch.arange(6.).reshape(2, 3)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(outer, backend="aot_eager", fullgraph=True)(x),
                               outer(x))


def test_what_the_body_reads_from_outside():
    def helper(v):
        return torch.tanh(v) * SCALE

    def body(v):
        return helper(v) + nx.lax.psum(v, "b")

    reads = outside_reads(body)
    assert {id(v) for _, _, v in reads} == {id(helper), id(SCALE)}

    counter = [0]

    def counting(v):
        counter[0] += 1
        return v

    def rebinding(v):
        global SCALE
        SCALE = 1.0
        return v
    assert outside_reads(counting) is None and outside_reads(rebinding) is None
    total = 0

    def accumulating(v):
        nonlocal total
        total = total + 1
        return v
    assert outside_reads(accumulating) is None
    looped = nx.xmap(lambda v: v * 2, in_axes=["b", ...], out_axes=["b", ...],
                     axis_resources={"b": nx.SerialLoop(1)})
    assert outside_reads(lambda v: looped(v)) is None   # its loop needs values
    made_by_library = nx.grad(lambda v: (v * torch.ones(())).sum())
    assert outside_reads(lambda v: made_by_library(v)) is None   # read through: a tensor


# -- every collective and control-flow form, as one call of the graph, against eager -----

def _p_psum(x):
    return lax.psum(torch.sin(x), "b") * x


def _p_extremes(x):
    return lax.pmax(x, "b") - lax.pmin(x * 2, "b") + lax.pmean(x, "b")


def _p_gather(x):
    return lax.all_gather(x, "b").sum(0) * x


def _p_permute(x):
    return lax.ppermute(x, "b", perm=[(0, 1), (1, 2), (2, 0)]) * x


def _p_shuffle(x):
    return lax.pshuffle(x, "b", perm=[2, 0, 1]) + x


def _p_all_to_all(x):
    return lax.all_to_all(x.reshape(3, 2), "b", 0, 0).sum(0) * 1.5


def _p_scatter(x):
    return lax.psum_scatter(x.reshape(3, 2), "b", scatter_dimension=0).sum() * x


def _p_index(x):
    return x * lax.axis_index("b") + nx.one_hot(lax.axis_index("b"), 3, dim="k").sum("k")


def _p_pdot(x):
    return torch.tanh(lax.pdot(x, x, "b"))


def _p_control(x):
    y = lax.fori_loop(0, 3, lambda i, c: c * 0.5 + torch.sin(c), x)
    z, _ = lax.scan(lambda c, v: (c + v, c * v), x.sum() * 0, x)
    return lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, y) + z


def _p_grad_inside(x):
    return nx.grad(lambda v: lax.psum((v ** 3).sum(), "b"))(x)


def _p_slices(x):
    return lax.dynamic_slice_in_dim(x, lax.axis_index("b") % 2, 3) * 2


PROGRAMS = [(_p_psum, ["b", ...]), (_p_extremes, [...]), (_p_gather, ["b", ...]),
            (_p_permute, ["b", ...]), (_p_shuffle, ["b", ...]), (_p_all_to_all, ["b", ...]),
            (_p_scatter, ["b", ...]), (_p_index, ["b", ...]), (_p_pdot, [...]),
            (_p_control, ["b", ...]), (_p_grad_inside, ["b", ...]), (_p_slices, ["b", ...])]


@pytest.mark.parametrize("program, out", PROGRAMS, ids=[p.__name__[3:] for p, _ in PROGRAMS])
def test_collectives_and_control_flow_as_one_call(program, out):
    f = nx.xmap(program, in_axes=["b", ...], out_axes=out)
    assert outside_reads(program) is not None   # (the route this file is about)
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    want = f(x)
    (gw,) = torch.autograd.grad(want.sum(), x, allow_unused=True)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got = compiled(x)
    torch.testing.assert_close(got, want)
    (gg,) = torch.autograd.grad(got.sum(), x, allow_unused=True)
    torch.testing.assert_close(gg, gw)


def _one_call(graphs) -> bool:
    calls = [getattr(n.target, "__name__", "") for g in graphs for n in g.graph.nodes
             if n.op == "call_function"]
    return calls.count("xmap_call") == 1


def test_only_plain_tensors_and_parameters_take_the_one_call():
    """The argument test under dynamo (by the types' ids: see GraphCall.applies): a
    Parameter takes the one-call route; a named value is traced by dynamo as before,
    with the same result as eager."""
    f = nx.xmap(lambda x: torch.sin(x) * 2, in_axes=["b", ...], out_axes=["b", ...])
    p = torch.nn.Parameter(torch.randn(3, 2))
    graphs, out = _graphs(f, p)
    assert _one_call(graphs)
    torch.testing.assert_close(out, f(p))
    named = nx.named(torch.randn(4, 3, 2), "n ...")
    graphs, out = _graphs(f, named)
    assert not _one_call(graphs)
    assert out.named_shape == {"n": 4}
    assert torch.allclose(out, f(named))
