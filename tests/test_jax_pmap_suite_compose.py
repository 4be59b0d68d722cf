"""JAX's pmap test suite (tests/pmap_test.py at jax-v0.4.30), part 3: vmap of pmap
(VmapOfPmapTest, VmapPmapCollectivesTest), PmapWithDevicesTest, jit/cond/scan around and
inside pmap, static arguments, custom_jvp/custom_vjp under pmap (PythonPmapEagerTest) and
the device_put helpers (ArrayTest).

Conventions as in tests/test_jax_pmap_suite.py (``N = 4`` instances).
"""
from __future__ import annotations

import itertools as it
import random

import pytest
import torch

import named_axes as nx
from _pmap_corpus import arange as _x
from _pmap_corpus import close as _close

L = nx.lax
N = 4


# -- VmapOfPmapTest ----------------------------------------------------------------------

_COMPATIBLE = [[(3,)], [(3, 4), (3, 1), (1, 4)], [(2, 3, 4), (2, 1, 4)]]


def _all_bdims(*shapes):
    dims = (it.chain([None], range(len(s) + 1)) for s in shapes)
    return [t for t in it.product(*dims) if not all(e is None for e in t)]


def _add_bdim(size, bdim, shape):
    shape = list(shape)
    if bdim is not None:
        shape.insert(bdim, size)
    return tuple(shape)


def _vmap_of_pmap_cases(count=24, seed=0):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        arg_shapes = rng.choice(_COMPATIBLE)
        shapes = rng.choice(list(it.combinations_with_replacement(arg_shapes, rng.randint(1, 3))))
        out = [d[0] for d in _all_bdims(shapes[0]) if d[0] is not None]
        cases.append((shapes, rng.choice(_all_bdims(*shapes)), rng.choice(_all_bdims(*shapes)),
                      rng.choice(out), rng.choice(out)))
    return cases


@pytest.mark.parametrize("shapes, vmap_in, pmap_in, vmap_out, pmap_out", _vmap_of_pmap_cases())
def test_vmap_of_pmap_axes(shapes, vmap_in, pmap_in, vmap_out, pmap_out):
    V = 3
    torch.manual_seed(len(shapes))
    final = [_add_bdim(V, v, _add_bdim(N, p, s)) for v, p, s in zip(vmap_in, pmap_in, shapes)]
    args = [torch.randn(s) for s in final]
    fun = lambda *a: sum(a)
    ans = nx.vmap(nx.pmap(fun, in_axes=pmap_in, out_axes=pmap_out), in_dims=vmap_in,
                  out_dims=vmap_out)(*args)

    def take(a, d, i):
        return a if d is None else a.select(d, i)
    want = torch.stack([torch.stack([fun(*[take(take(a, v, vi), p, pi)
                                           for a, v, p in zip(args, vmap_in, pmap_in)])
                                     for pi in range(N)], pmap_out) for vi in range(V)], vmap_out)
    _close(ans, want)


def test_vmap_of_pmap():
    ax = torch.randn(2, N, 5, 6)
    _close(nx.vmap(nx.pmap(lambda x: x, axis_name='i'))(ax), ax)


def test_vmap_of_pmap_non_leading_axis():
    ax = torch.randn(N, 2, 5, 6)
    _close(nx.vmap(nx.pmap(lambda x: x, axis_name='i'), in_dims=2, out_dims=2)(ax), ax)


def test_vmap_of_pmap3():
    def func(q, pts):
        return q, nx.pmap(lambda x, y: y, in_axes=(0, None))(pts, q)
    pts = torch.ones(N)
    qs = torch.tensor([[0, 0], [3, 3], [2, 2]])
    _, ans = nx.vmap(func, in_dims=(0, None))(qs, pts)
    _close(ans, torch.stack([func(q, pts)[1] for q in qs]))
    _close(ans, qs[:, None, :].expand(3, N, 2))


def test_vmap_of_pmap_tuple():
    f1 = nx.pmap(lambda *x: x, axis_name='i')
    ax, ay = torch.randn(N, 2, 5, 6), torch.randn(N, 3, 2)
    az1, az2 = torch.randn(N, 2), torch.randn(2, N, 2)
    bx, by, bz = nx.vmap(f1, in_dims=(1, 2, (None, 0)), out_dims=(1, 2, 0))(ax, ay, (az1, az2))
    _close(bx, ax)
    _close(by, ay)
    _close(bz[0], az1.expand(2, N, 2))
    _close(bz[1], az2)


def test_axis_name_shadowing_with_vmap():
    """JAX 0.4.30 lets an inner map rebind (shadow) an enclosing name; named_axes refuses
    rebinding a bound name (docs/errors.md, "Rebinding an enclosing name") with a clear
    error, whatever the sizes."""
    for inner in (nx.pmap, nx.vmap):
        for size in (2, 1):
            f = nx.vmap(inner(lambda x: 2 * x, axis_name='i'), axis_name='i')
            with pytest.raises(nx.AxisSpecError, match="axis 'i' is already bound by an enclosing"):
                f(torch.ones(size, 1))
    # distinct names: JAX's values
    x = _x(2, 3)
    _close(nx.vmap(nx.pmap(lambda x: 2 * x, axis_name='i'), axis_name='j')(x), 2 * x)
    inner = nx.pmap(lambda x: L.psum(x, 'i') + L.psum(1, 'j'), axis_name='i')
    _close(nx.vmap(inner, axis_name='j')(x), x.sum(1, keepdim=True).expand(2, 3) + 2)


# -- VmapPmapCollectivesTest -------------------------------------------------------------

def _two_maps(map1, map2, collective):
    def f(x, y):
        return x + collective(x @ y, ('i', 'j'))
    return map1(map2(f, 'j'), 'i')


