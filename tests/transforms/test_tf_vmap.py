"""nx.vmap: torch.func.vmap semantics, axis names, collectives, nesting with xmap."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

lax = pytest.importorskip("named_axes.lax")


def test_plain_delegates_to_torch_func():
    x, y = torch.randn(4, 3), torch.randn(3, 4)
    f = lambda a, b: a @ b
    ref = torch.func.vmap(f, in_dims=(0, 1))(x, y)
    assert torch.equal(nx.vmap(f, in_dims=(0, 1))(x, y), ref)


@pytest.mark.parametrize("in_dims,out_dims", [(0, 0), (1, 0), (0, 1), (-1, -1)])
def test_named_path_matches_loop(in_dims, out_dims):
    x = torch.randn(3, 4, 5)
    f = lambda r: r.softmax(-1) * 2
    got = nx.vmap(f, in_dims=in_dims, out_dims=out_dims, axis_name="i")(x)
    ref = torch.stack([f(s) for s in x.unbind(in_dims)], out_dims)
    torch.testing.assert_close(got, ref)


def test_pytree_in_dims_and_none():
    xs = {"a": torch.randn(4, 3), "b": torch.randn(3, 4)}
    w = torch.randn(3)
    f = lambda d, w: (d["a"] * w + d["b"], d["a"].sum())
    got = nx.vmap(f, in_dims=({"a": 0, "b": 1}, None), out_dims=(1, 0), axis_name="i")(xs, w)
    ref0 = torch.stack([xs["a"][i] * w + xs["b"][:, i] for i in range(4)], 1)
    ref1 = xs["a"].sum(1)
    torch.testing.assert_close(got[0], ref0)
    torch.testing.assert_close(got[1], ref1)


def test_psum_keeps_mapped_axis():
    x = torch.randn(4, 3)
    got = nx.vmap(lambda r: r / lax.psum(r, "i"), axis_name="i")(x)
    torch.testing.assert_close(got, x / x.sum(0, keepdim=True))
    idx = nx.vmap(lambda r: lax.axis_index("i"), axis_name="i")(x)
    assert torch.equal(idx, torch.arange(4))


def test_axis_size_without_mapped_inputs():
    got = nx.vmap(lambda: lax.axis_index("i") * 1.0, in_dims=(), axis_name="i", axis_size=3)()
    assert torch.equal(got, torch.tensor([0., 1., 2.]))


def test_vmap_of_xmap_and_xmap_of_vmap():
    x = torch.randn(5, 2, 3)
    inner = nx.xmap(lambda r: r.sum() * r, in_axes=["b", ...], out_axes=["b", ...])
    got = nx.vmap(inner, axis_name="v")(x)
    ref = torch.stack([torch.stack([r.sum() * r for r in s]) for s in x])
    torch.testing.assert_close(got, ref)
    outer = nx.xmap(nx.vmap(lambda r: r - r.mean(), in_dims=1), in_axes=["b", ...],
                    out_axes=["b", ...])
    ref2 = torch.stack([torch.stack([c - c.mean() for c in s.unbind(1)]) for s in x])
    torch.testing.assert_close(outer(x), ref2)


def test_collective_over_outer_xmap_axis_inside_vmap():
    x = torch.randn(2, 4, 3)       # xmap 'b' over dim 0, vmap 'i' over dim 0 of the rest
    f = nx.xmap(nx.vmap(lambda r: lax.psum(r, ("b", "i")), axis_name="i"),
                in_axes=["b", ...], out_axes=["b", ...])
    ref = x.sum((0, 1)).expand(2, 4, 3)
    torch.testing.assert_close(f(x), ref)


@pytest.mark.parametrize("chunk_size", [1, 2, 3])
def test_chunk_size_with_named_input(chunk_size):
    """Chunks smaller than the mapped axis (1, 2) run it in serial pieces; the results,
    out_dims and unmapped outputs included, equal one unchunked call's."""
    x = nx.named(torch.randn(2, 7, 3), {0: "q"})
    got = nx.vmap(lambda r: r.cumsum(0), in_dims=1, chunk_size=chunk_size)(x)
    ref = torch.stack([x._data[:, :, j].cumsum(1) for j in range(3)], 1)
    assert got.named_shape == {"q": 2}
    torch.testing.assert_close(nx.positional(got, {0: "q"}), ref)
    both = nx.vmap(lambda r, c: (r.cumsum(0), r.sum(), c * 2), in_dims=(1, None),
                   out_dims=(1, 0, None), chunk_size=chunk_size)(x, torch.ones(2))
    torch.testing.assert_close(nx.positional(both[0], {0: "q"}), ref.transpose(1, 2))
    assert both[1].named_shape == {"q": 2} and both[1].shape == (3,)
    torch.testing.assert_close(nx.positional(both[1], {0: "q"}), x._data.sum(1))
    torch.testing.assert_close(both[2], torch.full((2,), 2.0))


