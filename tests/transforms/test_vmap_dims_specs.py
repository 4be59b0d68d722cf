"""nx.vmap's named path reads in_dims/out_dims as torch.func.vmap and jax.vmap do: a
container must match the value's container type and keys, and a dim is an int or None
(JAX 0.4.30 / torch 2.x both refuse what these tests refuse; the named path accepted it)."""
from __future__ import annotations

import collections

import pytest
import torch

import named_axes as nx

X = torch.arange(6.).reshape(2, 3)
P = collections.namedtuple("P", "a b")


def V(f, **kw):
    return nx.vmap(f, axis_name="i", **kw)


def test_container_types_must_match():
    # torch.func.vmap(lambda p: p.a + p.b, in_dims=((0, 1),))(P(x, x.T)) -> ValueError
    # (jax.vmap: "in_axes specification must be a tree prefix of the corresponding value")
    with pytest.raises(nx.AxisSpecError, match="does not match the structure"):
        V(lambda p: p.a + p.b, in_dims=((0, 1),))(P(X, X.T))
    with pytest.raises(nx.AxisSpecError, match="does not match the structure"):
        V(lambda l: l[0] + l[1], in_dims=((0, 1),))([X, X.T])
    with pytest.raises(nx.AxisSpecError, match="does not match the structure"):
        V(lambda a: (a, a), out_dims=[0, 1])(X)
    # matching containers (a namedtuple spec for a namedtuple, a list for a list) work
    assert torch.equal(V(lambda p: p.a + p.b, in_dims=(P(0, 1),))(P(X, X.T)), X * 2)
    assert torch.equal(V(lambda l: l[0] + l[1], in_dims=([0, 1],))([X, X.T]), X * 2)
    out = V(lambda a: [a, a], out_dims=[0, 1])(X)
    assert isinstance(out, list) and torch.equal(out[1], X.T)
    # a list at the top of in_dims is the argument tuple (as jax.vmap reads it)
    assert torch.equal(V(lambda a, b: a + b, in_dims=[0, 1])(X, X.T), X * 2)


def test_dict_keys_must_match():
    # jax.vmap(lambda d: d['a'], in_axes=({'a': 0, 'b': 0, 'c': 0},))({'a': x, 'b': x})
    # -> ValueError: ... must be a tree prefix of the corresponding value
    with pytest.raises(nx.AxisSpecError, match=r"entries for keys \[\"'c'\"\], which the value "
                                                r"lacks"):
        V(lambda d: d["a"], in_dims=({"a": 0, "b": 0, "c": 0},))({"a": X, "b": X})


@pytest.mark.parametrize("dims", [True, 0.5, (0, False)])
def test_a_dim_is_an_int_or_none(dims):
    # jax.vmap(f, in_axes=True)(x) -> TypeError: vmap in_axes must be an int, None, or a
    # tuple ...; torch.func.vmap refuses True and 0.5 too (the named path read True as 1
    # and failed on 0.5 with "'float' object is not iterable")
    with pytest.raises(nx.AxisTypeError, match="is not a dim; use an int, None"):
        V(lambda a, *b: a, in_dims=dims)(X, X)
    with pytest.raises(nx.AxisTypeError, match="is not a dim; use an int, None"):
        V(lambda a: a, out_dims=True)(X)
