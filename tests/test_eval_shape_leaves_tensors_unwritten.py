"""nx.eval_shape writes no real tensor: an op writing into a tensor the program closes
over (a module's buffer, a counter) runs on that tensor's fake.  JAX's eval_shape has
no effects; ours used to run such an op for real when all its operands were real
(BatchNorm's num_batches_tracked counted the eval_shape call; w.add_(1) changed w)."""
from __future__ import annotations

import torch
from torch import nn

import named_axes as nx


def test_eval_shape_of_a_training_batchnorm_leaves_its_buffers():
    bn = nn.BatchNorm1d(3)
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    s = nx.eval_shape(bn, torch.randn(4, 3))
    assert (s.shape, s.named_shape) == ((4, 3), {})
    for k, v in bn.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_eval_shape_leaves_a_closed_over_tensor_unwritten():
    w = torch.zeros(3)

    def f(x):
        w.add_(1)
        w[:2].mul_(2)
        return x + w, w.sum()

    f_named = nx.xmap(f, in_axes=['b', ...], out_axes=(['b', ...], []))
    s, t = nx.eval_shape(f_named, torch.ones(5, 3))
    assert (s.shape, s.named_shape, t.shape) == ((5, 3), {}, ())
    assert torch.equal(w, torch.zeros(3))
