"""nx.jit's fast lane for pytrees of tensors (transforms/_jit_keys.py): calls repeating
the previous call's structure and tensor properties skip the cache key; any change --
a container's type or length, a dict's keys or their order, a leaf's shape, strides,
dtype or grad flag, a non-tensor leaf -- takes the full key.  Every call is checked
against the uncompiled function (generated trees and their mutations)."""
from __future__ import annotations

import random

import pytest
import torch

import named_axes as nx
from named_axes.transforms._jit_keys import structure_reader, tensor_guard


def weighted_sum(*args):
    """Every leaf counts with its own weight, so swapped or dropped leaves show (and a
    named leaf's names: its axes are summed in name order, each weighted by position)."""
    leaves = torch.utils._pytree.tree_leaves(args)
    total = torch.zeros(())
    for i, x in enumerate(leaves):
        if isinstance(x, nx.NamedTensor):
            d = x._data.float()
            pos = [j for j, n in enumerate(x.names) if n is not None][0]
            w = torch.arange(1, d.shape[pos] + 1, dtype=d.dtype) * (2 if x.names[pos] == "a"
                                                                   else 3)
            shape = [1] * d.dim()
            shape[pos] = -1
            total = total + (i + 1) * (d * w.reshape(shape)).sum()
        elif isinstance(x, torch.Tensor):
            total = total + (i + 1) * x.float().sum()
        else:
            total = total + (i + 1) * float(x)
    return total


def random_tree(rng: random.Random, depth: int = 0):
    kind = rng.choice(["tensor", "tensor", "named", "tuple", "list", "dict"] if depth < 3
                      else ["tensor", "named"])
    if kind == "tensor":
        return torch.randn([rng.randint(1, 3) for _ in range(rng.randint(0, 2))])
    if kind == "named":
        return nx.named(torch.randn(rng.randint(1, 3), 2), {0: rng.choice("ab")})
    items = [random_tree(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return items
    return {f"k{i}": v for i, v in enumerate(items)}


def mutations(tree):
    """Trees differing from ``tree`` in one way (structure or a leaf's properties)."""
    if isinstance(tree, nx.NamedTensor):
        other = "b" if tree.names[0] == "a" else "a"
        yield nx.named(tree._data, {0: other})                  # another name
        yield nx.named(tree._data, {1: tree.names[0]})          # the name elsewhere
        yield tree._data                                        # no names
        yield nx.named(tree._data.double(), {0: tree.names[0]})  # dtype
        return
    if isinstance(tree, torch.Tensor):
        yield torch.randn([*tree.shape, 2])                     # shape
        yield tree.double()                                     # dtype
        yield tree.clone().requires_grad_()                     # grad flag
        yield (tree,)                                           # a container instead
        if tree.dim() == 2 and tree.shape[0] > 1 and tree.shape[1] > 1:
            yield tree.t().contiguous().t()                     # strides
        return
    if isinstance(tree, dict):
        keys = list(tree)
        if len(keys) > 1:
            yield {k: tree[k] for k in reversed(keys)}          # key order
        yield {**{f"x{k}": v for k, v in tree.items()}}         # key names
        yield tuple(tree.values())                              # container type
        for k in keys:
            for m in mutations(tree[k]):
                yield {**tree, k: m}
        return
    yield list(tree) if isinstance(tree, tuple) else tuple(tree)  # container type
    yield type(tree)([*tree, torch.ones(())])                     # length
    yield type(tree)([*tree[:-1], 2.5])                           # a Python number leaf
    for i, x in enumerate(tree):
        for m in mutations(x):
            yield type(tree)([*tree[:i], m, *tree[i + 1:]])


@pytest.mark.parametrize("seed", range(12))
def test_generated_trees_and_their_mutations_match_eager(seed):
    rng = random.Random(seed)
    args = (random_tree(rng), random_tree(rng))
    f = nx.jit(weighted_sum, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(f(*args), weighted_sum(*args))
    assert f.stats()["fast_lane"] == 2
    for i in range(2):
        for m in mutations(args[i]):
            other = (m, args[1]) if i == 0 else (args[0], m)
            lane = f.stats()["fast_lane"]
            torch.testing.assert_close(f(*other), weighted_sum(*other))
            assert f.stats()["fast_lane"] == lane      # a new signature: the full key
            torch.testing.assert_close(f(*args), weighted_sum(*args))


def test_training_step_shape_uses_the_lane_with_new_tensors_each_step():
    def step(params, state, batch):
        grads = tuple(p * batch.sum() for p in params)
        new = tuple(p - 0.1 * g for p, g in zip(params, grads))
        return new, {"t": state["t"] + 1}

    f = nx.jit(step, backend="eager")
    params = (torch.randn(3), torch.randn(2, 2))
    state = {"t": torch.zeros(())}
    ref = (tuple(p.clone() for p in params), {"t": torch.zeros(())})
    for _ in range(4):
        batch = torch.randn(5)
        params, state = f(params, state, batch)
        ref = step(*ref, batch)
        for a, b in zip(params, ref[0]):
            torch.testing.assert_close(a, b)
    assert f.stats()["fast_lane"] == 3
    f.clear_cache()
    f(params, state, torch.randn(5))
    assert f.cache_size() == 1 and f.stats()["fast_lane"] == 3


def test_reader_refuses_what_the_lane_does_not_serve():
    t = torch.zeros(2)
    assert structure_reader((t, 3)) is None                      # a static leaf
    assert structure_reader(({1: t},)) is None                   # a non-string key
    assert structure_reader(()) is None                          # no tensor
    named = nx.named(torch.zeros(2), {0: "a"})
    read_named = structure_reader((named,))
    assert read_named((named,))[0] is named._data
    assert read_named((nx.named(torch.zeros(2), {0: "b"}),)) is None
    assert read_named((torch.zeros(2),)) is None
    read = structure_reader(([t, (t,)],))
    assert read(([t, (t,)],)) == [t, t]
    assert read(([t, [t]],)) is None and read(((t, (t,)),)) is None
    assert read(([t, (t,)], t)) is None                          # another argument count
    assert tensor_guard([t, 3]) is None
