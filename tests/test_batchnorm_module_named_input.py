"""torch.nn.BatchNorm modules on named inputs.  In eval mode: the module once per named
index.  In training mode with the module's own (plain) running statistics, every instance
would update them in turn: refused with the shared-write message, the statistics left as
they were.  An affine module (weight and bias nn.Parameters) used to skip that check and
fail with functorch's "Batch norm got a batched tensor" under the misleading fix
"positional shapes are per instance"."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import named_axes as nx


@pytest.mark.parametrize("make,shape", [(lambda: nn.BatchNorm1d(3), (2, 4, 3)),
                                        (lambda: nn.BatchNorm2d(3), (2, 4, 3, 5, 5)),
                                        (lambda: nn.BatchNorm1d(3, affine=False), (2, 4, 3))])
def test_training_batchnorm_with_shared_statistics_is_refused(make, shape):
    bn = make()
    x = torch.randn(shape)
    with pytest.raises(nx.AxisSizeError, match=r"writes into a plain tensor argument of shape "
                                               r"\(3,\) that every instance of the named axes "
                                               r"\{'a': 2\} shares"):
        bn(nx.named(x, ['a', ...]))
    assert torch.equal(bn.running_mean, torch.zeros(3))
    assert torch.equal(bn.running_var, torch.ones(3))


def test_eval_batchnorm_matches_the_loop():
    bn = nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(), bn.running_var.uniform_(1, 2), bn.weight.uniform_()
    x = torch.randn(2, 4, 3, 5, 5)
    got = nx.positional(bn(nx.named(x, ['a', ...])), ['a', ...])
    torch.testing.assert_close(got, torch.stack([bn(x[i]) for i in range(2)]))


@pytest.mark.parametrize("trace", ["eval_shape", "jit"])
def test_training_batchnorm_under_a_trace_names_the_running_statistics(trace):
    """Under eval_shape / nx.jit (no values to check on) functorch's message stands; the
    fix told beside it is about the shared running statistics, not positional shapes."""
    bn = nn.BatchNorm1d(3)
    f = nx.xmap(lambda x: bn(x), in_axes=['a', ...], out_axes=['a', ...])
    run = (lambda x: nx.eval_shape(f, x)) if trace == "eval_shape" else nx.jit(f)
    with pytest.raises(nx.AxisSizeError, match=r"(?s)fix: training mode updates the running "
                                               r"statistics in place.*eval mode"):
        run(torch.randn(2, 4, 3))
