"""JAX's own pmap test suite (tests/pmap_test.py at jax-v0.4.30: PythonPmapTest's collectives
and nesting) ported to named_axes: torch tensors for jnp arrays, nx.lax for lax, nx.pmap for
pmap.

Each test is named for the JAX test it ports.  JAX's tests size the mapped axis by
``jax.device_count()`` (its module sets 8 CPU devices); here ``N = 4``, the device count
of tests/parallel's XLA runs and of the JAX runs that produced the inlined values
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``).  On one CPU device nx.pmap runs
vectorized; tests/parallel/test_xla_pmap*.py run it over devices.  References are JAX's own
(its numpy expressions, computed here with numpy/torch); where JAX's test compares against
JAX itself, the value JAX 0.4.30 computed is inlined.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import named_axes as nx

L = nx.lax
N = 4


def _x(*shape, dtype=np.float32):
    return np.arange(math.prod(shape), dtype=dtype).reshape(shape)


def _close(got, want, **kw):
    want = want if isinstance(want, torch.Tensor) else torch.as_tensor(np.array(want))
    torch.testing.assert_close(torch.as_tensor(got), want, check_dtype=False, **kw)


def _sum_and_broadcast(x, axis):
    return np.repeat(np.sum(x, axis, keepdims=True), x.shape[axis], axis)


# -- single-axis collectives -------------------------------------------------------------

def test_basic():
    x = _x(N, 4)
    _close(nx.pmap(lambda x: x - L.psum(x, 'i'), axis_name='i')(x), x - x.sum(0))


def test_mean():
    x = _x(N, 4)
    _close(nx.pmap(lambda x: x - L.pmean(x, 'i'), axis_name='i')(x), x - x.mean(0))


@pytest.mark.parametrize("op, ref", [(L.pmax, np.max), (L.pmin, np.min)], ids=["max", "min"])
def test_reduce_max_min(op, ref):   # testReduceMax, testReduceMin
    x = _x(N, 4)
    _close(nx.pmap(lambda x: x - op(x, 'i'), axis_name='i')(x), x - ref(x, 0))


def test_complex_psum():
    x = _x(N, 8).view(np.complex64)
    got = nx.pmap(lambda x: x - L.psum(x, 'i'), axis_name='i')(x)
    assert got.dtype == torch.complex64
    _close(got, x - x.sum(0))


@pytest.mark.parametrize("boolean", [False, True], ids=["float", "bool"])
def test_gather(boolean):   # testGather, testGatherBool
    x = _x(N, 4)
    if boolean:
        x = (x % 2).astype(np.bool_)
    got = nx.pmap(lambda x: L.all_gather(x, 'i'), axis_name='i')(x)
    assert got.dtype == torch.as_tensor(x).dtype
    _close(got, np.array([x] * N))


def test_gather_negative_axis():
    x = _x(N, 4)
    _close(nx.pmap(lambda x: L.all_gather(x, 'i', axis=-1), axis_name='i')(x),
           np.array([x.T] * N))


def test_gather_tiled():
    x = _x(N, 4)
    _close(nx.pmap(lambda x: L.all_gather(x, 'i', tiled=True), axis_name='i')(x),
           np.array([x] * N).reshape(N, -1))


def test_gather_tiled_negative_axis():
    x = _x(N, 4, 3)
    _close(nx.pmap(lambda x: L.all_gather(x, 'i', tiled=True, axis=-1), axis_name='i')(x),
           np.array([x.transpose(1, 0, 2).reshape(4, -1)] * N))


@pytest.mark.parametrize("prim", [L.all_gather, L.psum_scatter], ids=["gather", "scatter"])
def test_vmap_of(prim):
    f = nx.pmap(lambda x: prim(x, axis_name='i'), axis_name='i')
    x = torch.as_tensor(_x(4, N, N))
    _close(nx.vmap(f)(x), torch.stack([f(xs) for xs in x]))


def test_reduce_scatter():
    x = _x(N, N)
    ans = nx.pmap(lambda x: L.psum_scatter(x, 'i'), axis_name='i')(x)
    _close(ans, x.sum(0))


def test_reduce_scatter_tiled():
    x = _x(N, 4 * N)
    ans = nx.pmap(lambda x: L.psum_scatter(x, 'i', tiled=True), axis_name='i')(x)
    _close(ans, x.sum(0).reshape(N, 4))


@pytest.mark.parametrize("call", [
    lambda x, g: L.psum_scatter(x, 'i', axis_index_groups=g, tiled=True),   # ReplicaGroupsTiled
    lambda x, g: x - L.psum(x, 'i', axis_index_groups=g),   # testPsumReplicaGroups
    lambda x, g: x - L.psum(2., 'i', axis_index_groups=g),  # testPsumConstantReplicaGroups
    lambda x, g: L.all_gather(x, 'i', axis_index_groups=g),   # testGatherReplicaGroups
    lambda x, g: L.all_to_all(x, 'i', 0, 0, axis_index_groups=g),   # AllToAllReplicaGroups
], ids=["psum_scatter", "psum", "psum_constant", "all_gather", "all_to_all"])
def test_replica_groups_are_refused(call):
    """JAX's axis_index_groups tests (testReduceScatterReplicaGroupsTiled, testPsum*ReplicaGroups,
    testGatherReplicaGroups*, testNestedPmapReplicaGroups, testAllToAllReplicaGroups): nx.lax
    refuses axis_index_groups with a clear error rather than reducing over the whole axis."""
    groups = [[0, 2], [1, 3]]
    with pytest.raises(nx.AxisSpecError, match=r"axis_index_groups=\[\[0, 2\], \[1, 3\]\] "
                                                r"is not supported"):
        nx.pmap(lambda x: call(x, groups), axis_name='i')(_x(N, 4 * N))


def _ptranspose(x, name):
    return L.all_to_all(x, name, 0, 0)


def _protate(x, name):
    n = L.psum(1, name)
    return L.ppermute(x, name, [(i, (i + 1) % n) for i in range(n)])


_TREE_CASES = [
    (L.pmax, lambda x: np.broadcast_to(x.max(0), x.shape)),
    (L.pmin, lambda x: np.broadcast_to(x.min(0), x.shape)),
    (L.psum, lambda x: np.broadcast_to(x.sum(0), x.shape)),
    (L.pmean, lambda x: np.broadcast_to(x.mean(0), x.shape)),
    (_ptranspose, np.transpose),
    (_protate, lambda x: np.concatenate([x[-1:], x[:-1]])),
]


@pytest.mark.parametrize("p, ref", _TREE_CASES,
                         ids=["pmax", "pmin", "psum", "pmean", "transpose", "rotate"])
def test_trees(p, ref):
    n = N
    x = {'a': np.arange(n * n, 2 * n * n).reshape(n, n),
         'b': np.arange(2 * n * n, 3 * n * n).reshape(n, n),
         'c': np.arange(4 * n * n, 5 * n * n).reshape(n, n)}
    got = nx.pmap(lambda x: p(x, 'i'), 'i')(x)
    assert set(got) == set(x)
    for k in x:
        _close(got[k], ref(x[k]))


@pytest.mark.parametrize("p, ref", _TREE_CASES[:4], ids=["pmax", "pmin", "psum", "pmean"])
def test_collectives_with_trees_of_different_dtypes(p, ref):
    n = N
    x = {'a': np.arange(n * n, 2 * n * n, dtype=np.float32).reshape(n, n),
         'b': np.arange(2 * n * n, 3 * n * n, dtype=np.int32).reshape(n, n),
         'c': np.arange(4 * n * n, 5 * n * n, dtype=np.float32).reshape(n, n),
         'd': np.arange(6 * n * n, 7 * n * n, dtype=np.int32).reshape(n, n)}
    got = nx.pmap(lambda x: p(x, 'i'), 'i')(x)
    for k in x:
        _close(got[k], ref(x[k]))


_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
           torch.uint8, torch.int32, torch.int64, torch.bool, torch.complex64]


@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
@pytest.mark.parametrize("split_axis, concat_axis", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_all_to_all(split_axis, concat_axis, dtype):
    torch.manual_seed(split_axis * 2 + concat_axis)
    x = (torch.randn(N, N, N) * 5).to(dtype)
    y = nx.pmap(lambda x: L.all_to_all(x, 'i', split_axis, concat_axis), axis_name='i')(x)
    assert y.dtype == dtype
    ref = torch.movedim(x, (0, split_axis + 1), (concat_axis + 1, 0))
    torch.testing.assert_close(y, ref, rtol=0, atol=0)


@pytest.mark.parametrize("split_axis, concat_axis", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_all_to_all_split_axis(split_axis, concat_axis):
    x = _x(4, 4, 4)
    f = nx.pmap(nx.pmap(lambda x: L.all_to_all(x, ('i', 'j'), split_axis, concat_axis),
                        axis_name='j'), axis_name='i')
    y = f(x.reshape(2, 2, 4, 4)).reshape(4, 4, 4)
    _close(y, np.moveaxis(x, (0, split_axis + 1), (concat_axis + 1, 0)))


# -- nesting -----------------------------------------------------------------------------

def test_nested_pmap_axis_swap():
    f = nx.pmap(nx.pmap(lambda x: x, in_axes=1, out_axes=0), in_axes=0, out_axes=0)
    a = torch.arange(24.).reshape(2, 4, 3)
    _close(f(a), a.permute(0, 2, 1))


def test_nested_basic():
    f = nx.pmap(nx.pmap(lambda x: L.psum(L.psum(x, 'i'), 'j'), 'i'), 'j')
    x = _x(N, 1, 4)
    _close(f(x), _sum_and_broadcast(_sum_and_broadcast(x, 0), 1))


@pytest.mark.parametrize("mesh_shape", [(1, 1), (2, 2), (4, 1)])
def test_nested_sharding_and_stacking(mesh_shape):
    x = _x(*mesh_shape, 4)
    ans = nx.pmap(nx.pmap(lambda x: x, 'i'), 'j')(x)
    assert tuple(ans.shape) == x.shape
    _close(ans, x)


def test_partially_mapped():
    f = nx.pmap(lambda x, y: x, in_axes=(None, 0))
    g = nx.pmap(lambda x, y: x - L.psum(y, 'i'), axis_name='i', in_axes=(None, 0))
    x = np.array(3., dtype=np.float32)
    y = _x(N, 4)
    # (out_axes 0 broadcasts the unmapped result along the mapped axis)
    _close(f(x, y), np.broadcast_to(x, (N,)))
    _close(g(x, y), np.broadcast_to(x - y.sum(0, keepdims=True), (N, 4)))


@pytest.mark.parametrize("mesh_shape", [(1, 1), (2, 2), (4, 1)])
def test_partially_mapped_nested(mesh_shape):
    f = nx.pmap(lambda x, y: x - L.psum(y, 'i'), axis_name='i', in_axes=(None, 0))
    f = nx.pmap(f, axis_name='j', in_axes=(None, 0))
    y = _x(*mesh_shape)
    _close(f(3., y), np.broadcast_to(3. - y.sum(1, keepdims=True), mesh_shape))


def test_psum_multiple():
    f = nx.pmap(nx.pmap(lambda x: L.psum(x, ('i', 'j')), 'i'), 'j')
    x = _x(N // 2, 2, 4)
    _close(f(x), _sum_and_broadcast(_sum_and_broadcast(x, 0), 1))


def test_collective_constant():
    _close(nx.pmap(lambda x: L.psum(1, 'i'), 'i')(torch.arange(N)), np.repeat(N, N))


def test_collective_constant_nested():
    def f(x):
        def g(y):
            return L.psum(1, 'i'), L.psum(1, 'j'), L.psum(1, ('i', 'j'))
        return nx.pmap(g, axis_name='j')(x)
    x = _x(N, 1, 4)
    a, b, c = nx.pmap(f, axis_name='i')(x)
    assert a.shape == b.shape == c.shape == (N, 1)
    assert (a.ravel()[0], b.ravel()[0], c.ravel()[0]) == (N, 1, N)


def test_nested_pmap_constant():
    x = torch.arange(2 * (N // 2) * 3).reshape(2, N // 2, 3)
    ans = nx.pmap(nx.pmap(lambda x: 3))(x)
    _close(ans, 3 * np.ones((2, N // 2)))
    xs, ans = nx.pmap(nx.pmap(lambda x: (x, 3)))(x)
    _close(xs, x)
    _close(ans, 3 * np.ones((2, N // 2)))


def test_pmap_constant():
    _close(nx.pmap(lambda x: 3)(torch.arange(N)), np.repeat(3, N))
    _, ans = nx.pmap(lambda x: (x, 3))(np.arange(N))
    _close(ans, np.repeat(3, N))


# -- axis_index --------------------------------------------------------------------------

def test_axis_index():
    got = nx.pmap(lambda x: x + L.axis_index('i'), 'i')(torch.ones(N, dtype=torch.int32))
    _close(got, 1 + np.arange(N))


@pytest.mark.parametrize("axis", ['i', 'j'])
def test_axis_index_nested_pmap(axis):
    f = nx.pmap(nx.pmap(lambda x: x + L.axis_index(axis), 'j'), 'i')
    want = np.broadcast_to(1 + np.arange(2), (2, 2))
    _close(f(torch.ones(2, 2, dtype=torch.int32)), want if axis == 'j' else want.T)


@pytest.mark.parametrize("axes", [('i', 'j'), ('j', 'i')])
def test_axis_index_nd(axes):
    f = nx.pmap(nx.pmap(lambda x: x + L.axis_index(axes), 'j'), 'i')
    want = 1 + np.arange(4).reshape(2, 2)
    _close(f(torch.ones(2, 2, dtype=torch.int32)), want if axes == ('i', 'j') else want.T)


def test_axis_index_in_initial_style():
    def f(x):
        def body(carry, i):
            return carry + i + L.axis_index('i'), None
        return L.scan(body, 0, x)[0]
    got = nx.pmap(f, axis_name='i')(torch.ones(N, 10, dtype=torch.int32))
    _close(got, (np.arange(N) + 1) * 10)
