"""The error catalogue (docs/errors.md), one test per error.

Every test checks the SPEC §6 exception *type* (ValueError subclasses for size, spec
and resource problems; TypeError subclasses for wrong types; ``nx.UnboundAxisError``,
a NameError, for unbound names) and pins the message text: the axis, the sizes and
the argument or operation must all be named.  Tests for pieces that are not built
yet (einsum, nx.lax, Mesh) skip until those land.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import named_axes as nx
from named_axes import _errors

X5 = torch.zeros(5, 3)
X7 = torch.zeros(7, 3)


def _raises(kind, pattern):
    """``pytest.raises`` that also checks the error belongs to the library's hierarchy."""
    return pytest.raises(kind, match=pattern)


def _ours(excinfo):
    assert isinstance(excinfo.value, nx.NamedAxisError), type(excinfo.value)
    return str(excinfo.value)


def _needs(attr):
    return pytest.mark.skipif(not hasattr(nx, attr), reason=f"nx.{attr} not built yet")


def _lax():
    return pytest.importorskip("named_axes.lax")


def ident(x):
    return x


# -- the exception types themselves --------------------------------------------------

def test_exception_hierarchy_matches_spec():
    assert issubclass(nx.AxisSizeError, ValueError)
    assert issubclass(nx.AxisSpecError, ValueError)
    assert issubclass(nx.AxisResourceError, ValueError)
    assert issubclass(nx.AxisTypeError, TypeError)
    assert issubclass(nx.UnboundAxisError, NameError)
    for cls in (nx.AxisSizeError, nx.AxisSpecError, nx.AxisResourceError, nx.AxisTypeError,
                nx.UnboundAxisError):
        assert issubclass(cls, nx.NamedAxisError)


def test_unbound_message_helper_spells_spec_form():
    msg = _errors.unbound_message("foo", {"batch": 2, "hidden": 3})
    assert msg == "axis 'foo' is not bound here (bound: 'batch', 'hidden')"
    msg = _errors.unbound_message("foo", {}, op="Tensor.sum", carried=("a",))
    assert msg == ("Tensor.sum: axis 'foo' is not bound here (bound: none); "
                   "the value's named axes are 'a'")


def test_size_clash_message_helper():
    msg = _errors.size_clash_message("i", 5, "argument 0, dim 0", 7, "argument 1, dim 0")
    assert msg == "inconsistent sizes for axis 'i': 5 (argument 0, dim 0) vs 7 (argument 1, dim 0)"


# -- inconsistent sizes ----------------------------------------------------------------

def test_inconsistent_sizes_across_xmap_arguments():
    f = nx.xmap(lambda a, b: a + b, in_axes=({0: 'i'}, {0: 'i'}), out_axes={0: 'i'})
    with _raises(ValueError, re.escape(
            "inconsistent sizes for axis 'i': 5 (argument 0, dim 0) vs 7 (argument 1, dim 0)")) as e:
        f(X5, X7)
    assert isinstance(e.value, nx.AxisSizeError)
    assert _ours(e).startswith("xmap(<lambda>, in_axes=({0: 'i'}, {0: 'i'})")


def test_inconsistent_sizes_inside_one_argument_pytree():
    f = nx.xmap(lambda d: d['a'] + d['b'], in_axes=({'a': {1: 'i'}, 'b': {0: 'i'}},),
                out_axes=['i', ...])
    with _raises(ValueError, r"axis 'i': 3 \(argument 0\['a'\], dim 1\) vs 7 "
                             r"\(argument 0\['b'\], dim 0\)") as e:
        f({'a': X5, 'b': X7})
    _ours(e)


@pytest.mark.parametrize("op", [
    lambda a, b: a + b,
    lambda a, b: torch.where(a > 0, b, 0.0),
    lambda a, b: a @ b,
    lambda a, b: torch.cat([a, b]),
])
def test_inconsistent_sizes_between_named_operands(op):
    a = nx.named(torch.zeros(5, 3), {0: 'i'})
    b = nx.named(torch.zeros(7, 3), {0: 'i'})
    with _raises(ValueError, r"inconsistent sizes for axis 'i': 5 \(.*\) vs 7 \(.*\)") as e:
        op(a, b)
    assert isinstance(e.value, nx.AxisSizeError)
    assert re.match(r"(torch|Tensor)\.\w+: ", _ours(e))  # names the operation


