"""``torch.xla``: the device module torch's checkpointing looks up for XLA tensors.

``torch.utils.checkpoint`` saves and restores the random state of the device its inputs
live on through ``torch.<device type>`` (``get_rng_state``, ``set_rng_state``,
``device``), the device-module protocol CUDA, XPU and MPS follow.  torch-xla 2.9 does not
register one, so checkpointing XLA tensors fails with ``module 'torch' has no attribute
'xla'``, and its own ``torch_xla.utils.checkpoint`` is reentrant only (no
``torch.autograd.grad``, which ``nx.grad`` uses).  :func:`register` gives torch a small
module over ``torch_xla.core.xla_model``'s seed functions, through torch's
``_register_device_module``, the first time an XLA tensor is checkpointed.
"""
from __future__ import annotations

import contextlib
import types

import torch

__all__ = ["register"]


def register() -> None:
    """Make ``torch.xla`` (unless torch-xla or an earlier call already did)."""
    if hasattr(torch, "xla"):
        return
    import torch_xla
    import torch_xla.core.xla_model as xm

    def where(device) -> str:
        # checkpoint passes device indices (tensor.get_device()), fork_rng the same
        return f"xla:{device}" if isinstance(device, int) else str(device or torch_xla.device())

    module = types.ModuleType("torch.xla", __doc__)
    module._initialized = True               # checkpoint stashes the state only if set
    module.device = lambda index: contextlib.nullcontext()
    module.device_count = lambda: 1          # one SPMD (virtual) device per process
    module.get_rng_state = lambda device=None: xm.get_rng_state(where(device))
    module.set_rng_state = lambda state, device=None: xm.set_rng_state(state, where(device))
    from .._torch_private import register_device_module

    register_device_module("xla", module)
