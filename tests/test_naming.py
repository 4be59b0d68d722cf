"""PyTorch's named-tensor vocabulary on NamedTensors (issue 15 item 2): names, rename,
refine_names, align_to/align_as, flatten/unflatten by name, indexing by name, numel,
nx.norm's p vs dim."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

T = torch.arange(24.).reshape(2, 3, 4)


def X():
    return nx.named(T.clone(), "b s ...")


def test_names_are_named_axes_then_none_per_positional_dim():
    assert X().names == ("b", "s", None)
    assert nx.named(torch.zeros(3), {}).names == (None,)
    assert nx.named(torch.zeros(3), "a").names == ("a",)


def test_numel_counts_positional_elements():
    x = X()
    assert x.numel() == 4 and x.numel() == x.shape.numel()
    assert (x.sum() / x.numel()).named_shape == {"b": 2, "s": 3}


def test_rename():
    x = X()
    y = x.rename(b="batch")
    assert y.named_shape == {"batch": 2, "s": 3}
    assert x.rename({"b": "x", "s": "b"}).named_shape == {"x": 2, "b": 3}
    torch.testing.assert_close(nx.positional(y, "batch s ..."), T)
    with pytest.raises(nx.AxisSpecError, match="no named axis 'q'"):
        x.rename(q="r")
    with pytest.raises(nx.AxisSpecError, match="two axes named 's'"):
        x.rename(b="s")
    with pytest.raises(nx.AxisTypeError, match="align_to"):
        x.rename(None)
    with pytest.raises(nx.AxisTypeError, match="refine_names"):
        x.rename("a", "b")


def test_refine_names():
    x = nx.named(T, {})
    assert x.refine_names("a", None, "c").named_shape == {"a": 2, "c": 4}
    assert x.refine_names(..., "c").named_shape == {"c": 4}
    y = x.refine_names("a", ...)
    assert y.shape == (3, 4)
    torch.testing.assert_close(nx.positional(y, "a ..."), T)
    with pytest.raises(nx.AxisSpecError, match="add '...'"):
        x.refine_names("a")
    with pytest.raises(nx.AxisTypeError):
        x.refine_names(0, ...)


def test_align_to_places_named_axes_like_positional():
    x = X()
    out = x.align_to("s", "b", ...)
    assert type(out) is torch.Tensor
    torch.testing.assert_close(out, T.permute(1, 0, 2))
    torch.testing.assert_close(x.align_to(..., "b", "s"), T.permute(2, 0, 1))
    torch.testing.assert_close(x.align_to("b", ..., "s"), T.permute(0, 2, 1))
    assert x.align_to("new", "b", "s", ...).shape == (1, 2, 3, 4)      # PyTorch: size-1 dims
    part = x.align_to("s", ...)
    assert isinstance(part, nx.NamedTensor) and part.named_shape == {"b": 2} and part.shape == (3, 4)
    with pytest.raises(nx.AxisSpecError, match="add '...'"):
        x.align_to("b", "s")


def test_align_as_broadcasts_against_positional_other():
    y = nx.named(torch.zeros(2, 3, 5, 4), "b s ...")
    x = nx.named(torch.arange(3.), "s")
    out = x.align_as(y)
    assert out.shape == (1, 3, 1, 1)
    assert (nx.positional(y) + out).shape == (2, 3, 5, 4)
    with pytest.raises(nx.AxisSpecError, match="'q'"):
        nx.named(torch.zeros(2), "q").align_as(y)


def test_flatten_and_unflatten_by_name():
    x = X()
    f = x.flatten(["b", "s"], "bs")
    assert f.named_shape == {"bs": 6} and f.shape == (4,)
    torch.testing.assert_close(nx.positional(f, "bs ..."), T.reshape(6, 4))
    g = x.flatten(["s", "b"], "sb")
    torch.testing.assert_close(nx.positional(g, "sb ..."), T.permute(1, 0, 2).reshape(6, 4))
    u = f.unflatten("bs", (("b", 2), ("s", 3)))
    torch.testing.assert_close(nx.positional(u, "b s ..."), T)
    v = f.unflatten("bs", {"b": -1, "s": 3})
    assert v.named_shape == {"b": 2, "s": 3}
    # positional forms still go to torch
    assert x.flatten().shape == (4,) and x.unflatten(0, (2, 2)).shape == (2, 2)
    with pytest.raises(nx.AxisSizeError, match="cannot be split"):
        f.unflatten("bs", (("b", 4), ("s", 2)))
    with pytest.raises(nx.AxisSpecError, match="no named axis 'q'"):
        x.flatten(["b", "q"], "f")


def test_indexing_by_name():
    x = X()
    one = x[{"b": 1}]
    assert one.named_shape == {"s": 3}
    torch.testing.assert_close(nx.positional(one, "s ..."), T[1])
    sl = x[{"s": slice(0, 2)}]
    assert sl.named_shape == {"b": 2, "s": 2}
    torch.testing.assert_close(nx.positional(sl, "b s ..."), T[:, :2])
    pick = x[{"b": torch.tensor([1, 1, 0])}]
    torch.testing.assert_close(nx.positional(pick, "b s ..."), T[[1, 1, 0]])
    mixed = x[{"b": -1, "s": 2, 0: slice(1, 3)}]
    torch.testing.assert_close(nx.positional(mixed, {}), T[-1, 2, 1:3])
    with pytest.raises(nx.AxisSizeError, match="out of range for axis 'b'"):
        x[{"b": 2}]
    with pytest.raises(nx.AxisSpecError, match="no named axis 'q'"):
        x[{"q": 0}]


def test_string_index_is_a_clear_error():
    with pytest.raises(nx.AxisTypeError, match=r"x\['b'\]: a string is not an index.*x\[\{'b': 3\}\]"):
        X()["b"]
    with pytest.raises(TypeError):           # still a TypeError, as before
        X()["b"] = 0


def test_setitem_by_name():
    x = X()
    x[{"b": 1, "s": slice(0, 2)}] = -1.0
    want = T.clone()
    want[1, :2] = -1.0
    torch.testing.assert_close(nx.positional(x, "b s ..."), want)


def test_naming_verbs_refuse_axes_bound_by_xmap():
    def f(x):
        return x.rename(b="c").sum("c")
    with pytest.raises(nx.AxisSpecError, match="bound by an enclosing xmap"):
        nx.xmap(f, in_axes=["b", ...], out_axes=[...])(torch.ones(2, 3))

    def g(x):       # a local name is fine inside xmap
        return nx.named(x, "k ...").rename(k="j").sum("j")
    out = nx.xmap(g, in_axes=["b", ...], out_axes=["b", ...])(torch.ones(2, 3, 4))
    torch.testing.assert_close(out, torch.full((2, 4), 3.))


def test_reductions_take_dim_names_and_norm_reads_p_positionally():
    x = nx.named(torch.ones(2, 4), {0: "classes"})
    torch.testing.assert_close(nx.norm(x, dim="classes"), torch.full((4,), 2 ** 0.5))
    torch.testing.assert_close(nx.norm(x, 1, dim="classes"), torch.full((4,), 2.))
    torch.testing.assert_close(nx.norm(x, p=1, axis="classes"), torch.full((4,), 2.))
    with pytest.raises(nx.AxisTypeError, match=r"order p .* nx.norm\(x, dim='classes'\)"):
        nx.norm(x, "classes")
    for f in ("sum", "mean", "amax", "logsumexp", "std"):
        assert getattr(nx, f)(x, dim="classes").shape == (4,)
        assert getattr(x, f)("classes").shape == (4,)
