"""JAX's own xmap test suite (tests/xmap_test.py: XMapTest, XMapTestSPMD, XMapTestManualSPMD,
NamedNumPyTest, NamedRandomTest, NamedNNTest, XMapArrayTest, XMapErrorTest,
NamedAutodiffTests) ported to named_axes: torch tensors for jnp arrays, nx.lax for lax.

Each test is named for the JAX test it ports.  The references are JAX's own (its
assertAllClose expressions, computed here with plain torch), checked against JAX 0.4.30's
xmap run side by side.  A mesh assignment of JAX's test is ported twice: vectorized and
with SerialLoop resources in its place (a resource assignment never changes a result).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import named_axes as nx

L = nx.lax
SL = nx.SerialLoop


def _arange(*shape, dtype=None):
    return torch.arange(math.prod(shape), dtype=dtype).reshape(shape)


def _close(got, want, **kw):
    torch.testing.assert_close(got, want, check_dtype=False, **kw)


# -- XMapTest ------------------------------------------------------------------------------

@pytest.mark.parametrize("res", [None, {'a': SL(4), 'b': SL(2), 'c': SL(2)}])
def test_basic(res):
    fm = nx.xmap(lambda a, b: (a * 2, b * 4),
                 in_axes=({0: 'a', 1: 'b'}, ['c', ...]), out_axes=({0: 'a', 1: 'b'}, ['c', ...]),
                 axis_resources=res)
    a, b = _arange(16, 8, 5), _arange(2, 7)
    c, d = fm(a, b)
    _close(c, a * 2)
    _close(d, b * 4)


@pytest.mark.parametrize("res", [None, {'a': SL(2), 'b': SL(2), 'c': SL(2)}])
def test_collective_reduce(res):
    fm = nx.xmap(lambda a, b: (L.psum(a * 2, 'a'), b * 4),
                 in_axes=(['a', 'b', ...], {0: 'c'}), out_axes=(['b', ...], {0: 'c'}),
                 axis_resources=res)
    a, b = _arange(16, 8, 5), _arange(2, 7)
    c, d = fm(a, b)
    _close(c, (a * 2).sum(0))
    _close(d, b * 4)


@pytest.mark.parametrize("perm", [np.array([3, 1, 2, 0]), [3, 1, 2, 0]])
def test_collective_permute_2d(perm):
    # (JAX 0.4.30 computes this on a mesh only: its vectorized 2-axis pshuffle is
    # NotImplementedError; the mesh run gives `perm`)
    x = _arange(2, 2)
    out = nx.xmap(lambda x: L.pshuffle(x, ('i', 'j'), perm),
                  in_axes=['i', 'j', ...], out_axes=['i', 'j', ...])(x)
    _close(out.reshape(-1), torch.tensor([3, 1, 2, 0]))


@pytest.mark.parametrize("names", [('i', 'j'), ('j', 'i')])
def test_collective_permute_2d_axis_order(names):
    # A tuple of axes is linearized in its order, as axis_index(names) numbers the
    # instances (JAX 0.4.30's axis_index(('j', 'i')) is j-major too).  JAX 0.4.30's own
    # multi-axis ppermute (xmap on a mesh, nested pmap, shard_map) ignores the tuple's
    # order and follows the device order: its xmap result changes with axis_resources
    # ({'i': 'x', 'j': 'y'} vs {'i': 'y', 'j': 'x'}), against its own rule; not followed.
    x = _arange(2, 2, 3) * 10
    perm = [(0, 1), (1, 3), (3, 2), (2, 0)]
    out = nx.xmap(lambda x: L.ppermute(x, names, perm), in_axes=['i', 'j', ...],
                  out_axes=['i', 'j', ...])(x)
    index = nx.xmap(lambda: L.axis_index(names), in_axes=(), out_axes=['i', 'j'],
                    axis_sizes={'i': 2, 'j': 2})()
    want = torch.empty_like(x)
    for src, dst in perm:
        want[tuple((index == dst).nonzero()[0])] = x[tuple((index == src).nonzero()[0])]
    _close(out, want)
    if names == ('j', 'i'):
        _close(out[..., 0], torch.tensor([[30, 90], [0, 60]]))


def test_collective_permute_1d():
    out = nx.xmap(lambda x: L.pshuffle(x, 'i', np.array([3, 1, 2, 0])),
                  in_axes=['i', ...], out_axes=['i', ...])(torch.arange(4))
    _close(out, torch.tensor([3, 1, 2, 0]))


def test_collective_all_gather():
    x = torch.arange(4, dtype=torch.int32)
    out = nx.xmap(lambda x: L.all_gather(x, 'i') + L.axis_index('i'),
                  in_axes=['i', ...], out_axes=['i', ...])(x)
    _close(out, x[None] + x[None].T)


@pytest.mark.parametrize("res", [None, {'a': SL(2)}, {'a': SL(4)}])
def test_one_logical_two_mesh_axes_basic(res):
    v = _arange(4, 5)
    ans, ans2 = nx.xmap(lambda v: (L.psum(v * 2, 'a'), v * 4), in_axes=['a', ...],
                        out_axes=({}, {1: 'a'}), axis_resources=res)(v)
    _close(ans, (v * 2).sum(0))
    _close(ans2, v.T * 4)


def test_skip_first_mesh_dim():
    run = lambda res: nx.xmap(lambda x: x * 2, in_axes=['i', ...], out_axes=['i', ...],
                              axis_resources=res)(torch.ones(4))
    _close(run({'i': SL(2)}), run(None))


def _nested_mesh(ra, rb):
    def f(x):
        y = x * 2

        def h(y):   # times a constant array, as JAX's test does
            return (torch.sin(y) * torch.arange(y.numel(), dtype=torch.float64),
                    L.psum(y, ('a', 'b')))
        return nx.xmap(h, in_axes={0: 'b'}, out_axes=({1: 'b'}, {}), axis_resources=rb)(y)
    x = _arange(4, 2, 5, dtype=torch.float64)
    out = nx.xmap(f, in_axes={1: 'a'}, out_axes=({0: 'a'}, {}), axis_resources=ra)(x)
    ref = ((torch.sin(x * 2) * torch.arange(5.)).permute(1, 2, 0), (x * 2).sum((0, 1)))
    return out, ref


@pytest.mark.parametrize("ra, rb", [(None, None), ({'a': SL(2)}, None), (None, {'b': SL(2)})])
def test_nested_mesh(ra, rb):
    out, ref = _nested_mesh(ra, rb)
    _close(out, ref)


@pytest.mark.parametrize("res", [None, {'i': SL(2), 'j': SL(2)}])
def test_multiple_calls(res):
    f = nx.xmap(lambda x, y: torch.tensordot(x, y, dims=([1], [1])),
                in_axes=(['i', ...], ['j', ...]), out_axes=['i', 'j', ...], axis_resources=res)
    x = _arange(2, 3, 5)
    want = torch.einsum('imk,jnk->ijmn', x, x)
    for _ in range(3):
        _close(f(x, x), want)


@pytest.mark.parametrize("res", [None, {'i': SL(5)}])
def test_control_flow(res):
    # (JAX 0.4.30's value: the first psum sums over 'i', each later one multiplies by 5)
    f = nx.xmap(lambda x: L.fori_loop(0, 3, lambda _, x: L.psum(x, 'i'), x),
                in_axes=['i', ...], out_axes=['i', ...], axis_resources=res)
    _close(f(torch.arange(5)), torch.full((5,), 250))


@pytest.mark.parametrize("res", [None, {'i': SL(3)}, {'i': SL(6)}])
def test_axis_sizes(res):
    out = nx.xmap(lambda: L.axis_index('i'), in_axes=(), out_axes=['i', ...],
                  axis_sizes={'i': 6}, axis_resources=res)()
    _close(out, torch.arange(6))


def test_collective_over_no_name():
    out = nx.xmap(lambda: L.psum(torch.tensor(2) ** 2, 'i'), in_axes={}, out_axes={},
                  axis_sizes={'i': 4})()
    assert int(out) == 16


def test_batching_post_process():
    x = _arange(5, 2)
    f = nx.vmap(lambda y: nx.xmap(lambda x: x + y, in_axes=['i', ...], out_axes=['i', ...])(x))
    ref = torch.func.vmap(lambda y: torch.func.vmap(lambda x: x + y)(x))
    _close(f(x * 2), ref(x * 2))


@pytest.mark.parametrize("res", [None, {'i': SL(2)}])
def test_named_shape(res):
    f = nx.xmap(lambda x, y: (x + y, y * L.axis_index('i')), in_axes=(['i', ...], {}),
                out_axes=(['i', ...], ['i', ...]), axis_resources=res)
    z, w = f(np.arange(4), 2)
    assert type(z) is torch.Tensor and type(w) is torch.Tensor
    _close(z, torch.arange(4) + 2)
    _close(w, torch.arange(4) * 2)


@pytest.mark.parametrize("res", [None, {'i': SL(2)}])
def test_broadcast(res):
    f = nx.xmap(lambda x: x, in_axes={}, out_axes=['i'], axis_sizes={'i': 4}, axis_resources=res)
    _close(f(torch.tensor(2.0)), torch.full((4,), 2.0))


def test_nested_broadcast():
    f = nx.xmap(lambda x: x, in_axes={}, out_axes=['i'], axis_sizes={'i': 4})
    g = nx.xmap(f, in_axes={}, out_axes=['j', ...], axis_sizes={'j': 7})
    _close(g(torch.tensor(2.0)), torch.full((7, 4), 2.0))


@pytest.mark.parametrize("res", [SL(4), SL(8)])   # (loop_basic, loop_with_mesh: 'x' x 'l')
def test_loop_anon_basic(res):
    x = torch.arange(16)
    y = nx.xmap(lambda x: x + 4, in_axes=['i'], out_axes=['i'], axis_resources={'i': res})(x)
    _close(y, x + 4)


def test_loop_two_serial_loops_for_one_axis_is_refused():
    # (JAX 0.4.30: NotImplementedError "Only one loop per xmap is supported")
    with pytest.raises(nx.NamedAxisError, match="one SerialLoop per named axis"):
        nx.xmap(lambda x: x + 4, in_axes=['i'], out_axes=['i'],
                axis_resources={'i': (SL(2), SL(4))})(torch.arange(16))


def test_no_tracer_leak():
    xs = torch.arange(1, 4, dtype=torch.float32)
    _, grad_f = nx.linearize(torch.sin, xs)
    out = nx.xmap(grad_f, in_axes=['i', ...], out_axes=['i', ...],
                  axis_resources={'i': SL(1)})(torch.eye(3))
    _close(out, torch.diag(torch.cos(xs)))


def test_new_checkpoint():
    f = nx.checkpoint(nx.xmap(lambda x: x, in_axes=['i', ...], out_axes=['i', ...]))
    _close(nx.grad(lambda x: f(x).sum())(torch.arange(3.)), torch.ones(3))


def test_new_checkpoint_nonlinear():
    # (JAX 0.4.30: [4.5347, 2.6148, 0.7678] for sin(sin(x)) * psum(x, 'i'))
    f = nx.checkpoint(nx.xmap(lambda x: torch.sin(torch.sin(x)) * L.psum(x, 'i'),
                              in_axes=['i', ...], out_axes=['i', ...]))
    x = torch.arange(3., dtype=torch.float64)
    want = torch.func.grad(lambda x: (torch.sin(torch.sin(x)) * x.sum()).sum())(x)
    _close(nx.grad(lambda x: f(x).sum())(x), want)


def test_autodiff_no_broadcast():
    f = nx.xmap(lambda x, y: torch.cos(torch.dot(x, torch.sin(y))),
                in_axes=(['i', ...], [None, 'i']), out_axes=['i'])
    x = _arange(3, 4, dtype=torch.float64).div(100).requires_grad_()
    y = _arange(4, 3, dtype=torch.float64).div(100).requires_grad_()
    assert torch.autograd.gradcheck(f, (x, y))
    assert torch.autograd.gradgradcheck(f, (x, y))


# -- XMapTestSPMD / XMapTestManualSPMD -----------------------------------------------------

@pytest.mark.parametrize("ra, rc", [(None, None), ({'a': SL(2), 'b': SL(2)}, None),
                                    (None, {'c': SL(2)})])
def test_nested_mesh_spmd(ra, rc):
    h = nx.xmap(lambda y: (torch.sin(y) * torch.arange(y.numel(), dtype=torch.float64),
                           L.psum(y, ('a', 'b', 'c'))),
                in_axes={0: 'c'}, out_axes=({1: 'c'}, {}), axis_resources=rc)
    f = nx.xmap(lambda x: h(x * 2), in_axes=[None, 'a', 'b', ...],
                out_axes=(['a', 'b', ...], {}), axis_resources=ra)
    x = _arange(8, 2, 4, 5, dtype=torch.float64)
    y0, y1 = f(x)
    _close(y0, (torch.sin(x * 2) * torch.arange(5.)).permute(1, 2, 3, 0))
    _close(y1, (x * 2).sum((0, 1, 2)))


@pytest.mark.parametrize("res", [None, {'i': SL(2)}])
def test_fixed_sharding(res):
    x = torch.arange(20, dtype=torch.float32)
    out = nx.xmap(lambda x: torch.sin(2 * L.psum(torch.cos(x) + 4, 'i')), in_axes=['i'],
                  out_axes={}, axis_resources=res)(x)
    _close(out, torch.sin(2 * (torch.cos(x) + 4).sum()))


def test_fixed_sharding_named_sum():
    x = torch.arange(20, dtype=torch.float32)
    for red in (lambda v: nx.sum(v, 'i'), lambda v: v.sum('i')):
        out = nx.xmap(lambda x: torch.sin(2 * red(torch.cos(x) + 4)), in_axes=['i'],
                      out_axes={})(x)
        _close(out, torch.sin(2 * (torch.cos(x) + 4).sum()))


@pytest.mark.parametrize("res", [None, {'i': SL(2)}])
def test_manual_basic(res):
    f = lambda x: torch.sin(torch.cos(x) + x) * x
    x = torch.arange(20, dtype=torch.float32)
    _close(nx.xmap(f, in_axes=['i'], out_axes=['i'], axis_resources=res)(x), f(x))


@pytest.mark.parametrize("res", [None, {'i': SL(2)}])
def test_manual_replicated(res):
    f = lambda x: torch.sin(torch.cos(x) + x) * x
    x = torch.arange(20, dtype=torch.float32)
    fx = nx.xmap(f, in_axes=[...], out_axes=[...], axis_sizes={'i': 4}, axis_resources=res)
    _close(fx(x), f(x))


@pytest.mark.parametrize("res", [None, {'i': SL(2)}])
def test_in_pjit_replicated(res):
    f = nx.xmap(lambda x: torch.sin(x) + x, in_axes={}, out_axes={}, axis_sizes={'i': 4},
                axis_resources=res)
    x = torch.arange(20, dtype=torch.float32)
    _close(f(x * x) + x, torch.sin(x * x) + x * x + x)


@pytest.mark.parametrize("res", [None, {'i': SL(2)}, {'i': SL(2), 'j': SL(2)}])
def test_manual_collective(res):
    f = nx.xmap(lambda x: L.psum(x, 'i'), in_axes=['i', 'j'], out_axes=['j'], axis_resources=res)
    x = _arange(4, 4, dtype=torch.float32)
    _close(f(x * x), (x * x).sum(0))


def test_manual_all_gather():
    x = _arange(2, 4)
    f = nx.xmap(lambda x: L.all_gather(x, 'i', axis=0, tiled=True), in_axes=['i', None],
                out_axes=[None])
    _close(f(x), x.reshape(8))
    # untiled, along positional axis 1 (JAX 0.4.30: x.T)
    g = nx.xmap(lambda x: L.all_gather(x, 'i', axis=1), in_axes=['i', None],
                out_axes=[None, None])
    _close(g(x), x.T)


def test_manual_reduce_scatter():
    x = _arange(2, 4)
    f = nx.xmap(lambda x: L.psum_scatter(x, 'i', scatter_dimension=0, tiled=True),
                in_axes=[None, None], out_axes=['i', None, None], axis_sizes={'i': 2})
    _close(f(x), (x * 2).reshape(2, 1, 4))
    # untiled (JAX 0.4.30: x * 2), and over a named operand along positional axis 1
    g = nx.xmap(lambda x: L.psum_scatter(x, 'i', scatter_dimension=0),
                in_axes=[None, None], out_axes=['i', None], axis_sizes={'i': 2})
    _close(g(x), x * 2)
    y = _arange(2, 3, 4)
    h = nx.xmap(lambda x: L.psum_scatter(x, 'i', scatter_dimension=1, tiled=True),
                in_axes=['i', None, None], out_axes=['i', None, None])
    _close(h(y), y.sum(0).reshape(3, 2, 2).permute(1, 0, 2))


@pytest.mark.parametrize("res", [None, {'i': SL(2)}])
def test_bare_xmap_collective(res):
    x = _arange(4, 5, dtype=torch.float32)
    y = nx.xmap(lambda x: L.psum(x, 'i'), in_axes=['i', ...], out_axes=[...],
                axis_resources=res)(x)
    _close(y, x.sum(0))


def test_ppermute():
    n = 2
    x = _arange(n, 5, dtype=torch.float32)
    f = nx.xmap(lambda x: L.ppermute(x, 'i', perm=[(j, (j + 1) % n) for j in range(n)]),
                in_axes=['i', ...], out_axes=['i', ...])
    _close(f(x), x.flip(0))


def test_ppermute_partial_follows_pmap():
    # (JAX 0.4.30's xmap asserts a full permutation; its pmap, the SPEC's reading of a
    # named axis, zero-fills the instances nothing is sent to: this value)
    x = _arange(3, 4, dtype=torch.float32) + 1
    f = nx.xmap(lambda x: L.ppermute(x, 'i', perm=[(0, 2), (2, 1)]),
                in_axes=['i', ...], out_axes=['i', ...])
    _close(f(x), torch.stack([torch.zeros(4), x[2], x[0]]))


# -- XMapArrayTest -------------------------------------------------------------------------

def test_can_stage_and_interpret_xmap_with_constants():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = nx.xmap(lambda x: x + np.ones(tuple(x.shape), np.float32), in_axes=({0: 'batch'},),
                out_axes={0: 'batch'})
    _close(f(x), torch.from_numpy(x) + 1)
    _close(nx.jit(f)(torch.from_numpy(x)), torch.from_numpy(x) + 1)


# -- NamedNumPyTest ------------------------------------------------------------------------

_REDUCTIONS = {
    'sum': (nx.sum, torch.sum),
    'max': (nx.amax, torch.amax),
    'min': (nx.amin, torch.amin),
    'mean': (nx.mean, torch.mean),
    'var': (lambda x, a: nx.var(x, a, correction=0), lambda x, a: torch.var(x, a, correction=0)),
    'std': (lambda x, a: nx.std(x, a, correction=0), lambda x, a: torch.std(x, a, correction=0)),
    'logsumexp': (nx.logsumexp, torch.logsumexp),
}


@pytest.mark.parametrize("mapped_axis", range(3))
@pytest.mark.parametrize("axes", [0, 'i', (1,), ('i',), (0, 1), (0, 'i'), ('i', 0)])
@pytest.mark.parametrize("reduction", list(_REDUCTIONS))
def test_reductions(reduction, axes, mapped_axis):
    red, ref = _REDUCTIONS[reduction]
    axes_t = axes if isinstance(axes, tuple) else (axes,)
    ref_axes = tuple(mapped_axis if a == 'i' else a + (a >= mapped_axis) for a in axes_t)
    after = mapped_axis - sum(a < mapped_axis for a in axes_t if a != 'i')
    f = nx.xmap(lambda x: red(x, axes), in_axes={mapped_axis: 'i'},
                out_axes={} if 'i' in axes_t else {after: 'i'})
    x = torch.from_numpy(np.random.RandomState(0).randn(2, 5, 6))
    _close(f(x), ref(x, ref_axes))


# -- NamedRandomTest -----------------------------------------------------------------------

_SAMPLERS = {
    'uniform': torch.rand_like,
    'normal': torch.randn_like,
    'bernoulli': lambda v: torch.bernoulli(v + 0.5),
}


def test_sampler_sharding():
    rep = nx.xmap(lambda: torch.rand(3), in_axes=(), out_axes=[None, 'i', ...],
                  axis_sizes={'i': 4})()
    assert bool((rep[:, [0]] == rep).all())
    sh = nx.xmap(lambda: torch.rand_like(torch.zeros(3) + L.axis_index('i')), in_axes=(),
                 out_axes=[None, 'i', ...], axis_sizes={'i': 4})()
    assert not bool((sh[:, [0]] == sh[:, 1:]).all(0).any())


@pytest.mark.parametrize("res", [{'i': SL(2)}, {'i': SL(4)}, {'j': SL(3)},
                                 {'i': SL(2), 'j': SL(2)}, {'i': SL(4), 'j': SL(6)}])
@pytest.mark.parametrize("distr", list(_SAMPLERS))
def test_sampler_resource_independence(distr, res):
    def sample(res):
        torch.manual_seed(0)
        body = lambda: _SAMPLERS[distr](torch.zeros(3) + 0 * L.axis_index('i')
                                        + 0 * L.axis_index('j'))
        return nx.xmap(body, in_axes=(), out_axes=['i', 'j', ...], axis_sizes={'i': 4, 'j': 6},
                       axis_resources=res)()
    _close(sample(None), sample(res))


# -- NamedNNTest ---------------------------------------------------------------------------

def test_one_hot():
    f = nx.xmap(lambda x: nx.one_hot(torch.tensor([1, 2, 0]), 3, dim='i'),
                in_axes=['i', ...], out_axes=['i', ...])
    want = torch.tensor([[0, 1, 0], [0, 0, 1], [1, 0, 0]]).T
    _close(f(torch.ones(3, dtype=torch.int32)), want)


def test_one_hot_out_of_bound():
    f = nx.xmap(lambda x: nx.one_hot(torch.tensor([-1, 3]), 3, dim='i'),
                in_axes=['i', ...], out_axes=['i', ...])
    _close(f(torch.ones(3, dtype=torch.int32)), torch.zeros(3, 2))


def test_one_hot_axis_size_mismatch():
    f = nx.xmap(lambda x: nx.one_hot(torch.tensor([-1, 3]), 3, dim='i'),
                in_axes=['i', ...], out_axes=['i', ...])
    with pytest.raises(ValueError, match=r"num_classes=3 but axis 'i' is bound with size 5"):
        f(torch.ones(5, dtype=torch.int32))


# -- NamedAutodiffTests (JAX skips them since reduce_axes left its vjp; nx keeps it) ---------

def _f(w, x):
    return torch.sin(torch.matmul(x, w))


def _wxg():
    return _arange(3, 4, dtype=torch.float32), _arange(2, 3, dtype=torch.float32), \
        _arange(2, 4, dtype=torch.float32)


def test_vjp_reduce_axes():
    w, x, gy = _wxg()

    def vjp_f(w, x, gy, **kw):
        return nx.vjp(_f, w, x, **kw)[1](gy)
    with pytest.raises(ValueError, match=r"output 0 has named axis 'batch'"):
        nx.xmap(vjp_f, in_axes=({}, {0: 'batch'}, {0: 'batch'}),
                out_axes=({}, {0: 'batch'}))(w, x, gy)
    out = nx.xmap(vjp_f, in_axes=({}, {0: 'batch'}, {0: 'batch'}),
                  out_axes=({0: 'batch'}, {0: 'batch'}))(w, x, gy)
    want = torch.func.vmap(lambda w, x, gy: torch.func.vjp(_f, w, x)[1](gy),
                           in_dims=(None, 0, 0))(w, x, gy)
    _close(out, want, rtol=5e-3, atol=1e-5)
    out = nx.xmap(lambda w, x, gy: vjp_f(w, x, gy, reduce_axes=('batch',)),
                  in_axes=({}, {0: 'batch'}, {0: 'batch'}), out_axes=({}, {0: 'batch'}))(w, x, gy)
    _close(out, torch.func.vjp(_f, w, x)[1](gy), rtol=5e-3, atol=1e-5)


def test_vjp_reduce_axes_collective():
    w, x, _ = _wxg()

    @nx.custom_vjp
    def psum_idrev(x, axis_name):
        return L.psum(x, axis_name)
    psum_idrev.defvjp(lambda x, axis_name: (psum_idrev(x, axis_name), None),
                      lambda res, g: (g, None))

    def f_named(w, x):
        return psum_idrev(torch.sin(torch.matmul(x, w)).sum(), 'batch')
    f_positional = lambda w, x: torch.sin(x @ w).sum()
    out = nx.xmap(f_named, in_axes=({}, {0: 'batch'}), out_axes={})(w, x)
    _close(out, f_positional(w, x))
    out = nx.xmap(nx.grad(f_named, (0, 1), reduce_axes=('batch',)),
                  in_axes=({}, {0: 'batch'}), out_axes=({}, {0: 'batch'}))(w, x)
    _close(out, torch.func.grad(f_positional, (0, 1))(w, x), rtol=5e-3, atol=1e-5)