def test_errors():
    with pytest.raises(nx.AxisSizeError, match=r"inconsistent sizes for axis 'i': 4 .* vs 5"):
        nx.vmap(lambda a, b: a + b, axis_name="i")(torch.ones(4), torch.ones(5))
    with pytest.raises(nx.AxisSpecError, match=r"in_dim=2 for an input with 2 positional"):
        nx.vmap(lambda a: a, in_dims=2, axis_name="i")(torch.ones(4, 5))
    with pytest.raises(nx.AxisSpecError, match=r"no input is mapped .* axis_size"):
        nx.vmap(lambda a: a, in_dims=None, axis_name="i")(torch.ones(4))
    with pytest.raises(nx.AxisSpecError, match=r"axis 'b' is already bound"):
        nx.xmap(nx.vmap(lambda r: r, axis_name="b"), in_axes=["b", ...],
                out_axes=["b", ...])(torch.ones(2, 3))


def test_pytree_dims_on_the_named_path():
    """With an axis_name, in_dims/out_dims are pytree prefixes read by named_axes (not
    torch.func.vmap): dicts, tuples, None; each mismatch is our error naming it."""
    x, y = torch.randn(4, 3), torch.randn(3, 4)
    f = lambda d: d["a"] * d["b"].sum()   # noqa: E731
    got = nx.vmap(f, in_dims=({"a": 0, "b": 1},), axis_name="i")({"a": x, "b": y})
    torch.testing.assert_close(got, torch.vmap(f, in_dims=({"a": 0, "b": 1},))({"a": x, "b": y}))
    both = nx.vmap(lambda a: (a, nx.lax.psum(a, "i")), out_dims=(1, None), axis_name="i")(x)
    torch.testing.assert_close(both[0], x.T)
    torch.testing.assert_close(both[1], x.sum(0))
    V = lambda fn, **k: nx.vmap(fn, axis_name="i", **k)   # noqa: E731
    for call, error, msg in [
            (lambda: V(f, in_dims=({"a": 0},))({"a": x, "b": y}), nx.AxisSpecError,
             r"no entry for keys \[\"'b'\"\]"),
            (lambda: V(lambda a, b: a, in_dims=(0,))(x, x), nx.AxisSpecError,
             "1 entries for 2 values"),
            (lambda: V(lambda a: a, in_dims=({"a": 0},))(x), nx.AxisSpecError,
             r"\{'a': 0\} does not match the structure of the values \(Tensor\)"),
            (lambda: V(lambda a, s: a * s, in_dims=(0, 0))(x, 2.0), nx.AxisTypeError,
             "input 1: in_dims=0 for a float, which has no dims; use None for it"),
            (lambda: V(lambda a: a * 2, out_dims=None)(x), nx.AxisSpecError,
             "output 0: out_dims=None for an output that varies along the mapped axis"),
            (lambda: V(lambda a: (a, a), out_dims=(1,))(x), nx.AxisSpecError,
             "out_dims: 1 entries for 2 values")]:
        with pytest.raises(error, match=msg):
            call()
