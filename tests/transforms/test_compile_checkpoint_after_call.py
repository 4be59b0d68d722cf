"""torch.compile(xmap(f), fullgraph=True) where f uses nx.checkpoint and the gradient
is taken after the call: dynamo refused torch.utils.checkpoint's
``set_checkpoint_early_stop`` (and the wrapper's Python side effects inside its
checkpoint region) with a raw ``Unsupported`` error.  Reference: the eager values and
gradients (a checkpoint never changes values)."""
import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy

import named_axes as nx

X = torch.linspace(-1., 1., 12).reshape(3, 4)
W = torch.tensor([0.5, -1., 2., 0.25])


def _save_sin(ctx, op, *args, **kwargs):
    return (CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.sin.default
            else CheckpointPolicy.PREFER_RECOMPUTE)


def _grads(f):
    x, w = torch.nn.Parameter(X.clone()), torch.nn.Parameter(W.clone())
    out = f(x, w)
    return (out, *torch.autograd.grad((out * out).sum(), [x, w]))


@pytest.mark.parametrize("policy", [None, _save_sin])
def test_compiled_checkpoint_gradients_after_the_call(policy):
    scale = torch.tensor(1.5)   # closed over: dynamo traces the library's code
    f = nx.xmap(lambda x, w: nx.checkpoint(
        lambda x, w: torch.sin(torch.cos(x * w) * w) * scale, policy=policy)(x, w),
                in_axes=(['i', ...], [...]), out_axes=['i', ...])
    for got, want in zip(_grads(torch.compile(f, fullgraph=True)), _grads(f)):
        torch.testing.assert_close(got, want)
