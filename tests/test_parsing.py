"""Axis specs: the mapping forms, and pytree prefix matching."""
from __future__ import annotations

import pytest

from named_axes._parsing import is_mapping, match_prefix, parse_mapping


@pytest.mark.parametrize("spec,entries", [
    ({0: 'a', 2: 'b'}, ((0, 'a'), (2, 'b'))),
    ({-1: 'a'}, ((-1, 'a'),)),
    (['a', 'b', ...], ((0, 'a'), (1, 'b'))),
    (('a', ...), ((0, 'a'),)),
    ('batch seq ...', ((0, 'batch'), (1, 'seq'))),
    ('batch', ((0, 'batch'),)),
    ({}, ()),
    ([...], ()),
    # JAX 0.4.30 reads a list/tuple of names (None skips a position) as ONE mapping
    (['a', 'b'], ((0, 'a'), (1, 'b'))),
    (('a',), ((0, 'a'),)),
    ([None, 'a'], ((1, 'a'),)),
    ([None, 'a', ...], ((1, 'a'),)),
    ([], ()),
])
def test_mapping_forms(spec, entries):
    assert is_mapping(spec)
    assert parse_mapping(spec).entries == entries


@pytest.mark.parametrize("spec,rank", [
    (['a', 'b'], 2), (('a',), 1), ([None, 'a'], 2), ([], 0), (['a', ...], None),
    ({0: 'a'}, None), ('a b', None), ({}, None)])
def test_rank_assertion(spec, rank):
    # jax.experimental.maps._parse_entry: a list without ... is AxisNamePosWithRank
    assert parse_mapping(spec).rank == rank


def test_rank_mismatch_names_spec_and_ranks():
    with pytest.raises(ValueError, match=r"argument 1: axis mapping \['i', 'j'\] names every "
                                         r"axis .* asserts rank 2, but the value has rank 3"):
        parse_mapping(['i', 'j']).resolve(3, what='argument 1')
    assert parse_mapping(['i', 'j']).resolve(2, what='x') == ((0, 'i'), (1, 'j'))


# JAX: _is_axes_leaf is False for these (an element/value that is a container or None)
@pytest.mark.parametrize("spec", [{'w': {0: 'i'}}, [{0: 'i'}, {}], [['i', ...], ['j', ...]],
                                  ({0: 'i'}, 'j'), {'w': None}, {0: ['i']}])
def test_containers_are_not_mappings(spec):
    assert not is_mapping(spec)


def test_dict_of_names_with_non_int_keys_is_a_bad_mapping():
    # JAX: xmap(f, in_axes={'w': 'i'}, ...) -> TypeError "Value mapping specification ..."
    assert is_mapping({'w': 'i'})
    with pytest.raises(TypeError, match=r"key 'w' is not a position"):
        parse_mapping({'w': 'i'})


def test_output_path_labels():
    from named_axes._parsing import path_str
    assert path_str(('q', 0), 'output') == "output['q'][0]"
    assert path_str((1, 'w'), 'output') == "output 1['w']"
    assert path_str((), 'output') == "the output"
    assert path_str((1, 'w')) == "argument 1['w']"


def test_resolve_negative_and_sorted():
    m = parse_mapping({-1: 'c', 0: 'a'})
    assert m.resolve(3, what='x') == ((0, 'a'), (2, 'c'))


def test_match_prefix_mapping_covers_subtree():
    tree = ({'w': 1, 'b': 2}, [3, 4])
    pairs = match_prefix(({'w': ['i', ...], 'b': {}}, ['j', ...]), tree,
                         lambda t: not isinstance(t, (tuple, list, dict)), what='test')
    assert [(p, leaf, m.names) for p, leaf, m in pairs] == [
        ((0, 'w'), 1, ('i',)), ((0, 'b'), 2, ()), ((1, 0), 3, ('j',)), ((1, 1), 4, ('j',))]


def test_match_prefix_errors():
    leaf = lambda t: not isinstance(t, (tuple, list, dict))  # noqa: E731
    with pytest.raises(ValueError, match="keys"):
        match_prefix({'w': {}, 'q': {}}, {'w': 1, 'b': 2}, leaf, what='t')
    with pytest.raises(TypeError, match="neither an axis mapping"):
        match_prefix(3, 1, leaf, what='t')
