"""The partitioning plan, without devices: specs, placements, local shapes, SPEC §5 errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import named_axes as nx
from named_axes import parallel as P
from named_axes._errors import AxisResourceError, AxisTypeError
from named_axes.parallel._plan import make_plan, resource_conflicts


def test_spec_and_placements_of_tutorial_strategies():
    p = make_plan({"batch": "x", "hidden": "y"}, mesh_shape={"x": 2, "y": 2},
                  axis_sizes={"batch": 8, "hidden": 4, "inputs": 6})
    assert p.spec(("batch", "inputs"), 0) == (("x",), ())
    assert p.placements(("batch", "inputs")) == (("x", 0), ("y", None))
    assert p.placements(("inputs", "hidden"), 1) == (("x", None), ("y", 1))
    assert p.local_shape(("batch", "hidden", "inputs"), (8, 4, 6, 3)) == (4, 2, 6, 3)


def test_one_axis_over_two_mesh_axes_keeps_the_order():
    p = make_plan({"batch": ("y", "x")}, mesh_shape={"x": 2, "y": 3}, axis_sizes={"batch": 12})
    assert p.spec(("batch",), 1) == (("y", "x"), ())
    assert p.shards("batch") == 6 and not p.in_mesh_order("batch")
    assert p.lowering("psum", "batch") == "all-reduce over mesh axes (y, x)"


def test_no_mesh_in_scope():
    with pytest.raises(AxisResourceError, match=r"'batch'.*mesh axis 'x'.*no mesh is in scope"):
        make_plan({"batch": "x"}, mesh_shape=None, axis_sizes={"batch": 8})


def test_unknown_mesh_axis():
    with pytest.raises(AxisResourceError, match=r"'batch'.*mesh axis 'z'.*'x': 2"):
        make_plan({"batch": "z"}, mesh_shape={"x": 2}, axis_sizes={"batch": 8})


def test_size_not_divisible():
    with pytest.raises(AxisResourceError, match=r"'batch' has size 6.*not divisible by 4.*'x': 2 \* 'y': 2"):
        make_plan({"batch": ("x", "y")}, mesh_shape={"x": 2, "y": 2}, axis_sizes={"batch": 6})
    with pytest.raises(AxisResourceError, match=r"'seq' has size 5.*SerialLoop\(2\)"):
        make_plan({"seq": P.SerialLoop(2)}, mesh_shape=None, axis_sizes={"seq": 5})


def test_bad_resources():
    with pytest.raises(AxisTypeError, match="'a'"):
        make_plan({"a": ["x", ["y"]]}, mesh_shape={"x": 1}, axis_sizes={"a": 2})
    with pytest.raises(AxisResourceError, match="listed twice"):
        make_plan({"a": ("x", "x")}, mesh_shape={"x": 1}, axis_sizes={"a": 2})
    with pytest.raises(AxisResourceError, match="one SerialLoop per named axis"):
        make_plan({"a": ("x", P.SerialLoop(2), P.SerialLoop(2))}, mesh_shape={"x": 1},
                  axis_sizes={"a": 4})
    with pytest.raises(AxisResourceError, match=r"'a' has size 6.*not divisible by 4.*2 chunks"):
        make_plan({"a": ("x", P.SerialLoop(2))}, mesh_shape={"x": 2}, axis_sizes={"a": 6})


def test_mesh_axes_and_a_loop_on_one_axis():
    """JAX's ``axis_resources={'i': ('x', 'l')}``: chunks of the loop, each split over x."""
    p = make_plan({"a": ("x", P.SerialLoop(2))}, mesh_shape={"x": 2}, axis_sizes={"a": 8})
    assert p.mesh_axes == {"a": ("x",)} and p.loops == {"a": 2} and p.shards("a") == 4
    assert p.local_shape(("a",), (8, 3)) == (2, 3)
    assert p.lowering("psum", "a") == ("all-reduce over mesh axes (x) + accumulate over 2 "
                                       "serial chunks")
    with pytest.raises(AxisResourceError, match="positive int"):
        P.SerialLoop(0)


def test_conflicts_and_check_value():
    res = {"a": "x", "b": ("x", "y"), "c": "y", "d": P.SerialLoop(2), "e": P.SerialLoop(2)}
    assert resource_conflicts(res) == {frozenset("ab"), frozenset("bc")}
    p = make_plan(res, mesh_shape={"x": 2, "y": 2}, axis_sizes=dict(a=2, b=4, c=2, d=2, e=2))
    p.check_value(("a", "c", "d", "e"))
    with pytest.raises(AxisResourceError, match=r"'a' and 'b' are both mapped to mesh axis 'x'"):
        p.check_value(("a", "b"))


names = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=200, deadline=None)
@given(mesh=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       data=st.data())
def test_plan_properties(mesh, data):
    mesh_shape = {f"m{i}": s for i, s in enumerate(mesh)}
    axes = list(mesh_shape)
    res = {}
    for n in data.draw(st.lists(names, unique=True, max_size=3)):
        res[n] = tuple(data.draw(st.lists(st.sampled_from(axes), unique=True, min_size=1, max_size=2)))
    sizes = {n: int(np.prod([mesh_shape[a] for a in res.get(n, ())])) * data.draw(st.integers(1, 3))
             for n in "abcd"}
    p = make_plan(res, mesh_shape=mesh_shape, axis_sizes=sizes)
    value = tuple(data.draw(st.lists(names, unique=True, max_size=4)))
    clash = any(frozenset((x, y)) in resource_conflicts(res) for x in value for y in value)
    if clash:
        with pytest.raises(AxisResourceError):
            p.check_value(value)
        return
    pl = p.placements(value, 1)
    assert [a for a, _ in pl] == axes                    # one entry per mesh axis, in order
    shape = tuple(sizes[n] for n in value) + (5,)
    local = p.local_shape(value, shape)
    for dim, n in enumerate(value):                      # split iff mapped; exact division
        assert local[dim] * p.shards(n) == shape[dim]
        assert {a for a, d in pl if d == dim} == set(res.get(n, ()))
    assert local[-1] == 5


def test_mesh_object():
    devs = np.array(P.local_devices())
    m = P.Mesh(devs.reshape(1, 1), ("x", "y"))
    assert m.shape == {"x": 1, "y": 1} and m.size == 1
    assert P.current_mesh() is None
    with m, P.mesh(devs, ("z",)) as inner:
        assert P.current_mesh() is inner
    assert P.current_mesh() is None
    with pytest.raises(AxisResourceError, match="2 dims.*1 axis names"):
        P.Mesh(devs.reshape(1, 1), ("x",))
    with pytest.raises(AxisResourceError, match="repeated"):
        P.Mesh(devs.reshape(1, 1), ("x", "x"))
    with pytest.raises(AxisResourceError, match="twice"):
        P.Mesh(np.array([0, 0]), ("x",))


def test_xmap_errors_name_axis_sizes_and_resource():
    f = nx.xmap(lambda x: x, in_axes=["b", ...], out_axes=["b", ...], axis_resources={"b": "x"})
    with pytest.raises(AxisResourceError, match="no mesh is in scope"):
        f(torch.ones(4))
    with P.Mesh(np.array([0, 1, 2]), ("x",)):
        with pytest.raises(ValueError, match=r"'b' has size 4.*not divisible by 3"):
            f(torch.ones(4))
    with P.Mesh(np.array([0]), ("y",)):
        with pytest.raises(ValueError, match=r"mesh axis 'x'.*'y': 1"):
            f(torch.ones(4))


def test_conflict_at_the_op_that_creates_the_value():
    f = nx.xmap(lambda a, b: a.sum("a") + b.sum("b"), in_axes=(["a", ...], ["b", ...]),
                out_axes=[...], axis_resources={"a": "x", "b": "x"})
    g = nx.xmap(lambda a, b: a * b, in_axes=(["a", ...], ["b", ...]), out_axes=["a", "b", ...],
                axis_resources={"a": "x", "b": "x"})
    with P.Mesh(np.array(P.local_devices()), ("x",)):
        assert float(f(torch.ones(4), torch.ones(12))) == 16.0   # the tutorial's valid program
        with pytest.raises(ValueError, match=r"'a' and 'b'.*'x'"):
            g(torch.ones(4), torch.ones(12))


def test_single_device_mesh_runs_vectorized():
    f = nx.xmap(lambda x: x.sum("b"), in_axes=["b", ...], out_axes=[...],
                axis_resources={"b": "x"})
    with P.Mesh(np.array(P.local_devices()), ("x",)):
        assert torch.equal(f(torch.ones(4, 2)), torch.full((2,), 4.0))


def test_device_helpers():
    assert P.device_count() == P.local_device_count() == len(P.devices()) >= 1
    assert P.process_index() == 0 and P.process_count() == 1
    x = torch.arange(3.0)
    assert torch.equal(P.device_get(P.device_put({"a": x})["a"]), x)
    assert P.device_put_replicated(x, P.devices()).shape == (len(P.devices()), 3)
    assert torch.equal(P.device_put_sharded([x], P.devices()[:1]), x[None])
    with pytest.raises(ValueError, match="2 shards for 1 devices"):
        P.device_put_sharded([x, x], P.devices()[:1])