def test_axis_sizes_contradicting_an_input():
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...], axis_sizes={'i': 4})
    with _raises(ValueError, re.escape(
            "inconsistent sizes for axis 'i': 4 (axis_sizes) vs 5 (argument 0, dim 0)")) as e:
        f(X5)
    _ours(e)


@pytest.mark.parametrize("bad", [-1, 2.5, "3"])
def test_axis_sizes_not_a_size(bad):
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...], axis_sizes={'j': bad})
    with _raises(ValueError, rf"axis_sizes gives axis 'j' size {re.escape(repr(bad))}") as e:
        f(X5)
    _ours(e)


def test_axis_sizes_not_a_dict():
    with _raises(TypeError, r"axis_sizes must be a dict name -> size, got \[4\]") as e:
        nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...], axis_sizes=[4])
    _ours(e)


# -- unbound names ---------------------------------------------------------------------

def test_unbound_axis_in_the_environment_spec_form():
    from named_axes._env import axis_size, bind

    with bind({'batch': 2, 'hidden': 3}):
        with _raises(nx.UnboundAxisError, re.escape(
                "axis 'foo' is not bound here (bound: 'batch', 'hidden')")) as e:
            axis_size('foo')
    assert isinstance(e.value, NameError)


@pytest.mark.parametrize("call", [
    lambda a: a.sum('foo'),
    lambda a: nx.sum(a, 'foo'),
    lambda a: nx.logsumexp(a, dim='foo'),
    lambda a: a.softmax('foo'),
    lambda a: nx.max(a, axis='foo'),
])
def test_unbound_axis_in_a_reduction_lists_bound_names(call):
    f = nx.xmap(call, in_axes=['batch', 'hidden', ...], out_axes=[...])
    with _raises(nx.UnboundAxisError, r"axis 'foo' is not bound here") as e:
        f(torch.zeros(2, 3, 4))
    assert "bound: 'batch', 'hidden'" in _ours(e)
    assert isinstance(e.value, NameError)


def test_unbound_axis_outside_any_xmap():
    with _raises(nx.UnboundAxisError, r"axis 'q' is not bound here.*bound: none") as e:
        nx.named(torch.zeros(2, 3), {0: 'a'}).sum('q')
    _ours(e)


@pytest.mark.parametrize("coll", ["psum", "pmean", "pmax", "pmin", "all_gather"])
def test_collective_over_an_unbound_axis(coll):
    lax = _lax()
    fn = getattr(lax, coll)
    f = nx.xmap(lambda a: fn(a, 'foo'), in_axes=['batch', 'hidden', ...], out_axes=[...])
    with _raises(nx.UnboundAxisError, r"axis 'foo' is not bound here") as e:
        f(torch.zeros(2, 3, 4))
    assert "'batch', 'hidden'" in str(e.value)


def test_axis_index_of_an_unbound_axis():
    lax = _lax()
    f = nx.xmap(lambda a: a + lax.axis_index('foo'), in_axes=['batch', ...], out_axes=['batch', ...])
    with _raises(nx.UnboundAxisError, r"axis 'foo' is not bound here.*'batch'"):
        f(torch.zeros(2, 4))


# -- axis mappings: duplicates, positions, names ---------------------------------------

@pytest.mark.parametrize("spec, spelled", [
    (['i', 'i', ...], r"\['i', 'i', Ellipsis\]"),
    ({0: 'i', 1: 'i'}, r"\{0: 'i', 1: 'i'\}"),
    ('i i ...', r"'i i \.\.\.'"),
])
def test_duplicate_name_in_one_mapping(spec, spelled):
    with _raises(ValueError, rf"axis mapping {spelled} names axis 'i' more than once") as e:
        nx.xmap(ident, in_axes=spec, out_axes=['i', ...])
    assert isinstance(e.value, nx.AxisSpecError)


