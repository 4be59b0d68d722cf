"""``axis_resources='auto'``, ``nx.plan_resources``, ``nx.explain_resources`` (issue 33):
legal candidates only, memory budgets, the GPT choice, and the model's counts.

Rates are given (``nx.Rates``), so the choices do not depend on this machine; the runs on
4 gloo ranks are in tests/parallel/test_auto_mesh.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import named_axes as nx
from named_axes.parallel import _auto
from named_axes.parallel._cost_trace import trace_costs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import gpt_mesh as G  # noqa: E402

CPU = nx.Rates(flops_per_s=1e11, bytes_per_s=1e10, op_s=2e-5, link_bytes_per_s=1e9,
               link_latency_s=1e-4)
MESH = nx.Mesh(np.arange(4).reshape(2, 2), ("dp", "mp"))   # four ranks, priced only


def gpt(batch=8, context=32, embed=64, heads=4, mlp=512, layers=2, vocab=56):
    specs = G.param_specs(vocab, embed=embed, heads=heads, mlp_size=mlp, layers=layers,
                          context=context)
    params = {k: nx.ShapeDtypeStruct(shape, torch.float32) for k, (shape, _, _) in specs.items()}
    loss = nx.xmap(lambda p, t, y: G.named_loss(p, t, y, layers),
                   in_axes=(G.in_axes_of(specs), ["batch", "seq", ...], ["batch", "seq", ...]),
                   out_axes=[...])
    tokens = nx.ShapeDtypeStruct((batch, context), torch.int64)
    return loss, (params, tokens, tokens)


BIG = dict(embed=1024, heads=16, mlp=4096, context=128)


def _meet(trace, a, b) -> bool:
    return any(a in v and b in v for v in trace.values)


def test_candidates_are_legal():
    loss, args = gpt()
    trace = trace_costs(loss, args, differentiate=True)
    found = list(_auto.candidates(trace, MESH.shape))
    assert found and ({}, {}) in found
    for mesh_axes, _ in found:
        for name, axes in mesh_axes.items():   # sizes divide
            assert trace.axis_sizes[name] % int(np.prod([MESH.shape[a] for a in axes])) == 0
        for a in mesh_axes:   # axes that meet never share a mesh axis
            for b in mesh_axes:
                if a != b and _meet(trace, a, b):
                    assert not set(mesh_axes[a]) & set(mesh_axes[b])
    # vocab (56 here) is split only over one mesh axis of 2, never over both (4 divides 56:
    # both allowed); an axis of size 3 never goes to a mesh axis of size 2
    f = nx.xmap(lambda x: nx.lax.psum(x, "i"), in_axes=["i", ...], out_axes=[...])
    odd = trace_costs(f, (torch.ones(3, 4),))
    assert list(_auto.candidates(odd, MESH.shape)) == [({}, {})]


def test_counts_follow_the_program():
    """The collectives the model prices for the Megatron layout: per layer two forward
    all-reduces (after the row-parallel pdots), two in the backward (before the
    column-parallel ones), the data-parallel gradient bucket, the loss's pmean, and the
    gathers of the split parameters' gradients (they are full tensors here)."""
    loss, args = gpt()
    trace = trace_costs(loss, args, differentiate=True)
    split = _auto._Split({"batch": ("dp",), "heads": ("mp",), "mlp": ("mp",)}, {}, MESH.shape)
    kinds = [k for k, _, over in _auto._collectives(trace, split, True) if split.group(over) > 1]
    assert kinds.count("all_reduce") == 10   # CommDebugMode counts 10 on 4 gloo ranks
    assert kinds.count("edge_gather") == 14   # wq wk wv wo up b_up down, twice
    compute, comm, count, moved, memory = _auto.price(trace, split, CPU, train=True)
    assert count == 24 and comm > 0 and compute > 0


