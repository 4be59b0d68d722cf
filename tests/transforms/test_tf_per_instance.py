"""Per-instance cotangents inside xmap (SPEC §4), pinned to JAX 0.4.30's xmap.

Every expected value below was measured with jax==0.4.30 (``.venv-jax``); the JAX
program is in the comment above it.  ``reduce_axes`` is written in JAX 0.4.30 as a
``psum`` of the gradient (its ``grad`` no longer takes ``reduce_axes``).
"""
from functools import partial

import pytest
import torch

import named_axes as nx
from named_axes import lax

XB = torch.arange(6.).reshape(2, 3)
W = torch.tensor([1., 2., 3.])


def _in_b(body, out_axes):
    return nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=out_axes)(XB, W)


def test_psum_transposes_to_psum():
    # xmap(lambda x: grad(lambda y: psum(y, 'i').sum())(x), ['i', ...], ['i', ...])(arange(3.))
    f = nx.xmap(lambda x: nx.grad(lambda y: lax.psum(y, 'i').sum())(x),
                in_axes=['i', ...], out_axes=['i', ...])
    torch.testing.assert_close(f(torch.arange(3.)), torch.tensor([3., 3., 3.]))


def test_closure_gives_per_example_gradient():
    # grad(lambda w: pmean((xb * w).sum(), 'b'))(w), xb closed over -> xb per instance
    out = _in_b(lambda xb, w: nx.grad(lambda w: lax.pmean((xb * w).sum(), 'b'))(w),
                ['b', ...])
    torch.testing.assert_close(out, XB)


def test_closure_without_collective():
    # grad(lambda w: (xb * w).sum())(w), xb closed over -> xb per instance
    out = _in_b(lambda xb, w: nx.grad(lambda w: (xb * w).sum())(w), ['b', ...])
    torch.testing.assert_close(out, XB)


def test_unrelated_axis_is_not_added():
    # grad(lambda w: (w**2).sum())(w) inside xmap over 'b': 2w, no 'b' (out_axes [...])
    out = _in_b(lambda xb, w: nx.grad(lambda w: (w ** 2).sum())(w), [...])
    torch.testing.assert_close(out, 2 * W)


def test_psum_of_replicated_value():
    # grad(lambda w: psum(w, 'b').sum())(w) -> [2, 2, 2]
    out = _in_b(lambda xb, w: nx.grad(lambda w: lax.psum(w, 'b').sum())(w), [...])
    torch.testing.assert_close(out, torch.full((3,), 2.))


def test_reduce_axes_is_psum_of_per_instance_gradients():
    # psum(grad(lambda w: pmean((xb * w).sum(), 'b'))(w), 'b') -> [3, 5, 7]
    out = _in_b(lambda xb, w: nx.grad(lambda w: lax.pmean((xb * w).sum(), 'b'),
                                      reduce_axes=('b',))(w), [...])
    torch.testing.assert_close(out, torch.tensor([3., 5., 7.]))


def test_value_and_grad_value_keeps_jax_named_shape():
    def body(xb, w):
        value, g = nx.value_and_grad(lambda w: lax.pmean((xb * w).sum(), 'b'))(w)
        assert value.named_shape == {} if isinstance(value, nx.NamedTensor) else True
        return value, g
    value, g = nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=([...], ['b', ...]))(XB, W)
    torch.testing.assert_close(value, (XB * W).sum(1).mean())
    torch.testing.assert_close(g, XB)


@pytest.mark.parametrize("form", ["closure", "pmean", "psum_reduce", "replicated"])
def test_vjp(form):
    # vjp(lambda w: pmean(xb * w, 'b'), w)[1](ones(3))      -> xb per instance
    # psum(vjp(lambda w: psum(xb * w, 'b'), w)[1](ones(3)), 'b') -> [6, 10, 14]
    # vjp(lambda w: psum(w * w, 'b'), w)[1](ones(3))        -> [4, 8, 12]
    # vjp(lambda w: xb * w, w)[1](ones(3))                   -> xb per instance
    funs = {
        "closure": (lambda xb: lambda w: xb * w, (), ['b', ...], XB),
        "pmean": (lambda xb: lambda w: lax.pmean(xb * w, 'b'), (), ['b', ...], XB),
        "psum_reduce": (lambda xb: lambda w: lax.psum(xb * w, 'b'), ('b',), [...],
                        torch.tensor([6., 10., 14.])),
        "replicated": (lambda xb: lambda w: lax.psum(w * w, 'b'), (), [...],
                       torch.tensor([4., 8., 12.])),
    }
    make, reduce_axes, out_axes, expected = funs[form]

    def body(xb, w):
        _, f_vjp = nx.vjp(make(xb), w, reduce_axes=reduce_axes)
        return f_vjp(torch.ones(3))[0]
    torch.testing.assert_close(_in_b(body, out_axes), expected)