_MAPS = {'pmap': lambda f, n: nx.pmap(f, axis_name=n),
         'vmap': lambda f, n: nx.vmap(f, axis_name=n)}


@pytest.mark.parametrize("collective", [L.psum, L.pmean, L.pmax, L.pmin],
                         ids=["psum", "pmean", "pmax", "pmin"])
@pytest.mark.parametrize("outer", [2, 4])   # testCollectivesWithVmap, ...WithVmap2
def test_collectives_with_vmap(collective, outer):
    x = _x(outer, 2, 8, 8, dtype=torch.float64) / 100
    want = _two_maps(_MAPS['vmap'], _MAPS['vmap'], collective)(x, x)
    flat = x.reshape(outer * 2, 8, 8)
    red = {L.psum: torch.sum, L.pmean: torch.mean}.get(collective)
    prod = flat @ flat
    ref = red(prod, 0) if red else (prod.amax(0) if collective is L.pmax else prod.amin(0))
    _close(want, x + ref)
    for m1, m2 in [('pmap', 'pmap'), ('pmap', 'vmap'), ('vmap', 'pmap')]:
        _close(_two_maps(_MAPS[m1], _MAPS[m2], collective)(x, x), want)


def test_ppermute_with_vmap():
    perm = [(0, 1), (1, 0)]

    def f(map2):
        return nx.pmap(map2(lambda x, y: x + L.ppermute(x @ y, 'i', perm)), axis_name='i')
    x = _x(2, 2, 8, 8) / 100
    want = x + torch.flip(x @ x, (0,))
    _close(f(nx.pmap)(x, x), want)
    _close(f(nx.vmap)(x, x), want)


def test_ppermute_agrees_with_vmap():
    f = lambda x: L.ppermute(x, 'i', [[1, 0], [2, 1], [0, 2]])
    xs = torch.arange(3) * 10
    ys = nx.pmap(f, axis_name='i')(xs)
    _close(ys, nx.vmap(f, axis_name='i')(xs))
    _close(ys, torch.tensor([10, 20, 0]))


def _adj(axis, hidden):
    for h in sorted(hidden):
        if h <= axis:
            axis += 1
    return axis


def _all_to_all_in_vmap_ref(x, split_axis, concat_axis, vmap_axis):
    pmap_axis = 0
    vmap_axis = _adj(vmap_axis, [pmap_axis])
    split_axis = _adj(split_axis, [pmap_axis, vmap_axis])
    x = torch.movedim(x, split_axis, pmap_axis + 1)
    vmap_axis = vmap_axis + (0 if split_axis < vmap_axis else 1)
    split_axis = pmap_axis + 1
    concat_axis = _adj(concat_axis, [pmap_axis, split_axis, vmap_axis]) - 1
    x = torch.movedim(x, pmap_axis, concat_axis)
    vmap_axis = vmap_axis - (1 if concat_axis >= vmap_axis else 0)
    return torch.movedim(x, vmap_axis, 1)


@pytest.mark.parametrize("split_axis, concat_axis, vmap_axis",
                         list(it.product(range(3), range(3), range(4))))
def test_all_to_all_in_vmap(split_axis, concat_axis, vmap_axis):
    shape = [2, 3, 4, 5, 6]   # JAX's verify_ref: the reference's shape function
    pmap_dim, vmap_dim = shape.pop(0), shape.pop(vmap_axis)
    split_dim = shape.pop(split_axis)
    shape.insert(concat_axis, pmap_dim)
    assert _all_to_all_in_vmap_ref(torch.ones(2, 3, 4, 5, 6), split_axis, concat_axis,
                                   vmap_axis).shape == (split_dim, vmap_dim, *shape)
    f = lambda x: L.all_to_all(x, 'i', split_axis=split_axis, concat_axis=concat_axis)
    x = torch.arange(N ** 5).reshape((N,) * 5)
    _close(nx.pmap(nx.vmap(f, in_dims=vmap_axis), axis_name='i')(x),
           _all_to_all_in_vmap_ref(x, split_axis, concat_axis, vmap_axis))


@pytest.mark.parametrize("split_axis, concat_axis", list(it.product(range(3), range(3))))
def test_all_to_all_vs_vmap(split_axis, concat_axis):
    f = lambda x: L.all_to_all(x, 'i', split_axis=split_axis, concat_axis=concat_axis)
    x = torch.arange(N ** 4).reshape((N,) * 4)
    ans = nx.pmap(f, axis_name='i')(x)
    _close(ans, nx.vmap(f, axis_name='i')(x))
    _close(ans, torch.movedim(x, (0, split_axis + 1), (concat_axis + 1, 0)))


@pytest.mark.parametrize("prim", [L.all_gather, L.psum_scatter], ids=["gather", "scatter"])
def test_with_vmap(prim):
    def f(map2):
        return nx.pmap(map2(lambda x: prim(x, axis_name='i')), axis_name='i')
    x = torch.randn(2, 2, 2, 8)
    _close(f(nx.pmap)(x), f(nx.vmap)(x))


@pytest.mark.parametrize("prim", [L.all_gather, L.psum_scatter], ids=["gather", "scatter"])
@pytest.mark.parametrize("tiled", [False, True])
def test_vs_vmap(prim, tiled):
    x = torch.arange(4 * 4 * 8).reshape(4, 4, 8)
    f = lambda x: prim(x, axis_name='i', tiled=tiled)
    ans = nx.pmap(f, axis_name='i')(x)
    _close(ans, nx.vmap(f, axis_name='i')(x))
    if prim is L.all_gather:
        _close(ans, (x.reshape(16, 8) if tiled else x).expand(4, *([-1] * (2 if tiled else 3))))
    else:
        _close(ans, x.sum(0).reshape(4, 1, 8) if tiled else x.sum(0))