def test_gpt_choice_is_megatrons():
    """A GPT large enough for its parameters to matter: data parallelism over both mesh
    axes sums every parameter's gradient once per mesh axis (the engines, like DTensor,
    reduce over one mesh axis at a time); Megatron's layout (heads and mlp on the model
    axis, batch on the data axis) sums a few activations instead, and holds less."""
    loss, args = gpt(**BIG)
    chosen = nx.plan_resources(loss, MESH, *args, rates=CPU, train=True)
    assert chosen.axis_resources == G.RESOURCES
    found = _auto.rank(trace_costs(loss, args, differentiate=True), MESH.shape, CPU, train=True)
    dp = next(c for c in found if c.axis_resources == {"batch": ("dp", "mp")})
    assert chosen.time_s < dp.time_s and chosen.memory_bytes < dp.memory_bytes
    assert chosen == found[0]


def test_default_gpt_under_a_budget_is_megatron_then_shards_further():
    """examples/gpt_mesh.py's default sizes (a vocabulary of 56, not the corpus's 55,
    so that it can split): a budget below data parallelism's memory gives Megatron's
    layout (the example's RESOURCES); one below Megatron's shards the vocabulary too."""
    loss, args = gpt()
    found = _auto.rank(trace_costs(loss, args, differentiate=True), MESH.shape, CPU, train=True)
    memory = {repr(c.axis_resources): c.memory_bytes for c in found}
    dp, mega = memory[repr({"batch": ("dp", "mp")})], memory[repr(G.RESOURCES)]
    assert mega < dp
    chosen = nx.plan_resources(loss, MESH, *args, rates=CPU, train=True,
                               memory_per_device=(dp + mega) / 2)
    assert chosen.axis_resources == G.RESOURCES
    further = nx.plan_resources(loss, MESH, *args, rates=CPU, train=True,
                                memory_per_device=mega - 1)
    assert further.memory_bytes < mega
    assert {k: v for k, v in further.axis_resources.items() if k != "vocab"} == G.RESOURCES


def test_a_tighter_budget_shards_further_and_an_impossible_one_raises():
    loss, args = gpt(**BIG)
    mega = nx.plan_resources(loss, MESH, *args, rates=CPU, train=True)
    tighter = nx.plan_resources(loss, MESH, *args, rates=CPU, train=True,
                                memory_per_device=mega.memory_bytes - 1)
    assert tighter.memory_bytes < mega.memory_bytes
    with pytest.raises(nx.AxisResourceError, match=r"fits memory_per_device=1e\+06 bytes"):
        nx.plan_resources(loss, MESH, *args, rates=CPU, train=True, memory_per_device=1e6)


def test_inference_may_add_a_serial_loop():
    """Without a backward, a loop over an axis keeps one chunk's activations alive: on
    one device (a mesh of 1), a budget below the whole batch's adds a SerialLoop."""
    f = nx.xmap(lambda x, w: torch.tanh(torch.tanh(x @ w) @ w.T), in_axes=(["b", ...], [...]),
                out_axes=["b", ...])
    args = (torch.ones(64, 256), torch.ones(256, 256))
    one = nx.Mesh(np.arange(1), ("x",))
    free = nx.plan_resources(f, one, *args, rates=CPU)
    looped = nx.plan_resources(f, one, *args, rates=CPU, memory_per_device=0.8 * free.memory_bytes)
    assert free.axis_resources == {}
    assert isinstance(looped.axis_resources["b"], nx.SerialLoop)
    x, w = torch.randn(64, 256), torch.randn(256, 256) / 16
    with one:
        loop = nx.xmap(f.fun, in_axes=f.in_axes, out_axes=f.out_axes,
                       axis_resources=looped.axis_resources)
        torch.testing.assert_close(loop(x, w), f(x, w))


def test_explain_resources_table_and_html():
    loss, args = gpt()
    report = nx.explain_resources(loss, MESH, *args, rates=CPU, train=True, top=4)
    text = str(report)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["axis_resources", "step"]
    assert len(lines) == 5 and lines[1].endswith("<- chosen")
    assert report.chosen == report.candidates[0]
    assert [c.time_s for c in report.candidates] == sorted(c.time_s for c in report.candidates)
    html = report._repr_html_()
    assert html.startswith("<table>") and html.count("<tr") == 5


