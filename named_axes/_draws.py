"""Random draws on named values: which ops may draw, and drawing them under an engine
(a mesh's ranks, a SerialLoop's chunks) as the unsplit run draws them.

>>> import torch
>>> may_draw(torch.nn.functional.dropout), may_draw(torch.add)
(True, False)
"""
from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

import torch

from ._engine import NeedsWholeAxes, engine_for
from ._errors import AxisResourceError, RandomnessError
from ._registry import is_inplace as _is_inplace
from ._registry import op_name
from ._shape_errors import _first_line
from ._tensor import NamedTensor as _NT

__all__ = ["DRAWS", "may_draw", "drawn_on_whole", "refuse_draw"]

# the random ops (by name: the function, method and in-place spellings alike); those
# whose draws depend on the values (gamma, poisson) are exact on a mesh, which gathers
# the values, and independent per chunk under SerialLoop, which pads with zeros
DRAWS = frozenset("""rand randn randint randperm rand_like randn_like randint_like
bernoulli bernoulli_ normal normal_ uniform_ exponential_ geometric_ log_normal_ cauchy_
random_ poisson multinomial binomial dropout alpha_dropout feature_alpha_dropout dropout1d
dropout2d dropout3d feature_dropout rrelu rrelu_ native_dropout gumbel_softmax
fractional_max_pool2d fractional_max_pool3d fractional_max_pool2d_with_indices
fractional_max_pool3d_with_indices _standard_gamma _sample_dirichlet""".split())


@functools.cache
def may_draw(func: Callable) -> bool:
    """Whether ``func`` may draw random numbers (under an engine the dispatcher watches
    torch's random state around those), by torch's tags: an aten op may if tagged
    ``nondeterministic_seeded``, a function bound in C (``torch.mean``, ``Tensor.add``)
    runs the aten op of its name, Python's operators never draw, other Python code may.

    >>> [may_draw(f) for f in (torch.mean, torch.Tensor.__pow__, torch.nn.functional.relu,
    ...                         torch.nn.functional.scaled_dot_product_attention)]
    [False, False, True, True]
    """
    f = inspect.unwrap(func)   # (torch's Python wrappers of bound functions: Tensor.__pow__)
    name = str(getattr(f, "__name__", ""))
    if hasattr(f, "tags"):   # an aten op (OpOverload)
        return torch.Tag.nondeterministic_seeded in f.tags
    if name.startswith("__"):
        return False
    bound = isinstance(f, (types.BuiltinFunctionType, types.MethodDescriptorType))
    ops = f if hasattr(f, "overloads") else getattr(torch.ops.aten, name, None) if bound else None
    return ops is None or any(may_draw(getattr(ops, o)) for o in ops.overloads())


def drawn_on_whole(func: Callable, args: tuple, kwargs: dict, state: Any = None,
                    out: Any = NotImplemented) -> Any:
    """A random op on values carrying axes an engine splits (over a mesh's ranks, into a
    SerialLoop's chunks), drawn as the unsplit run draws it: on their whole, each piece
    keeping its part (the engine's ``whole``); else ``out``.  An op not named a random op
    that drew (``state``: the random state before it) is drawn again from ``state``."""
    if state is None and getattr(func, "__name__", None) not in DRAWS:
        return out
    names = tuple(dict.fromkeys(n for v in (*args, *kwargs.values()) for w in (
        v if isinstance(v, (list, tuple)) else (v,)) if type(w) is _NT for n in w._names))
    for engine in dict.fromkeys(engine_for((n,)) for n in names):
        try:
            if engine is not None:
                engine.check_draw(op_name(func), names)
        except NeedsWholeAxes as e:
            if _is_inplace(func) or kwargs.get("inplace") is True:
                raise AxisResourceError(
                    f"{op_name(func)}: a random op writing in place into a value split along "
                    f"{e.names}; draw out of place (x = x.op(...)), so that each piece draws "
                    f"its part of the unsplit run's draws") from None
            if state is not None:
                torch.set_rng_state(state)
            return e.engine.whole(func, args, kwargs, e.names)
    return out



def refuse_draw(func: Callable, e: BaseException, randomness: dict) -> None:
    """Raise :class:`RandomnessError` where torch's vmap refused a draw along an nx.vmap
    axis (its ``randomness``), or could not run a random op under ``'error'`` or
    ``'same'`` (a loop would draw per instance)."""
    if randomness and ("randomness" in str(e) or getattr(func, "__name__", None) in DRAWS
                       and set(randomness.values()) - {"different"}):
        modes = ", ".join(f"{n!r}: {r!r}" for n, r in randomness.items())
        raise RandomnessError(f"{op_name(func)}: a random op under nx.vmap axes with "
                              f"randomness {{{modes}}}: {_first_line(e)}") from None