def test_duplicate_name_in_named():
    with _raises(ValueError, r"names axis 'a' more than once"):
        nx.named(torch.zeros(2, 2), 'a a')


@pytest.mark.parametrize("spec, pos", [({3: 'i'}, 3), ({-3: 'i'}, -3)])
def test_input_position_out_of_range(spec, pos):
    f = nx.xmap(ident, in_axes=spec, out_axes=['i', ...])
    with _raises(ValueError, rf"argument 0: axis mapping .* puts 'i' at position {pos}, but the "
                             rf"value has only 2 positional dimension") as e:
        f(X5)
    _ours(e)


def test_two_names_at_one_position_after_normalizing():
    f = nx.xmap(ident, in_axes={0: 'i', -2: 'j'}, out_axes=['i', 'j', ...])
    with _raises(ValueError, r"maps position 0 to both 'j' and 'i'"):
        f(X5)


def test_output_position_out_of_range():
    f = nx.xmap(ident, in_axes=['i', ...], out_axes={5: 'i'})
    with _raises(ValueError, r"the output.*puts 'i' at position 5, but the result has only 2 "
                             r"dimension\(s\): the value's 1 positional one\(s\) and the 1 it "
                             r"places"):
        f(X5)
    with _raises(ValueError, r"position 1, but the result has only 1 dimension\(s\): the "
                             r"value's 0 positional"):   # (JAX: 'it only has 0')
        nx.xmap(ident, in_axes=['i', ...], out_axes={1: 'i'})(torch.ones(5))


def test_ellipsis_not_last():
    with _raises(ValueError, r"axis mapping 'a \.\.\. b': '\.\.\.' may only come last"):
        nx.named(X5, 'a ... b')
    with _raises(ValueError, r"may only come last"):
        nx.xmap(ident, in_axes=('a', ..., 'b', ...), out_axes=[...])


@pytest.mark.parametrize("spec", [[['i'], ...], {0: {'i'}}, [{'i': 1}, ...]])
def test_unhashable_name(spec):
    with _raises(TypeError, r"axis name .* is not hashable") as e:
        nx.xmap(ident, in_axes=spec, out_axes=[...])
    assert isinstance(e.value, nx.AxisTypeError)


@pytest.mark.parametrize("spec", [[0, ...], {0: 1}, [True, ...]])
def test_int_name_is_ambiguous(spec):
    with _raises(TypeError, r"axis name (0|1|True) is an int, which is ambiguous with a "
                            r"positional dimension") as e:
        nx.xmap(ident, in_axes=spec, out_axes=[...])
    _ours(e)


@pytest.mark.parametrize("name", [None, ...])
def test_none_or_ellipsis_as_name(name):
    with _raises(TypeError, r"is not a valid axis name"):
        nx.xmap(ident, in_axes={0: name}, out_axes=[...])


def test_unhashable_dim_in_a_reduction():
    x = nx.named(torch.zeros(5, 3, 4), {0: 'i'})
    with _raises(TypeError, r"Tensor.sum: \[1\] is neither a dimension nor an axis name"):
        x.sum(([1],))


@pytest.mark.parametrize("call, op", [
    (lambda x: x.sum(5), "Tensor.sum"),
    (lambda x: nx.sum(x, dim=5), "torch.sum"),
    (lambda x: x.softmax(7), "Tensor.softmax"),
])
def test_positional_dim_out_of_range_in_an_op(call, op):
    x = nx.named(torch.zeros(5, 3, 4), {0: 'i'})
    with _raises(ValueError, rf"{re.escape(op)}: dimension \d is out of range for a value with 2 "
                             rf"positional dimension\(s\)") as e:
        call(x)
    _ours(e)


def test_naming_an_axis_twice_in_named():
    x = nx.named(X5, {0: 'i'})
    with _raises(ValueError, r"named\(\): the value already has a named axis 'i'"):
        nx.named(x, {0: 'i'})


