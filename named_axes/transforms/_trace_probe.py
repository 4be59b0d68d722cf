"""What ``nx.jit``'s trace of a program saw: a backward, and side effects it cannot keep.

A compiled program replays the traced tensor operations only, not the trace's Python
side effects.  Two of those ran without an error and trained wrongly:

* ``loss.backward()`` inside the program set each parameter's ``.grad`` once, to a
  tracing placeholder, and never again;
* a ``torch.optim`` optimizer's ``step()`` created its state (step counts, moments)
  once, as tracing placeholders, and baked its step count into the update as a Python
  number: the compiled update restarted from step 1 on every call.

Both are errors now: :func:`refusing_optimizer_steps` makes an optimizer step inside
the trace raise before it touches its state, and :func:`check_grads_untouched` finds
the ``.grad`` a backward set on the program's inputs or closed-over tensors (resets it
to None, as it was: a real ``.grad`` stays real under fake tensors) and raises.

>>> import torch
>>> w = torch.nn.Parameter(torch.ones(2))
>>> opt = torch.optim.SGD([w], lr=0.1)
>>> with refusing_optimizer_steps("step"):
...     opt.step()
Traceback (most recent call last):
...
named_axes._errors.NamedAxisError: jit(step): the program calls SGD.step()...
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .._errors import NamedAxisError

__all__ = ["TraceProbe", "refusing_optimizer_steps", "check_grads_untouched"]

_graph_task_id = torch._C._current_graph_task_id

_ADVICE = ("Compute gradients with nx.grad / nx.value_and_grad and update the parameters "
           "functionally or in place under torch.no_grad() (docs/guide.md §4), or keep "
           ".backward() and opt.step() outside nx.jit: nx.jit(loss_fn)(...).backward() "
           "runs a compiled forward and backward.")


class TraceProbe(TorchDispatchMode):
    """Notes whether an autograd backward ran while the program was traced (the program
    computes gradients itself: ``value_and_grad``, a training step)."""

    ran = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.ran and _graph_task_id() != -1:
            self.ran = True
        return func(*args, **(kwargs or {}))


class _Tracing(threading.local):
    name: str | None = None


_tracing = _Tracing()


def _refuse_step(optimizer, args, kwargs) -> None:
    name = _tracing.name
    if name is None:   # another thread's optimizer, or no trace: not ours to judge
        return
    for group in optimizer.param_groups:   # a backward before the step set these
        _reset_traced_grads(group["params"])
    raise NamedAxisError(
        f"jit({name}): the program calls {type(optimizer).__name__}.step(). An optimizer "
        "keeps Python-side state (its step count and moments, created on its first "
        "step) that a compiled program cannot carry from call to call: the update would "
        f"restart from its first step on every call. {_ADVICE}")


@contextlib.contextmanager
def refusing_optimizer_steps(name: str):
    """While tracing ``name`` on this thread, a ``torch.optim`` step raises."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    before = _tracing.name
    _tracing.name = name
    handle = register_optimizer_step_pre_hook(_refuse_step)
    try:
        yield
    finally:
        handle.remove()
        _tracing.name = before


def check_grads_untouched(name: str, holders: Iterable[torch.Tensor]) -> None:
    """Raise if a backward in the traced program set the ``.grad`` of ``holders`` (the
    program's traced inputs and closed-over tensors); reset those to None first."""
    touched = _reset_traced_grads(holders)
    if touched:
        raise NamedAxisError(
            f"jit({name}): the program calls .backward(): it set the .grad of "
            f"{len(touched)} tensor(s) of shape(s) {', '.join(map(str, touched))} while "
            "tracing, and a compiled program does not replay that: those .grad would "
            f"never be updated again (they are reset to None). {_ADVICE}")


def _reset_traced_grads(tensors: Iterable[torch.Tensor]) -> list:
    """Set to None each ``.grad`` the trace made; their tensors' shapes."""
    touched = []
    for t in tensors:
        grad = t.grad
        if grad is not None and _is_traced(grad):
            touched.append(tuple(t.shape))
            t.grad = None
    return touched


def _is_traced(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor) or t.device.type == "meta"
