"""xmap axis specs, outputs and boundary checks pinned to JAX 0.4.30.

Every expected value below was measured with ``jax.experimental.maps.xmap`` (JAX 0.4.30,
CPU; the snippet is in the comment) unless the comment says the behaviour is ours (SPEC).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import named_axes as nx

X = torch.arange(6.).reshape(2, 3)
Y = torch.arange(6.).reshape(2, 3) * 10


def _twice(f, *args):
    """Call twice: the first call takes the slow path, the second the cached plans."""
    a = f(*args)
    b = f(*args)
    return a, b


# -- a list/tuple of names is ONE mapping ---------------------------------------------

def test_list_of_names_is_one_mapping_for_every_argument():
    # xmap(lambda a, b: a + b, in_axes=['i', 'j'], out_axes=['i', 'j'])(x, y)
    # -> [[0., 11., 22.], [33., 44., 55.]]   (one mapping for both arguments)
    f = nx.xmap(lambda a, b: a + b, in_axes=['i', 'j'], out_axes=['i', 'j'])
    for out in _twice(f, X, Y):
        assert torch.equal(out, torch.tensor([[0., 11., 22.], [33., 44., 55.]]))


def test_tuple_of_names_is_one_mapping():
    # xmap(lambda a, b: a * b, in_axes=('i', 'j'), out_axes=('i', 'j'))(x, y)
    # -> [[0., 10., 40.], [90., 160., 250.]]   (elementwise, not an outer product)
    f = nx.xmap(lambda a, b: a * b, in_axes=('i', 'j'), out_axes=('i', 'j'))
    for out in _twice(f, X, Y):
        assert torch.equal(out, torch.tensor([[0., 10., 40.], [90., 160., 250.]]))


def test_list_of_lists_is_a_container():
    # xmap(lambda a, b: a + b, in_axes=[['i', ...], ['i', ...]], out_axes=['i', ...])(x, y)
    # -> [[0., 11., 22.], [33., 44., 55.]]
    f = nx.xmap(lambda a, b: a + b, in_axes=[['i', ...], ['i', ...]], out_axes=['i', ...])
    for out in _twice(f, X, Y):
        assert torch.equal(out, X + Y)


def test_rank_mismatch_names_argument_rank_and_spec():
    # xmap(lambda a: a, in_axes=['i', 'j'], out_axes=['i', 'j', ...])(arange(24.).reshape(2, 3, 4))
    # -> ValueError: xmap argument has an in_axes specification of ['i', 'j'], which asserts
    #    that it should be of rank 2, but the argument has rank 3 (and shape (2, 3, 4))
    f = nx.xmap(lambda a: a, in_axes=['i', 'j'], out_axes=['i', 'j', ...])
    for _ in range(2):
        with pytest.raises(nx.AxisSpecError, match=r"argument 0: axis mapping \['i', 'j'\] names "
                                                   r"every axis .* asserts rank 2, but the value "
                                                   r"has rank 3"):
            f(torch.zeros(2, 3, 4))
    g = nx.xmap(lambda a, b: a, in_axes=(['i', ...], ['i', 'j']), out_axes=['i', ...])
    with pytest.raises(ValueError, match=r"argument 1: axis mapping \['i', 'j'\] .* rank 2, but "
                                         r"the value has rank 1"):
        g(X, torch.zeros(2))


def test_none_skips_a_position():
    # xmap(lambda a: a, in_axes=[None, 'i'], out_axes=['i', ...])(x) -> x.T, shape (3, 2)
    f = nx.xmap(lambda a: a, in_axes=[None, 'i'], out_axes=['i', ...])
    for out in _twice(f, X):
        assert torch.equal(out, X.T)
    # xmap(lambda a: a, in_axes=[None, 'i', ...], out_axes=['i', ...])(arange(24.).reshape(2, 3, 4))
    # -> shape (3, 2, 4)
    z = torch.arange(24.).reshape(2, 3, 4)
    out = nx.xmap(lambda a: a, in_axes=[None, 'i', ...], out_axes=['i', ...])(z)
    assert torch.equal(out, z.permute(1, 0, 2))
    # xmap(lambda a: a, in_axes=['i', ...], out_axes=[None, 'i'])(x) -> x.T
    out = nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=[None, 'i'])(X)
    assert torch.equal(out, X.T)


def test_empty_list_asserts_rank_zero():
    # xmap(lambda a: a, in_axes=[], out_axes=[...])(x) -> ValueError: ... in_axes specification
    #   of [], which asserts that it should be of rank 0, but the argument has rank 2
    # xmap(lambda a: a, in_axes=[], out_axes=[...])(jnp.float32(3)) -> 3.0
    f = nx.xmap(lambda a: a, in_axes=[], out_axes=[...])
    with pytest.raises(ValueError, match=r"axis mapping \[\] .* asserts rank 0, but the value "
                                         r"has rank 2"):
        f(X)
    assert torch.equal(f(torch.tensor(3.)), torch.tensor(3.))


def test_empty_sequences():
    # nested [] and () are rank-0 mappings in JAX:
    # xmap(lambda a, b: a * b, in_axes=(['i', ...], ()), out_axes=['i', ...])(x, jnp.float32(2))
    # -> 2 * x;  with jnp.ones(3) instead -> ValueError: ... in_axes specification of (), which
    #    asserts that it should be of rank 0, but the argument has rank 1
    for empty in ((), []):
        f = nx.xmap(lambda a, b: a * b, in_axes=(['i', ...], empty), out_axes=['i', ...])
        assert torch.equal(f(X, torch.tensor(2.)), X * 2)
        with pytest.raises(ValueError, match=r"asserts rank 0, but the value has rank 1"):
            f(X, torch.ones(3))
    # top-level in_axes=() is the empty argument list:
    # xmap(lambda a: a, in_axes=(), out_axes=[...])(jnp.float32(2)) -> ValueError: xmap in_axes
    #   specification must be a tree prefix of the corresponding value, got specification ()
    # xmap(lambda: jnp.ones(2), in_axes=(), out_axes=[...])() -> [1., 1.]
    with pytest.raises(nx.AxisSpecError, match=r"in_axes=\(\) describes an empty argument list, "
                                               r"but the call has 1 arguments"):
        nx.xmap(lambda a: a, in_axes=(), out_axes=[...])(torch.tensor(2.))
    assert torch.equal(nx.xmap(lambda: torch.ones(2), in_axes=(), out_axes=[...])(), torch.ones(2))
    # top-level in_axes=[] is a rank-0 mapping:
    # xmap(lambda a: a, in_axes=[], out_axes=[...])(jnp.float32(2)) -> 2.0
    assert float(nx.xmap(lambda a: a, in_axes=[], out_axes=[...])(torch.tensor(2.))) == 2.0
    # xmap(lambda a: a.sum(), in_axes=['i', ...], out_axes=())
    # -> ValueError: xmapped functions cannot have no return values
    with pytest.raises(nx.AxisSpecError, match=r"cannot have no return values"):
        nx.xmap(lambda a: a.sum(), in_axes=['i', ...], out_axes=())


def test_out_axes_list_without_ellipsis_asserts_output_rank():
    # xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', 'j'], axis_sizes={'j': 4})(x)
    # -> ValueError: xmap output has an out_axes specification of ['i', 'j'], which asserts
    #    that it should be of rank 2, but the output has rank 3 (and shape (2, 4, 3))
    f = nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', 'j'], axis_sizes={'j': 4})
    for _ in range(2):
        with pytest.raises(ValueError, match=r"out_axes.*\['i', 'j'\] .* asserts rank 2, but "
                                             r"the value has rank 3"):
            f(X)
    # xmap(lambda a: a.sum(), in_axes=['i', ...], out_axes=['i'])(x) -> [3., 12.]
    g = nx.xmap(lambda a: a.sum(), in_axes=['i', ...], out_axes=['i'])
    for out in _twice(g, X):
        assert torch.equal(out, torch.tensor([3., 12.]))
    # xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', None])(x) -> x
    assert torch.equal(nx.xmap(lambda a: a, in_axes=['i', ...], out_axes=['i', None])(X), X)


def test_dict_of_names_with_non_int_keys_is_a_type_error():
    # xmap(lambda a: a, in_axes={'w': 'i'}, out_axes={0: 'i'}) -> TypeError: Value mapping
    #   specification in xmap in_axes pytree can be either: ... but got: {'w': 'i'}
    with pytest.raises(TypeError, match=r"axis mapping \{'w': 'i'\}: key 'w' is not a position"):
        nx.xmap(lambda a: a, in_axes={'w': 'i'}, out_axes={0: 'i'})


def test_dict_of_specs_is_a_container():
    # xmap(lambda d: d['w'] + d['b'], in_axes=({'w': ['i', ...], 'b': ['i', ...]},),
    #      out_axes=['i', ...])  -> elementwise sum
    f = nx.xmap(lambda d: d['w'] + d['b'], in_axes=({'w': ['i', ...], 'b': ['i', ...]},),
                out_axes=['i', ...])
    for out in _twice(f, {'w': X, 'b': Y}):
        assert torch.equal(out, X + Y)


# -- non-array leaves -----------------------------------------------------------------

def test_top_level_mapping_passes_non_arrays_through():
    # JAX: xmap(lambda a, b: a, in_axes=['i', ...], out_axes=['i', ...])(x, None) -> x
    # (JAX fails on a float here -- AttributeError: 'float' object has no attribute
    # 'shape' -- SPEC §2: a single mapping applies to the array arguments only.)
    seen = []

    def f(a, s, t, n):
        seen.append((s, t, n))
        return a * s

    g = nx.xmap(f, in_axes=['i', ...], out_axes=['i', ...])
    for out in _twice(g, X, 2.0, "tag", None):
        assert torch.equal(out, X * 2)
    assert seen == [(2.0, "tag", None)] * 2
    # an explicit per-argument mapping that names axes on a number stays an error
    with pytest.raises(TypeError, match=r"argument 1 is a float, which has no axes"):
        nx.xmap(lambda a, b: a, in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...])(X, 2.0)


def test_numpy_zero_d_argument_stays_zero_d():
    # xmap(lambda a, b: b, in_axes=(['i', ...], [...]), out_axes=[...])(x, np.array(2.))
    # -> Array(2.), shape ()
    seen = []

    def f(a, b):
        seen.append(tuple(b.shape))
        return b

    out = nx.xmap(f, in_axes=(['i', ...], [...]), out_axes=[...])(X, np.array(2.))
    assert seen == [()] and out.shape == () and float(out) == 2.0
    # xmap(lambda a, b: a * b, in_axes=(['i', ...], {}), out_axes=['i', ...])(x, np.array(2.))
    # -> 2 * x
    out = nx.xmap(lambda a, b: a * b, in_axes=(['i', ...], {}), out_axes=['i', ...])(
        X, np.array(2.))
    assert torch.equal(out, X * 2)


def test_none_outputs():
    # xmap(lambda a: (a, None), in_axes=['i', ...], out_axes=['i', ...])(x) -> (x, None)
    # xmap(lambda a: (a, None), in_axes=['i', ...], out_axes=(['i', ...], {}))(x) -> (x, None)
    # xmap(lambda a: (a, None), in_axes=['i', ...], out_axes=(['i', ...], ['i', ...]))(x)
    # -> (x, None)
    for out_axes in (['i', ...], (['i', ...], {}), (['i', ...], ['i', ...])):
        f = nx.xmap(lambda a: (a, None), in_axes=['i', ...], out_axes=out_axes)
        for a, n in _twice(f, X):
            assert torch.equal(a, X) and n is None


def test_number_outputs():
    # xmap(lambda a: (a, 3.5), in_axes=['i', ...], out_axes=['i', ...])(x) -> (x, [3.5, 3.5])
    f = nx.xmap(lambda a: (a, 3.5), in_axes=['i', ...], out_axes=['i', ...])
    for a, b in _twice(f, X):
        assert torch.equal(a, X) and torch.equal(b, torch.tensor([3.5, 3.5]))
    # xmap(lambda a: (a, 3), in_axes=['i', ...], out_axes=(['i', ...], {}))(x) -> (x, 3)
    # (JAX returns a 0-d array; SPEC §2: a Python number with nothing to place passes)
    g = nx.xmap(lambda a: (a, 3), in_axes=['i', ...], out_axes=(['i', ...], {}))
    for a, b in _twice(g, X):
        assert torch.equal(a, X) and b == 3


def test_numpy_outputs_become_tensors():
    # xmap(lambda a: (a, np.array(0)), in_axes=['i', ...], out_axes=(['i', ...], {}))(x)
    # -> (x, Array(0)), shape ()
    f = nx.xmap(lambda a: (a, np.array(0)), in_axes=['i', ...], out_axes=(['i', ...], {}))
    for a, b in _twice(f, X):
        assert isinstance(b, torch.Tensor) and b.shape == () and int(b) == 0
    # xmap(lambda a: (a, np.array(0)), in_axes=['i', ...], out_axes=['i', ...])(x)
    # -> (x, [0, 0])
    g = nx.xmap(lambda a: (a, np.array(0)), in_axes=['i', ...], out_axes=['i', ...])
    for a, b in _twice(g, X):
        assert torch.equal(b, torch.tensor([0, 0]))
    # xmap(lambda a: (a, np.arange(3.)), in_axes=['i', ...], out_axes=['i', ...])(x)
    # -> (x, [[0., 1., 2.], [0., 1., 2.]])
    h = nx.xmap(lambda a: (a, np.arange(3.)), in_axes=['i', ...], out_axes=['i', ...])
    a, b = h(X)
    assert torch.equal(b, torch.tensor([[0., 1., 2.], [0., 1., 2.]], dtype=torch.float64))
    # nested in a dict output: same, and the path label is output['q'][1]
    k = nx.xmap(lambda a: {'q': [a, np.array(0)]}, in_axes=['i', ...],
                out_axes={'q': ['i', ...]})
    assert torch.equal(k(X)['q'][1], torch.tensor([0, 0]))


def test_output_path_label_in_errors():
    f = nx.xmap(lambda a: {'q': [a, object()]}, in_axes=['i', ...], out_axes={'q': ['i', ...]})
    with pytest.raises(TypeError, match=r"output\['q'\]\[1\] is an object, but out_axes places"):
        f(X)


# -- axes escaping xmap ---------------------------------------------------------------

def test_axis_created_inside_cannot_escape():
    labels = torch.tensor([1, 0, 2])
    f = nx.xmap(lambda a: nx.one_hot(labels, 3, dim='classes') * a.sum(), in_axes=['i', ...],
                out_axes=['i', ...])
    for _ in range(2):
        with pytest.raises(nx.AxisSpecError, match=r"the output has named axis 'classes' .* "
                                                   r"out_axes \['i', Ellipsis\] does not place"):
            f(X)
    assert issubclass(nx.AxisSpecError, ValueError) and issubclass(nx.AxisSpecError,
                                                                   nx.NamedAxisError)
    # placed once axis_sizes defines it
    g = nx.xmap(lambda a: nx.one_hot(labels, 3, dim='classes') * a.sum(), in_axes=['i', ...],
                out_axes=['i', 'classes', ...], axis_sizes={'classes': 3})
    assert g(X).shape == (2, 3, 3)


def test_closed_over_named_value_cannot_escape():
    c = nx.named(torch.ones(4, 3), 'c ...')
    f = nx.xmap(lambda a: (a, a * c), in_axes=['i', ...], out_axes=['i', ...])
    for _ in range(2):
        with pytest.raises(nx.AxisSpecError, match=r"output 1 has named axis 'c'"):
            f(X)


def test_enclosing_axis_passes_out_of_inner_xmap():
    # def outer(v):
    #     return xmap(lambda u: u * 2, in_axes=['j', ...], out_axes=['j', ...])(v)
    # xmap(outer, in_axes=['i', ...], out_axes=['i', ...])(arange(6.).reshape(2, 3))
    # -> [[0., 2., 4.], [6., 8., 10.]]
    inner = nx.xmap(lambda u: u * 2, in_axes=['j', ...], out_axes=['j', ...])
    f = nx.xmap(lambda v: inner(v), in_axes=['i', ...], out_axes=['i', ...])
    for out in _twice(f, X):
        assert torch.equal(out, torch.tensor([[0., 2., 4.], [6., 8., 10.]]))
    # closed over instead of passed:
    # def outer4(v): return xmap(lambda u: u * v, in_axes=['j', ...], out_axes=['j', ...])(ones(4))
    # xmap(outer4, in_axes=['i', ...], out_axes=['i', ...])(arange(2.))
    # -> [[0., 0., 0., 0.], [1., 1., 1., 1.]]
    def outer4(v):
        return nx.xmap(lambda u: u * v, in_axes=['j', ...], out_axes=['j', ...])(torch.ones(4))

    g = nx.xmap(outer4, in_axes=['i', ...], out_axes=['i', ...])
    for out in _twice(g, torch.arange(2.)):
        assert torch.equal(out, torch.tensor([[0.] * 4, [1.] * 4]))


def test_inner_plan_cache_does_not_let_an_axis_escape_later():
    # the same inner xmap, first inside an xmap binding 'i' (legal), then at top level on a
    # closed-over value carrying 'i' that nothing binds any more
    box = {}
    inner = nx.xmap(lambda u: u + box['v'], in_axes=['j', ...], out_axes=['j', ...])

    def outer(v):
        box['v'] = v
        return inner(torch.ones(4))

    nx.xmap(outer, in_axes=['i', ...], out_axes=['i', ...])(torch.arange(2.))
    nx.xmap(outer, in_axes=['i', ...], out_axes=['i', ...])(torch.arange(2.))
    box['v'] = nx.named(torch.arange(2.), 'i')
    with pytest.raises(nx.AxisSpecError, match=r"the output has named axis 'i'"):
        inner(torch.ones(4))


def test_names_carried_in_by_arguments_pass_out():
    # ours: a NamedTensor argument's own names (not bound by this xmap) come back out named
    x = nx.named(torch.randn(5, 2, 3), 'b ...')
    f = nx.xmap(lambda a: a * 2, in_axes=['i', ...], out_axes=['i', ...])
    for out in _twice(f, x):
        assert out.named_shape == {'b': 5} and out.shape == (2, 3)


# -- resource conflicts at the xmap boundary -------------------------------------------

def _mesh():
    return nx.Mesh(np.array(nx.local_devices()[:1]), ('x',))


def test_conflict_in_an_argument():
    # with Mesh(devs, ('x',)): xmap(lambda a: a, in_axes={0: 'i', 1: 'j'},
    #     out_axes={0: 'i', 1: 'j'}, axis_resources={'i': 'x', 'j': 'x'})(x)
    # -> JAXTypeError: Axes `i` and `j` are both mapped to the resource `x`, but they coincide
    #    in the named_shape of an input to an xmapped function <lambda>
    f = nx.xmap(lambda a: a, in_axes={0: 'i', 1: 'j'}, out_axes={0: 'i', 1: 'j'},
                axis_resources={'i': 'x', 'j': 'x'})
    with _mesh():
        with pytest.raises(nx.AxisResourceError, match=r"argument 0: axes 'i' and 'j' are both "
                                                       r"mapped to resource 'x' and would meet"):
            f(torch.zeros(2, 2))
    # separate arguments never meet: (x, x) as JAX returns them
    g = nx.xmap(lambda a, b: (a, b), in_axes=({0: 'i'}, {0: 'j'}), out_axes=({0: 'i'}, {0: 'j'}),
                axis_resources={'i': 'x', 'j': 'x'})
    with _mesh():
        a, b = g(X[:, :2], X[:, :2])
    assert torch.equal(a, X[:, :2]) and torch.equal(b, X[:, :2])


def test_conflict_in_an_output_broadcast():
    # xmap(lambda a, b: (a, b), in_axes=({0: 'i'}, {0: 'j'}), out_axes=(['i', 'j', ...],
    #      ['j', ...]), axis_resources={'i': 'x', 'j': 'x'})(x, x)
    # -> JAXTypeError: One of xmapped function (<lambda>) outputs is broadcast along axis `j`
    #    which is assigned to resources `x`, but the output is already partitioned along `x`
    f = nx.xmap(lambda a, b: (a, b), in_axes=({0: 'i'}, {0: 'j'}),
                out_axes=(['i', 'j', ...], ['j', ...]), axis_resources={'i': 'x', 'j': 'x'})
    with _mesh():
        with pytest.raises(nx.AxisResourceError, match=r"output 0: axes 'i' and 'j' are both "
                                                       r"mapped to resource 'x'"):
            f(torch.zeros(2, 2), torch.zeros(2, 2))


def test_conflict_in_a_nested_xmap_argument_and_body():
    # def outer(v): return xmap(lambda u: u, in_axes={0: 'j'}, out_axes={0: 'j'},
    #                           axis_resources={'j': 'x'})(v)
    # xmap(outer, in_axes={0: 'i'}, out_axes={0: 'i'}, axis_resources={'i': 'x'})(x)
    # -> JAXTypeError: Axes `i` and `j` are both mapped to the resource `x`, but they coincide
    #    in the named_shape of an input to an xmapped function <lambda>
    def outer(v):
        return nx.xmap(lambda u: u, in_axes={0: 'j'}, out_axes={0: 'j'},
                       axis_resources={'j': 'x'})(v)

    f = nx.xmap(outer, in_axes={0: 'i'}, out_axes={0: 'i'}, axis_resources={'i': 'x'})
    with _mesh():
        with pytest.raises(nx.AxisResourceError, match=r"argument 0: axes 'i' and 'j' are both "
                                                       r"mapped to resource 'x'"):
            f(torch.zeros(2, 2))

    # def outer2(v): return xmap(lambda u: u + v, in_axes={0: 'j'}, out_axes={0: 'j'},
    #                            axis_resources={'j': 'x'})(jnp.ones(2))
    # -> JAXTypeError: Axes `i` and `j` are both mapped to the resource `x`, but they coincide
    #    in the named_shape of a value returned from a primitive add
    def outer2(v):
        return nx.xmap(lambda u: u + v, in_axes={0: 'j'}, out_axes={0: 'j'},
                       axis_resources={'j': 'x'})(torch.ones(2))

    g = nx.xmap(outer2, in_axes={0: 'i'}, out_axes={0: 'i'}, axis_resources={'i': 'x'})
    with _mesh():
        with pytest.raises(nx.AxisResourceError, match=r"axes 'i' and 'j' are both mapped to "
                                                       r"resource 'x' and would meet"):
            g(torch.arange(2.))

    # values that never meet are fine:
    # def outer3(v): return xmap(lambda u: u * 2, in_axes={0: 'j'}, out_axes=['j', ...],
    #                            axis_resources={'j': 'x'})(jnp.ones(2))
    # xmap(outer3, ...)(arange(2.)) -> [[2., 2.], [2., 2.]]
    def outer3(v):
        return nx.xmap(lambda u: u * 2, in_axes={0: 'j'}, out_axes=['j', ...],
                       axis_resources={'j': 'x'})(torch.ones(2))

    h = nx.xmap(outer3, in_axes={0: 'i'}, out_axes={0: 'i'}, axis_resources={'i': 'x'})
    with _mesh():
        assert torch.equal(h(torch.arange(2.)), torch.full((2, 2), 2.))