def test_rebinding_an_enclosing_name():
    inner = nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...])
    outer = nx.xmap(inner, in_axes=['i', ...], out_axes=['i', ...])
    with _raises(ValueError, r"axis 'i' is already bound by an enclosing"):
        outer(torch.zeros(2, 3, 4))


# -- out_axes ---------------------------------------------------------------------------

def test_out_axes_leaves_a_named_axis_unplaced():
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=[...])
    with _raises(ValueError, r"the output has named axis 'i' \(named_shape \{'i': 5\}\) that "
                             r"out_axes \[Ellipsis\] does not place") as e:
        f(X5)
    assert isinstance(e.value, nx.AxisSpecError)


def test_out_axes_leaves_an_axis_unplaced_in_one_output_of_several():
    f = nx.xmap(lambda a: (a, a.sum()), in_axes=['i', ...], out_axes=(['i', ...], [...]))
    with _raises(ValueError, r"output 1 has named axis 'i'.*does not place"):
        f(X5)


def test_out_axes_places_an_undefined_axis():
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=['i', 'j', ...])
    with _raises(ValueError, r"out_axes places axis 'j', which this xmap does not define "
                             r"\(defined: 'i'\)"):
        f(X5)


def test_positional_leaves_an_axis_unplaced():
    with _raises(ValueError, r"positional\(\) has named axis 'a'.*does not place"):
        nx.positional(nx.named(X5, 'a b'), [...])


# -- pytree prefixes -------------------------------------------------------------------

def test_prefix_with_too_many_entries():
    f = nx.xmap(lambda a, b: a, in_axes=(['i', ...],) * 3, out_axes=['i', ...])
    with _raises(ValueError, r"has 3 entries but the call has 2 arguments") as e:
        f(X5, X5)
    assert isinstance(e.value, nx.AxisSpecError)


def test_prefix_dict_where_the_value_is_a_tensor():
    f = nx.xmap(ident, in_axes=({'w': ['i', ...]},), out_axes=['i', ...])
    with _raises(ValueError, r"the spec at argument 0 is a dict with keys \[\"'w'\"\], but the "
                             r"value there is a single Tensor"):
        f(X5)


def test_prefix_dict_keys_differ():
    f = nx.xmap(lambda d: d['w'], in_axes=({'v': ['i', ...]},), out_axes=['i', ...])
    with _raises(ValueError, r"has keys \[\"'v'\"\] but the value has keys \[\"'w'\"\]"):
        f({'w': X5})


@pytest.mark.parametrize("spec", [3, (3,), 1.5])
def test_spec_leaf_that_is_not_a_mapping(spec):
    with _raises(TypeError, r"xmap in_axes: .* is neither an axis mapping nor a container"):
        nx.xmap(ident, in_axes=spec, out_axes=[...])


def test_out_axes_prefix_deeper_than_the_output():
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=(['i', ...], ['i', ...]))
    with _raises(ValueError, r"out_axes: the spec at .* is a tuple of 2 specs, but the value "
                             r"there is a single NamedTensor"):
        f(X5)


def test_in_axes_names_an_axis_of_a_non_tensor():
    f = nx.xmap(lambda a, b: a, in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...])
    with _raises(TypeError, r"argument 1 is an int, which has no axes, but in_axes names 'i'"):
        f(X5, 3)


# -- wrong types -----------------------------------------------------------------------

def test_fun_not_callable():
    with _raises(TypeError, r"xmap: fun must be callable, got int"):
        nx.xmap(3, in_axes=['i', ...], out_axes=['i', ...])


def test_keyword_arguments_to_an_xmapped_function():
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...])
    with _raises(TypeError, r"keyword arguments are not supported"):
        f(x=X5)


def test_named_of_a_non_tensor():
    with _raises(TypeError, r"named\(\): expected a tensor or numpy array, got list"):
        nx.named([1, 2], 'a')


def test_positional_of_a_non_tensor():
    with _raises(TypeError, r"positional\(\) needs a NamedTensor, got int"):
        nx.positional(3, 'a')


