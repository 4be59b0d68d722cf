"""A jitted program that calls ``nn.Module``s follows their state as eager code does:
``eval()`` / ``train()``, a replaced weight, and a weight whose shape or dtype changed in
place (``.data =``) each give eager's result (the program is traced again, or one traced
before for that state runs), never the stale program's."""
from __future__ import annotations

import torch

import named_axes as nx


class _Doubles(torch.nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x


def test_train_eval_flag_seen_by_the_fast_lane():
    m = _Doubles()
    f = nx.jit(lambda x: m(x) + 1)
    x = torch.ones(3)
    for training in (True, True, False, False, True, False):
        m.train(training)
        torch.testing.assert_close(f(x), m(x) + 1)


def test_batch_norm_eval_uses_running_stats():
    bn = torch.nn.BatchNorm1d(2)
    f = nx.jit(lambda x: bn(x).sum(0), backend="eager")
    x = torch.randn(4, 2)
    with torch.no_grad():
        f(x)
        bn.eval()
        torch.testing.assert_close(f(x), bn(x).sum(0))


def test_dropout_eval_is_identity():
    m = torch.nn.Dropout(0.5)
    f = nx.jit(lambda x: m(x), backend="eager")
    x = torch.ones(8)
    f(x)
    m.eval()
    torch.testing.assert_close(f(x), x)


def test_replaced_and_reshaped_weights():
    lin = torch.nn.Linear(2, 2)
    f = nx.jit(lambda x: lin(x))
    x = torch.ones(1, 2)
    with torch.no_grad():
        f(x)
        lin.weight = torch.nn.Parameter(torch.zeros(2, 2))
        torch.testing.assert_close(f(x), lin(x))
        lin.weight.data = torch.ones(3, 2)
        lin.bias.data = torch.zeros(3)
        torch.testing.assert_close(f(x), lin(x))
