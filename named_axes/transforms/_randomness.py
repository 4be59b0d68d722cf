"""nx.vmap's ``randomness`` on its named path: random ops draw as ``torch.func.vmap``'s
do ('error' refuses them, 'different' draws per instance, 'same' once for all), by one
TorchFunctionMode entered per call (:class:`Draws`) and the dispatcher's hook.

>>> import torch, named_axes as nx
>>> _ = torch.manual_seed(0)
>>> out = nx.vmap(lambda r: r + torch.randn(2), randomness='same', axis_name='i')(
...     torch.zeros(3, 2))
>>> bool((out[0] == out[1]).all() and (out[1] == out[2]).all())
True
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from .. import _env
from .._dispatch import dispatch
from .._draws import draws
from .._tensor import NamedTensor
from .._torch_private import tree_flatten

__all__ = ["Draws"]


class Draws(torch.overrides.TorchFunctionMode):
    """While nx.vmap's named path runs, a random op draws as ``torch.func.vmap``'s
    ``randomness`` says for every nx.vmap axis bound ('error': refused, 'different': per
    instance, its operands lacking the axis too, 'same': one draw for all), by torch's
    vmap over the named axes (the dispatcher's fallback); xmap's axes draw per instance
    of those its operands carry.  The mode sees draws on plain tensors; the dispatcher
    hands it every op on named values (``_env._state.draws``: :func:`_through_mode`),
    which runs in its handler, where torch has popped the mode: the library's own torch
    calls there pass unseen, so a body that never draws pays one handler call per op on
    named values and one per torch call of its own on plain values."""

    def __enter__(self):
        self.saved, _env._state.draws = _env._state.draws, _through_mode
        return super().__enter__()

    def __exit__(self, *exc):
        _env._state.draws = self.saved
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if types == _OP:   # (an op on named values, sent by the dispatcher)
            return args[0].run()
        kwargs = kwargs or {}
        if _env._state.draws is None:
            return func(*args, **kwargs)
        if types == _NAMED:
            return _handle(func, args, kwargs)
        if not draws(func) or any(type(v) is NamedTensor
                                  for v in tree_flatten((args, kwargs))[0]):
            return func(*args, **kwargs)   # (named operands: the dispatcher's, below)
        with _env.untouched_draws():   # a plain draw
            func, args, kwargs = _with_stand_in(func, args, kwargs)
            return dispatch(func, args, kwargs) if "_axes" in kwargs else func(*args, **kwargs)


def _handle(func: Callable, args: tuple, kwargs: dict) -> Any:
    """An op on named values under :class:`Draws`: a random one by the dispatcher's
    fallback with its stand-in operand; the ops it runs itself draw untouched."""
    state = _env._state
    saved, state.draws = state.draws, None   # (_env.untouched_draws, inlined: hot)
    try:
        if not draws(func):
            return dispatch(func, args, kwargs)
        return dispatch(*_with_stand_in(func, args, kwargs))
    finally:
        state.draws = saved


class _Op:
    """An op on named values carried through a torch call to :class:`Draws`' handler
    (torch runs a mode's handler with the mode popped); with no mode to take it (called
    from inside the handler), its own ``__torch_function__`` runs it."""

    __slots__ = ("func", "args", "kwargs", "ran")

    def __init__(self, func: Callable, args: tuple, kwargs: dict) -> None:
        self.func, self.args, self.kwargs, self.ran = func, args, kwargs, False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return args[0].run()

    def run(self) -> Any:
        self.ran = True
        return _handle(self.func, self.args, self.kwargs)


_OP, _NAMED = (_Op,), (NamedTensor,)


def _through_mode(func: Callable, args: tuple, kwargs: dict) -> Any:
    """The dispatcher's hook under :class:`Draws`: ``func`` run in the mode's handler."""
    if torch.compiler.is_dynamo_compiling():   # (a trace sees no handler's pops)
        return _handle(func, args, kwargs)
    op = _Op(func, args, kwargs)
    try:
        return torch.neg(op)
    except TypeError:   # (torch functions disabled: no handler took it)
        if op.ran:
            raise
        return op.run()


def _with_stand_in(func: Callable, args: tuple, kwargs: dict) -> tuple:
    """``(func, args, kwargs)`` of a random op for the dispatcher's fallback (no rule:
    torch's vmap draws): with an operand standing in for the 'different' and 'error'
    nx.vmap axes that its operands lack (so the draw varies, or is refused, along them)."""
    carried = {n for v in tree_flatten((args, kwargs))[0] if type(v) is NamedTensor
               for n in v._names}
    extra = {n: s for f in _env.frames() if f.randomness not in (None, "same")
             for n, s in f.sizes.items() if n not in carried}
    if extra:
        kwargs = {**kwargs, "_axes": NamedTensor._wrap(
            torch.empty(()).expand(*extra.values()), tuple(extra))}
    return _drawing(func), args, kwargs


_env.DRAWS_SCOPE[:] = [Draws]   # (re-entered with the frames: _env.within)
_DRAWING: dict = {}   # op -> _drawing(op)


def _drawing(func: Callable) -> Callable:
    """``func`` taking (and ignoring) a stand-in operand ``_axes``; one per op."""
    call = _DRAWING.get(func)
    if call is None:
        @functools.wraps(func)
        def call(*args, _axes=None, **kwargs):
            if _axes is not None and _axes.is_meta:   # (the dispatcher's check on meta
                raise NotImplementedError             # tensors: it would draw for real)
            return func(*args, **kwargs)
        _DRAWING[func] = call
    return call
