"""NamedTensor itself: shapes, repr/_repr_html_, named/positional round trips, autograd."""
from __future__ import annotations

import random

import pytest
import torch

import named_axes as nx


def test_shapes_and_attributes():
    x = nx.named(torch.zeros(2, 3, 4, dtype=torch.float64), {1: "b", -1: "c"})
    assert x.shape == torch.Size([2]) and x.ndim == 1
    assert x.named_shape == {"c": 4, "b": 3}
    assert x.dtype == torch.float64 and x.device.type == "cpu"
    assert x.size(0) == 2 and x.size("c") == 4 and x.numel() == 2


def test_repr_shows_both_shapes_and_values():
    x = nx.named(torch.arange(6.0).reshape(2, 3), {0: "batch"})
    r = repr(x)
    assert r.startswith("NamedTensor(shape=(3,), named_shape={'batch': 2})")
    assert "'batch' × 3" in r and "5." in r
    g = nx.named(torch.ones(2, 2, requires_grad=True), {0: "b"})
    assert "requires_grad=True" in repr(g)
    h = x._repr_html_()
    assert "<table" in h and "&#x27;batch&#x27;" in h and "positional" in h and "</div>" in h
    i = nx.named(torch.arange(6).reshape(2, 3), "N C")
    assert repr(i).startswith("NamedTensor(shape=(), named_shape={'N': 2, 'C': 3}, "
                              "dtype=torch.int64)\nvalues laid out as ['N' × 'C']:")


def test_repr_of_values_without_data_shows_the_shapes_only():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = nx.named(torch.zeros(2, 3), "N")
        assert repr(x) == "NamedTensor(shape=(3,), named_shape={'N': 2})"
        assert "(no values: symbolic tensor)" in x._repr_html_()
    m = nx.named(torch.zeros(2, 3, device="meta"), "N")
    assert repr(m) == "NamedTensor(shape=(3,), named_shape={'N': 2}, device=meta)"


@pytest.mark.parametrize("seed", range(8))
def test_named_positional_round_trip(seed):
    rng = random.Random(seed)
    nd = rng.randint(1, 4)
    t = torch.rand([rng.randint(1, 4) for _ in range(nd)])
    k = rng.randint(1, nd)
    positions = rng.sample(range(nd), k)
    names = [f"n{i}" for i in range(k)]
    mapping = {(p - nd if rng.random() < 0.5 else p): n for p, n in zip(positions, names)}
    x = nx.named(t, mapping)
    assert x.named_shape == {n: t.shape[p] for p, n in zip(positions, names)}
    assert x.shape == tuple(s for i, s in enumerate(t.shape) if i not in positions)
    assert torch.equal(nx.positional(x, mapping), t)
    # a list spec names the leading axes; a string spec likewise
    lead = nx.positional(x, names + [...])
    assert torch.equal(nx.positional(nx.named(lead, " ".join(names) + " ..."), names + [...]), lead)


def test_positional_without_placing_every_name_is_an_error():
    x = nx.named(torch.zeros(2, 3), {0: "a", 1: "b"})
    with pytest.raises(ValueError, match="'b'"):
        nx.positional(x, {0: "a"})


def test_backward_and_grad_on_named_values():
    t = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    x = nx.named(t, {0: "b"})
    assert x.requires_grad
    loss = (x * x).sum()          # one scalar per 'b': backward sums the per-index losses
    assert loss.named_shape == {"b": 3}
    loss.backward()
    torch.testing.assert_close(t.grad, 2 * t.detach())


def test_named_leaf_grad_and_requires_grad_():
    x = nx.named(torch.rand(3, 4, dtype=torch.float64), {0: "b"})
    x.requires_grad_()
    assert x.requires_grad
    y = (x.exp() * 2).sum(("b", 0))
    y.backward()
    assert isinstance(x.grad, nx.NamedTensor) and x.grad.named_shape == {"b": 3}
    torch.testing.assert_close(nx.positional(x.grad, {0: "b"}), 2 * nx.positional(x, {0: "b"}).exp().detach())
    x.grad = None
    assert x.grad is None


def test_autograd_grad_and_hooks():
    x = nx.named(torch.rand(2, 3, dtype=torch.float64), {0: "b"}).requires_grad_()
    seen = []
    x.register_hook(lambda g: seen.append(g.named_shape))
    (gx,) = torch.autograd.grad((x ** 3).sum(), x)
    assert gx.named_shape == {"b": 2}
    torch.testing.assert_close(nx.positional(gx, {0: "b"}),
                               3 * nx.positional(x, {0: "b"}).detach() ** 2)
    assert seen == [{"b": 2}]


def test_backward_with_a_named_gradient():
    t = torch.rand(2, 3, dtype=torch.float64, requires_grad=True)
    x = nx.named(t, {0: "b"})
    g = nx.named(torch.tensor([1.0, 10.0], dtype=torch.float64), {0: "b"})
    (x * 1.0).sum().backward(g)
    torch.testing.assert_close(t.grad, torch.tensor([[1.0] * 3, [10.0] * 3], dtype=torch.float64))


def test_scalar_conversions_need_no_named_axes():
    x = nx.named(torch.rand(2), {0: "b"})
    with pytest.raises(TypeError, match=r"bool\(\) of a NamedTensor with named axes \{'b': 2\}"):
        bool(x)
    with pytest.raises(TypeError, match="ambiguous"):
        x.item()
    assert float(x.sum("b")) == pytest.approx(float(nx.positional(x).sum()))


def test_python_protocols_act_per_instance():
    """Iteration walks the first positional dim, each item keeping the named axes;
    ``in`` needs one answer, so it refuses while named axes remain; ``.real``/``.imag``
    keep the names."""
    t = torch.arange(6.).view(2, 3)
    x = nx.named(t, "N")                       # per instance: a vector of 3
    items = list(x)
    assert len(items) == 3 and all(i.named_shape == {"N": 2} and i.shape == () for i in items)
    torch.testing.assert_close(torch.stack([nx.positional(i, ["N"]) for i in items], 1), t)
    back = list(reversed(x))
    torch.testing.assert_close(nx.positional(back[0], ["N"]), t[:, 2])
    with pytest.raises(TypeError, match=r"`item in x` of a NamedTensor with named axes "
                                        r"\{'N': 2\} is ambiguous"):
        3.0 in x
    assert 3.0 in x.sum("N") and 4.0 not in x.sum("N")   # [3, 5, 7]: no named axis left
    z = nx.named(torch.complex(t, -t), "N")
    assert z.real.named_shape == z.imag.named_shape == {"N": 2}
    torch.testing.assert_close(nx.positional(z.imag, ["N", ...]), -t)
