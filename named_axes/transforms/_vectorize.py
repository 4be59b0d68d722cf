"""``vectorize``: NumPy-style generalized ufuncs from a per-core function.

``signature='(n),(n)->()'`` names each argument's core dims; the leading (loop) dims
broadcast against each other and are mapped with :func:`named_axes.vmap`, so named
inputs from an enclosing xmap pass through (``jnp.vectorize`` semantics).

>>> import torch, named_axes as nx
>>> dot = nx.vectorize(lambda a, b: (a * b).sum(), signature='(n),(n)->()')
>>> dot(torch.ones(4, 3), torch.ones(3)).shape
torch.Size([4])
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable

import torch

from .._errors import AxisSizeError, AxisSpecError, AxisTypeError
from .._tensor import NamedTensor
from ._vmap import vmap

__all__ = ["vectorize"]

_DIMS = r"\(\s*(?:\w+(?:\s*,\s*\w+)*)?\s*\)"
_SIG = re.compile(rf"^\s*{_DIMS}(?:\s*,\s*{_DIMS})*\s*->\s*{_DIMS}(?:\s*,\s*{_DIMS})*\s*$")


def parse_signature(signature: str) -> tuple[list, list]:
    """``'(m,n),(n)->(m)'`` -> ``([('m','n'), ('n',)], [('m',)])``."""
    if not _SIG.match(signature):
        raise AxisSpecError(f"vectorize: signature {signature!r} is not a gufunc signature "
                            f"like '(m,n),(n)->(m)'")
    ins, outs = signature.split("->")
    parse = lambda part: [tuple(d.strip() for d in grp.split(",") if d.strip())
                          for grp in re.findall(r"\(([^)]*)\)", part)]
    return parse(ins), parse(outs)


def vectorize(pyfunc: Callable, *, excluded: Iterable = frozenset(),
              signature: str | None = None) -> Callable:
    """Vectorize ``pyfunc`` over the leading dims of its arguments.

    Args:
        pyfunc: acts on the core dims (all dims without a signature: a scalar function).
        excluded: positions (ints) of arguments passed through unchanged.
        signature: a gufunc signature; without one, every argument's core is 0-d.

    Raises:
        AxisSpecError: a malformed signature, or an argument with too few dims.
        AxisSizeError: a core dim with two sizes, or loop dims that do not broadcast.

    >>> import torch, named_axes as nx
    >>> nx.vectorize(lambda x: x ** 2)(torch.tensor([1., 2.]))
    tensor([1., 4.])
    """
    if not callable(pyfunc):
        raise AxisTypeError(f"vectorize: pyfunc must be callable, got {type(pyfunc).__name__}")
    excluded = frozenset(excluded)
    if any(not isinstance(e, int) for e in excluded):
        raise AxisTypeError(f"vectorize: excluded takes argument positions (ints), got "
                            f"{sorted(map(repr, excluded))}")
    in_core, out_core = parse_signature(signature) if signature else (None, None)

    @functools.wraps(pyfunc)
    def run(*args):
        what = f"vectorize({getattr(pyfunc, '__name__', 'fun')}, signature={signature!r})"
        pos = [i for i in range(len(args)) if i not in excluded]
        tensors = [_as_tensor(args[i]) for i in pos]
        cores = in_core if in_core is not None else [()] * len(pos)
        if len(cores) != len(pos):
            raise AxisSpecError(f"{what}: the signature has {len(cores)} inputs, the call "
                                f"passes {len(pos)} (excluding {sorted(excluded)})")
        loops = _loop_shapes(what, tensors, cores, pos)
        loop, tensors = _broadcast_loops(what, tensors, loops)

        def core_fun(*ts):
            call = list(args)
            for i, t in zip(pos, ts):
                call[i] = t
            return pyfunc(*call)

        f = core_fun
        for _ in loop:
            f = vmap(f, in_dims=0, out_dims=0)
        out = f(*tensors)
        if out_core is not None and len(out_core) > 1 and not isinstance(out, tuple):
            raise AxisSpecError(f"{what}: the signature has {len(out_core)} outputs but "
                                f"pyfunc returned one value")
        return out

    return run


def _loop_shapes(what: str, tensors: list, cores: list, pos: list) -> list:
    """Each argument's loop (leading) dims, its core dims checked against the signature:
    enough dims, one size per core dim name across the arguments."""
    sizes: dict = {}
    loops = []
    for k, (t, core) in enumerate(zip(tensors, cores)):
        if t.ndim < len(core):
            raise AxisSpecError(f"{what}: argument {pos[k]} has {t.ndim} dims but its "
                                f"core {core} needs {len(core)}")
        for d, s in zip(core, t.shape[t.ndim - len(core):]):
            if sizes.setdefault(d, s) != s:
                raise AxisSizeError(f"{what}: inconsistent sizes for core dim {d!r}: "
                                    f"{sizes[d]} vs {s} (argument {pos[k]})")
        loops.append(tuple(t.shape[:t.ndim - len(core)]))
    return loops


def _broadcast_loops(what: str, tensors: list, loops: list) -> tuple:
    """``(loop, tensors)``: the broadcast loop shape, each tensor expanded to it."""
    try:
        loop = torch.broadcast_shapes(*loops) if loops else ()
    except RuntimeError:
        raise AxisSizeError(f"{what}: loop dims {loops} of the arguments do not "
                            f"broadcast") from None
    return loop, [t.expand(*loop, *t.shape[len(l):]) if tuple(t.shape[:len(l)]) != loop
                  else t for t, l in zip(tensors, loops)]


def _as_tensor(x: Any):
    if isinstance(x, (torch.Tensor, NamedTensor)):
        return x
    return torch.as_tensor(x)
