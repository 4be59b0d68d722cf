"""``torch.func`` and named values: an explicit opt-in.

A named value that a closure brings into a ``torch.func`` transform would be
differentiated positionally, not per instance (docs/guide.md §4), so the library calls
torch's transforms through :data:`named_axes._levels.ORIGINAL` and
:func:`enable_torch_func` makes ``torch.func``'s transforms (and ``torch.vmap``) run
their ``nx`` counterparts on named values.  ``import named_axes`` changes nothing.

>>> import torch, named_axes as nx
>>> nx.enable_torch_func()
>>> def per_example(x, w):
...     return torch.func.grad(lambda w: (x * w).sum())(w)
>>> g = nx.xmap(per_example, in_axes=(['b', ...], [...]), out_axes=['b', ...])
>>> g(torch.tensor([[1., 2.], [3., 4.]]), torch.zeros(2))
tensor([[1., 2.],
        [3., 4.]])
>>> nx.disable_torch_func()
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.func

from .._env import _state as _env_state
from .._levels import TORCH_FUNC as _TORCH
from .._levels import TORCH_VMAP as _TORCH_VMAP
from .._tensor import NamedTensor
from .._torch_private import tree_flatten
from ..nn import functional_call
from ._grad import grad, value_and_grad, vjp
from ._forward import hessian, jacfwd, jacrev, jvp
from ._vmap import vmap

__all__ = ["enable_torch_func", "disable_torch_func"]

# torch's own; after the opt-in, torch.func.functional_call takes named values too
_TORCH_FUNCTIONAL_CALL = torch.func.functional_call


def _named(*values: Any) -> bool:
    """A NamedTensor among ``values``, or a named program in progress (a closure may
    bring named values into a function whose arguments are plain)."""
    return bool(_env_state.bound) or any(
        type(leaf) is NamedTensor for leaf in tree_flatten(values)[0])


def _transform(name: str, build_named: Callable) -> Callable:
    """``torch.func.<name>(func, ...)`` whose result dispatches per call on its arguments."""
    original = _TORCH[name]

    @functools.wraps(original)
    def transform(func: Callable, *t_args: Any, **t_kwargs: Any) -> Callable:
        plain = original(func, *t_args, **t_kwargs)

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            if _named(args, kwargs):
                return build_named(func, *t_args, **t_kwargs)(*args, **kwargs)
            return plain(*args, **kwargs)
        return call
    return transform


def _grad_and_value(func, argnums=0, has_aux=False):
    vg = value_and_grad(func, argnums, has_aux)

    def call(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return g, value   # torch's order; with has_aux, value is (value, aux) in both
    return call


def _vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    return vmap(func, in_dims, out_dims, randomness=randomness, chunk_size=chunk_size)


def _jac(transform: Callable) -> Callable:
    def build(func, argnums=0, has_aux=False, **_options):   # chunk_size etc.: speed only
        return transform(func, argnums, has_aux)
    return build


def _vjp(func: Callable, *primals: Any, has_aux: bool = False):
    return (vjp if _named(primals) else _TORCH["vjp"])(func, *primals, has_aux=has_aux)


def _jvp(func: Callable, primals: Any, tangents: Any, *, strict: bool = False,
         has_aux: bool = False):
    if _named(primals, tangents):
        return jvp(func, primals, tangents, has_aux=has_aux)
    return _TORCH["jvp"](func, primals, tangents, strict=strict, has_aux=has_aux)


def enable_torch_func() -> None:
    """Make ``torch.func``'s transforms (and ``torch.vmap``) take named values
    (idempotent; process-wide until :func:`disable_torch_func`).

    A call whose arguments hold a NamedTensor, or one made inside a named program (a
    closure may bring named values), runs ``nx.grad`` / ``nx.value_and_grad`` /
    ``nx.vjp`` / ``nx.jvp`` / ``nx.vmap`` / ``nx.jacrev`` / ``nx.jacfwd`` /
    ``nx.hessian`` with torch's argument and result conventions (``grad_and_value``
    returns ``(grad, value)``); any other call goes to torch's own transform.
    ``torch.func.functional_call`` given a named parameter or buffer runs
    :func:`named_axes.nn.functional_call`.  A function imported by name before this
    call (``from torch.func import grad``) stays torch's own.
    """
    if getattr(torch.func.grad, "_named_axes", False):
        return
    wrapped = {
        "grad": _transform("grad", grad),   # (torch's own checks the arguments first)
        "grad_and_value": _transform("grad_and_value", _grad_and_value),
        "vmap": _transform("vmap", _vmap),
        "jacrev": _transform("jacrev", _jac(jacrev)),
        "jacfwd": _transform("jacfwd", _jac(jacfwd)),
        "hessian": _transform("hessian", hessian),
        "vjp": functools.wraps(_TORCH["vjp"])(_vjp),
        "jvp": functools.wraps(_TORCH["jvp"])(_jvp),
        "functional_call": functools.wraps(_TORCH_FUNCTIONAL_CALL)(_functional_call),
    }
    for name, fn in wrapped.items():
        fn._named_axes = True
        setattr(torch.func, name, fn)
    torch.vmap = wrapped["vmap"]


def _functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                     tie_weights=True, strict=False):
    dicts = parameter_and_buffer_dicts
    values = dicts.values() if isinstance(dicts, dict) else [v for d in dicts for v in d.values()]
    call = functional_call if any(type(v) is NamedTensor for v in values) \
        else _TORCH_FUNCTIONAL_CALL
    return call(module, dicts, args, kwargs, tie_weights=tie_weights, strict=strict)


def disable_torch_func() -> None:
    """Undo :func:`enable_torch_func`: torch's own transforms back in ``torch.func``."""
    for name, fn in _TORCH.items():
        setattr(torch.func, name, fn)
    torch.func.functional_call = _TORCH_FUNCTIONAL_CALL
    torch.vmap = _TORCH_VMAP
