"""nx.einsum / torch.einsum with braced named axes, against per-index loops."""
from __future__ import annotations

import itertools

import pytest
import torch

import named_axes as nx


def _r(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def test_tutorial_spec_contracts_k():
    x, w = _r(2, 3, 4), _r(3, 5, seed=1)            # x: [b, k, n], w: [k, m]
    f = nx.xmap(lambda x, w: nx.einsum('n{b,k},{k,m}->n{b,m}', x, w),
                in_axes=(['b', 'k', ...], ['k', 'm', ...]), out_axes=['b', 'm', ...])
    ref = torch.zeros(2, 5, 4, dtype=torch.float64)
    for b, m in itertools.product(range(2), range(5)):
        for k in range(3):
            ref[b, m] += x[b, k] * w[k, m]
    torch.testing.assert_close(f(x, w), ref)


def test_torch_einsum_spelling_goes_through_the_rule():
    x = nx.named(_r(2, 3, 4), 'b k ...')
    w = nx.named(_r(3, 5, seed=1), 'k m ...')
    a = torch.einsum('n{b,k},{k,m}->n{b,m}', x, w)
    b = nx.einsum('n{b,k},{k,m}->n{b,m}', x, w)
    assert a.named_shape == {'b': 2, 'm': 5} and a.shape == (4,)
    torch.testing.assert_close(nx.positional(a, 'b m ...'), nx.positional(b, 'b m ...'))


def test_plain_spec_batches_named_axes():
    x, y = _r(3, 2, 4), _r(4, 5, seed=1)
    out = torch.einsum('ij,jk->ik', nx.named(x, 'b ...'), y)
    assert out.named_shape == {'b': 3}
    ref = torch.stack([x[i] @ y for i in range(3)])
    torch.testing.assert_close(nx.positional(out, 'b ...'), ref)


def test_mixed_positional_and_named_contraction_three_operands():
    a, b, c = _r(2, 3, 4), _r(4, 5, seed=1), _r(5, 3, 6, seed=2)
    A = nx.named(a, 'i j ...')                # positional (k=4)
    C = nx.named(c, {1: 'j'})                 # positional (l=5, p=6)
    out = nx.einsum('k{i,j},kl,lp{j}->p{i}', A, b, C)
    ref = torch.zeros(2, 6, dtype=torch.float64)
    for i in range(2):
        for j in range(3):
            ref[i] += a[i, j] @ b @ c[:, j]
    torch.testing.assert_close(nx.positional(out, 'i ...'), ref)


def test_listed_but_absent_name_broadcasts_and_bound_output_name_expands():
    def f(x):
        y = nx.einsum('n{i},{j}->n{i,j}', x, torch.tensor(2.0, dtype=torch.float64))
        assert y.named_shape == {'i': 2, 'j': 3}
        return y
    out = nx.xmap(f, in_axes=['i', ...], out_axes=['i', 'j', ...], axis_sizes={'j': 3})(_r(2, 4))
    torch.testing.assert_close(out, 2 * _r(2, 4)[:, None].expand(2, 3, 4))


def test_contracting_a_replicated_name_multiplies_by_its_size():
    out = nx.xmap(lambda x: nx.einsum('n{j}->n', x), in_axes={}, out_axes=[...],
                  axis_sizes={'j': 3})(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 3.0))


def test_implicit_mode_keeps_names_in_one_term():
    x, y = nx.named(_r(2, 3), 'b ...'), nx.named(_r(4, 3, seed=1), 'c ...')
    out = nx.einsum('j{b},j{c}', x, y)
    assert out.named_shape == {'b': 2, 'c': 4} and out.shape == ()


