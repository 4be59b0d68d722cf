"""Direct bindings: operators, common Tensor methods and builtin torch pointwise functions
go straight to their rule, without the dispatcher's table lookup and frames.

The rules themselves live in :mod:`named_axes._rules` (and ``_rules_shape``,
``_rules_matmul``, ``_rules_nn``); this module only wires NamedTensor's methods and the
``__torch_function__`` hook to them once the tables are filled.  Each direct path runs
the common case inline (same-layout operands, scalars, plain tensors that fit the
positional part) and hands everything else — unnamed NamedTensors, declined calls,
positional errors — to :func:`named_axes._dispatch.dispatch`, so errors are raised in
one place.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.ones(2, 3), {0: 'b'})
>>> (x * 2 + x).tanh().named_shape
{'b': 2}
"""
from __future__ import annotations

import numpy as np
import torch

from ._dispatch import RULES
from ._errors import NamedAxisError
from ._rules import (DUNDERS, UNARY_POINTWISE, _NO, _by_name, _finish, _inline_operand,
                     _pointwise, _pointwise_inplace)
from ._switches import FASTPATH
from ._tensor import NamedTensor

_ndarray = np.ndarray

_NT = NamedTensor
_T = torch.Tensor


# re-running these through the dispatcher after an error would repeat a side effect
_NOT_DIRECT = {"backward", "register_hook"}


def _has_unnamed(args: tuple, kwargs: dict) -> bool:
    """An empty-named NamedTensor among the operands: the dispatcher unwraps those."""
    for a in args:
        if type(a) is _NT and not a._names:
            return True
    if kwargs:
        for v in kwargs.values():
            if type(v) is _NT and not v._names:
                return True
    return False


def _direct(func, rule, dispatch):
    """``call(args, kwargs)``: ``rule`` run directly when the first operand carries names;
    the dispatcher when it doesn't, when an operand is an unnamed NamedTensor (it unwraps
    those), when the rule declines, and after a positional error (to raise its error
    naming the op).  While dynamo traces, the rule runs directly for unnamed operands too:
    the dispatcher's table lookup keyed by a Tensor method fails under torch 2.9's dynamo."""
    def call(args, kwargs):
        a0 = args[0] if args else None
        if type(a0) is _NT and (a0._names and not _has_unnamed(args, kwargs)
                                or torch.compiler.is_compiling()):
            try:
                out = rule(func, args, dict(kwargs) if kwargs else kwargs)
            except NamedAxisError:
                raise
            except (RuntimeError, IndexError, ValueError):
                return dispatch(func, args, kwargs)
            if out is not NotImplemented:
                return out
        return dispatch(func, args, kwargs)
    return call


def bind_all() -> None:
    """Install the direct paths (called once the rule tables are filled); none with
    ``NAMED_AXES_NO_FASTPATH=1`` (every op then goes through the dispatcher)."""
    _bind_operators()
    if FASTPATH:
        _bind_methods()
        _bind_functions()


def _bind_operators() -> None:
    """Point NamedTensor's operators straight at their rules: no table lookup per call
    (faster, and dynamo then needs no guard on the rule table)."""
    from ._dispatch import dispatch

    for name in DUNDERS + ["__matmul__", "__rmatmul__"]:
        method = getattr(_T, name, None)
        if method is None:
            continue
        rule = RULES.get(method)
        if not FASTPATH:
            op = _dispatched(method, dispatch)
        elif rule is _pointwise and name not in ("__neg__", "__pos__", "__abs__", "__invert__"):
            op = _binary_operator(method, dispatch)
        elif rule is _pointwise_inplace:
            op = _inplace_operator(method, dispatch)
        elif rule is None:
            op = _dispatched(method, dispatch)
        else:
            op = _generic_operator(method, rule, dispatch)
        op.__name__ = op.__qualname__ = name
        setattr(NamedTensor, name, op)


def _dispatched(method, dispatch):
    def op(self, *args):
        return dispatch(method, (self, *args), {})
    return op


def _generic_operator(method, rule, dispatch):
    call = _direct(method, rule, dispatch)

    def op(self, *args):
        return call((self, *args), {})
    return op