@pytest.mark.parametrize("call, what", [
    (lambda x: x.item(), r"\.item\(\)"), (lambda x: bool(x), r"bool\(\)"),
    (lambda x: x.numpy(), r"\.numpy\(\)"), (lambda x: x.tolist(), r"\.tolist\(\)"),
])
def test_python_value_of_a_named_tensor_is_ambiguous(call, what):
    x = nx.named(torch.zeros(5, 1), {0: 'i'})
    with _raises(TypeError, rf"{what} of a NamedTensor with named axes \{{'i': 5\}} is ambiguous"):
        call(x)


# -- donate_argnums --------------------------------------------------------------------

@pytest.mark.parametrize("donate", [(3,), (-2,), 1])
def test_donate_argnums_out_of_range(donate):
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...], donate_argnums=donate)
    with _raises(ValueError, r"donate_argnums=\(-?\d,\) names argument -?\d, but the call has 1 "
                             r"arguments") as e:
        f(X5)
    assert isinstance(e.value, nx.AxisSpecError)


def test_donate_argnums_not_ints():
    with _raises(TypeError, r"donate_argnums must be ints, got 'a'"):
        nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...], donate_argnums=('a',))


# -- in-place ops that would broadcast a named axis ------------------------------------

def _add_(a, b):
    a.add_(b)
    return a


def _iadd(a, b):
    a += b
    return a


def _mul_(a, b):
    a.mul_(b)
    return a


def _copy_(a, b):
    a.copy_(b)
    return a


def _clamp_(a, b):
    a.clamp_(min=b)
    return a


@pytest.mark.parametrize("fn, op", [(_add_, "Tensor.add_"), (_iadd, "Tensor.__iadd__"),
                                    (_mul_, "Tensor.mul_"), (_copy_, "Tensor.copy_"),
                                    (_clamp_, "Tensor.clamp_")])
def test_inplace_op_would_broadcast_a_named_axis(fn, op):
    f = nx.xmap(fn, in_axes=({}, ['i', ...]), out_axes=['i', ...])
    target = torch.zeros(3)
    with _raises(ValueError, rf"{re.escape(op)}: in-place update of a value with named shape "
                             rf"\{{\}} by a value with named axis 'i' \(size 5\) would write "
                             rf"every instance of that axis into it; compute a new value "
                             rf"instead \(x = x \+ y") as e:
        f(target, X5)
    assert isinstance(e.value, nx.AxisSizeError)
    assert torch.equal(target, torch.zeros(3)), "the failed update must not touch the target"


def test_index_assignment_would_broadcast_a_named_axis():
    def fn(a, b):
        a[0] = b[0]
        return a

    f = nx.xmap(fn, in_axes=({}, ['i', ...]), out_axes=['i', ...])
    with _raises(ValueError, r"named axis 'i' \(size 5\) that the target \(named shape \{\}\) "
                             r"lacks"):
        f(torch.zeros(3), X5)


# -- positional shape problems inside ops ----------------------------------------------

def test_positional_shape_error_names_the_op_and_both_shapes():
    x = nx.named(torch.zeros(5, 3, 4), {0: 'i'})
    with _raises(RuntimeError, r"(?s)Tensor.__matmul__ failed on the positional shapes: .*"
                               r"\[3, 4\] X \[5, 2\].*args\[0\]: positional shape \(3, 4\), "
                               r"named shape \{'i': 5\}\n  args\[1\]: positional shape \(5, 2\)"
                               r".*\nfix: ") as e:
        x @ torch.zeros(5, 2)
    assert isinstance(e.value, ValueError)   # ShapeError is both


