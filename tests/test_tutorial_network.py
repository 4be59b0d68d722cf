"""The tutorial's named network, ported line by line, equals its positional version
(loss and gradients), eagerly, under torch.func.grad, make_fx and torch.compile."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import named_axes as nx
from named_axes.nn import relu


# -- the tutorial, positional ----------------------------------------------------------

def predict(w1, w2, images):
    hiddens = torch.relu(images @ w1)
    logits = hiddens @ w2
    return logits - torch.logsumexp(logits, dim=1, keepdim=True)


def loss(w1, w2, images, labels):
    predictions = predict(w1, w2, images)
    targets = torch.nn.functional.one_hot(labels, predictions.shape[-1])
    losses = torch.sum(targets * predictions, dim=1)
    return -torch.mean(losses, dim=0)


# -- the tutorial, named (line by line) ---------------------------------------------------

def named_predict(w1, w2, image):
    hidden = relu(nx.lax.pdot(image, w1, 'inputs'))
    logits = nx.lax.pdot(hidden, w2, 'hidden')
    return logits - nx.logsumexp(logits, 'classes')


def named_loss(w1, w2, images, labels):
    predictions = named_predict(w1, w2, images)
    num_classes = nx.lax.psum(1, 'classes')
    targets = nx.one_hot(labels, num_classes, dim='classes')
    losses = nx.lax.psum(targets * predictions, 'classes')
    return -nx.lax.pmean(losses, 'batch')


in_axes = [['inputs', 'hidden', ...],
           ['hidden', 'classes', ...],
           ['batch', 'inputs', ...],
           ['batch', ...]]


def _data(batch=8, inputs=16, hidden=12, classes=4, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    w1 = torch.randn(inputs, hidden, generator=g, dtype=dtype)
    w2 = torch.randn(hidden, classes, generator=g, dtype=dtype)
    images = torch.randn(batch, inputs, generator=g, dtype=dtype)
    labels = torch.randint(0, classes, (batch,), generator=g)
    return w1, w2, images, labels


named_loss_x = nx.xmap(named_loss, in_axes=in_axes, out_axes=[...])


def test_loss_equals_positional():
    args = _data()
    torch.testing.assert_close(named_loss_x(*args), loss(*args))


def test_predictions_equal_positional():
    w1, w2, images, _ = _data()
    f = nx.xmap(named_predict, in_axes=in_axes[:3], out_axes=['batch', 'classes', ...])
    torch.testing.assert_close(f(w1, w2, images), predict(w1, w2, images))


def test_gradients_equal_positional():
    args = _data()
    got = torch.func.grad(named_loss_x, argnums=(0, 1))(*args)
    want = torch.func.grad(loss, argnums=(0, 1))(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    w1, w2 = (a.clone().requires_grad_() for a in args[:2])
    named_loss_x(w1, w2, *args[2:]).backward()
    torch.testing.assert_close(w1.grad, want[0])
    torch.testing.assert_close(w2.grad, want[1])


def test_gradcheck_through_the_named_loss():
    w1, w2, images, labels = _data(batch=3, inputs=4, hidden=5, classes=3)
    assert torch.autograd.gradcheck(lambda a, b: named_loss_x(a, b, images, labels),
                                    (w1.requires_grad_(), w2.requires_grad_()))


def test_make_fx_of_the_gradient_shows_collectives():
    args = _data(dtype=torch.float32)
    gm = make_fx(torch.func.grad(named_loss_x, argnums=(0, 1)))(*args)
    assert "named_axes.pdot" in gm.code and "named_axes.pmean" in gm.code
    for g, w in zip(gm(*args), torch.func.grad(loss, argnums=(0, 1))(*args)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_torch_compile_of_the_loss_matches():
    args = _data(dtype=torch.float32)
    compiled = torch.compile(named_loss_x, fullgraph=True)
    torch.testing.assert_close(compiled(*args), loss(*args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch,inputs,hidden,classes", [(1, 3, 2, 2), (5, 7, 3, 6)])
def test_shapes_vary(batch, inputs, hidden, classes):
    args = _data(batch, inputs, hidden, classes)
    torch.testing.assert_close(named_loss_x(*args), loss(*args))