def _binary_operator(method, dispatch):
    """``self <op> other``: same-named operands, scalars and plain tensors that fit the
    positional part run inline; the rest goes to the rule (see ``_direct``)."""
    call = _direct(method, _pointwise, dispatch)

    def op(self, other):
        names = self._names
        if names:
            d0 = self._data
            b = _inline_operand(other, d0, names)
            if b is _NO:
                if type(other) is _ndarray:   # numpy operands act as tensors
                    return op(self, torch.from_numpy(other))
                if type(other) is _NT and other._names and not torch.compiler.is_compiling():
                    try:
                        out = _by_name(method, self, other)
                    except (RuntimeError, IndexError, ValueError):
                        out = None
                    if out is not None:
                        return out
                return call((self, other), {})
            try:
                out = method(d0, b)
            except (RuntimeError, IndexError, ValueError):
                return dispatch(method, (self, other), {})
            return _finish(out, names, method)
        return call((self, other), {})
    return op


def _inplace_operator(method, dispatch):
    call = _direct(method, _pointwise_inplace, dispatch)

    def op(self, other):
        names = self._names
        if names:
            d0 = self._data
            b = _inline_operand(other, d0, names)
            if b is _NO:
                if type(other) is _ndarray:   # numpy operands act as tensors
                    return op(self, torch.from_numpy(other))
                return call((self, other), {})
            try:
                method(d0, b)
            except (RuntimeError, IndexError, ValueError):
                return dispatch(method, (self, other), {})
            return self
        return call((self, other), {})
    return op


def _unary_method(method, dispatch, inplace: bool):
    """``x.tanh()`` and friends: the no-argument call inline."""
    call = _direct(method, _pointwise_inplace if inplace else _pointwise, dispatch)

    def m(self, *args, **kwargs):
        names = self._names
        if args or kwargs or not names:
            return call((self, *args), kwargs)
        try:
            out = method(self._data)
        except (RuntimeError, IndexError, ValueError):
            return dispatch(method, (self,), {})
        return self if inplace else _finish(out, names, method)
    return m


def _rule_method(method, rule, dispatch):
    call = _direct(method, rule, dispatch)

    def m(self, *args, **kwargs):
        return call((self, *args), kwargs)
    return m


def _bind_methods() -> None:
    """The Tensor methods that have a rule call it directly (see ``_direct``); the rest
    keep the dispatching methods ``_tensor`` bound at import."""
    from ._dispatch import dispatch

    unary = set(UNARY_POINTWISE)
    for name, attr in list(vars(NamedTensor).items()):
        if not getattr(attr, "_dispatched", False) or name in _NOT_DIRECT:
            continue
        method = getattr(_T, name)
        rule = RULES.get(method)
        if rule is None:
            continue
        if name in unary and rule in (_pointwise, _pointwise_inplace):
            m = _unary_method(method, dispatch, rule is _pointwise_inplace)
        else:
            m = _rule_method(method, rule, dispatch)
        m.__name__ = m.__qualname__ = name
        m.__doc__ = attr.__doc__
        setattr(NamedTensor, name, m)


def _bind_functions() -> None:
    """``torch.tanh(x)`` and the other builtin torch functions with a pointwise rule: the
    ``__torch_function__`` hook calls them directly (see ``_tensor._DIRECT``)."""
    from . import _tensor
    from ._dispatch import dispatch

    for f, rule in RULES.items():
        if type(f) is _tensor._BUILTIN and rule is _pointwise:
            _tensor._DIRECT[f] = _direct_pointwise(f, dispatch)


def _direct_pointwise(func, dispatch):
    """``torch.tanh(x)``: the one-argument call inline, the rest through ``_direct``."""
    general = _direct(func, _pointwise, dispatch)

    def call(args, kwargs):
        if len(args) == 1 and not kwargs:
            a0 = args[0]
            if type(a0) is _NT and a0._names:
                names = a0._names
                try:
                    out = func(a0._data)
                except (RuntimeError, IndexError, ValueError):
                    return dispatch(func, args, kwargs)
                return _finish(out, names, func)
        return general(args, kwargs)
    return call