# The user's shapes, never the internal layout's (named axes leading), and a fix.
@pytest.mark.parametrize("body, shape, says, fix", [
    (lambda x: x.reshape(8, 5), (8, 5), "shape '[8, 5]' is invalid for input of size 5",
     "nx.positional"),
    (lambda x: x @ torch.zeros(4, 3), (8, 5), "[1, 5] X [4, 3]", "lax.pdot"),
    (lambda x: x + torch.zeros(4), (8, 5), "broadcast a dimension of length 4",
     "matched by name"),
    (lambda x: x.view(-1, 3), (8, 5), "shape '[-1, 3]' is invalid for input of size 5",
     "nx.positional"),
])
def test_shape_errors_speak_in_the_users_shapes(body, shape, says, fix):
    f = nx.xmap(body, in_axes=['batch', ...], out_axes=['batch', ...])
    with pytest.raises(nx.ShapeError) as e:
        f(torch.zeros(shape))
    msg = str(e.value)
    assert says in msg and fix in msg, msg
    assert "named shape {'batch': 8}" in msg and "positional shape (5,)" in msg, msg
    assert "[8, 8" not in msg and "40" not in msg, msg   # no physical-layout numbers


# -- einsum ------------------------------------------------------------------------------

_A = nx.named(torch.zeros(2, 3), {1: 'b'})
_B = nx.named(torch.zeros(3), {0: 'b'})


@_needs("einsum")
@pytest.mark.parametrize("spec, why", [
    ("n{b,k},{k,m}->n{b,m", r"unclosed '\{' in term 'n\{b,m'"),
    ("n{b},{b}->n->", r"more than one '->'"),
    ("n{b}{c},{b}->n", r"term 'n\{b\}\{c\}' has two brace groups"),
    ("n{b,b},{b}->n", r"term 'n\{b,b\}' repeats a named axis"),
    ("n{b},{b}->q", r"output letter 'q' appears in no input term"),
    ("n{b},{b}->n{zz}", r"the output lists named axis 'zz', which no input lists"),
])
@pytest.mark.parametrize("entry", ["nx", "torch"])
def test_malformed_einsum_spec(spec, why, entry):
    fn = nx.einsum if entry == "nx" else torch.einsum
    with _raises(ValueError, rf"einsum[ (]'{re.escape(spec)}'\)?: {why}") as e:
        fn(spec, _A, _B)
    assert isinstance(e.value, nx.AxisSpecError)


@_needs("einsum")
def test_einsum_wrong_operand_count():
    with _raises(ValueError, r"einsum\('n\{b\},\{b\}->n'\): the spec has 2 operand terms but 1 "
                             r"operands were given"):
        nx.einsum('n{b},{b}->n', _A)


@_needs("einsum")
def test_einsum_term_skips_a_named_axis_the_operand_carries():
    # vectorized over, as by every other op (issue 11, item 6): not an error
    out = nx.einsum('n->n', _A)
    assert isinstance(out, nx.NamedTensor) and out.named_shape == {'b': 3}
    torch.testing.assert_close(nx.positional(out, {1: 'b'}), nx.positional(_A, {1: 'b'}))


@_needs("einsum")
def test_einsum_output_repeats_a_letter():
    with _raises(ValueError, r"einsum 'n\{b\}->nn\{b\}': the output term 'nn\{b\}' repeats "
                             r"letter 'n'; an output axis appears once"):
        nx.einsum('n{b}->nn{b}', _A)


@_needs("einsum")
def test_einsum_lists_an_axis_nobody_carries_or_binds():
    with _raises(nx.UnboundAxisError, r"axis 'c' is listed but no operand carries it and it is "
                                      r"not bound here \(bound: none\)"):
        nx.einsum('n{b,c}->n', _A)


@_needs("einsum")
def test_einsum_positional_rank_mismatch():
    a = nx.named(torch.zeros(2, 4, 3), {2: 'b'})
    with _raises(ValueError, r"operand 0 has 2 positional dims \(shape \(2, 4\)\) but its term "
                             r"has 1 letters"):
        nx.einsum('n{b}->n', a)


@_needs("einsum")
def test_einsum_inconsistent_named_sizes():
    with _raises(ValueError, r"inconsistent sizes for axis 'b': 3 \(operand 0\) vs 4 "
                             r"\(operand 1\)") as e:
        nx.einsum('n{b},{b}->n', _A, nx.named(torch.zeros(4), {0: 'b'}))
    assert isinstance(e.value, nx.AxisSizeError)


