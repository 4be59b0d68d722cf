"""``nx.nn``: the ``jax.nn`` conveniences, over positional dims or axis names.

Thin names over the dispatcher: activations (torch's own) act elementwise; ``softmax``,
``log_softmax``, ``logsumexp``, ``standardize`` and ``one_hot`` take ``axis`` as an
int, an axis name, or a tuple mixing both.  Defaults follow ``jax.nn``
(``gelu(approximate=True)``, ``axis=-1``).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(4, 2), {0: 'classes'})
>>> nx.positional(nx.nn.softmax(x, axis='classes'), {0: 'classes'})[:, 0]
tensor([0.2500, 0.2500, 0.2500, 0.2500])
>>> nx.nn.relu(torch.tensor([-1., 2.]))
tensor([0., 2.])
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from . import _functions as _f
from ._errors import AxisSpecError, AxisTypeError
from ._one_hot import one_hot as _one_hot
from ._tensor import NamedTensor

__all__ = ["relu", "relu6", "gelu", "silu", "swish", "sigmoid", "softplus", "log_sigmoid",
           "elu", "leaky_relu", "tanh", "softmax", "log_softmax", "logsumexp",
           "standardize", "normalize", "one_hot", "functional_call"]


# the elementwise activations are torch's own, which the dispatcher runs on NamedTensors
relu, sigmoid, tanh = torch.relu, torch.sigmoid, torch.tanh
relu6, silu, softplus, log_sigmoid = F.relu6, F.silu, F.softplus, F.logsigmoid
elu, leaky_relu = F.elu, F.leaky_relu
swish = silu


def gelu(x: Any, approximate: bool = True) -> Any:
    """GELU; ``approximate=True`` (jax's default) is the tanh form.

    >>> import torch, named_axes as nx
    >>> nx.nn.gelu(torch.tensor([0.]))
    tensor([0.])
    """
    return F.gelu(x, approximate="tanh" if approximate else "none")


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """log(sum(exp(x))) over ``axis`` (ints, names or a mix; None: every positional axis).

    >>> import torch, named_axes as nx
    >>> nx.nn.logsumexp(nx.named(torch.zeros(2, 3), 'c ...'), ('c', 0)).exp()
    tensor(6.)
    """
    return _f.logsumexp(x, axis, keepdims)


def log_softmax(x: Any, axis: Any = -1) -> Any:
    """x - logsumexp(x, axis): log-probabilities over ``axis``.

    >>> import torch, named_axes as nx
    >>> nx.nn.log_softmax(torch.zeros(2)).exp()
    tensor([0.5000, 0.5000])
    """
    return _f.log_softmax(x, axis)


def softmax(x: Any, axis: Any = -1) -> Any:
    """exp(x) / sum(exp(x), axis): probabilities over ``axis``.

    >>> import torch, named_axes as nx
    >>> nx.nn.softmax(torch.zeros(2))
    tensor([0.5000, 0.5000])
    """
    return _f.softmax(x, axis)


def standardize(x: Any, axis: Any = -1, mean: Any = None, variance: Any = None,
                epsilon: float = 1e-5) -> Any:
    """(x - mean) / sqrt(variance + epsilon), the statistics taken over ``axis``.

    >>> import torch, named_axes as nx
    >>> nx.nn.standardize(torch.tensor([1., 3.]))
    tensor([-1.0000,  1.0000])
    """
    axis = tuple(axis) if isinstance(axis, (tuple, list)) else axis
    if mean is None:
        mean = _f.mean(x, axis, True)
    if variance is None:
        variance = _f.mean(x * x, axis, True) - mean * mean
    return (x - mean) * torch.rsqrt(variance + epsilon)


normalize = standardize


def one_hot(x: Any, num_classes: int, *, dtype: torch.dtype | None = None,
            axis: Any = -1) -> Any:
    """One-hot encoding (jax.nn spelling; ``axis`` may be a name). See :func:`nx.one_hot`.

    >>> import torch, named_axes as nx
    >>> nx.nn.one_hot(torch.tensor([1]), 3, dtype=torch.float32)
    tensor([[0., 1., 0.]])
    """
    return _one_hot(x, num_classes, dim=axis, dtype=dtype)


def functional_call(module: torch.nn.Module, parameter_and_buffer_dicts: Any,
                    args: Any = None, kwargs: dict | None = None, *,
                    tie_weights: bool = True, strict: bool = False) -> Any:
    """``torch.func.functional_call`` that takes named values: ``module`` run with some of
    its parameters and buffers replaced (by dotted name), then restored.  Its arguments
    are torch's: a dict (or a tuple of dicts), ``tie_weights`` (a value given for one of
    tied parameters replaces them all) and ``strict`` (every parameter and buffer given).

    Per-example gradients of a module go through it (or through torch's after
    :func:`named_axes.enable_torch_func`): inside ``nx.grad`` over named inputs the
    parameters carry the inputs' named axes, which torch's own does not accept.

    >>> import torch, named_axes as nx
    >>> m = torch.nn.Linear(3, 1)
    >>> p = {k: v.detach() for k, v in m.named_parameters()}
    >>> loss = lambda p, x: nx.nn.functional_call(m, p, (x,)).sum()
    >>> g = nx.xmap(nx.grad(loss), in_axes=[{}, ['batch', ...]], out_axes=['batch', ...])
    >>> g(p, torch.ones(5, 3))['weight'].shape
    torch.Size([5, 1, 3])
    """
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    values = _merged(parameter_and_buffer_dicts)
    places = _tensor_places(module, tie_weights)
    unknown = [n for n in values if n not in places]
    given = {n for v in values if v in places for n in places[v]}
    missing = sorted(set(places) - given) if strict else []
    if unknown or missing:
        raise AxisTypeError(
            f"functional_call: {type(module).__name__} "
            + (f"has no parameter or buffer {', '.join(map(repr, unknown))}" if unknown
               else f"is missing {', '.join(map(repr, missing))} (strict=True)"))
    tied = sorted(n for n in values if len({id(values[t]) for t in places[n] if t in values}) > 1)
    if tied:
        raise AxisSpecError(f"functional_call: {', '.join(map(repr, tied))} are tied (one "
                            f"tensor) but given different values; give one of them, or "
                            f"tie_weights=False")
    if not any(type(v) is NamedTensor for v in values.values()):   # torch's own, exactly
        return torch.func.functional_call(module, parameter_and_buffer_dicts, args, kwargs,
                                          tie_weights=tie_weights, strict=strict)
    buffers = {n for n, _ in module.named_buffers(remove_duplicate=False)}
    swaps = []   # (given name, what puts back the place's value)
    try:
        for name, value in values.items():
            for place in places[name]:
                owner, _, attr = place.rpartition(".")
                swaps.append((name, _put(module.get_submodule(owner), attr, value,
                                         place in buffers)))
        return module(*args, **(kwargs or {}))
    finally:
        ends = {name: restore() for name, restore in reversed(swaps)}
        if isinstance(parameter_and_buffer_dicts, dict):   # (a buffer the forward reassigned)
            parameter_and_buffer_dicts.update({n: v for n, v in ends.items() if v is not None})


def _put(sub: torch.nn.Module, attr: str, value: Any, buffer: bool) -> Callable:
    """``value`` in ``sub.<attr>``; returns what puts the value before back, giving the
    value at the end (a forward may reassign a buffer).  A parameter's slot wants an
    nn.Parameter, so an instance attribute shadows it instead."""
    if buffer:
        before = getattr(sub, attr)
        setattr(sub, attr, value)
        return lambda: (getattr(sub, attr), setattr(sub, attr, before))[0]
    held = vars(sub)
    before = held.get(attr)
    held[attr] = value
    return lambda: held.pop(attr) if before is None else held.update({attr: before})


def _merged(dicts: Any) -> dict:
    """One dict of the given values; a name in two of them is an error, as in torch."""
    if isinstance(dicts, dict):
        return dict(dicts)
    merged: dict = {}
    for d in dicts:
        twice = sorted(set(merged) & set(d))
        if twice:
            raise AxisTypeError(f"functional_call: {', '.join(map(repr, twice))} given in "
                                f"more than one dict")
        merged.update(d)
    return merged


def _tensor_places(module: torch.nn.Module, tie_weights: bool) -> dict:
    """Each parameter's and buffer's dotted name -> the dotted names of the places that a
    value given for it replaces (with ``tie_weights``, every place holding the same
    tensor)."""
    named = list(module.named_parameters(remove_duplicate=False))
    named += list(module.named_buffers(remove_duplicate=False))
    holders: dict = {}
    for name, t in named:
        holders.setdefault(id(t), []).append(name)
    return {name: holders[id(t)] if tie_weights else [name] for name, t in named}