def test_linear_transpose_with_reduce_axes():
    # psum(linear_transpose(lambda w: xb * w, w)(ones(3))[0], 'b') -> [3, 5, 7]
    def body(xb, w):
        return nx.linear_transpose(lambda w: xb * w, w, reduce_axes=('b',))(torch.ones(3))[0]
    torch.testing.assert_close(_in_b(body, [...]), torch.tensor([3., 5., 7.]))


def test_linearize_then_map_over_tangents():
    out, f_jvp = nx.linearize(lambda w: torch.sin(w) * 2, W)
    expected = torch.stack([f_jvp(t) for t in XB])
    for res in ({}, {'i': nx.SerialLoop(2)}):
        mapped = nx.xmap(f_jvp, in_axes=['i', ...], out_axes=['i', ...], axis_resources=res)
        torch.testing.assert_close(mapped(XB), expected)


# -- custom_vjp -------------------------------------------------------------------

@nx.custom_vjp
def f_psum(x):
    return x


f_psum.defvjp(lambda x: (f_psum(x), None), lambda _, g: (lax.psum(g, 'shard'),))


@nx.custom_vjp
def g_psum(x):
    return lax.psum(x, 'shard')


g_psum.defvjp(lambda x: (g_psum(x), None), lambda _, g: (g,))


def test_f_psum_inside_grad():
    # grad(lambda w: (f_psum(w) * xs).sum())(w) over 'shard' -> [3, 5, 7] per shard
    out = nx.xmap(lambda xs, w: nx.grad(lambda w: (f_psum(w) * xs).sum())(w),
                  in_axes=(['shard', ...], [...]), out_axes=['shard', ...])(XB, W)
    torch.testing.assert_close(out, torch.tensor([[3., 5., 7.], [3., 5., 7.]]))


def test_f_psum_where_nothing_carries_the_axis():
    # grad(lambda w: (f_psum(w) ** 2).sum())(w) over 'shard' -> psum(2w) = [4, 8, 12]
    out = nx.xmap(lambda xs, w: nx.grad(lambda w: (f_psum(w) ** 2).sum())(w),
                  in_axes=(['shard', ...], [...]), out_axes=[...])(XB, W)
    torch.testing.assert_close(out, torch.tensor([4., 8., 12.]))


def test_f_psum_backward_outside_xmap():
    # grad(lambda w: xmap((f_psum(w) * xs).sum(), ...)(xs, w).sum())(w) -> [3, 5, 7]
    w = W.clone().requires_grad_()
    out = nx.xmap(lambda xs, w: (f_psum(w) * xs).sum(), in_axes=(['shard', ...], [...]),
                  out_axes=['shard', ...])(XB, w)
    out.sum().backward()
    torch.testing.assert_close(w.grad, torch.tensor([3., 5., 7.]))


def _gptj_like_step(params, x):
    def loss(params, x):
        w1, w2, e = params
        h = x * e
        for _ in range(2):
            a = torch.tanh(f_psum(h) @ w1) @ w2
            h = h + g_psum(a)
        return torch.mean(h ** 2)
    value, grads = nx.value_and_grad(loss)(params, x)
    return lax.pmean(value, 'batch'), tuple(lax.pmean(g, 'batch') for g in grads)


def _gptj_like_inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 4, generator=g)
    w1 = torch.randn(2, 4, 3, generator=g) * 0.5
    w2 = torch.randn(2, 3, 4, generator=g) * 0.5
    e = torch.randn(4, generator=g)
    return (w1, w2, e), x


def _gptj_like_reference(params, x):
    """The same model in plain torch: shards concatenated, batch looped, true grads."""
    w1, w2, e = [p.clone().requires_grad_() for p in params]
    losses = []
    for xb in x:
        h = xb * e
        for _ in range(2):
            h = h + sum(torch.tanh(h @ w1[s]) @ w2[s] for s in range(w1.shape[0]))
        losses.append(torch.mean(h ** 2))
    total = torch.stack(losses).mean()
    total.backward()
    return total.detach(), [w1.grad, w2.grad, e.grad]


