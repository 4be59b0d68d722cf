"""nx.ShapeDtypeStruct equality and hash agree: named shapes are order-free (SPEC §1), so
two structs equal up to the order of their named axes hash alike, as JAX 0.4.30's do
(the hash used to follow the order: equal structs were two entries of a set)."""
from __future__ import annotations

import torch

import named_axes as nx


def test_equal_structs_hash_alike_whatever_the_named_axes_order():
    a = nx.ShapeDtypeStruct((2,), torch.float32, {'a': 2, 'b': 3})
    b = nx.ShapeDtypeStruct((2,), torch.float32, {'b': 3, 'a': 2})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    s1 = nx.eval_shape(lambda x: x, nx.named(torch.ones(2, 3, 4), ['a', 'b', ...]))
    s2 = nx.eval_shape(lambda x: x, nx.named(torch.ones(3, 2, 4), ['b', 'a', ...]))
    assert {s1: 1}[s2] == 1
    assert a != nx.ShapeDtypeStruct((2,), torch.float32, {'a': 3, 'b': 2})