def test_errors():
    x = nx.named(_r(2, 3), 'b ...')
    w = nx.named(_r(4, 5), 'b ...')
    with pytest.raises(nx.AxisSpecError, match=r"operands 1 and 2 list named axis 'b' to "
                                               r"contract it, while operand 0 carries 'b' unlisted "
                                               r"\(named_shape \{'b': 2\}\), a batch axis"):
        nx.einsum('n,m{b},m{b}->n', x, nx.named(_r(2, 5), 'b ...'), nx.named(_r(2, 5), 'b ...'))
    with pytest.raises(nx.AxisSizeError, match=r"inconsistent sizes for axis 'b': 2 \(operand 0\) "
                                               r"vs 4 \(operand 1\)"):
        nx.einsum('n,m{b}->n', x, w)
    with pytest.raises(nx.AxisSpecError, match="output letter 'q' appears in no input term"):
        nx.einsum('n{b}->q', x)
    with pytest.raises(nx.AxisSizeError, match=r"inconsistent sizes for axis 'b': 2 \(operand 0\) vs 4 \(operand 1\)"):
        nx.einsum('n{b},m{b}->nm{b}', x, w)
    with pytest.raises(nx.AxisSizeError, match=r"inconsistent sizes for letter 'n': 3 \(operand 0, dim 0\) vs 5 \(operand 1, dim 0\)"):
        nx.einsum('n{b},n{b}->{b}', x, nx.named(_r(2, 5), 'b ...'))
    with pytest.raises(nx.AxisSpecError, match="operand 0 has 1 positional dims"):
        nx.einsum('nm{b}->{b}', x)
    with pytest.raises(nx.AxisSpecError, match="unexpected character '1'"):
        nx.einsum('n1{b}->{b}', x)
    with pytest.raises(nx.UnboundAxisError, match=r"einsum\('n\{b,z\}->n\{b\}'\): axis 'z' is "
                                                  r"listed but no operand carries it and it is not "
                                                  r"bound here \(bound: none\); operand 0's term "
                                                  r"lists it"):
        nx.einsum('n{b,z}->n{b}', x)


def test_gradients_and_make_fx():
    from torch.fx.experimental.proxy_tensor import make_fx
    f = nx.xmap(lambda x, w: nx.einsum('n{b,k},{k,m}->n{b,m}', x, w),
                in_axes=(['b', 'k', ...], ['k', 'm', ...]), out_axes=['b', 'm', ...])
    x, w = _r(2, 3, 4).requires_grad_(), _r(3, 5, seed=1).requires_grad_()
    assert torch.autograd.gradcheck(f, (x, w))
    code = make_fx(f)(x.detach(), w.detach()).code
    assert "bmm" in code and "vmap" not in code    # one contraction, no per-op fallback


# -- one_hot and nx.nn (named ops beside einsum) -----------------------------------------

def test_one_hot_positional_and_named():
    labels = torch.tensor([[0, 2], [1, 1]])
    torch.testing.assert_close(nx.one_hot(labels, 3), torch.nn.functional.one_hot(labels, 3))
    torch.testing.assert_close(nx.one_hot(labels, 3, dim=0),
                               torch.nn.functional.one_hot(labels, 3).movedim(-1, 0))
    named = nx.one_hot(nx.named(labels, 'b ...'), 3, dim='classes', dtype=torch.float32)
    assert named.named_shape == {'classes': 3, 'b': 2} and named.shape == (2,)
    ref = torch.nn.functional.one_hot(labels, 3).float()          # [b, n, classes]
    torch.testing.assert_close(nx.positional(named, 'b classes ...'), ref.permute(0, 2, 1))


def test_one_hot_errors_and_tracing():
    from torch.fx.experimental.proxy_tensor import make_fx
    with pytest.raises(nx.AxisSizeError, match=r"num_classes=4 but axis 'classes' is bound with size 3"):
        nx.xmap(lambda y, z: nx.one_hot(y, 4, dim='classes') * z, in_axes=({}, ['classes', ...]),
                out_axes=['classes', ...])(torch.tensor([0]), torch.zeros(3))
    # labels carrying the axis keep it (tests/test_one_hot_named.py); its size must agree
    with pytest.raises(nx.AxisSizeError, match=r"num_classes=3 but axis 'b' is carried by the "
                                               r"labels with size 2"):
        nx.one_hot(nx.named(torch.tensor([0, 1]), 'b ...'), 3, dim='b')
    gm = make_fx(lambda y: nx.one_hot(y, 5))(torch.tensor([1, 4]))
    torch.testing.assert_close(gm(torch.tensor([3, 0])),
                               torch.nn.functional.one_hot(torch.tensor([3, 0]), 5))


def test_nn_softmax_over_names_and_positions():
    full = _r(3, 4, 5)
    x = nx.named(full, 'c ...')
    got = nx.positional(nx.nn.softmax(x, axis=('c', 1)), 'c ...')
    ref = torch.softmax(full.permute(1, 0, 2).reshape(4, 15), -1).reshape(4, 3, 5).permute(1, 0, 2)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(nx.positional(nx.nn.log_softmax(x, 'c'), 'c ...'),
                               torch.log_softmax(full, 0))
    st = nx.positional(nx.nn.standardize(x, axis='c'), 'c ...')
    torch.testing.assert_close(st, (full - full.mean(0)) / torch.sqrt(full.var(0, unbiased=False) + 1e-5))


# -- named axes a term does not list are vectorized over (issue 11, item 6) -------------------
# JAX 0.4.30's braces are jax.lax.xeinsum's (jnp.einsum has none): inside xmap, a named axis
# a term does not list is batched by xmap like any op's.  The reference here is the loop
# over the unlisted axis.