@pytest.mark.parametrize("resources", [{}, {'batch': nx.SerialLoop(2)}], ids=["vector", "loop-batch"])
def test_gptj_like_f_psum_g_psum(resources):
    """GPT-J's f_psum/g_psum pair, ported verbatim: JAX's gradients (checked there to
    4.8e-7 against the same plain reference) and the plain model's."""
    params, x = _gptj_like_inputs()
    step = nx.xmap(_gptj_like_step,
                   in_axes=((['shard', ...], ['shard', ...], [...]), ['batch', ...]),
                   out_axes=([...], (['shard', ...], ['shard', ...], [...])),
                   axis_resources=resources)
    value, grads = step(params, x)
    ref_value, ref_grads = _gptj_like_reference(params, x)
    torch.testing.assert_close(value, ref_value)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_gptj_like_loop_on_shard_is_exact_or_refused():
    params, x = _gptj_like_inputs()
    step = nx.xmap(_gptj_like_step,
                   in_axes=((['shard', ...], ['shard', ...], [...]), ['batch', ...]),
                   out_axes=([...], (['shard', ...], ['shard', ...], [...])),
                   axis_resources={'shard': nx.SerialLoop(2)})
    ref_value, ref_grads = _gptj_like_reference(params, x)
    try:
        value, grads = step(params, x)
    except nx.NamedAxisError:
        return   # psum over the loop axis inside the derivative: SerialLoopError
    torch.testing.assert_close(value, ref_value)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_custom_vjp_fwd_may_call_the_function():
    # JAX's own example: f_fwd(x, y) returns f(x, y) -> grad(f)(3., 4.) == -3.95997
    @nx.custom_vjp
    def f(x, y):
        return torch.sin(x) * y

    def f_fwd(x, y):
        return f(x, y), (torch.cos(x), torch.sin(x), y)

    def f_bwd(res, g):
        cos_x, sin_x, y = res
        return (cos_x * g * y, sin_x * g)
    f.defvjp(f_fwd, f_bwd)
    torch.testing.assert_close(nx.grad(f)(torch.tensor(3.), torch.tensor(4.)),
                               torch.tensor(-3.95997), rtol=1e-5, atol=1e-5)
    # per example inside xmap: [[0, .5403, 1.0806], [1.6209, 2.1612, 2.7015]]
    out = nx.xmap(lambda xb, w: nx.grad(lambda w: f(w, xb).sum())(w),
                  in_axes=(['b', ...], [...]), out_axes=['b', ...])(XB, torch.ones(3))
    torch.testing.assert_close(out, XB * torch.cos(torch.tensor(1.)))


def test_custom_vjp_nondiff_argnums():
    @partial(nx.custom_vjp, nondiff_argnums=(0,))
    def app(f, x):
        return f(x)
    app.defvjp(lambda f, x: (app(f, x), x), lambda f, x, g: (5 * g,))
    torch.testing.assert_close(nx.grad(lambda x: app(torch.sin, x))(torch.tensor(3.)),
                               torch.tensor(5.))


def test_grad_with_and_without_reduce_axes_under_a_mesh():
    import numpy as np
    mesh = nx.Mesh(np.array(nx.devices()[:1]), ('x',))

    def body(w, x):
        loss = lambda w: (x * w).sum()  # noqa: E731
        return nx.grad(loss)(w), nx.grad(loss, reduce_axes=('batch',))(w)
    with mesh:
        per_example, reduced = nx.xmap(body, in_axes=([...], ['batch', ...]),
                                       out_axes=(['batch', ...], [...]),
                                       axis_resources={'batch': 'x'})(torch.ones(3), XB)
    torch.testing.assert_close(per_example, XB)
    torch.testing.assert_close(reduced, XB.sum(0))


def test_eval_shape_on_duck_typed_arrays():
    # jax.eval_shape's own example: objects with only .shape and .dtype
    class MyArgArray:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype
    f = lambda A, x: torch.tanh(torch.matmul(A, x))  # noqa: E731
    out = nx.eval_shape(f, MyArgArray((2000, 3000), torch.float32),
                        MyArgArray((3000, 1000), 'float32'))
    assert out.shape == (2000, 1000) and out.dtype == torch.float32


