"""nx.jit of a program using nx.checkpoint with a selective-checkpoint ``policy``,
differentiated after the call.  torch's selective checkpointing, run under make_fx's
trace, tags nodes through fx's process-wide node meta and never clears it: AOT
autograd's partitioner failed with ``TypeError: '>' not supported between instances of
'NoneType' and 'NoneType'`` on that program and on every program nx.jit traced after it.
Reference: the eager gradients (a checkpoint never changes values)."""
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


def _xmap(body):
    return nx.xmap(body, in_axes=(['i', ...], [...]), out_axes=['i', ...])


def test_jit_with_checkpoint_policy_matches_eager_and_leaves_later_programs_alone():
    f = _xmap(lambda x, w: nx.checkpoint(lambda x, w: torch.sin(torch.cos(x * w) * w),
                                         policy=_save_sin)(x, w))
    for got, want in zip(_grads(nx.jit(f)), _grads(f)):
        torch.testing.assert_close(got, want)
    g = _xmap(lambda x, w: torch.tanh(x * w))   # a later program compiles as ever
    for got, want in zip(_grads(nx.jit(g)), _grads(g)):
        torch.testing.assert_close(got, want)
