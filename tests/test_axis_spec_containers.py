"""A spec's containers are its value's, as JAX 0.4.30 reads a pytree prefix: a tuple of
specs for a list (or a namedtuple) value, or a list of specs for a tuple output, is an
error there ("... specification must be a tree prefix of the corresponding value");
named_axes matched any tuple/list against any tuple/list. A list at the top of in_axes is
the argument tuple (as JAX converts it)."""
from __future__ import annotations

import collections

import pytest
import torch

import named_axes as nx

X = torch.arange(6.).reshape(2, 3)
P = collections.namedtuple("P", "a b")
I, T = ["i", ...], [None, "i"]


def test_in_axes_containers_must_be_the_values():
    # xmap(lambda d: d[0] + d[1], in_axes=((['i', ...], [None, 'i']),), ...)([x, x.T])
    # -> ValueError: xmap in_axes specification must be a tree prefix ...
    f = nx.xmap(lambda d: d[0] + d[1], in_axes=((I, T),), out_axes=I)
    with pytest.raises(nx.AxisSpecError, match=r"argument 0 is a tuple, but the value there "
                                                r"is a list of 2"):
        f([X, X.T])
    assert torch.equal(nx.xmap(lambda d: d[0] + d[1], in_axes=([I, T],), out_axes=I)(
        [X, X.T]), X * 2)
    # a namedtuple value takes a namedtuple spec (or one mapping for all of it)
    g = nx.xmap(lambda p: p.a + p.b, in_axes=((I, T),), out_axes=I)
    with pytest.raises(nx.AxisSpecError, match=r"is a tuple, but the value there is a P of 2"):
        g(P(X, X.T))
    assert torch.equal(nx.xmap(lambda p: p.a + p.b, in_axes=(P(I, T),), out_axes=I)(
        P(X, X.T)), X * 2)
    # a top-level list of specs is the argument tuple (JAX: tuple(in_axes))
    assert torch.equal(nx.xmap(lambda a, b: a + b, in_axes=[I, T], out_axes=I)(X, X.T), X * 2)


def test_out_axes_containers_must_be_the_outputs():
    # xmap(lambda a: (a, a * 2), in_axes=['i', ...], out_axes=[['i', ...], [None, 'i']])(x)
    # -> ValueError: xmap out_axes specification must be a tree prefix ...
    with pytest.raises(nx.AxisSpecError, match=r"out_axes: the spec at the output is a list, "
                                                r"but the value there is a tuple of 2"):
        nx.xmap(lambda a: (a, a * 2), in_axes=I, out_axes=[I, T])(X)
    with pytest.raises(nx.AxisSpecError, match=r"the output is a tuple, but the value there is "
                                                r"a P of 2"):
        nx.xmap(lambda a: P(a, a * 2), in_axes=I, out_axes=(I, T))(X)
    out = nx.xmap(lambda a: [a, a * 2], in_axes=I, out_axes=[I, T])(X)
    assert isinstance(out, list) and torch.equal(out[1], (X * 2).T)
    # too many out_axes entries: named as the output's, not "the call has 2 arguments"
    with pytest.raises(nx.AxisSpecError, match=r"the spec at the output has 3 entries but the "
                                                r"value there has 2"):
        nx.xmap(lambda a: (a, a), in_axes=I, out_axes=(I, I, I))(X)
    with pytest.raises(nx.AxisSpecError, match=r"the spec at output 1 is a dict"):
        nx.xmap(lambda a: (a, a), in_axes=I, out_axes=(I, {"q": I}))(X)


def test_pmap_keeps_a_top_level_list_and_checks_nested_ones():
    assert torch.equal(nx.pmap(lambda a, b: a + b, in_axes=[0, None])(X, torch.ones(3)), X + 1)
    with pytest.raises(nx.AxisSpecError, match=r"is a tuple, but the value there is a list"):
        nx.pmap(lambda l: l[0] + l[1], in_axes=((0, None),))([X, torch.ones(3)])