def test_gptj_like_under_jit_has_the_eager_named_shapes():
    """Under tracing the values cannot be read: the axes folded by the eager call of the
    same function are folded again, so the compiled step returns what eager returns."""
    params, x = _gptj_like_inputs()
    step = nx.xmap(_gptj_like_step,
                   in_axes=((['shard', ...], ['shard', ...], [...]), ['batch', ...]),
                   out_axes=([...], (['shard', ...], ['shard', ...], [...])))
    eager_value, eager_grads = step(params, x)
    value, grads = nx.jit(step)(params, x)
    torch.testing.assert_close(value, eager_value)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_pdot_transposes_without_a_psum():
    # JAX 0.4.30: xmap(lambda v, w: grad(lambda q: pdot(q, w, 'b').sum())(v),
    #   in_axes=[['b', ...]] * 2, out_axes=['b', ...]) is w.sum(-1) per instance
    #   (x, y = RandomState(0).randn(4, 3), RandomState(1).randn(4, 3): [:, 0] is
    #   [0.4844, -2.5091, 1.3026, -0.8474]); the psum form gives 4x that.
    import numpy as np
    x = torch.tensor(np.random.RandomState(0).randn(4, 3), dtype=torch.float32)
    y = torch.tensor(np.random.RandomState(1).randn(4, 3), dtype=torch.float32)
    f = nx.xmap(lambda v, w: nx.grad(lambda q: lax.pdot(q, w, 'b').sum())(v),
                in_axes=[['b', ...]] * 2, out_axes=['b', ...])
    torch.testing.assert_close(f(x, y)[:, 0], torch.tensor([0.4844, -2.5091, 1.3026, -0.8474]),
                               rtol=1e-4, atol=1e-4)
    g = nx.xmap(lambda v, w: nx.grad(lambda q: lax.psum((q * w).sum(), 'b'))(v),
                in_axes=[['b', ...]] * 2, out_axes=['b', ...])
    torch.testing.assert_close(g(x, y), 4 * y)


@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_reduce_axes_over_a_serial_loop_axis(chunks):
    # JAX: psum(grad(lambda w: (x * w).sum())(w), 'c') over arange(4.) -> [6.]
    x, w = torch.arange(4.).reshape(4, 1), torch.ones(1)
    res = {'c': nx.SerialLoop(chunks)} if chunks > 1 else {}
    f = nx.xmap(lambda x, w: nx.grad(lambda w: (x * w).sum(), reduce_axes=('c',))(w),
                in_axes=(['c', ...], [...]), out_axes=[...], axis_resources=res)
    torch.testing.assert_close(f(x, w), torch.tensor([6.]))


def test_vjp_primal_output_keeps_jax_named_shape():
    # JAX: vjp(loss, w)[0] with an unused `w + xb` inside is 5.0, no 'b'
    def body(xb, w):
        def loss(w):
            _ = w + xb
            return (w * w).sum()
        return nx.vjp(loss, w)[0]
    out = nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=[...])(XB, torch.tensor([1., 2., 0.]))
    torch.testing.assert_close(out, torch.tensor(5.))


def test_jit_traces_the_gptj_step_once_with_jax_named_shapes():
    """nx.jit traces the step with no eager call first: the gradients' named shapes
    (e's lacks 'shard') come from the program, not from values."""
    params, x = _gptj_like_inputs()
    step = nx.jit(nx.xmap(_gptj_like_step,
                          in_axes=((['shard', ...], ['shard', ...], [...]), ['batch', ...]),
                          out_axes=([...], (['shard', ...], ['shard', ...], [...]))))
    value, grads = step(params, x)
    ref_value, ref_grads = _gptj_like_reference(params, x)
    torch.testing.assert_close(value, ref_value)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    step(params, x)
    assert step.stats()['programs'] == 1


@pytest.mark.parametrize("loop", [1, 3], ids=["chunk1", "whole"])
def test_serial_loop_grad_has_the_vectorized_named_shape(loop):
    """A gradient that does not vary along a loop axis (a closed-over value carries it,
    the loss ignores it) folds it as the vectorized run does: the decision spans every
    chunk, so resources change neither values nor named shapes."""
    shapes = []

    def f(w, y, z):
        g = nx.grad(lambda w: (w * y).sum() + 0 * (z * z).sum())(w)
        shapes.append(dict(g.named_shape))
        return g

    kw = dict(in_axes=(['b', ...], ['b', 'a', ...], ['c', ...]), out_axes=['a', 'b', ...])
    args = (torch.randn(2), torch.randn(2, 4), torch.randn(3))
    want = nx.xmap(f, **kw)(*args)
    got = nx.xmap(f, axis_resources={'c': nx.SerialLoop(loop)}, **kw)(*args)
    torch.testing.assert_close(got, want)
    assert all(s == {'a': 4, 'b': 2} for s in shapes), shapes


