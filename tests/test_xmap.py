"""xmap: every runnable example of the xmap docstring and tutorial, against plain torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import named_axes as nx


def test_docstring_vdot_becomes_matmul():
    x = torch.arange(10.).reshape(2, 5)
    out = nx.xmap(torch.vdot, in_axes=({0: 'left'}, {1: 'right'}),
                  out_axes=['left', 'right', ...])(x, x.T)
    torch.testing.assert_close(out, torch.tensor([[30., 80.], [80., 255.]]))


def test_docstring_regression_loss():
    torch.manual_seed(0)
    x, y = torch.randn(8, 3), torch.randn(8, 2)
    w, b = torch.randn(3, 2), torch.randn(2)

    def regression_loss(x, y, w, b):
        y_pred = nx.sum(x * w, 'in_features') + b
        error = nx.sum((y - y_pred) ** 2, axis='out_features')
        return nx.mean(error, axis='batch')

    loss = nx.xmap(regression_loss,
                   in_axes=(['batch', 'in_features', ...], ['batch', 'out_features', ...],
                            ['in_features', 'out_features', ...], ['out_features', ...]),
                   out_axes={})
    ref = ((y - (x @ w + b)) ** 2).sum(1).mean()
    torch.testing.assert_close(loss(x, y, w, b), ref)


def test_tutorial_transpose():
    x = torch.randn(20, 5)
    f = nx.xmap(lambda v: v, in_axes={0: 'batch'}, out_axes={1: 'batch'})
    y = f(x)
    assert y.shape == (5, 20)
    assert torch.equal(y, x.T)


def test_named_shape_inside():
    seen = {}

    def my_func(x):
        seen['shape'], seen['named'] = x.shape, x.named_shape
        return x

    nx.xmap(my_func, in_axes={0: 'batch'}, out_axes={1: 'batch'})(torch.zeros(20, 5))
    assert seen['shape'] == (5,)
    assert seen['named'] == {'batch': 20}


def test_inconsistent_sizes_message():
    with pytest.raises(ValueError, match=r"inconsistent sizes for axis 'i': 5 \(argument 0, dim 0\) vs 7 \(argument 1, dim 0\)"):
        nx.xmap(lambda x, y: x * y, in_axes=(['i', ...], ['i', ...]),
                out_axes=['i', ...])(torch.arange(5), torch.arange(7))


def _expm_frechet_like(a, e):
    # a 3x3 -> 3x3 function with no notion of named axes
    return torch.linalg.matrix_exp(a) @ e + e.T @ a


def test_tutorial_per_index_and_all_pairs():
    torch.manual_seed(1)
    A, E = torch.randn(5, 3, 3), torch.randn(5, 3, 3)
    out = nx.xmap(_expm_frechet_like, in_axes=(['b', ...], ['b', ...]), out_axes=['b', ...])(A, E)
    for i in range(5):
        torch.testing.assert_close(out[i], _expm_frechet_like(A[i], E[i]))
    A, E = torch.randn(7, 3, 3), torch.randn(5, 3, 3)
    out = nx.xmap(_expm_frechet_like, in_axes=(['ba', ...], ['be', ...]),
                  out_axes=['ba', 'be', ...])(A, E)
    assert out.shape == (7, 5, 3, 3)
    for i in range(7):
        for j in range(5):
            torch.testing.assert_close(out[i, j], _expm_frechet_like(A[i], E[j]))


def test_tutorial_named_broadcasting():
    def named_broadcasting(x, y, z):
        i = x + y
        assert i.shape == (2, 3, 1) and i.named_shape == {'a': 2, 'b': 3}
        j = y + z
        assert j.named_shape == {'b': 3, 'c': 5}
        return i + j

    x, y, z = torch.randn(2, 2, 1, 1), torch.randn(3, 1, 3, 1), torch.randn(5, 1, 1, 5)
    k = nx.xmap(named_broadcasting, in_axes=(['a', ...], ['b', ...], ['c', ...]),
                out_axes=['a', 'b', 'c', ...])(x, y, z)
    assert k.shape == (2, 3, 5, 2, 3, 5)
    for a in range(2):
        for b in range(3):
            for c in range(5):
                torch.testing.assert_close(k[a, b, c], (x[a] + y[b]) + (y[b] + z[c]))


def test_tutorial_broadcast_and_reduce():
    def named_broadcast_and_reduce(x, y):
        z = x + y
        assert z.shape == (5,) and z.named_shape == {'x': 2, 'y': 4}
        w0 = nx.sum(z, 0)
        w0x = nx.sum(w0, 'x')
        stepwise = nx.sum(w0x, 'y')
        w = nx.sum(z, axis=(0, 'x', 'y'))
        return w, stepwise

    xs, ys = torch.arange(2.), torch.arange(20.).reshape(5, 4)
    w, stepwise = nx.xmap(named_broadcast_and_reduce, in_axes=({0: 'x'}, {1: 'y'}),
                          out_axes={})(xs, ys)
    ref = (xs[:, None, None] + ys[None]).sum()
    torch.testing.assert_close(w, ref)
    torch.testing.assert_close(stepwise, ref)


@pytest.mark.parametrize("in_axes,perm", [
    ({0: 'a', 2: 'b'}, (0, 2, 1)),
    ({-1: 'a'}, (2, 0, 1)),
    ('a b ...', (0, 1, 2)),
    (['b', 'a', ...], (1, 0, 2)),
    (('a', ...), (0, 1, 2)),
])
def test_mapping_forms_round_trip(in_axes, perm):
    x = torch.randn(2, 3, 4)
    names = [n for n in ('a', 'b') if n in str(in_axes)]
    out = nx.xmap(lambda v: v, in_axes=in_axes, out_axes=list(names) + [...])(x)
    y = x.permute(perm)
    assert torch.equal(out, y)


def test_negative_out_position_counts_from_end():
    x = torch.randn(4, 3, 2)
    out = nx.xmap(lambda v: v, in_axes={0: 'a'}, out_axes={-1: 'a'})(x)
    assert torch.equal(out, x.permute(1, 2, 0))


def test_pytree_prefix_dict_and_numpy_and_scalars():
    def f(d, s, label):
        assert label == "tag" and s == 2.0
        return {'out': d['w'] * s + d['b']}

    d = {'w': np.ones((3, 4), dtype=np.float32), 'b': torch.ones(3)}
    out = nx.xmap(f, in_axes=({'w': {0: 'i'}, 'b': ['i', ...]}, {}, {}),
                  out_axes={'out': ['i', ...]})(d, 2.0, "tag")
    assert torch.equal(out['out'], torch.full((3, 4), 3.0))


def test_single_mapping_applies_to_every_argument():
    x, y = torch.randn(3, 2), torch.randn(3, 2)
    out = nx.xmap(lambda a, b: a * b, in_axes=['i', ...], out_axes=['i', ...])(x, y)
    torch.testing.assert_close(out, x * y)


def test_missing_output_axis_is_broadcast():
    x = torch.randn(3, 2)
    out = nx.xmap(lambda a: nx.sum(a, 'i'), in_axes=['i', ...], out_axes=['i', ...])(x)
    torch.testing.assert_close(out, x.sum(0, keepdim=True).expand(3, 2))


def test_axis_sizes_for_axes_no_input_carries():
    x = torch.randn(2)
    out = nx.xmap(lambda a: a * 1.0, in_axes=[...], out_axes=['k', ...],
                  axis_sizes={'k': 4})(x)
    assert out.shape == (4, 2)
    assert torch.equal(out, x.expand(4, 2))


def test_axis_sizes_contradicting_input():
    with pytest.raises(ValueError, match="axis 'i'.*3.*axis_sizes"):
        nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', ...],
                axis_sizes={'i': 3})(torch.zeros(4))


def test_unplaced_output_axis_is_an_error():
    with pytest.raises(ValueError, match="named axis 'i'.*does not\\s+place"):
        nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=[...])(torch.zeros(4, 2))


def test_unbound_name_is_name_error():
    def f(a):
        return nx.sum(a, 'foo')

    with pytest.raises(nx.UnboundAxisError, match="axis 'foo' is not bound here.*bound: 'batch'"):
        nx.xmap(f, in_axes=['batch', ...], out_axes=['batch', ...])(torch.zeros(2, 3))
    assert issubclass(nx.UnboundAxisError, NameError)


def test_reducing_bound_axis_the_value_lacks_is_replicated():
    def f(a, c):
        return nx.sum(c, 'i'), nx.max(c * 1.0, 'i').values, nx.sum(a, 'i')

    a, c = torch.randn(3, 2), torch.randn(2)
    s, m, sa = nx.xmap(f, in_axes=(['i', ...], {}), out_axes=[...])(a, c)
    torch.testing.assert_close(s, 3 * c)
    torch.testing.assert_close(m, c)
    torch.testing.assert_close(sa, a.sum(0))


def test_nested_xmap_and_outer_names_stay_named():
    x = torch.randn(2, 3, 4)

    def outer(v):                      # v: (3, 4) named {'i': 2}
        inner = nx.xmap(lambda u: u * 2 + nx.sum(u, 'j'), in_axes=['j', ...], out_axes=['j', ...])
        out = inner(v)                 # inner names j on v's first positional axis
        assert out.named_shape == {'i': 2} and out.shape == (3, 4)
        return out

    out = nx.xmap(outer, in_axes=['i', ...], out_axes=['i', ...])(x)
    torch.testing.assert_close(out, x * 2 + x.sum(1, keepdim=True))


def test_rebinding_an_enclosing_name_is_an_error():
    inner = nx.xmap(lambda u: u, in_axes=['i', ...], out_axes=['i', ...])
    f = nx.xmap(lambda v: inner(v), in_axes=['i', ...], out_axes=['i', ...])
    with pytest.raises(ValueError, match="axis 'i' is already bound"):
        f(torch.zeros(2, 2))


def test_kwargs_and_bad_types():
    f = nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', ...])
    with pytest.raises(TypeError, match="keyword arguments"):
        f(a=torch.zeros(2))
    with pytest.raises(TypeError, match="no axes"):
        nx.xmap(lambda a: a, in_axes=({0: 'i'},), out_axes=[...])(3.0)
    with pytest.raises(TypeError, match="not hashable"):
        nx.xmap(lambda a: a, in_axes=[['x'], ...], out_axes=[...])
    with pytest.raises(TypeError, match="ambiguous"):
        nx.xmap(lambda a: a, in_axes={0: 1}, out_axes=[...])


def test_bad_prefix_and_positions():
    f = nx.xmap(lambda a, b: a, in_axes=(['i', ...], ['i', ...], ['i', ...]), out_axes=['i', ...])
    with pytest.raises(ValueError, match="has 3 entries but the call has 2 arguments"):
        f(torch.zeros(2), torch.zeros(2))
    g = nx.xmap(lambda a: a, in_axes={3: 'i'}, out_axes=['i', ...])
    with pytest.raises(ValueError, match="position 3.*only 2 positional"):
        g(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="more than once"):
        nx.xmap(lambda a: a, in_axes=['i', 'i', ...], out_axes=[...])


def test_donate_argnums_out_of_range():
    f = nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', ...], donate_argnums=(2,))
    with pytest.raises(ValueError, match="donate_argnums.*argument 2"):
        f(torch.zeros(2))


def test_out_axes_unknown_name():
    f = nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', 'zz', ...])
    with pytest.raises(ValueError, match="'zz'"):
        f(torch.zeros(2))


def test_grad_through_xmap_matches_positional():
    w = torch.randn(4, 3, dtype=torch.float64)
    x = torch.randn(5, 4, dtype=torch.float64)

    def named(w, x):
        return nx.mean(torch.tanh(x @ w).sum(), 'batch')

    f = nx.xmap(named, in_axes=({}, ['batch', ...]), out_axes={})
    g = torch.func.grad(f)(w, x)
    ref = torch.func.grad(lambda w: torch.tanh(x @ w).sum(1).mean())(w)
    torch.testing.assert_close(g, ref)


@pytest.mark.usefixtures("dynamo_matmul")
def test_torch_compile_fullgraph_with_matmul_operator():
    w = torch.randn(4, 3)
    x = torch.randn(5, 4)

    def named(w, x):
        return torch.relu(x @ w) * 2.0 - 1.0

    f = nx.xmap(named, in_axes=({}, ['batch', ...]), out_axes=['batch', ...])
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(w, x), f(w, x))
    torch.testing.assert_close(f(w, x), torch.relu(x @ w) * 2.0 - 1.0)


def test_backend_argument():
    f = nx.xmap(lambda a: a + 1, in_axes=['i', ...], out_axes=['i', ...], backend='cpu')
    assert f(torch.zeros(2)).device.type == 'cpu'
    with pytest.raises(ValueError, match="backend"):
        nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', ...], backend='abacus')(torch.zeros(2))


# -- JAX's error kinds (issue 31, item 5) -------------------------------------------------

def test_in_axes_that_is_no_mapping_is_a_type_error():
    with pytest.raises(nx.AxisTypeError, match=r"3.5 is neither an axis mapping"):
        nx.xmap(lambda x: x, in_axes=3.5, out_axes=[...])(torch.ones(2))


def test_an_axis_no_argument_carries_has_no_size():
    f = nx.xmap(lambda x: x, in_axes=['omega', ...], out_axes=['omega', ...])
    with pytest.raises(nx.AxisSizeError, match=r"the size of axis 'omega' cannot be inferred.*"
                                               r"axis_sizes=\{'omega': n\}"):
        f({})
    g = nx.xmap(lambda x: x, in_axes=['omega', ...], out_axes=['omega', ...],
                axis_sizes={'omega': 2})
    assert g({}) == {}


def test_einsum_on_plain_tensors_raises_ours():
    with pytest.raises(nx.AxisSpecError, match=r"einsum\('ij->jij'\): .*more than once"):
        nx.einsum('ij->jij', torch.ones(2, 3))


def test_jit_takes_numpy_arrays_as_arrays():
    import numpy as np

    f = nx.jit(lambda x: x * 2, backend="eager")
    out = f(np.ones(3, dtype=np.float32))
    assert isinstance(out, torch.Tensor) and out.tolist() == [2.0, 2.0, 2.0]


def test_dict_subclasses_keep_their_type_through_xmap():
    # JAX's pytrees rebuild an OrderedDict / defaultdict as itself
    import collections
    f = nx.xmap(lambda x: collections.OrderedDict(b=x * 2, a=x), in_axes=["i", ...],
                out_axes=["i", ...])
    for _ in range(2):   # the checked first call and the planned repeat
        out = f(torch.ones(2, 3))
        assert type(out) is collections.OrderedDict and list(out) == ["b", "a"]
    d = collections.defaultdict(list, a=torch.ones(2))
    g = nx.xmap(lambda d: d, in_axes=[{"a": ["i", ...]}], out_axes={"a": ["i", ...]})
    out = g(d)
    assert type(out) is collections.defaultdict and out.default_factory is list
    assert torch.equal(out["a"], torch.ones(2))