@_needs("einsum")
def test_einsum_inconsistent_letter_sizes():
    with _raises(ValueError, r"inconsistent sizes for letter 'n': 2 \(operand 0, dim 0\) vs 5 "
                             r"\(operand 1, dim 0\)"):
        nx.einsum('n{b},n{b}->n', _A, nx.named(torch.zeros(5, 3), {1: 'b'}))


# -- other collective argument errors ---------------------------------------------------

def _in_i(fn, n=2):
    return nx.xmap(fn, in_axes=['i', ...], out_axes=['i', ...])(torch.zeros(n, 3))


def test_ppermute_perm_not_a_partial_permutation():
    lax = _lax()
    with _raises(ValueError, r"ppermute\(x, 'i', perm=\[\(0, 1\), \(1, 1\)\]\): every index "
                             r"may send at most once and receive at most once"):
        _in_i(lambda v: lax.ppermute(v, 'i', [(0, 1), (1, 1)]))
    with _raises(ValueError, r"\(0, 5\) is not a \(source, destination\) pair of indices in "
                             r"\[0, 2\)"):
        _in_i(lambda v: lax.ppermute(v, 'i', [(0, 5)]))


def test_pshuffle_perm_not_a_permutation():
    lax = _lax()
    with _raises(ValueError, r"pshuffle\(x, 'i', perm=\[0, 0\]\): perm must be a permutation of "
                             r"range\(2\) \(the size of 'i'\)"):
        _in_i(lambda v: lax.pshuffle(v, 'i', [0, 0]))


@pytest.mark.parametrize("coll, call", [
    ("all_to_all", lambda lax, v: lax.all_to_all(v, 'i', 0, 0)),
    ("psum_scatter", lambda lax, v: lax.psum_scatter(v, 'i')),
])
def test_split_collective_dim_must_match_axis_size(coll, call):
    lax = _lax()
    with _raises(ValueError, rf"{coll}\(x, 'i', .*\): positional dim 0 has size 3, but must be 2 "
                             rf"\(the size of 'i'\)") as e:
        _in_i(lambda v: call(lax, v))
    assert isinstance(e.value, nx.AxisSizeError)


# -- mesh and resources (SPEC §5) ------------------------------------------------------

def _par():
    return pytest.importorskip("named_axes.parallel")


def _mesh1(names=('x',)):
    P = _par()
    devs = np.array(P.local_devices()[:1]).reshape((1,) * len(names))
    return P.Mesh(devs, names)


def test_axis_resources_with_no_mesh():
    f = nx.xmap(ident, in_axes=['batch', ...], out_axes=['batch', ...],
                axis_resources={'batch': 'x'})
    with _raises(ValueError, r"maps axis 'batch' to mesh axis 'x', but no mesh is in scope") as e:
        f(torch.zeros(4, 3))
    assert isinstance(e.value, nx.AxisResourceError)


def test_unknown_mesh_axis():
    f = nx.xmap(ident, in_axes=['batch', ...], out_axes=['batch', ...],
                axis_resources={'batch': 'z'})
    with _mesh1(('x',)):
        with _raises(ValueError, r"maps axis 'batch' to mesh axis 'z', which the mesh in scope "
                                 r"does not have \(mesh axes: \{'x': 1\}\)") as e:
            f(torch.zeros(4, 3))
    assert isinstance(e.value, nx.AxisResourceError)


def test_axis_size_not_divisible_by_mesh_axes():
    from named_axes.parallel._plan import make_plan

    with _raises(ValueError, r"axis 'batch' has size 6, which is not divisible by 4, the size "
                             r"of the mesh axes it is mapped to \('x': 2 \* 'y': 2\)") as e:
        make_plan({'batch': ('x', 'y')}, mesh_shape={'x': 2, 'y': 2}, axis_sizes={'batch': 6})
    assert isinstance(e.value, nx.AxisResourceError)


