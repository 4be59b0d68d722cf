"""JAX's own xmap test suite, part two (tests/xmap_test.py: PDotTests, the xeinsum tests,
XMapTest.testNestedMap) ported to named_axes: nx.lax.pdot for lax.pdot, nx.einsum for
lax.xeinsum, nx.vmap / nx.xmap around nx.xmap.

The references are JAX's own (dot_general, its vjp, np.einsum), computed here with plain
torch; every case was checked against JAX 0.4.30 run side by side.  The systematic cases
take a fixed sample of JAX's enumeration; mesh schedules become SerialLoop ones.
"""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

import named_axes as nx

L = nx.lax
SL = nx.SerialLoop


def _close(got, want, **kw):
    torch.testing.assert_close(got, want, check_dtype=False, **kw)


def _randn(*shape, seed=0):
    return torch.from_numpy(np.asarray(np.random.RandomState(seed).randn(*shape)))


def _dot_general(x, y, dims):
    """lax.dot_general on plain tensors: contract ``dims[0]``, batch over ``dims[1]``."""
    (xc, yc), (xb, yb) = dims
    letters = iter('abcdefghijklmnop')
    xs = [next(letters) for _ in range(x.dim())]
    ys = [next(letters) for _ in range(y.dim())]
    for i, j in zip(list(xc) + list(xb), list(yc) + list(yb)):
        ys[j] = xs[i]
    out = ([xs[i] for i in xb] + [s for i, s in enumerate(xs) if i not in xc + xb]
           + [s for j, s in enumerate(ys) if j not in yc + yb])
    return torch.einsum(f"{''.join(xs)},{''.join(ys)}->{''.join(out)}", x, y)


# -- the systematic pdot cases (JAX's PdotTestSpec enumeration, re-derived) ------------------

def _matchings(lhs, rhs, start=0, used_l=(), used_r=()):
    """Every set of (lhs dim, rhs dim) pairs of equal sizes, each dim used at most once."""
    yield ()
    for i in range(start, len(lhs)):
        if i in used_l:
            continue
        for j, d in enumerate(rhs):
            if d == lhs[i] and j not in used_r:
                for rest in _matchings(lhs, rhs, i + 1, used_l + (i,), used_r + (j,)):
                    yield ((i, j),) + rest


def _names():
    for n in itertools.count(1):
        for chars in itertools.product('ijkl', repeat=n):
            yield ''.join(chars)


def _spec(groups):
    """One case from the matched pairs split into (named contract, positional contract,
    named batch, positional batch) groups."""
    (mc, pc, mb, pb) = [(tuple(p[0] for p in g), tuple(p[1] for p in g)) for g in groups]
    names = _names()
    cn = [next(names) for _ in mc[0]]
    bn = [next(names) for _ in mb[0]]
    mapped = ({*mc[0], *mb[0]}, {*mc[1], *mb[1]})
    shift = lambda idx, side: [i - sum(j < i for j in mapped[side]) for i in idx]
    return dict(
        dims=(((*mc[0], *pc[0]), (*mc[1], *pc[1])), ((*mb[0], *pb[0]), (*mb[1], *pb[1]))),
        contract=tuple(cn), batch=tuple(bn),
        pos_contract=(shift(pc[0], 0), shift(pc[1], 1)),
        pos_batch=(shift(pb[0], 0), shift(pb[1], 1)),
        lhs_axes=dict(zip([*mc[0], *mb[0]], cn + bn)),
        rhs_axes=dict(zip([*mc[1], *mb[1]], cn + bn)))


def _all_specs():
    out = []
    for ls, rs in itertools.product([(2,), (2, 4, 2, 1)], repeat=2):
        for matching in _matchings(ls, rs):
            for which in itertools.product(range(4), repeat=len(matching)):
                groups = [[m for m, w in zip(matching, which) if w == g] for g in range(4)]
                out.append((ls, rs, _spec(groups)))
    return out


_SPECS = _all_specs()
_SAMPLE = random.Random(0).sample(range(len(_SPECS)), 120)


def _pdot(sp):
    return lambda x, y: L.pdot(x, y, axis_name=sp['contract'], pos_batch=sp['pos_batch'],
                               pos_contract=sp['pos_contract'])


def _loops(sp, ls, rs):
    """SerialLoop(2) for every named axis of even size (a schedule of JAX's test)."""
    sizes = {n: ls[p] for p, n in sp['lhs_axes'].items()}
    sizes.update({n: rs[p] for p, n in sp['rhs_axes'].items()})
    return {n: SL(2) for n, s in sizes.items() if s % 2 == 0}


def test_pdot_enumeration_size():
    assert len(_SPECS) == 1248   # as JAX's all_pdot_specs over the same shapes


