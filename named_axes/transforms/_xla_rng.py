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
import sys
from typing import Callable

import torch

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


def states(xla: bool = True) -> tuple:
    """The CPU generator's state, and XLA's where torch-xla is in use (imported) and
    ``xla`` (its runtime started: reading the state would start it).

    >>> import torch
    >>> s = states()
    >>> a = torch.rand(())
    >>> set_states(s)
    >>> bool(torch.rand(()) == a)
    True
    """
    if not xla or "torch_xla" not in sys.modules:
        return torch.get_rng_state(), None
    import torch_xla.core.xla_model as xm
    return torch.get_rng_state(), xm.get_rng_state()


def set_states(states: tuple) -> None:
    """Give the generators the ``states`` :func:`states` read."""
    cpu, xla = states
    torch.set_rng_state(cpu)
    if xla is not None:
        import torch_xla.core.xla_model as xm
        xm.set_rng_state(xla)
