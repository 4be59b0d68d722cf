"""What ``nx.jit``'s trace of a program saw: a backward, and side effects it cannot keep.

A compiled program replays the traced tensor operations, not the trace's Python side
effects; those that would train wrongly without an error raise: a ``loss.backward()``
(:func:`check_grads_untouched`), a ``torch.optim`` step (:func:`refusing_optimizer_steps`),
a number read from a tensor the program updates (:func:`check_no_stale_numbers`).

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
import inspect
import threading
from typing import Iterable

import torch
from torch.fx.experimental.proxy_tensor import CONSTANT_NUMEL_LIMIT
from torch.utils.module_tracker import ModuleTracker

from .._errors import NamedAxisError
from .._torch_private import (EagerDispatchMode, FakeTensor, TorchDispatchMode,
                              disable_dispatch_modes, module_converting, op_schema,
                              tree_leaves)

__all__ = ["TraceProbe", "refusing_optimizer_steps", "check_grads_untouched",
           "check_no_stale_numbers", "preserving_writes", "storage_key", "written_tensors",
           "watching_modules", "closed_over_check"]

# torch's public answer to "is an autograd backward running now?" (``is_bw``; the
# tracker need not be entered for it)
_BACKWARD = ModuleTracker()

_ADVICE = ("Compute gradients with nx.grad / nx.value_and_grad and update the parameters "
           "functionally or in place under torch.no_grad() (docs/guide.md §4), or keep "
           ".backward() and opt.step() outside nx.jit: nx.jit(loss_fn)(...).backward() "
           "runs a compiled forward and backward.")


class _Keeper:
    """Keeps the values of tensors about to be written in place, to put them back."""

    def _keep(self, t: torch.Tensor) -> None:
        if id(t) not in self._kept:
            with disable_dispatch_modes():
                self._kept[id(t)] = (t, t.detach().clone())

    def restore(self) -> None:
        """Give the kept tensors their values back (latest first: a region kept twice
        gets its first value)."""
        with torch.no_grad():
            for t, value in reversed(list(self._kept.values())):
                t.copy_(value)


class TraceProbe(_Keeper, TorchDispatchMode):
    """Notes whether an autograd backward ran while the program was traced, and keeps the
    values of the real one-element tensors the program updates in place: ``make_fx``
    runs ops on those for real, so a closed-over counter (``BatchNorm``'s
    ``num_batches_tracked``) would advance twice on the first call (:meth:`restore`)."""

    def __init__(self) -> None:
        super().__init__()
        self.ran = False
        self._kept: dict = {}
        self._read: dict = {}   # real tensors read as Python numbers while tracing

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.ran and _BACKWARD.is_bw:
            self.ran = True
        for t in written_tensors(func, args, kwargs):
            if _is_real(t) and t.numel() <= CONSTANT_NUMEL_LIMIT:
                self._keep(t)
        if not torch.is_grad_enabled() and module_converting(inspect.currentframe()) and any(
                _is_real(a) for a in tree_leaves((args, kwargs))):
            raise NamedAxisError(
                f"jit({_tracing.name}): the program converts a module (Module.double(), "
                f".float(), .half(), .to(...) replace its parameters and buffers), which a "
                f"compiled program does not replay: the trace would leave its placeholders in "
                f"the module. Convert the module before calling the program (this call left "
                f"it unchanged).")
        if (torch.Tag.data_dependent_output in getattr(func, "tags", ()) and args
                and _is_real(args[0])):
            self._read.setdefault(id(args[0]), args[0])
        return func(*args, **kwargs)


class preserving_writes(_Keeper, EagerDispatchMode):
    """Undo, on exit, a call's in-place updates of tensors that existed before it (the
    program store's identifying run would otherwise advance closed-over state once more).

    >>> import torch
    >>> counter = torch.zeros(())
    >>> with preserving_writes():
    ...     y = (counter.add_(1) * 2).add_(1)   # y is the call's own
    >>> float(counter), float(y)
    (0.0, 3.0)
    """

    runs_values = True   # ops see real values: _instances may read them

    def __init__(self) -> None:
        super().__init__()
        self._made: set = set()   # the storages of the tensors the call made
        self._kept: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in written_tensors(func, args, kwargs):
            if storage_key(t) not in self._made:
                self._keep(t)
        given = {storage_key(a) for a in tree_leaves((args, kwargs))
                 if isinstance(a, torch.Tensor)}
        out = func(*args, **kwargs)
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, torch.Tensor) and storage_key(o) not in given:
                self._made.add(storage_key(o))   # new memory (not a view of an argument)
        return out

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        self.restore()
        self._kept.clear()
        return out


def storage_key(t: torch.Tensor):
    """What tells ``t``'s memory apart from other live tensors' (a view shares its
    base's): its storage's address, or ``t`` itself where it has none (empty, or a lazy
    device's tensor: XLA's)."""
    try:
        ptr = t.untyped_storage().data_ptr() if t.layout == torch.strided else 0
    except RuntimeError:
        ptr = 0
    return ptr if ptr else ("tensor", id(t))


def written_tensors(func, args: tuple, kwargs: dict) -> list:
    """The tensors an op call writes to in place (views as they are: see
    :func:`storage_key` for the memory they write)."""
    schema = op_schema(func)
    if schema is None or not schema.is_mutable:
        return []
    out = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        t = args[i] if i < len(args) else kwargs.get(arg.name)
        if isinstance(t, torch.Tensor):
            out.append(t)
    return out


def _is_real(t) -> bool:
    return isinstance(t, torch.Tensor) and not _is_traced(t)


def check_no_stale_numbers(name: str, probe: TraceProbe) -> None:
    """Raise if the traced program read a tensor it updates in place as a Python number:
    the trace baked the number in, so every later call would use it."""
    stale = [t for i, t in probe._read.items() if i in probe._kept]
    if stale:
        t = stale[0]
        raise NamedAxisError(
            f"jit({name}): the program updates a closed-over {t.dtype} tensor of shape "
            f"{tuple(t.shape)} in place and reads it as a Python number (float(), .item(), "
            "a comparison in an if): the trace bakes in the number it read, and every "
            "compiled call would use it again (BatchNorm with momentum=None reads its "
            "num_batches_tracked so). Keep the arithmetic on tensors, or pass the value as "
            "an argument.")


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


@contextlib.contextmanager
def watching_modules(into: dict):
    """While it lasts, each ``nn.Module`` called on this thread is put in ``into`` (by id)."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    thread = threading.get_ident()

    def note(module, args) -> None:
        if threading.get_ident() == thread:
            into.setdefault(id(module), module)

    handle = register_module_forward_pre_hook(note)
    try:
        yield
    finally:
        handle.remove()


def closed_over_check(consts: list, guard, modules: Iterable[torch.nn.Module]):
    """A check, True while a traced program's closed-over state is as the trace saw it:
    the tensors' properties (``guard``: ``_jit_keys.tensor_guard(consts)``), the modules'
    ``training`` flag and own parameters and buffers; None when there is nothing to check."""
    states = [(m, m.training, [*m.named_parameters(recurse=False),
                               *m.named_buffers(recurse=False)]) for m in modules]
    if guard is None and not states:
        return None
    return lambda: (guard is None or guard.check(*consts)) and all(
        m.training is on and all(getattr(m, n, None) is t for n, t in own)
        for m, on, own in states)


def check_grads_untouched(name: str, holders: Iterable[torch.Tensor], had: dict) -> None:
    """Raise if a backward in the traced program set the ``.grad`` of ``holders`` (``had``:
    id -> the ``.grad`` each came with); reset those to None first."""
    touched = _reset_traced_grads(t for t in holders if id(t) not in had
                                  or t.grad is not had[id(t)])
    if touched:
        raise NamedAxisError(
            f"jit({name}): the program calls .backward(): it set the .grad of "
            f"{len(touched)} tensor(s) of shape(s) {', '.join(map(str, touched))} while "
            "tracing, and a compiled program does not replay that: those .grad would "
            f"never be updated again (they are reset to None). {_ADVICE}")


def _reset_traced_grads(tensors: Iterable[torch.Tensor]) -> list:
    """Set to None each ``.grad`` the trace made (on leaves only); their tensors' shapes."""
    touched = [t for t in tensors if t.is_leaf and t.grad is not None and _is_traced(t.grad)]
    for t in touched:
        t.grad = None
    return [tuple(t.shape) for t in touched]


def _is_traced(t: torch.Tensor) -> bool:
    return isinstance(t, FakeTensor) or t.device.type == "meta"