@pytest.mark.parametrize("k", _SAMPLE)
def test_pdot_systematic(k):
    ls, rs, sp = _SPECS[k]
    lhs, rhs = _randn(*ls, seed=k), _randn(*rs, seed=k + 10000)
    want = _dot_general(lhs, rhs, sp['dims'])
    for res in (None, _loops(sp, ls, rs)):
        f = nx.xmap(_pdot(sp), in_axes=(sp['lhs_axes'], sp['rhs_axes']),
                    out_axes=[*sp['batch'], ...], axis_resources=res)
        _close(f(lhs, rhs), want)


@pytest.mark.parametrize("k", _SAMPLE[:60])
def test_pdot_vjp_systematic(k):
    ls, rs, sp = _SPECS[k]
    lhs, rhs = _randn(*ls, seed=k), _randn(*rs, seed=k + 10000)
    out, vjp = torch.func.vjp(lambda x, y: _dot_general(x, y, sp['dims']), lhs, rhs)
    out_bar = _randn(*out.shape, seed=k + 20000)

    def pdot_fun(x, y, out_bar):
        return nx.vjp(_pdot(sp), x, y)[1](out_bar)
    f = nx.xmap(pdot_fun, in_axes=(sp['lhs_axes'], sp['rhs_axes'], [*sp['batch'], ...]),
                out_axes=(sp['lhs_axes'], sp['rhs_axes']))
    _close(f(lhs, rhs, out_bar), vjp(out_bar))


@pytest.mark.parametrize("res", [None, {'i': SL(2)}, {'i': SL(8)}])
def test_pdot_basic(res):
    x, y = _randn(3, 8), _randn(8, 5, seed=1)
    f = nx.xmap(lambda x, y: L.pdot(x, y, 'i'), in_axes=({1: 'i'}, {0: 'i'}), out_axes={},
                axis_resources=res)
    _close(f(x, y), x @ y)


@pytest.mark.parametrize("res", [None, {'i': SL(2)}, {'j': SL(2)}])   # (+ ShardUncontractedDim)
def test_pdot_batching(res):
    x, y = _randn(2, 3, 8), _randn(2, 8, 5, seed=1)
    f = nx.xmap(lambda x, y: L.pdot(x, y, 'i'), in_axes=({0: 'j', 2: 'i'}, {0: 'j', 1: 'i'}),
                out_axes=['j', ...], axis_resources=res)
    _close(f(x, y), torch.einsum('nij,njk->nik', x, y))


# -- xeinsum -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["{i,j}->{j,i,j}", "ij->jij"])
def test_xeinsum_error(spec):
    # (JAX 0.4.30 computes zeros here; later JAX raises "Output axes/subscripts should be
    # unique", as named_axes does)
    with pytest.raises(ValueError, match="more than once|repeats a named axis"):
        nx.einsum(spec, torch.zeros(2, 2))


def test_xeinsum_vector_dot():
    x, y = _randn(3), _randn(3, seed=1)
    out = nx.xmap(lambda a, b: nx.einsum('{i},{i}->', a, b), in_axes=(['i'], ['i']),
                  out_axes=[])(x, y)
    _close(out, torch.einsum('i,i->', x, y))


def test_xeinsum_outer_product():
    x, y = _randn(3), _randn(3, seed=1)
    out = nx.xmap(lambda a, b: nx.einsum('{i},{j}->{i,j}', a, b), in_axes=(['i'], ['j']),
                  out_axes=['i', 'j'])(x, y)
    _close(out, torch.einsum('i,j->ij', x, y))


@pytest.mark.parametrize("einsum", [nx.einsum, torch.einsum])
@pytest.mark.parametrize("spec", ['{i,j},{j,k}->{i,k}', '{i,j},{k,j}->{k,i}', '{j},{k,j}->{k}',
                                  '{i,j},{j}->{i}', '{j},{j}->{}'])
def test_xeinsum_matmul(spec, einsum):
    x, y = _randn(3, 4), _randn(4, 5, seed=1)
    out = nx.xmap(lambda a, b: einsum(spec, a, b), in_axes=(['i', 'j'], ['j', 'k']),
                  out_axes=['i', 'k'])(x, y)
    _close(out, x @ y)


@pytest.mark.parametrize("spec, shapes", [('ij,ij->i', [(3, 2), (3, 2)]), ('i,->', [(3,), ()]),
                                          ('bij,bjk->bik', [(3, 5, 4), (3, 4, 2)]),
                                          ('bij,cjk->ik', [(3, 5, 4), (2, 4, 2)])])
def test_xeinsum_no_named_axes(spec, shapes):
    ops = [_randn(*s, seed=n) for n, s in enumerate(shapes)]
    _close(nx.einsum(spec, *ops),
           torch.from_numpy(np.asarray(np.einsum(spec, *[o.numpy() for o in ops]))))