@pytest.mark.parametrize("loop", [2, 4])
def test_serial_loop_on_another_axis_keeps_the_vectorized_named_shape(loop):
    """A per-instance gradient that varies along ``a`` in some chunks of the loop axis
    ``b`` and not in others keeps ``a`` in every chunk, as the vectorized run does (each
    chunk deciding alone dropped it where its own slice was constant along ``a``: found
    by the mesh oracle, seed 23, p23_00681)."""
    shapes = []

    def f(x, y):
        v, g = nx.value_and_grad(lambda x: torch.maximum(x, y))(x)
        shapes.append(dict(g.named_shape))
        return v, g

    kw = dict(in_axes=(['d', 'b', ...], ['b', 'd', 'a', ...]),
              out_axes=(['b', 'a', 'd', ...], ['b', 'a', 'd', ...]))
    x = torch.zeros(3, 4)
    y = torch.empty(4, 3, 2)
    y[..., 0], y[..., 1] = -1.0, 1.0   # the gradient is 1 for a=0, 0 for a=1 ...
    y[3] = -1.0                        # ... except at b=3, where it is 1 for both
    want = nx.xmap(f, **kw)(x, y)
    n = len(shapes)
    got = nx.xmap(f, axis_resources={'b': nx.SerialLoop(loop)}, **kw)(x, y)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert all(s == {'a': 2, 'd': 3, 'b': 4} for s in shapes), shapes[n:]


def test_serial_loop_reduce_axes_gradient_keeps_its_type():
    """A gradient summed over a SerialLoop axis (``reduce_axes``) that leaves no named axis
    is the same kind of value as without the loop (found by the mesh oracle, seed 4711,
    p4711_00046: a plain tensor under the loop, a NamedTensor without it)."""
    kinds = []

    def f(s, x):
        v, g = nx.value_and_grad(lambda s: (x * x).sum(-1) * s, reduce_axes=('a',))(s)
        kinds.append((type(g), dict(g.named_shape) if isinstance(g, nx.NamedTensor) else None))
        return v, g

    kw = dict(in_axes=([], ['a', ...]), out_axes=(['a', ...], [...]))
    args = (torch.tensor(1.5), torch.randn(2, 3))
    want = nx.xmap(f, **kw)(*args)
    n = len(kinds)
    got = nx.xmap(f, axis_resources={'a': nx.SerialLoop(2)}, **kw)(*args)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert all(k == kinds[0] for k in kinds[n:]), (kinds[0], kinds[n:])


@pytest.mark.parametrize("how", ["vjp", "linear_transpose"])
@pytest.mark.parametrize("loop", [2, 4])
def test_serial_loop_vjp_reduce_axes_sums_every_chunk(how, loop):
    """``vjp``'s pullback (and ``linear_transpose``, built on it) with ``reduce_axes`` over a
    SerialLoop axis sums the cotangents of every chunk, as ``grad`` does: it summed only
    its own chunk's, a silently wrong result (1/loop of the sum; found by the JAX oracle,
    seed 20261125, p20261125_00675 and 10 more)."""
    def f(w, x):
        if how == "vjp":
            _, pullback = nx.vjp(lambda w: torch.sin(w * x), w, reduce_axes=('a',))
        else:
            pullback = nx.linear_transpose(lambda w: w * x, w, reduce_axes=('a',))
        return pullback(torch.cos(x) + 0.5)[0]

    kw = dict(in_axes=(['b', ...], ['a', 'b', ...]), out_axes=['b', ...])
    args = (torch.randn(3, 2), torch.randn(4, 3, 2))
    want = nx.xmap(f, **kw)(*args)
    got = nx.xmap(f, axis_resources={'a': nx.SerialLoop(loop)}, **kw)(*args)
    torch.testing.assert_close(got, want)
    # the plain loop over the named indices (the reference where no oracle runs)
    w, x = args
    ct = torch.cos(x) + 0.5
    ref = (ct * (torch.cos(w * x) * x if how == "vjp" else x)).sum(0)
    torch.testing.assert_close(want, ref)
