"""nx.grad of a function that writes into an argument it does not differentiate (a
module's running statistics given to nx.nn.functional_call, a counter) works wherever it
runs.  Eagerly plain autograd allowed the write, but where torch.func computes the
gradient (under nx.jit, nx.make_graph, nx.eval_shape, inside nx.vmap) the argument was a
captured tensor, and torch refused the write ("would mutate a captured Tensor"); it now
goes through torch.func with the differentiated ones, as torch.func.grad's own arguments
do."""
from __future__ import annotations

import torch
from torch import nn

import named_axes as nx


def _count_and_scale(p, n):
    n.add_(1)
    return (n * p).sum()


def test_vmap_of_grad_writing_an_argument_matches_torch_func():
    n_nx, n_torch = torch.zeros(3, 2), torch.zeros(3, 2)
    got = nx.vmap(nx.grad(_count_and_scale), in_dims=(None, 0))(torch.ones(2), n_nx)
    want = torch.func.vmap(torch.func.grad(_count_and_scale), in_dims=(None, 0))(
        torch.ones(2), n_torch)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(n_nx, n_torch)


def test_traced_grad_writing_an_argument():
    n = torch.zeros(2)
    assert nx.eval_shape(nx.grad(_count_and_scale), torch.ones(2), n).shape == (2,)
    assert torch.equal(n, torch.zeros(2))
    assert "add_" in nx.make_graph(nx.grad(_count_and_scale))(torch.ones(2), n).code


def test_jit_per_example_grads_with_batchnorm_statistics_match_eager():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
    params = {k: v.detach() for k, v in m.named_parameters()}
    x = torch.randn(3, 5, 3)

    def stats():
        return {k: v.detach().clone().expand(3, *v.shape).clone()
                for k, v in m.named_buffers()}

    def loss(p, b, x):
        return nx.nn.functional_call(m, (p, b), (x,)).pow(2).sum()

    g = nx.xmap(nx.grad(loss), in_axes=({}, ['a', ...], ['a', ...]), out_axes=['a', ...])
    eager_stats, jit_stats = stats(), stats()
    want = g(params, eager_stats, x)
    got = nx.jit(g)(params, jit_stats, x)
    for k in want:
        torch.testing.assert_close(got[k], want[k])
    for k in eager_stats:
        torch.testing.assert_close(jit_stats[k], eager_stats[k])
    assert eager_stats["1.num_batches_tracked"].tolist() == [1, 1, 1]