def test_unlisted_named_axis_is_a_batch_axis():
    X, W = _r(2, 3, 4), _r(3, 5, seed=1)                 # X: [b, k, n], W: [k, m]
    x, w = nx.named(X, 'b k ...'), nx.named(W, 'k m ...')
    ref = torch.stack([torch.einsum('kn,km->mn', X[b], W) for b in range(2)])   # [b, m, n]
    for spec in ('n{k},{k,m}->n{m}', 'n{k},{k,m}', 'n{k},{k,m}->n{b,m}', 'n{k},{k,m}->n{m,b}'):
        for fn in (nx.einsum, torch.einsum):
            out = fn(spec, x, w)
            assert out.named_shape == {'b': 2, 'm': 5} and out.shape == (4,), spec
            torch.testing.assert_close(nx.positional(out, {0: 'b', 1: 'm'}), ref)


def test_unlisted_axis_on_several_operands_pairs_by_name():
    X, Y = _r(2, 3, 4), _r(2, 4, seed=1)                 # X: [b, k, n], Y: [b, n]
    out = nx.einsum('n{k},n->{k}', nx.named(X, 'b k ...'), nx.named(Y, 'b ...'))
    ref = torch.stack([torch.einsum('kn,n->k', X[b], Y[b]) for b in range(2)])   # [b, k]
    assert out.named_shape == {'b': 2, 'k': 3}
    torch.testing.assert_close(nx.positional(out, {0: 'b', 1: 'k'}), ref)
    # a term without braces at all in a braced spec: every name it carries is a batch axis
    out = nx.einsum('n{k},n->', nx.named(X, 'b k ...'), nx.named(Y, 'b ...'))
    torch.testing.assert_close(nx.positional(out, {0: 'b'}), ref.sum(1))


def test_unlisted_axis_inside_xmap_and_gradient():
    X, C = _r(2, 3, 4), _r(3, seed=1)
    f = nx.xmap(lambda a, c: torch.einsum('n{k},{k}->n', a, c),
                in_axes=(['b', 'k', ...], ['k', ...]), out_axes=['b', ...])
    Xg = X.clone().requires_grad_()
    out = f(Xg, C)
    torch.testing.assert_close(out, torch.einsum('bkn,k->bn', X, C))
    out.sum().backward()
    torch.testing.assert_close(Xg.grad, C[None, :, None].expand(2, 3, 4))


def test_einsum_spec_errors_are_named_axis_errors():
    x = nx.named(_r(2, 3, 4), 'b k ...')
    # a repeated output letter (was torch's "output subscript n appears more than once")
    with pytest.raises(nx.AxisSpecError, match=r"einsum 'n\{b,k\}->nn\{b\}': the output term "
                                               r"'nn\{b\}' repeats letter 'n'"):
        nx.einsum('n{b,k}->nn{b}', x)
    with pytest.raises(nx.AxisSpecError, match=r"einsum 'n\{b,k\}->n\{b,b\}': term 'n\{b,b\}' "
                                               r"repeats a named axis: 'b' \(the output\)"):
        torch.einsum('n{b,k}->n{b,b}', x)
    with pytest.raises(nx.AxisSpecError, match=r"repeats a named axis: 'k' \(operand 0\)"):
        nx.einsum('n{k,k}->n', x)
    # an unbound name in the output's braces: an UnboundAxisError (a NameError), and a
    # malformed spec (a ValueError)
    with pytest.raises(nx.UnboundAxisError, match=r"einsum\('n\{b,k\}->n\{z\}'\): the output "
                                                  r"lists named axis 'z', which no input lists and "
                                                  r"no enclosing map binds \(bound: none\)") as e:
        nx.einsum('n{b,k}->n{z}', x)
    assert isinstance(e.value, nx.AxisSpecError)
    with pytest.raises(nx.UnboundAxisError, match=r"axis 'z' is listed but no operand carries it "
                                                  r"and it is not bound here \(bound: none\); "
                                                  r"operand 1's term lists it"):
        nx.einsum('n{k},{k,z}->n', x, nx.named(_r(3), 'k ...'))


# -- a name one term lists while another operand carries it unlisted (issue 31, item 3) ------
# JAX 0.4.30's jax.lax.xeinsum sums the listing operand over the name first (psum), unless the
# output lists it; the other operand keeps it as a batch axis.  Values and gradients below
# were computed with .venv-jax (jax 0.4.30):
#   f = xmap(lambda a, b: jax.lax.xeinsum(spec, a, b), in_axes=(['i', ...], ['i', ...]),
#            out_axes=['i', ...])
#   f(X, Y); jax.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(X, Y)
#   xmap(lambda a, b: jax.grad(lambda a, b: xeinsum(spec, a, b).sum(), (0, 1))(a, b), ...)
_A, _B = torch.tensor([1., 2., 3.], dtype=torch.float64), torch.tensor([10., 20., 30.],
                                                                       dtype=torch.float64)
