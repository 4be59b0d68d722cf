"""Random draws on named values: which ops may draw, and drawing them under an engine
(a mesh's ranks, a SerialLoop's chunks) as the unsplit run draws them.

>>> import torch
>>> may_draw(torch.nn.functional.dropout), may_draw(torch.add)
(True, False)
"""
from __future__ import annotations

import inspect
import sys
import types
from typing import Any, Callable

import torch

from ._engine import NeedsWholeAxes, engine_for
from ._errors import AxisResourceError, RandomnessError
from ._registry import is_inplace as _is_inplace
from ._registry import op_name
from ._shape_errors import _first_line
from ._tensor import NamedTensor as _NT
from ._torch_private import op_schema

__all__ = ["draws", "may_draw", "drawn_on_whole", "refuse_draw", "states", "set_states",
           "on_xla"]

# Python functions that draw and have no aten op of their name for torch's tag to mark
# (they draw with torch.rand/exponential_ and pass the samples on)
_UNTAGGED = frozenset("""dropout1d dropout2d dropout3d gumbel_softmax fractional_max_pool2d
fractional_max_pool3d fractional_max_pool2d_with_indices
fractional_max_pool3d_with_indices""".split())

# arguments that make an op's draw an option of a larger computation (attention's and the
# recurrent layers' dropout): torch tags the op, but it draws only when asked
_OPTIONS = frozenset({"dropout", "dropout_p"})

# what draws() says True for, by name, for dynamo's traces: it cannot trace the tag lookup
# (OpOverloadPacket.overloads).  tests/test_draws_while_compiling.py keeps it equal to the
# tag rule over torch, Tensor, F, torch.special and nn.init.
RANDOM_NAMES = frozenset("""_sample_dirichlet _standard_gamma alpha_dropout alpha_dropout_
bernoulli bernoulli_ binomial cauchy_ dropout dropout1d dropout2d dropout3d dropout_
exponential_ feature_alpha_dropout feature_alpha_dropout_ feature_dropout feature_dropout_
fractional_max_pool2d fractional_max_pool2d_with_indices fractional_max_pool3d
fractional_max_pool3d_with_indices geometric_ gumbel_softmax log_normal_ multinomial
native_dropout normal normal_ poisson rand rand_like randint randint_like randn randn_like
random_ randperm rrelu rrelu_ uniform uniform_""".split())
_SEEDED = torch.Tag.nondeterministic_seeded


def _tagged(ops: Any) -> bool | None:
    """torch's tag on an aten op (an overload, or each of a packet's): True if it draws,
    None if only a dropout option draws, False if untagged."""
    ops = [getattr(ops, o) for o in ops.overloads()] if hasattr(ops, "overloads") else [ops]
    seeded = [op for op in ops if _SEEDED in op.tags]
    if not seeded:
        return False
    schemas = [op_schema(op) for op in seeded]
    return None if any(a.name in _OPTIONS for s in schemas if s is not None
                       for a in s.arguments) else True


_DRAWS: dict = {}   # func -> draws(func)


def draws(func: Callable) -> bool | None:
    """Whether ``func`` draws random numbers: True for a random op (it draws on every call
    but where a probability or mode argument says none), None where it may (a dropout
    option: attention, recurrent layers; Python code that may call a random op), False
    where it never does.  torch's tag ``nondeterministic_seeded`` decides for an aten op,
    and for a function bound in C (``torch.randn``, ``Tensor.normal_``) or a Python one
    (``F.dropout``) by the aten op of its name; a short list only for the Python
    functions that draw with no aten op of their name (``F.gumbel_softmax``).

    >>> import torch.nn.functional as F
    >>> [draws(f) for f in (torch.randn, torch.Tensor.normal_, F.dropout, F.gumbel_softmax,
    ...                     F.scaled_dot_product_attention, F.relu, torch.add)]
    [True, True, True, True, None, None, False]
    """
    try:
        return _DRAWS[func]
    except KeyError:
        if torch.compiler.is_dynamo_compiling():   # (None: not a random op, as unwatched)
            return True if getattr(func, "__name__", None) in RANDOM_NAMES else None
        out = _DRAWS[func] = _draws(func)
        return out
    except TypeError:   # (unhashable)
        return _draws(func)


