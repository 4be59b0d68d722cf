"""nx.jit keys a call on which of its tensor arguments share memory (views of one
tensor, and where in it): the trace ties such arguments (an in-place update of one shows
in the other), so a program traced for aliased arguments must not serve distinct ones,
nor one traced for one overlap another."""
from __future__ import annotations

import torch

import named_axes as nx


def _bump_then_read(a, b):
    a.add_(1)
    return b * 2


def _eager(make):
    args = make()
    return _bump_then_read(*args), args


def test_aliased_then_distinct_then_overlapping_arguments():
    f = nx.jit(_bump_then_read)
    makers = [lambda: (lambda x: (x, x[:]))(torch.zeros(3)),
              lambda: (torch.zeros(3), torch.zeros(3)),
              lambda: (lambda x: (x[:3], x[1:]))(torch.zeros(4)),
              lambda: (lambda x: (x, x[:]))(torch.zeros(3))]
    for make in makers:
        want, want_args = _eager(make)
        args = make()
        torch.testing.assert_close(f(*args), want)
        torch.testing.assert_close(args, want_args)
