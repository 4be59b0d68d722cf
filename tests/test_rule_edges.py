"""Edges of the op rules (rules/): allclose broadcasting positional dims per instance,
hooks and autograd.grad laying named gradients out by name, 0-d flatten, std/var's
unbiased overload, new_* on a plain tensor with a named fill -- each once a wrong answer,
a refusal of a valid call or a raw error."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def test_new_full_of_plain_tensor_with_named_fill_is_a_named_axes_error():
    # plain.new_full(size, named) reached the new_* rule with a plain self and raised a
    # raw AttributeError ('Tensor' object has no attribute '_data'); the rule now hands
    # it to the vmap fallback, which reports it as a ShapeError.
    n = nx.named(torch.ones(2, 3), {0: "b"})
    with pytest.raises(nx.NamedAxisError):
        torch.zeros(2).new_full((2,), n.sum())


def test_allclose_broadcasts_positional_dims_per_instance():
    # torch.allclose broadcast the physical tensors, so a value with positional shape (3,)
    # was matched against the other's positional rows with its named axis (a silently
    # wrong False); per instance, allclose(a[i], b[i]) broadcasts a[i] over b[i]'s rows.
    rows = torch.tensor([[0.0, 0, 0], [1, 1, 1]])
    a = nx.named(rows, "N ...")
    b = nx.named(rows[:, None, :].expand(2, 2, 3).contiguous(), "N ...")
    assert torch.allclose(a, b) and torch.allclose(b, a)
    assert not torch.allclose(a, b + 1)
    # equal compares positional shapes as they are: (3,) against (1, 3) differs
    c = nx.named(rows[:, None, :].contiguous(), "N ...")
    assert not torch.equal(a, c) and not torch.equal(c, a)
    assert torch.equal(a, nx.named(rows.T, {1: "N"}))


def test_std_var_legacy_unbiased_positional_bool():
    # x.std(True) is torch's std(unbiased=True) over every dim; the reduction rule read
    # the bool as a dim and raised a ShapeError ("tuple.index(x): x not in tuple").
    t = torch.randn(2, 3, 4)
    x = nx.named(t, {0: "b"})
    for op, unbiased in ((lambda v, u: v.std(u), True), (torch.var, False)):
        out = op(x, unbiased)
        assert out.named_shape == {"b": 2} and out.shape == ()
        want = torch.stack([op(t[i], unbiased) for i in range(2)])
        torch.testing.assert_close(out._data, want)


def test_flatten_of_positional_scalar_refuses_out_of_range_dims():
    # A named value with no positional dims flattened to (1,) whatever the dims; torch
    # refuses a dim outside [-1, 0] for a 0-d tensor (IndexError), so does the rule now.
    x = nx.named(torch.ones(2), "b ...")
    assert x.flatten().shape == (1,) and x.flatten(-1, 0).shape == (1,)
    for dims in ((1,), (2, 3), (0, -2)):
        with pytest.raises(IndexError):
            x.flatten(*dims)


def test_register_hook_result_with_names_in_another_order():
    # A hook returning a value whose named axes come in another order than the
    # tensor's had its physical data used as is: a silently transposed gradient when
    # the axes have equal sizes.
    base = torch.zeros(3, 3, requires_grad=True)
    x = nx.named(base * 1, "a b")
    w = nx.named(torch.arange(9.0).reshape(3, 3), "b a")   # w[b, a]
    x.register_hook(lambda g: w * g)
    (x * 1).sum().backward()
    torch.testing.assert_close(base.grad, torch.arange(9.0).reshape(3, 3).T)


def test_autograd_grad_outputs_with_names_in_another_order():
    # grad_outputs' physical data was passed as is: a named grad_output whose axes came
    # in another order than the output's gave a silently transposed gradient.
    base = torch.ones(3, 3, requires_grad=True)
    y = nx.named(base * 1, "a b") * 2
    go = nx.named(torch.arange(9.0).reshape(3, 3), "b a")
    (g,) = torch.autograd.grad(y, base, go)
    torch.testing.assert_close(g, 2 * torch.arange(9.0).reshape(3, 3).T)


def test_autograd_grad_broadcasts_a_plain_grad_output_over_the_named_axes_as_backward_does():
    base = torch.arange(6., requires_grad=True)
    y = nx.named(base.reshape(2, 3), "a ...") * 2
    seed = torch.tensor([1., 2., 3.])   # the same for every instance of 'a'
    (got,) = torch.autograd.grad(y, base, seed, retain_graph=True)
    y.backward(seed)
    assert torch.equal(got, base.grad) and torch.equal(got, (2 * seed).repeat(2))
    for bad in (torch.ones(2), nx.named(torch.ones(2), "a")):   # positional shape not (3,)
        with pytest.raises(nx.ShapeError, match=r"grad_output has positional shape .* but "
                                                r"its output has \(3,\)"):
            torch.autograd.grad(y, base, bad)