@pytest.mark.parametrize("res", [None, {'i': SL(2), 'k': SL(2)}])
@pytest.mark.parametrize("spec", ['{i,j},{k}->{i,k}', '{i,j},{k}->{k,i}', '{j,i},{k}->{i,k}',
                                  '{j,i},{k}->{k,i}'])
def test_xeinsum_named_axes_reduce_with_mesh(spec, res):
    x, y = _randn(6, 4), _randn(8, seed=1)
    out = nx.xmap(lambda a, b: nx.einsum(spec, a, b), in_axes=(['i', 'j'], ['k']),
                  out_axes=['i', 'k'], axis_resources=res)(x, y)
    _close(out, torch.einsum('ij,k->ik', x, y))


@pytest.mark.parametrize("res", [None, {'b': SL(2), 'j': SL(2)}])
@pytest.mark.parametrize("spec", ['{b,i,j},{b,j,k}->{b,i,k}', '{j,i,b},{j,b,k}->{i,b,k}'])
def test_xeinsum_named_axes_batch_matmul_with_mesh(spec, res):
    x, y = _randn(8, 3, 4), _randn(8, 4, 5, seed=1)
    out = nx.xmap(lambda a, b: nx.einsum(spec, a, b), in_axes=(['b', 'i', 'j'], ['b', 'j', 'k']),
                  out_axes=['b', 'i', 'k'], axis_resources=res)(x, y)
    _close(out, torch.einsum('bij,bjk->bik', x, y))


@pytest.mark.parametrize("res", [None, {'b': SL(2), 'i': SL(2)}])
@pytest.mark.parametrize("spec", ['{b,i,j}->{b}', '{b,j,i}->{b}', '{i,j,b}->{b}'])
def test_xeinsum_named_axes_unary_reduce_with_mesh(spec, res):
    x = _randn(8, 6, 4)
    out = nx.xmap(lambda a: nx.einsum(spec, a), in_axes=['b', 'i', 'j'], out_axes=['b'],
                  axis_resources=res)(x)
    _close(out, x.sum((1, 2)))


@pytest.mark.parametrize("res", [None, {'b': SL(2), 'i': SL(2)}])
def test_xeinsum_mixed_axes_unary_reduce_with_mesh(res):
    x = _randn(8, 6, 4, 5)
    out = nx.xmap(lambda a: nx.einsum('jk{i,b}->k{b}', a), in_axes=['b', 'i', ...],
                  out_axes=['b', ...], axis_resources=res)(x)
    _close(out, torch.einsum('bijk->bk', x))


# -- XMapTest.testNestedMap: vmap(xmap) and xmap(xmap) -------------------------------------

def _nested_cases():
    xin = ([{}] + [{i: 'x'} for i in range(3)]
           + [{i: 'x', j: 'y'} for i in range(4) for j in range(4) if i != j])
    for dx, dy in itertools.product(xin, repeat=2):
        names = sorted(set(dx.values()) | set(dy.values()))
        for dims in itertools.permutations(range(2 + len(names)), len(names)):
            for vx in [*range(2 + len(dx)), None]:
                for vy in [*range(2 + len(dy)), None]:
                    if vx is None and vy is None:
                        continue
                    for vz in range(2 + len(names)):
                        for as_xmap in (False, True):
                            yield dx, dy, dict(zip(dims, names)), vx, vy, vz, as_xmap


_NESTED = random.Random(0).sample(list(_nested_cases()), 150)


@pytest.mark.parametrize("case", _NESTED)
def test_nested_map(case):
    dx, dy, dz, vx, vy, vz, as_xmap = case
    sizes = {'x': 3, 'y': 4}
    shapes = ([2, 5], [5, 3])                        # n k, k m
    letters = (['n', 'k'], ['k', 'm'], ['n', 'm'])
    for shape, idx, d in zip(shapes + ([],), letters, (dx, dy, dz)):
        for pos, name in sorted(d.items()):
            shape.insert(pos, sizes[name])
            idx.insert(pos, name.upper())
    for shape, idx, v in zip(shapes, letters, (vx, vy)):
        if v is not None:
            shape.insert(v, 7)
            idx.insert(v, 'V')
    letters[2].insert(vz, 'V')
    inner = nx.xmap(lambda a, b: torch.einsum('nk,km->nm', a, b), in_axes=(dx, dy), out_axes=dz)
    if as_xmap:
        f = nx.xmap(inner, in_axes=tuple({} if v is None else {v: 'v'} for v in (vx, vy)),
                    out_axes={vz: 'v'})
    else:
        f = nx.vmap(inner, in_dims=(vx, vy), out_dims=vz, axis_name='v')
    x, y = _randn(*shapes[0]), _randn(*shapes[1], seed=1)
    spec = '{},{}->{}'.format(*(''.join(i) for i in letters))
    _close(f(x, y), torch.einsum(spec, x, y))
