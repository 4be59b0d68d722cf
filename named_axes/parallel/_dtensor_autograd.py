"""The DTensor engine's torch-function mode: what the program's forward saves for the
backward, and in-place ops that write a DTensor into a plain tensor.

The backward of a program run on DTensors runs outside the engine (after ``xmap``
returned), where DTensor refuses to mix plain tensors and DTensors; the forward mixes
them under ``implicit_replication()``.  :func:`_saved_as_dtensors` makes every plain
tensor an op saves for the backward the replicated DTensor the forward treated it as.
"""
from __future__ import annotations

import torch

from .._errors import AxisResourceError
from .._registry import is_inplace_name
from .._torch_private import saved_tensors_hooks_disabled as hooks_disabled

__all__ = ["_saved_as_dtensors"]


def _saved_as_dtensors(dm):
    """A torch-function mode for the program's forward: a plain tensor that an op saves
    for the backward (a causal mask made with ``torch.arange``, mixed with DTensors under
    ``implicit_replication()``) is saved as the replicated DTensor the forward treated it
    as, so the backward -- which runs outside the engine, where DTensor refuses to mix
    plain tensors and DTensors -- sees DTensors only.

    The saved-tensor hooks are pushed around each op, not around the whole program:
    ``torch.func.grad``/``vjp``/``jvp`` (``nx.vjp``, ``nx.jvp``, per-example gradients)
    refuse to start while a saved-tensor hook is set, and inside them (where they
    disable the hooks) none is pushed: their own backward runs inside the engine."""
    from torch.distributed.tensor import DTensor, Replicate
    from torch.overrides import TorchFunctionMode

    rep = [Replicate()] * dm.ndim

    def pack(t):
        if type(t) is torch.Tensor and not t.requires_grad:
            return DTensor.from_local(t, dm, rep, run_check=False)
        return t

    def unpack(t):
        return t

    class _SaveAsDTensors(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if len(args) > 1 and type(args[0]) is torch.Tensor \
                    and any(isinstance(a, DTensor) for a in args[1:]):
                outplace = _out_of_place(func)
                if outplace is not None:
                    return _update_plain(args[0], outplace(*args, **kwargs), func)
            try:
                return _run_saving(func, args, kwargs, pack, unpack)
            except (AssertionError, NotImplementedError, RuntimeError) as e:
                _refuse(func, e)
                raise

    return _SaveAsDTensors()


def _run_saving(func, args: tuple, kwargs: dict, pack, unpack):
    """``func(*args, **kwargs)`` with what it saves for the backward packed by ``pack``."""
    # a backward pass saves nothing of its own, and a derivative rule run in it
    # may start torch.func (a custom_jvp's transpose), which refuses to run
    # under saved-tensor hooks
    if hooks_disabled() is not None or not torch.is_grad_enabled() \
            or func in _BACKWARD_PASSES:
        return func(*args, **kwargs)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return func(*args, **kwargs)


def _refuse(func, e: BaseException) -> None:
    """Raise the engine's own error where ``e`` (``func`` failing on DTensors) is
    DTensor failing at a backward pass or at forward-mode AD; return otherwise, for the
    caller to re-raise ``e``."""
    if func in _BACKWARD_PASSES and _raised_by_dtensor(e):
        raise AxisResourceError(
            f"a backward pass on the DTensor engine: DTensor cannot run the "
            f"backward of this program ({type(e).__name__}: {str(e)[:160]}; e.g. "
            f"torch 2.13's DTensor takes the aten.to.dtype_layout of a second "
            f"derivative for an out= variant); take this derivative without "
            f"mapping its axes to mesh axes (vectorized or SerialLoop), or on "
            f"backend='xla'") from None
    if not _in_forward_ad():
        return
    raise AxisResourceError(
        f"nx.jvp on the DTensor engine: DTensor cannot run forward-mode AD (jvp, "
        f"linearize, jacfwd, hessian) "
        f"through {getattr(func, '__name__', func)} here ({type(e).__name__}: "
        f"{str(e)[:160]}); compute this jvp without mapping its axes to mesh "
        f"axes (vectorized or SerialLoop), or on backend='xla'") from None


_BACKWARD_PASSES = (torch.autograd.grad, torch.autograd.backward, torch.Tensor.backward)


def _raised_by_dtensor(e: BaseException) -> bool:
    """Whether ``e`` is one of DTensor's own internal failures (an assertion or a missing
    rule raised in torch.distributed.tensor), not the program's."""
    if not isinstance(e, (AssertionError, NotImplementedError)):
        return False
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "torch/distributed/tensor" in tb.tb_frame.f_code.co_filename


def _out_of_place(func):
    """``Tensor.add`` for ``Tensor.add_`` / ``Tensor.__iadd__``; None if ``func`` is not
    a public in-place method (the registry owns the spelling)."""
    name = getattr(func, "__name__", "")
    if not is_inplace_name(name):
        return None
    if name.startswith("__i"):
        return getattr(torch.Tensor, "__" + name[3:], None)
    return None if name.startswith("_") else getattr(torch.Tensor, name[:-1], None)


def _update_plain(target: torch.Tensor, value, func) -> torch.Tensor:
    """``target`` (a plain tensor made in the program: replicated on every rank)
    updated in place with ``value``, the op's result computed out of place.  DTensor
    cannot write a DTensor into a plain tensor (a bare ``AssertionError``); the value is
    made whole on every rank (``full_tensor``, differentiable) and copied in."""
    from torch.distributed.tensor import DTensor

    full = value.full_tensor() if isinstance(value, DTensor) else value
    if full.shape != target.shape:
        raise AxisResourceError(
            f"{getattr(func, '__name__', func)}: the in-place target has shape "
            f"{tuple(target.shape)} but the result has shape {tuple(full.shape)}")
    return target.copy_(full)


def _in_forward_ad() -> bool:
    """Whether forward-mode AD is running (DTensor's forward mode is partial: an operand
    that is not a dual tensor fails inside DTensor, torch 2.13)."""
    from ..lax._ops import forward_mode

    return forward_mode()

