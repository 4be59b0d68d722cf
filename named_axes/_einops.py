"""An einops backend for NamedTensor: rearrange/reduce/repeat act on positional axes.

einops finds backends among the subclasses of its ``AbstractBackend`` whose
framework module is imported; this one (framework ``named_axes``) claims
NamedTensors and reuses the torch backend, whose tensor methods our dispatcher
already runs on the positional axes, leaving the named axes alone.

>>> import torch, einops, named_axes as nx
>>> x = nx.named(torch.zeros(5, 2, 3), {0: 'batch'})
>>> y = einops.rearrange(x, 'h w -> (h w)')
>>> y.shape, y.named_shape
(torch.Size([6]), {'batch': 5})
"""
from __future__ import annotations

from ._tensor import NamedTensor

__all__ = ["install"]

_BACKEND: list = []  # einops holds subclasses weakly: keep ours alive


def install() -> bool:
    """Define the backend class if einops is installed (einops then finds it by itself)."""
    try:
        from einops._backends import TorchBackend
    except ImportError:  # einops is optional
        return False
    if _BACKEND:
        return True

    class NamedTensorBackend(TorchBackend):
        """einops on the positional axes of a NamedTensor."""

        framework_name = "named_axes"

        def is_appropriate_type(self, tensor):
            return isinstance(tensor, NamedTensor)

    _BACKEND.append(NamedTensorBackend)
    return True
