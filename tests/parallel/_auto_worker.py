"""One torchrun rank of tests/parallel/test_auto_mesh.py: ``axis_resources='auto'`` on a
2x2 mesh of 4 gloo ranks for examples/gpt_mesh.py's GPT at its default sizes -- every
rank chooses alike (calibrated together), and the loss and gradients equal the
one-process run; so does the step a memory budget below data parallelism's forces
(Megatron's layout), and a budget below that is refused with the smallest memory."""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "examples")]

import named_axes as nx  # noqa: E402
from _ranks import run_rank  # noqa: E402
import gpt_mesh as G  # noqa: E402

LAYERS = 2


def program():
    vocab = len(set(G.CORPUS.read_text()))
    specs = G.param_specs(vocab, embed=64, heads=4, mlp_size=512, layers=LAYERS, context=32)
    params = {k: v.detach().requires_grad_() for k, v in
              G.init_params(specs, 0, None, torch.float64).items()}
    tokens = torch.randint(0, vocab, (8, 33), generator=torch.Generator().manual_seed(1))
    in_axes = (G.in_axes_of(specs), ["batch", "seq", ...], ["batch", "seq", ...])
    return in_axes, params, tokens[:, :-1], tokens[:, 1:]


def step(loss, params, x, y):
    for p in params.values():
        p.grad = None
    value = loss(params, x, y)
    value.backward()
    return float(value), {k: p.grad.clone() for k, p in params.items()}


def scenario_auto_equals_vectorized(rank, results):
    in_axes, params, x, y = program()

    def body(p, t, u):
        return G.named_loss(p, t, u, LAYERS)
    plain = nx.xmap(body, in_axes=in_axes, out_axes=[...])
    auto = nx.xmap(body, in_axes=in_axes, out_axes=[...], axis_resources="auto")
    want, want_g = step(plain, params, x, y)
    mesh = nx.Mesh(np.array(nx.devices()).reshape(2, 2), ("dp", "mp"))
    with mesh:
        got, got_g = step(auto, params, x, y)
        chosen = nx.parallel._auto.auto_resources(auto, (params, x, y))
    results["chosen"] = repr(chosen)
    results["loss_err"] = abs(got - want)
    results["grad_err"] = max(float((got_g[k] - want_g[k]).abs().max()) for k in want_g)
    # budgets below what data parallelism holds, then below Megatron's layout
    rates = nx.Rates(1e11, 1e10, 2e-5, 1e9, 1e-4)
    memory = {repr(c.axis_resources): c.memory_bytes
              for c in nx.explain_resources(plain, mesh, params, x, y, rates=rates,
                                            top=100).candidates}
    dp, mega = memory[repr({"batch": ("dp", "mp")})], memory[repr(G.RESOURCES)]
    chosen = nx.plan_resources(plain, mesh, params, x, y, rates=rates,
                               memory_per_device=(dp + mega) / 2).axis_resources
    with mesh:
        got2, got2_g = step(plain.replaced(axis_resources=chosen), params, x, y)
    results["forced"] = repr(chosen)
    results["forced_err"] = max([abs(got2 - want)] + [
        float((got2_g[k] - want_g[k]).abs().max()) for k in want_g])
    results["megatron"] = repr(G.RESOURCES)
    # the vocabulary (55 characters) splits over no mesh axis: nothing holds less
    try:
        nx.plan_resources(plain, mesh, params, x, y, rates=rates, memory_per_device=mega - 1)
        results["too_small"] = None
    except nx.AxisResourceError as e:
        results["too_small"] = str(e)


def scenario_counts_with_sharded_parameters(rank, results):
    """Parameters as DTensors laid out by the plan (gpt_mesh's NamedSharding): their
    gradients stay sharded, so the model counts no gathers -- as many collectives as
    CommDebugMode counts in the step."""
    from torch.distributed.tensor.debug import CommDebugMode

    from named_axes.parallel import _auto
    from named_axes.parallel._cost_trace import trace_costs

    in_axes, _, x, y = program()
    mesh = nx.Mesh(np.array(nx.devices()).reshape(2, 2), ("dp", "mp"))
    vocab = len(set(G.CORPUS.read_text()))
    specs = G.param_specs(vocab, embed=64, heads=4, mlp_size=512, layers=LAYERS, context=32)
    params = G.init_params(specs, 0, nx.NamedSharding(mesh, G.RESOURCES), torch.float64)
    loss = nx.xmap(lambda p, t, u: G.named_loss(p, t, u, LAYERS), in_axes=in_axes,
                   out_axes=[...], axis_resources=G.RESOURCES)
    split = _auto._Split({"batch": ("dp",), "heads": ("mp",), "mlp": ("mp",)}, {}, mesh.shape)
    trace = trace_costs(loss, (params, x, y))
    results["modelled"] = sum(1 for _, _, over in _auto._collectives(trace, split, True)
                              if split.group(over) > 1)
    with mesh:
        loss(params, x, y).backward()   # (the first call checks its inputs)
        for p in params.values():
            p.grad = None
        with CommDebugMode() as counts:
            loss(params, x, y).backward()
    results["counted"] = counts.get_total_counts()


if __name__ == "__main__":
    run_rank([scenario_auto_equals_vectorized, scenario_counts_with_sharded_parameters])
