"""JAX's pmap test suite (tests/pmap_test.py at jax-v0.4.30), part 4: PmapWithDevicesTest,
jit/cond/scan around and inside pmap, static arguments, dtypes, errors, custom_jvp and
custom_vjp under pmap (PythonPmapEagerTest) and the device_put helpers (ArrayTest).

Conventions as in tests/test_jax_pmap_suite.py (``N = 4`` instances).  JAX tests whose
subject named_axes does not have (lowering/HLO text, compile caches, jax.Array buffers and
shardings, PRNG keys, pargmax, pbroadcast, pswapaxes by name) are not ported.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import named_axes as nx
from _pmap_corpus import arange as _x
from _pmap_corpus import close as _close

L = nx.lax
N = 4


def _scan_map(f, xs):
    """lax.map as a scan."""
    return L.scan(lambda c, x: (c, f(x)), 0, xs)[1]


# -- PmapWithDevicesTest -----------------------------------------------------------------

def test_all_devices():
    f = nx.pmap(lambda x: x - L.psum(x, 'i'), axis_name='i', devices=nx.devices())
    x = _x(N, 4)
    _close(f(x), x - x.sum(0))


def test_one_device():
    x = torch.rand(1, 50, 50, dtype=torch.float64)
    r0 = nx.pmap(lambda x: x @ x.T, devices=[nx.devices()[0]])(x)
    _close(r0, (x[0] @ x[0].T)[None])


def test_no_devices_error():
    # JAX: ValueError "'devices' argument to pmap must be non-empty, or None."
    f = nx.pmap(lambda x: x - L.psum(x, 'i'), axis_name='i', devices=[])
    with pytest.raises(nx.AxisResourceError, match=r"pmap\(<lambda>, devices=\[\]\): no devices "
                                                   r"to map over; pass devices=None for all"):
        f(_x(N, 4))


def test_nested_pmaps():
    def foo(x):
        return nx.pmap(lambda y: L.psum(y, 'j'), axis_name='j')(x)
    x = torch.ones(N // 2, 2)
    _close(nx.pmap(foo, axis_name='i', devices=nx.devices())(x), x * 2)


def test_nested_pmaps_bools():
    def foo(x):
        return nx.pmap(torch.logical_not, axis_name='j')(x)
    x = torch.ones(N // 2, 2, dtype=torch.bool)
    got = nx.pmap(foo, axis_name='i', devices=nx.devices())(x)
    assert got.dtype == torch.bool
    _close(got, torch.zeros(N // 2, 2, dtype=torch.bool))


def test_nested_pmaps_error():
    # JAX: ValueError "Nested pmap with explicit devices argument."
    def foo(x):
        return nx.pmap(lambda y: L.psum(y, 'j'), axis_name='j', devices=nx.devices())(x)
    with pytest.raises(nx.AxisResourceError, match=r"pmap\(<lambda>, devices=\.\.\.\): a pmap "
                                                   r"inside a program already split over devices"):
        nx.pmap(foo, axis_name='i')(torch.ones(N, 1))


def test_jit_in_pmap():
    def foo(x):
        return L.psum(nx.jit(lambda y: y + 1, backend='eager')(x), 'i')
    ans = nx.pmap(foo, axis_name='i', devices=nx.devices())(torch.ones(N, 1))
    _close(ans, torch.full((N, 1), 2. * N))


def test_pmap_in_jit():
    bar = nx.pmap(lambda y: L.psum(y, 'i'), axis_name='i', devices=nx.devices())
    _close(nx.jit(bar, backend='eager')(torch.ones(N, 1)), torch.full((N, 1), float(N)))


def test_pmap_static_argnums():
    f = nx.pmap(lambda x, y: torch.sin(x + y()), axis_name='i', static_broadcasted_argnums=1)
    x = _x(N, 4)
    _close(f(x, lambda: 3.), torch.sin(x + 3.))


def test_pmap_in_axes_basic():
    f = nx.pmap(lambda x, y: torch.sin(x + y), in_axes=(1, 2))
    x, y = _x(2, N, 4), _x(2, 4, N)
    _close(f(x, y), torch.sin(x.permute(1, 0, 2) + y.permute(2, 0, 1)))


def test_pmap_out_axes_basic():
    f = nx.pmap(lambda x, y: (torch.sin(x + y), y * 2), in_axes=(1, None), out_axes=(2, None))
    x, y = _x(2, N, 4), _x(2, 4)
    _close(f(x, y), (torch.sin(x.permute(1, 0, 2) + y).permute(1, 2, 0), y * 2))


def test_pmap_dict_out_axes():
    x = torch.arange(N)
    _close(nx.pmap(lambda x: {'a': x}, out_axes={'a': 0})(x), {'a': x})


# -- jit, cond, scan and pmap ------------------------------------------------------------

@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.hunt)])
def test_jit_pmap_composition(backend):
    f = lambda x: x - L.psum(x, 'i')
    x = _x(N, 4)
    _close(nx.jit(nx.pmap(f, 'i'), backend=backend)(x), x - x.sum(0))
    _close(nx.pmap(nx.jit(f, backend=backend), 'i')(x), x - x.sum(0))


def test_composition_with_jit_twice():
    def f(x):
        y = torch.tensor(2., dtype=torch.float32) * x
        g = nx.jit(lambda z: nx.pmap(lambda x: x[None] * y)(z), backend='eager')
        return g(x)
    x = torch.arange(1., dtype=torch.float32).reshape(1, 1)
    _close(nx.jit(f, backend='eager')(x), torch.zeros(1, 1, 1))


def test_issue1065():
    def multi_step_pmap(state, count):
        step = nx.pmap(nx.jit(lambda s: s, backend='eager'), axis_name='x')
        return L.fori_loop(0, count, lambda i, s: step(s), state)
    _close(multi_step_pmap(torch.zeros(N), count=1), torch.zeros(N))


def test_issue_1062():
    def multi_step(state, count):
        return L.fori_loop(0, count, lambda i, s: s, state)
    u = torch.ones(N, 10)
    _close(nx.pmap(lambda s: multi_step(s, 2), axis_name='x')(u), u)


def test_num_replicas_with_switch():
    x = torch.zeros(N, 2)
    _close(L.cond(True, nx.pmap(lambda x: x), nx.pmap(lambda x: x + 1), x), x)
    _close(L.cond(False, nx.pmap(lambda x: x), nx.pmap(lambda x: x + 1), x), x + 1)


def test_post_process_map():
    # (skipped in JAX 0.4.30: "need eager multi-replica support")
    a = torch.randn(N * 2, N * 2, dtype=torch.float64)
    b = torch.randn(N * 2, dtype=torch.float64)

    def pmvm(a, b):
        return nx.pmap(lambda z: z @ b)(a.reshape(N, -1, a.shape[1])).reshape(b.shape)
    ans, _ = L.scan(lambda carry, i: (pmvm(a, carry), i), b, torch.arange(5))
    _close(ans, torch.linalg.matrix_power(a, 5) @ b)


def _matrix_vector(x, y, parallel):
    fv = lambda z: _scan_map(lambda j: j @ y, z)
    if parallel:
        res = nx.pmap(fv)(x.reshape(N, -1, *x.shape[1:]))
        return res.reshape(x.shape[0], *res.shape[2:])
    return fv(x)


def test_post_process_map2():
    torch.manual_seed(1)
    x = torch.randn(16, 5, dtype=torch.float64)
    y = torch.randn(3, 5, 1, dtype=torch.float64)
    result = nx.vmap(lambda b: _matrix_vector(x, b, True))(y)
    _close(result, torch.einsum('ij,njk->nik', x, y))


def test_pmap_map_vmap_combinations():
    torch.manual_seed(1)
    x, y = torch.randn(8, 5, dtype=torch.float64), torch.randn(5, 5, dtype=torch.float64)
    r1 = nx.vmap(lambda b: _matrix_vector(x, b, True))(y)            # vmap + pmap
    r2 = _scan_map(lambda b: _matrix_vector(x, b, False), y)         # map + map
    r3 = _scan_map(lambda b: _matrix_vector(x, b, True), y)          # map + pmap
    r4 = torch.stack([_matrix_vector(x, b, False) for b in y])       # none + map
    for r in (r1, r2, r3, r4):
        _close(r, y @ x.T)


@pytest.mark.parametrize("remat", [nx.remat, nx.checkpoint])
def test_axis_index_remat(remat):
    f = remat(lambda x: x * (L.axis_index('i') + 1))
    x = _x(N, 3)
    _close(nx.pmap(f, axis_name='i')(x), x * torch.arange(1., N + 1)[:, None])
    _close(nx.grad(lambda x: nx.pmap(f, axis_name='i')(x).sum())(x),
           torch.arange(1., N + 1)[:, None].expand(N, 3))


# -- arguments, dtypes, errors -----------------------------------------------------------

def test_mismatched_axis_sizes():
    with pytest.raises(nx.AxisSizeError, match="inconsistent sizes"):
        nx.pmap(lambda x, y: x + y)(torch.randn(N), torch.randn(N - 1))


def test_in_axes_pytree_prefix_mismatch_error():
    x = torch.tensor([3.14])
    with pytest.raises(ValueError, match=r"in_axes"):
        nx.pmap(lambda x, y: x, in_axes=((0, 0, 0), 0))((x, x), x)


def test_out_axes_pytree_prefix_mismatch_error():
    x = torch.tensor([3.14])
    with pytest.raises(ValueError, match=r"out_axes"):
        nx.pmap(lambda x, y: ((x, x), x), out_axes=((0, 0, 0), 0))(x, x)


def test_pmap_axis_name_error():
    with pytest.raises(nx.UnboundAxisError, match="'batch'"):
        nx.pmap(lambda x: L.psum(x, axis_name='batch'))(np.arange(4)[None])


def test_psum_on_boolean_dtype():
    x = torch.tensor([True, False])
    assert nx.pmap(lambda x: L.psum(x, 'i'), 'i')(x).tolist() == [1, 1]
    assert nx.pmap(lambda x: L.pmean(x, 'i'), 'i')(x).tolist() == [0.5, 0.5]


def test_pdot_basic():
    x, y = torch.arange(N * 3).reshape(N, 3), torch.arange(N * 5).reshape(N, 5)
    _close(nx.pmap(lambda x, y: L.pdot(x, y, 'i'), axis_name='i', out_axes=None)(x, y), x.T @ y)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_pmap_dtype(dtype):
    out = nx.pmap(lambda _: L.psum(dtype(0), axis_name='i'), axis_name='i')(torch.arange(N))
    assert out.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    assert out.tolist() == [0] * N


def test_many_args():
    f = nx.pmap(lambda args_list: sum(args_list))
    _close(f([torch.tensor([i] * N) for i in range(500)]), torch.tensor([sum(range(500))] * N))


def test_static_argnum_on_method():
    class A:
        def my_func(self, x):
            return x + 2
        my_func_pmap = nx.pmap(my_func, static_broadcasted_argnums=(0,))
    _close(A().my_func_pmap(torch.tensor([3] * N)), torch.tensor([5] * N))


def test_non_hashable_static_argument_is_passed():
    # JAX refuses (static arguments are its cache key); nx.pmap passes any value as it is
    f = nx.pmap(lambda x, y: x + 3 + y.sum(), static_broadcasted_argnums=(1,))
    _close(f(torch.tensor([1] * N), np.asarray([1, 2])), torch.tensor([7] * N))


def test_psum_with_no_axis_doesnt_leak_functions():
    x = torch.ones(1, 16)
    f = lambda _: x
    w = weakref.ref(f)
    g = nx.pmap(f)
    g(torch.ones(1))
    del f, g
    gc.collect()
    assert w() is None


def test_array_get_item():
    x = _x(N, 4)
    y = nx.pmap(lambda x: 2 * x, axis_name='i')(x)
    _close(y[0], 2 * x[0])


@pytest.mark.parametrize("in_shape, out_shape", [((1, 1), (1,)), ((1,), (1, 1)), ((1,), ()),
                                                 ((4, 7), (2, 2, 7))])
def test_array_reshape(in_shape, out_shape):
    x = _x(*in_shape)
    _close(nx.pmap(lambda x: x)(x).reshape(out_shape), x.reshape(out_shape))


# -- custom_jvp / custom_vjp (PythonPmapEagerTest) ---------------------------------------

def test_custom_jvp():
    @nx.custom_jvp
    def foo(x):
        return torch.exp(x)

    @foo.defjvp
    def foo_jvp(xs, ts):
        (x,), (t,) = xs, ts
        return foo(x), t * 4.

    f = lambda x, t: nx.jvp(foo, (x,), (t,))
    x = _x(N, 5) / 10
    p, t = nx.pmap(f)(x, x)
    _close(p, torch.exp(x))
    _close(t, x * 4.)


def test_custom_vjp():
    @nx.custom_vjp
    def foo(x):
        return torch.exp(x)
    foo.defvjp(lambda x: (foo(x), x), lambda _, g: (g * 5.,))
    _close(nx.pmap(nx.grad(foo))(torch.arange(float(N))), torch.full((N,), 5.))


# -- ArrayTest: device_put helpers -------------------------------------------------------

def test_device_put_sharded():
    devices = nx.local_devices()
    x = [np.arange(i, i + 4) for i in range(len(devices))]
    _close(nx.device_put_sharded(x, devices), np.stack(x))


def test_device_put_sharded_pytree():
    devices = nx.local_devices()
    x = [(i, np.arange(i, i + 4)) for i in range(len(devices))]
    y1, y2 = nx.device_put_sharded(x, devices)
    _close(y1, np.array([a for a, _ in x]))
    _close(y2, np.vstack([b for _, b in x]))


def test_device_put_replicated():
    devices = nx.local_devices()
    x = np.arange(1, 5)
    _close(nx.device_put_replicated(x, devices), np.stack([x for _ in devices]))
    ys = nx.device_put_replicated({'a': np.arange(1, 5), 'b': np.arange(3)}, devices)
    _close(ys['a'], np.stack([np.arange(1, 5)] * len(devices)))
    _close(ys['b'], np.stack([np.arange(3)] * len(devices)))
    _close(nx.device_put_replicated(1, devices), torch.ones(len(devices), dtype=torch.int64))


def test_device_put_replicated_tensors():
    devices = nx.local_devices()
    x = torch.arange(1, 5)
    _close(nx.device_put_replicated(x, devices), torch.stack([x for _ in devices]))