_M = torch.arange(12., dtype=torch.float64).reshape(3, 4) / 7
_N = (torch.arange(12., dtype=torch.float64).reshape(3, 4) + 1) / 5
_GM = [[3.0, 3.6, 4.2, 4.8]] * 3
_GN = [[1.714286, 2.142857, 2.571429, 3.0]] * 3
_XEINSUM = {   # spec: (X, Y, value, d/dX and d/dY of the sum (outside and inside xmap agree))
    ',{i}->': (_A, _B, [60., 120., 180.], [60.] * 3, [6.] * 3),
    '{i},->': (_A, _B, [60., 120., 180.], [60.] * 3, [6.] * 3),
    ',{i}->{i}': (_A, _B, [10., 40., 90.], [10., 20., 30.], [1., 2., 3.]),
    'k,k{i}->': (_M, _N, [3.771429, 12.685714, 21.6], _GM, _GN),
    'k{i},k->': (_M, _N, [5.142857, 12.685714, 20.228571], _GM, _GN),
    'k,k{i}->k': (_M, _N, [[0.0, 0.514286, 1.2, 2.057143], [1.714286, 2.571429, 3.6, 4.8],
                           [3.428571, 4.628571, 6.0, 7.542857]], _GM, _GN),
}


def _close(a, b):
    torch.testing.assert_close(a, torch.tensor(b, dtype=torch.float64), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("spec", list(_XEINSUM))
def test_listed_and_unlisted_name_is_xeinsum(spec):
    X, Y, value, gx, gy = _XEINSUM[spec]
    axes = dict(in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...])
    for fn in (nx.einsum, torch.einsum):
        f = nx.xmap(lambda a, b: fn(spec, a, b), **axes)
        Xg, Yg = X.clone().requires_grad_(), Y.clone().requires_grad_()
        out = f(Xg, Yg)
        _close(out.detach(), value)
        out.sum().backward()
        _close(Xg.grad, gx)
        _close(Yg.grad, gy)
    # per-instance gradients inside the map (JAX's convention)
    body = lambda a, b: nx.grad(lambda a, b: nx.einsum(spec, a, b).sum(), argnums=(0, 1))(a, b)
    ga, gb = nx.xmap(body, in_axes=axes['in_axes'], out_axes=(['i', ...], ['i', ...]))(X, Y)
    _close(ga, gx)
    _close(gb, gy)


def test_listed_and_unlisted_name_under_vmap_jit_and_serial_loop():
    # nx.vmap's axis_name is a named axis every operand carries unlisted
    f = lambda a, b: nx.einsum(',{i}->', a, b)   # noqa: E731
    torch.testing.assert_close(nx.vmap(f, axis_name='i')(_A, _B), _A * _B.sum())
    g = nx.jit(nx.xmap(f, in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...]))
    torch.testing.assert_close(g(_A, _B), _A * _B.sum())
    torch.testing.assert_close(g(_A, 2 * _B), 2 * _A * _B.sum())
    # an engine computing 'i' in chunks: the sum over 'i' spans every chunk
    X, Y = _r(4, 3), _r(4, 3, seed=1)
    for spec in ('k,k{i}->', 'k{i},k->k', 'k,k{i}->{i}'):
        h = lambda s: nx.xmap(lambda a, b: nx.einsum(spec, a, b),  # noqa: E731
                              in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...], **s)
        torch.testing.assert_close(h({'axis_resources': {'i': nx.SerialLoop(2)}})(X, Y),
                                   h({})(X, Y))


def test_listing_operand_lacking_the_name_is_scaled_by_its_size():
    # jax: xmap(lambda a, b: xeinsum(',{i}->', a, b), in_axes=(['i', ...], [...]), ...)
    #      gives [6., 12., 18.] for a = [1, 2, 3], b = 2 (b * psum(1, 'i') = 6)
    f = nx.xmap(lambda a, b: nx.einsum(',{i}->', a, b), in_axes=(['i', ...], [...]),
                out_axes=['i', ...])
    _close(f(_A, torch.tensor(2., dtype=torch.float64)), [6., 12., 18.])
    # outside any map the size is the carrying operand's
    out = nx.einsum(',{i}->', nx.named(_A, 'i ...'), torch.tensor(2., dtype=torch.float64))
    _close(nx.positional(out, 'i ...'), [6., 12., 18.])
