"""The random state of a checkpointed function on XLA tensors, replayed by its recomputation.

``torch.utils.checkpoint`` restores the random state of its inputs' device through
``torch.<device type>`` (the device-module protocol CUDA, XPU and MPS follow), which
torch-xla 2.9 does not register, and ``torch_xla.utils.checkpoint`` is reentrant only
(no ``torch.autograd.grad``, which ``nx.grad`` uses).  So ``nx.checkpoint`` runs torch's
checkpoint with ``preserve_rng_state=False`` and :func:`replaying` makes the recomputation
draw what the forward drew: it records the CPU and XLA generators' states at the first
call and sets them again around each later one.
"""
from __future__ import annotations

import functools
from typing import Callable

from .._draws import set_states, states

__all__ = ["replaying", "states", "set_states"]


def replaying(fun: Callable) -> Callable:
    """``fun`` whose calls after the first start from the random state the first had, and
    leave the generators as they found them.

    >>> import torch
    >>> from named_axes.transforms._xla_rng import replaying
    >>> f = replaying(lambda: torch.rand(()))   # (and XLA's generator, where torch-xla is in use)
    >>> bool(f() == f())
    True
    """
    first: list = []

    @functools.wraps(fun)
    def call(*args, **kwargs):
        if not first:
            first.append(states())
            return fun(*args, **kwargs)
        now = states()
        set_states(first[0])
        try:
            return fun(*args, **kwargs)
        finally:
            set_states(now)

    return call
