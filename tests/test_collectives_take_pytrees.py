"""all_gather, psum_scatter, all_to_all, ppermute and pshuffle take a pytree ``x`` as
JAX 0.4.30's do (each leaf moved alike, None leaves kept; psum and friends took pytrees
already): they refused one ('must be a tensor, NamedTensor, number or numpy array, got
tuple')."""
import torch

import named_axes as nx

L = nx.lax
X = torch.arange(32.).reshape(4, 4, 2)


def xm(f, out_axes):
    return nx.xmap(f, in_axes=['i', ...], out_axes=out_axes)(X)


def test_each_leaf_moves_alike():
    perm = [(0, 1), (1, 0), (2, 3), (3, 2)]
    cases = [
        (lambda v: L.all_gather(v, 'i', axis=1), [...]),
        (lambda v: L.psum_scatter(v, 'i'), ['i', ...]),
        (lambda v: L.all_to_all(v, 'i', 0, 0), ['i', ...]),
        (lambda v: L.ppermute(v, 'i', perm), ['i', ...]),
        (lambda v: L.pshuffle(v, 'i', [1, 0, 3, 2]), ['i', ...]),
    ]
    for f, oa in cases:
        one = xm(f, oa)
        got = xm(lambda v: f({'a': (v, None), 'b': [v * 2]}), {'a': (oa, None), 'b': [oa]})
        assert got['a'][1] is None
        torch.testing.assert_close(got['a'][0], one)
        torch.testing.assert_close(got['b'][0], one * 2)


def test_gradient_through_a_tree():
    # JAX 0.4.30: grad of sum_k k * (all_gather((u, sin u))[k-1] ** 2).sum() inside xmap
    g = xm(lambda v: nx.grad(lambda u: sum((a ** 2).sum() * k for k, a in enumerate(
        L.all_gather((u, torch.sin(u)), 'i'), 1)))(v), ['i', ...])
    u = X / 1
    want = 4 * (2 * u + 2 * 2 * torch.sin(u) * torch.cos(u))   # psum transposes to psum
    torch.testing.assert_close(g, want)
