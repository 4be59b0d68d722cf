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
])
def test_mapping_forms(spec, entries):
    assert is_mapping(spec)
    assert parse_mapping(spec).entries == entries


@pytest.mark.parametrize("spec", [['a', 'b'], ('a',), {'w': {0: 'i'}}, [{0: 'i'}, {}]])
def test_containers_are_not_mappings(spec):
    assert not is_mapping(spec)


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
    with pytest.raises(ValueError, match="neither an axis mapping"):
        match_prefix(3, 1, leaf, what='t')
