"""JAX's pmap test suite (tests/pmap_test.py at jax-v0.4.30), part 2: autodiff through and
inside nx.pmap, permutations, and composition with vmap, jit, remat and control flow.

Conventions as in tests/test_jax_pmap_suite.py (``N = 4`` instances; references are JAX's
own expressions, or JAX 0.4.30's computed values inlined where its test compares JAX with
itself).  ``jtu.check_grads`` becomes ``torch.autograd.gradcheck`` (float64) plus the
exact gradient where it is known.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

import named_axes as nx
from _pmap_corpus import arange as _x
from _pmap_corpus import close as _close

L = nx.lax
N = 4


def _sin_pmap():
    return nx.pmap(torch.sin, axis_name='i')


# -- grad of pmap (outside: the ordinary gradient of its positional output) ---------------

def test_jvp_and_partial_eval():
    x = _x(N, 4)
    _, jvp = nx.linearize(_sin_pmap(), x)
    _close(jvp(torch.ones_like(x)), torch.cos(x))


def test_grad_basic():
    x = _x(N, 4)
    _close(nx.grad(lambda x: _sin_pmap()(x).sum())(x), torch.cos(x))


def test_grad_of_psum():
    f = nx.pmap(lambda x: L.psum(x, 'i'), axis_name='i')
    x = _x(N, 4, dtype=torch.float64)
    _close(nx.grad(lambda x: (f(x) * torch.arange(1., N + 1)[:, None]).sum())(x),
           torch.full((N, 4), N * (N + 1) / 2))
    assert torch.autograd.gradcheck(f, (x.requires_grad_(),))
    assert torch.autograd.gradgradcheck(f, (x,))


def test_grad_of_jvp():
    x = _x(N, 4)

    def splitjvp(x):
        _, jvp = nx.linearize(_sin_pmap(), x)
        return jvp(torch.ones_like(x))
    _close(nx.grad(lambda x: splitjvp(x).sum())(x), -torch.sin(x))


def test_two_args_grad():
    # (JAX's test compares its reference with itself; this checks pmap against it)
    f = nx.pmap(lambda x, y: L.psum(5. * torch.cos(x) * torch.sin(y), 'i'), 'i')
    x = _x(N, 4)
    y = 4 + x
    dx, dy = nx.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1))(x, y)
    _close(dx, -N * 5. * torch.sin(x) * torch.sin(y))
    _close(dy, N * 5. * torch.cos(x) * torch.cos(y))


@pytest.mark.parametrize("mesh_shape", [(1, 1), (2, 2), (4, 1)])
def test_nested_with_closure(mesh_shape):
    def body(inner_map, outer_map):
        def test_fun(x):
            y = torch.sin(x).sum()
            g = inner_map(lambda z: 3. * torch.exp(torch.sin(x).sum() * torch.cos(y) * torch.tan(z)))
            return nx.grad(lambda w: g(w).sum())(x)
        return outer_map(test_fun)

    x = _x(*mesh_shape, 4, dtype=torch.float64) / 10
    ans = nx.grad(lambda x: body(lambda f: nx.pmap(f, axis_name='j'),
                                 lambda f: nx.pmap(f, axis_name='i'))(x).sum())(x)
    want = torch.func.grad(lambda x: body(torch.func.vmap, torch.func.vmap)(x).sum())(x)
    _close(ans, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("prim", [L.all_gather, L.psum_scatter], ids=["gather", "scatter"])
@pytest.mark.parametrize("tiled", [False, True])
def test_grad_of(prim, tiled):
    f = nx.pmap(lambda x: prim(x, axis_name='i', tiled=tiled), axis_name='i')
    x = _x(N, N, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))


def test_pmap_in_axes_grad():
    def f(x, y, z):
        return torch.sin(x + y + z)
    x, y, z = _x(5, N, 7), _x(5, 7, N), _x(5, 7)
    fp = nx.pmap(f, in_axes=(1, 2, None))
    fv = torch.func.vmap(f, in_dims=(1, 2, None))
    dp = nx.grad(lambda args: fp(*args).sum())((x, y, z))
    dv = torch.func.grad(lambda args: fv(*args).sum())((x, y, z))
    assert [tuple(d.shape) for d in dp] == [(5, N, 7), (5, 7, N), (5, 7)]
    _close(dp, dv)


_BDIMS = [(a, b, c) for a in (None, 0, 1, 2) for b in (None, 0, 1, 2) for c in (None, 0, 1, 2)
          if (a, b, c) != (None, None, None)]


@pytest.mark.parametrize("out_axes", [0, 1, 2])
@pytest.mark.parametrize("in_axes", _BDIMS[::3], ids=str)
def test_pmap_all_axes_grad(in_axes, out_axes):
    """Values and gradients against torch.func.vmap's (JAX's check_grads runs on a few)."""
    torch.manual_seed(sum((a or 0) for a in in_axes))
    shapes = [(3, 4), (3, 1), (1, 4)]
    args = [torch.randn(*(s[:a] + (N,) + s[a:] if a is not None else s), dtype=torch.float64)
            for a, s in zip(in_axes, shapes)]
    body = lambda x, y, z: torch.sin(x + y) * z
    f = nx.pmap(body, in_axes=in_axes, out_axes=out_axes)
    ref = torch.func.vmap(body, in_dims=in_axes, out_dims=out_axes)
    out = f(*args)
    _close(out, ref(*args))
    cot = torch.randn_like(out)
    got = nx.vjp(f, *args)[1](cot)
    _close(got, torch.func.vjp(ref, *args)[1](cot))
    if in_axes in [(0, 0, 1), (2, None, 0), (None, 1, 1)]:
        args = [a.requires_grad_() for a in args]
        assert torch.autograd.gradcheck(f, tuple(args))
        assert torch.autograd.gradgradcheck(f, tuple(args))


def test_pmap_post_process():
    def mk_case(map_fun):
        def f(x, y):
            h = map_fun(lambda y: torch.sin(x + y), in_axes=1, out_axes=2)
            return h(y).sum()
        return f
    x, y = _x(5, 7), _x(5, N, 7)
    pm = lambda g, in_axes, out_axes: nx.pmap(g, in_axes=in_axes, out_axes=out_axes)
    vm = lambda g, in_axes, out_axes: torch.func.vmap(g, in_dims=in_axes, out_dims=out_axes)
    _close(nx.grad(mk_case(pm))(x, y), torch.func.grad(mk_case(vm))(x, y))


def test_axis_env_length():
    f = lambda x: nx.pmap(lambda x: x)(x[None])[0]
    _close(nx.grad(f)(torch.tensor(3.)), torch.tensor(1.))


@pytest.mark.parametrize("axis_size", [1, 2])
def test_grad_of_pmap_compilation_caching(axis_size):
    f = nx.pmap(torch.sin)
    x = torch.ones(axis_size)
    out, f_bwd = nx.vjp(f, x)
    _close(out, torch.sin(x))
    _close(f_bwd(x)[0], torch.cos(x))
    _close(f_bwd(x)[0], torch.cos(x))   # a vjp function is reusable


@pytest.mark.parametrize("remat", [nx.remat, nx.checkpoint])
def test_remat_of_pmap(remat):
    f = remat(nx.pmap(lambda x: torch.sin(torch.sin(x))))
    x = torch.arange(1., dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))
    x = torch.arange(3., dtype=torch.float64)
    _close(nx.grad(lambda x: f(x).sum())(x), torch.cos(torch.sin(x)) * torch.cos(x))


# -- grad inside pmap (JAX's per-instance convention) ------------------------------------

def test_grad_of_pswapaxes():
    # lax.pswapaxes(x, 'i', 1) is all_to_all(x, 'i', 1, 1)
    x = _x(N, 1, N)
    w = _x(N)

    def f(x, w):
        return nx.grad(lambda x: (L.all_to_all(x, 'i', 1, 1) * w).sum())(x)
    _close(nx.pmap(f, axis_name='i')(x, w), w.repeat(N).reshape(N, 1, N))


def test_pswapaxes():
    x = torch.arange(N * 3 * N * 5).reshape(N, 3, N, 5)
    _close(nx.pmap(lambda x: L.all_to_all(x, 'i', 1, 1), axis_name='i')(x), x.transpose(0, 2))


def test_psum_zero_cotangents():
    # JAX 0.4.30: pmap(outer, axis_name='i')(([2.], [3.])) and the gradients of its sum
    def loss(params, meta_params):
        net, mpo = params
        return (meta_params * mpo * net).sum()

    def inner(meta_params, params):
        grads = L.psum(nx.grad(loss)(params, meta_params), axis_name='i')
        net_grads, mpo_grads = grads
        net = params[0] + net_grads
        return (params[1] * net).sum()

    def outer(params):
        return nx.grad(inner)(torch.tensor(4.0), params)

    f = lambda p: nx.pmap(outer, axis_name='i')(p).sum()
    params = (torch.tensor([2.0]), torch.tensor([3.0]))
    _close(nx.pmap(outer, axis_name='i')(params), torch.tensor([9.0]))
    _close(nx.grad(f)(params), (torch.tensor([0.0]), torch.tensor([6.0])))
    params = (torch.tensor([2.0, 5.0]), torch.tensor([3.0, -1.0]))
    _close(nx.pmap(outer, axis_name='i')(params), torch.tensor([6.0, -2.0]))
    _close(nx.grad(f)(params), (torch.tensor([0.0, 0.0]), torch.tensor([4.0, 4.0])))


# -- ppermute / pshuffle -----------------------------------------------------------------

def test_collective_permute():
    rotation = [(i, (i + 1) % N) for i in range(N)]
    x = torch.arange(4 * N).reshape(N, 4)
    got = nx.pmap(lambda x: L.ppermute(x, perm=rotation, axis_name='i'), 'i')(x)
    _close(got, torch.roll(x, 1, 0))


def test_collective_permute_grad():
    shift_right = [(i, i + 1) for i in range(N - 1)]
    f = lambda x: L.ppermute(x, perm=shift_right, axis_name='i')
    y = np.pi + torch.arange(N, dtype=torch.float32)
    g = lambda x: (y * nx.pmap(f, 'i')(x)).sum()
    _close(nx.grad(g)(torch.arange(N, dtype=torch.float32)),
           torch.cat([np.pi + torch.arange(1, N, dtype=torch.float32), torch.zeros(1)]))


def test_collective_permute_cyclic_grad():
    shift_right = [(i, (i + 1) % N) for i in range(N)]
    f = lambda x: L.ppermute(x, perm=shift_right, axis_name='i')
    y = np.pi + torch.arange(N, dtype=torch.float64)
    g = lambda x: (y * nx.pmap(f, 'i')(x)).sum()
    x = torch.arange(N, dtype=torch.float64)
    _close(nx.grad(g)(x), torch.roll(y, -1))
    assert torch.autograd.gradcheck(g, (x.requires_grad_(),))


def test_collective_permute_cyclic_with_pshuffle():
    shift_right = [(i - 1) % N for i in range(N)]
    got = nx.pmap(lambda x: L.pshuffle(x, perm=shift_right, axis_name='i'), 'i')(torch.arange(N))
    _close(got, torch.roll(torch.arange(N), 1))


def test_pshuffle_with_bad_perm():
    bad_perm = list(range(N))
    bad_perm[0] = 1
    f = nx.pmap(lambda x: L.pshuffle(x, perm=bad_perm, axis_name='i'), 'i')
    with pytest.raises(ValueError, match=r"perm=\[1, 1, 2, 3\]\): perm must be a permutation of range\(4\)"):
        f(torch.arange(N))


def test_ppermute_with_zip_object():
    perm = [N - 1] + list(range(N - 1))
    f = nx.pmap(lambda x: L.ppermute(x, "i", zip(perm, range(N))), "i")
    _close(f(torch.arange(N, dtype=torch.float32)), torch.tensor(perm, dtype=torch.float32))


def test_rule30():
    def send_right(x, name):
        return L.ppermute(x, perm=[(i, (i + 1) % N) for i in range(N)], axis_name=name)

    def send_left(x, name):
        return L.ppermute(x, perm=[((i + 1) % N, i) for i in range(N)], axis_name=name)

    def step(board_slice):
        left, right = board_slice[:1], board_slice[-1:]
        right, left = send_left(left, 'i'), send_right(right, 'i')
        b = torch.cat([left, board_slice, right])
        return b[:-2] ^ (b[1:-1] | b[2:])

    step = nx.pmap(step, axis_name='i')
    board = torch.zeros(40, dtype=torch.bool)
    board[20] = True
    board = board.reshape(N, -1)
    boards = []
    for _ in range(10):
        boards.append(''.join('*' if x else ' ' for x in board.ravel().tolist()))
        board = step(board)
    assert '\n'.join(boards) == '\n'.join((
        '                    *                   ',
        '                   ***                  ',
        '                  **  *                 ',
        '                 ** ****                ',
        '                **  *   *               ',
        '               ** **** ***              ',
        '              **  *    *  *             ',
        '             ** ****  ******            ',
        '            **  *   ***     *           ',
        '           ** **** **  *   ***          ',
    ))
