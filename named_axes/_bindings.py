"""Direct bindings: operators, common Tensor methods and builtin torch pointwise functions
go straight to their rule, without the dispatcher's table lookup and frames.

The bindings are made from the op registry (:mod:`named_axes._registry`) once
:mod:`named_axes.rules` has filled it, and never import a rule module: the inline lanes
are the pointwise kernel's own functions (:mod:`named_axes._pointwise`).  Each direct path runs
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

from ._dispatch import dispatch
from ._errors import NamedAxisError
from ._pointwise import NO as _NO
from ._pointwise import by_name as _by_name
from ._pointwise import finish as _finish
from ._pointwise import inline_operand as _inline_operand
from ._pointwise import pointwise_rule
from ._registry import RECORDS, is_inplace
from ._switches import FASTPATH
from ._tensor import NamedTensor
from ._writes import check_inplace

_ndarray = np.ndarray
_pointwise = pointwise_rule(False)
_pointwise_inplace = pointwise_rule(True)

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
    writes = is_inplace(func)

    def call(args, kwargs):
        if kwargs and "out" in kwargs:   # out= has one rule, in the dispatcher
            return dispatch(func, args, kwargs)
        if writes:
            check_inplace(func, args, kwargs)
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
    for name, method, rec in _operators():
        if not FASTPATH:
            op = _dispatched(method, dispatch)
        elif rec.kind == "pointwise" and rec.arity == 2:
            op = (_inplace_operator if rec.inplace else _binary_operator)(method, dispatch)
        else:
            op = _generic_operator(method, rec.impl, dispatch)
        op.__name__ = op.__qualname__ = name
        setattr(NamedTensor, name, op)


def _operators():
    """``(name, Tensor method, record)`` of the operators with a rule: the pointwise
    ones and ``@``."""
    for f, rec in list(RECORDS.items()):
        name = getattr(f, "__name__", "") or ""
        if name.startswith("__") and getattr(_T, name, None) is f and (
                rec.kind == "pointwise" or name in ("__matmul__", "__rmatmul__")):
            yield name, f, rec


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
    for name, attr in list(vars(NamedTensor).items()):
        if not getattr(attr, "_dispatched", False) or name in _NOT_DIRECT:
            continue
        method = getattr(_T, name)
        rec = RECORDS.get(method)
        if rec is None:
            continue
        if rec.kind == "pointwise" and rec.arity == 1:
            m = _unary_method(method, dispatch, rec.inplace)
        else:
            m = _rule_method(method, rec.impl, dispatch)
        m.__name__ = m.__qualname__ = name
        m.__doc__ = attr.__doc__
        setattr(NamedTensor, name, m)


def _bind_functions() -> None:
    """``torch.tanh(x)`` and the other builtin torch functions with a pointwise rule: the
    ``__torch_function__`` hook calls them directly (see ``_tensor._DIRECT``)."""
    from . import _tensor

    for f, rec in RECORDS.items():
        if type(f) is _tensor._BUILTIN and rec.kind == "pointwise" and not rec.inplace:
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