def test_plan_resources_prices_gptj_on_eight_devices():
    """GPT-J's training step (examples/gptj: its named axes ``shard`` and ``batch``, the
    optimizer inside the xmap) priced on a 2x2x2 mesh: one abstract trace, a few dozen
    legal candidates (how long it takes is benchmarks/bench_plan.py's figure, not a
    test's)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench_plan

    train_xmap, args, mesh = bench_plan.gptj_on_eight_devices()
    plan = nx.plan_resources(train_xmap, mesh, *args, rates=CPU)
    assert plan.fits and set(plan.axis_resources) <= {"shard", "batch"}
    found = _auto._ranked(train_xmap, mesh, args, None, CPU, None, 2)
    assert found[0] == plan and 1 < len(found) <= 64


def test_auto_xmap_runs_vectorized_without_a_mesh_and_under_jit():
    f = nx.xmap(lambda x, w: nx.lax.psum((x @ w).sum(), "b"), in_axes=(["b", ...], [...]),
                out_axes=[...], axis_resources="auto")
    x, w = torch.randn(16, 8), torch.randn(8, 4, requires_grad=True)
    plain = nx.xmap(f.fun, in_axes=f.in_axes, out_axes=f.out_axes)
    assert "axis_resources='auto'" in repr(f)
    torch.testing.assert_close(f(x, w), plain(x, w))
    with nx.Mesh(np.array(nx.local_devices()), ("x",)):
        torch.testing.assert_close(f(x, w), plain(x, w))
        torch.testing.assert_close(nx.jit(f)(x, w), plain(x, w))


def test_bad_arguments():
    with pytest.raises(nx.AxisTypeError, match="must be an nx.xmap'd function"):
        nx.plan_resources(lambda x: x, MESH, torch.ones(2))
    f = nx.xmap(lambda x: x, in_axes=["i", ...], out_axes=["i", ...])
    with pytest.raises(nx.AxisTypeError, match="must be an nx.Mesh"):
        nx.plan_resources(f, {"x": 2}, torch.ones(2))
    with pytest.raises(nx.AxisTypeError, match="or 'auto'"):
        nx.xmap(lambda x: x, in_axes=["i", ...], out_axes=["i", ...], axis_resources="fast")


def test_einsum_contractions_and_two_axis_collectives_are_priced_as_the_engines_run_them():
    """A torch.einsum summing a named axis is a contraction over it (its equation names
    no axis), and a sum over two mesh axes is one collective per mesh axis, as the engines
    (and DTensor) run it."""
    def body(q, k):
        s = torch.einsum("k,k->", q, k)                        # {b, i, j}: no axis summed
        return nx.lax.psum(torch.einsum("{b,i,j},{b,j}->{b,i}", s, k.sum(-1)), "b")
    f = nx.xmap(body, in_axes=(["b", "i", ...], ["b", "j", ...]), out_axes=["i", ...])
    trace = trace_costs(f, (torch.ones(8, 4, 3), torch.ones(8, 4, 3)))
    assert [(c.op, set(c.axes)) for c in trace.comms] == [("contract", {"j"}), ("psum", {"b"})]
    one = _auto._Split({"b": ("dp",)}, {}, MESH.shape)
    two = _auto._Split({"b": ("dp", "mp")}, {}, MESH.shape)
    assert _auto._comm(trace, one, CPU, False)[1] == 1
    assert _auto._comm(trace, two, CPU, False)[1] == 2
    # a SerialLoop over j keeps each chunk's part of j in the product (priced); a mesh
    # axis over j does not (each rank contracts its part)
    loop_j = _auto._Split({}, {"j": 2}, MESH.shape)
    mesh_j = _auto._Split({"j": ("dp",)}, {}, MESH.shape)
    assert _auto._kept_products(trace, loop_j) > 0 == _auto._kept_products(trace, mesh_j)