def _draws(func: Callable) -> bool | None:
    f = inspect.unwrap(func)   # (torch's Python wrappers of bound functions: Tensor.__pow__)
    name = str(getattr(f, "__name__", ""))
    if hasattr(f, "tags"):   # an aten op (OpOverload)
        return _tagged(f)
    if name.startswith("__"):   # (Python's operators)
        return False
    if name in _UNTAGGED:
        return True
    ops = f if hasattr(f, "overloads") else getattr(torch.ops.aten, name, None)
    bound = isinstance(f, (types.BuiltinFunctionType, types.MethodDescriptorType))
    if ops is None:
        return None
    tagged = _tagged(ops)
    return tagged if bound or tagged else None   # (Python code may call a random op)


def may_draw(func: Callable) -> bool:
    """Whether ``func`` may draw random numbers (:func:`draws` is not False): under an
    engine the dispatcher watches torch's random state around those.

    >>> [may_draw(f) for f in (torch.mean, torch.Tensor.__pow__, torch.nn.functional.relu,
    ...                         torch.nn.functional.scaled_dot_product_attention)]
    [False, False, True, True]
    """
    return draws(func) is not False


def drawn_on_whole(func: Callable, args: tuple, kwargs: dict, state: Any = None,
                    out: Any = NotImplemented) -> Any:
    """A random op on values carrying axes an engine splits (over a mesh's ranks, into a
    SerialLoop's chunks), drawn as the unsplit run draws it: on their whole, each piece
    keeping its part (the engine's ``whole``); else ``out``.  An op not named a random op
    that drew (``state``: the random state before it) is drawn again from ``state``."""
    if state is None and not draws(func):
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
                set_states(state)
            return e.engine.whole(func, args, kwargs, e.names)
    return out


def states(xla: bool = True) -> tuple:
    """The CPU generator's state, and XLA's where torch-xla is in use (imported) and
    ``xla`` (its runtime started: reading the state would start it).

    >>> s = states()
    >>> a = torch.rand(())
    >>> set_states(s)
    >>> bool(torch.rand(()) == a)
    True
    """
    if not xla or "torch_xla" not in sys.modules:
        return torch.get_rng_state(), None
    import torch_xla.core.xla_model as xm
    return torch.get_rng_state(), xm.get_rng_state()


def set_states(states: tuple) -> None:
    """Give the generators the ``states`` :func:`states` read."""
    cpu, xla = states
    torch.set_rng_state(cpu)
    if xla is not None:
        import torch_xla.core.xla_model as xm
        xm.set_rng_state(xla)


def drew(before: tuple) -> bool:
    """Whether a generator moved since :func:`states` read ``before``."""
    now = states(before[1] is not None)
    return not torch.equal(now[0], before[0]) or now[1] != before[1]


def on_xla(args: tuple, kwargs: dict) -> bool:
    """Whether a named operand's data lives on an XLA device (its draws move XLA's
    generator, not the CPU one)."""
    return "torch_xla" in sys.modules and any(
        type(v) is _NT and v._data.device.type == "xla" for v in (*args, *kwargs.values()))



def refuse_draw(func: Callable, e: BaseException, randomness: dict) -> None:
    """Raise :class:`RandomnessError` where torch's vmap refused a draw along an nx.vmap
    axis (its ``randomness``), or could not run a random op under ``'error'`` or
    ``'same'`` (a loop would draw per instance)."""
    if randomness and ("randomness" in str(e) or draws(func)
                       and set(randomness.values()) - {"different"}):
        modes = ", ".join(f"{n!r}: {r!r}" for n, r in randomness.items())
        raise RandomnessError(f"{op_name(func)}: a random op under nx.vmap axes with "
                              f"randomness {{{modes}}}: {_first_line(e)}") from None