def test_axis_size_not_divisible_by_serial_chunks():
    f = nx.xmap(ident, in_axes=['batch', ...], out_axes=['batch', ...],
                axis_resources={'batch': _par().SerialLoop(4)})
    with _raises(ValueError, r"axis 'batch' has size 6, which is not divisible by the 4 chunks "
                             r"of SerialLoop\(4\)"):
        f(torch.zeros(6, 3))


@pytest.mark.parametrize("chunks", [0, -1, 2.0])
def test_serial_loop_needs_positive_int(chunks):
    with _raises(ValueError, rf"SerialLoop\({re.escape(repr(chunks))}\): the number of chunks "
                             rf"must be a positive int"):
        _par().SerialLoop(chunks)


def test_axis_resources_for_an_undefined_axis():
    f = nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...], axis_resources={'k': 'x'})
    with _mesh1():
        with _raises(ValueError, r"axis_resources assigns axis 'k', which no input and no "
                                 r"axis_sizes entry defines \(defined: 'i'\)"):
            f(torch.zeros(4, 3))


def test_two_axes_on_one_resource_meeting_in_one_value():
    f = nx.xmap(lambda a, b: a * b, in_axes=(['a', ...], ['b', ...]), out_axes=['a', 'b', ...],
                axis_resources={'a': 'x', 'b': 'x'})
    with _mesh1():
        with _raises(ValueError, r"axes 'a' and 'b' are both mapped to .*'x'") as e:
            f(torch.zeros(2, 3), torch.zeros(4, 3))
    assert isinstance(e.value, nx.AxisResourceError)


def test_mesh_rank_differs_from_axis_names():
    with _raises(ValueError, r"devices has 1 dims \(shape \(1,\)\) but 2 axis names were given"):
        _par().Mesh(np.array(_par().local_devices()[:1]), ('x', 'y'))


def test_mesh_repeats_an_axis_name():
    with _raises(ValueError, r"repeated mesh axis name in \('x', 'x'\)"):
        _par().Mesh(np.array(_par().local_devices()[:1]).reshape(1, 1), ('x', 'x'))


def test_resource_that_is_not_a_mesh_axis_name():
    f = nx.xmap(ident, in_axes=['batch', ...], out_axes=['batch', ...],
                axis_resources={'batch': ['x', ['y']]})
    with _mesh1():
        with _raises(TypeError, r"axis_resources\['batch'\].*\['y'\] is not a mesh axis name"):
            f(torch.zeros(4, 3))


def test_axis_resources_not_a_dict():
    with _raises(TypeError, r"axis_resources must be a dict name -> resource"):
        nx.xmap(ident, in_axes=['i', ...], out_axes=['i', ...], axis_resources=['x'])


def test_optimizer_step_inside_jit():
    lin = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(lin.parameters())

    def step(x):
        opt.zero_grad()
        lin(x).sum().backward()
        opt.step()
    with _raises(nx.NamedAxisError, r"jit\(step\): the program calls Adam\.step\(\)\. An "
                                    r"optimizer keeps Python-side state"):
        nx.jit(step, backend='eager')(torch.zeros(2, 4))


def test_backward_inside_jit():
    lin = torch.nn.Linear(4, 3)

    def loss_step(x):
        loss = lin(x).sum()
        loss.backward()
        return loss.detach()
    with _raises(nx.NamedAxisError, r"jit\(loss_step\): the program calls \.backward\(\): it set "
                                    r"the \.grad of 2 tensor\(s\) of shape\(s\) \(3, 4\), \(3,\)"):
        nx.jit(loss_step, backend='eager')(torch.zeros(2, 4))


def test_counter_updated_and_read_as_a_number_inside_jit():
    bn = torch.nn.BatchNorm1d(3, momentum=None)
    with _raises(nx.NamedAxisError, r"jit\(<lambda>\): the program updates a closed-over "
                                    r"torch\.int64 tensor of shape \(\) in place and reads it"):
        nx.jit(lambda x: bn(x).sum(), backend='eager')(torch.zeros(4, 3))
