"""``nx.einsum`` / ``torch.einsum`` with named axes in braces.

One letter per positional axis, named axes in braces: ``'n{b,k},{k,m}->n{b,m}'``.
Named axes listed in inputs but not in the output are contracted; an operand may list a
name it lacks (it is replicated along it).  A named axis an operand carries but its term
does not list is a batch axis, kept in the output (without braces every named axis is);
if another term lists it and the output does not, that operand is summed over it first,
as in JAX's ``xeinsum`` (:class:`Prereduce`).  The call becomes one positional
``torch.einsum`` on the physical tensors, a fresh letter per named axis.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.ones(2, 3, 4), 'b k ...')      # positional (4,) = 'n'
>>> w = nx.named(torch.ones(3, 5), 'k m ...')
>>> y = nx.einsum('n{b,k},{k,m}->n{b,m}', x, w)
>>> y.shape, y.named_shape
(torch.Size([4]), {'b': 2, 'm': 5})
"""
from __future__ import annotations

import collections
import functools
import string
from typing import Any, NamedTuple

import torch

from ._dispatch import result
from ._einsum2 import einsum_physical as _einsum
from ._engine import NeedsWholeAxes, engine_for
from ._registry import register
from ._env import _state as _env_state
from ._env import bound_axes, current_frame
from .lax import psum
from ._errors import (AxisSizeError, AxisSpecError, AxisTypeError, UnboundAxisError,
                      fmt_named_shape, fmt_names)
from ._parsing import parse_einsum_spec
from ._plancache import PlanCache
from ._tensor import NamedTensor
from ._tape import taped

__all__ = ["einsum"]

_NT = NamedTensor


@taped("bilinear")
def einsum(spec: str, *operands: Any) -> Any:
    """Einstein summation over positional letters and braced axis names (``spec`` as
    ``'n{b,k},{k,m}->n{b,m}'``) of tensors or NamedTensors (or one list of them).

    The result carries the output's braced names and the batch axes (without braces,
    the operands' names); it is a plain tensor if it has none.

    Raises:
        AxisSpecError: a malformed spec, an output letter no input has or a repeated one,
            a name two terms list to contract while a third operand carries it unlisted
            (JAX's ``xeinsum`` takes two operands: contract in two einsums).
        UnboundAxisError: a braced name that no operand carries and no map binds.
        AxisSizeError: one letter or name with two sizes.

    >>> import torch, named_axes as nx
    >>> a = nx.named(torch.arange(6.).reshape(2, 3), 'i ...')
    >>> nx.einsum('j{i}->', a)
    tensor(15.)
    >>> b = nx.named(torch.tensor([1., 2.]), 'i ...')
    >>> nx.positional(nx.einsum(',{i}->', b, b), 'i ...')   # b carries i unlisted: b * psum(b, 'i')
    tensor([3., 6.])
    """
    operands = _listed(operands)
    if "{" not in spec and not any(type(o) is _NT for o in operands):
        try:
            return torch.einsum(spec, *operands)
        except RuntimeError as e:   # torch's complaint, as our error naming the spec
            raise AxisSpecError(f"einsum({spec!r}): {e}") from None
    out = _named_einsum(spec, operands)
    return out._data if type(out) is _NT and not out._names else out


def _einsum_rule(func, args, kwargs):
    if kwargs or not args or not isinstance(args[0], str):
        return NotImplemented
    return _named_einsum(args[0], _listed(args[1:]))


def _listed(operands: tuple) -> tuple:
    """The operands, also when given as one list of them."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        return tuple(operands[0])
    return operands


def _named_einsum(spec: str, operands: tuple) -> Any:
    bound = bound_axes()
    key = _plan_key(spec, operands)
    plan = _PLANS.plan(key, spec, operands, bound) if key is not None else \
        _build_plan(spec, operands)
    if type(plan) is Prereduce:
        return _run_prereduce(plan, operands, bound)
    if _env_state.engine:   # an engine may compute some named axes in pieces
        return _einsum_on(plan, bound, *operands)
    return _run_plan(plan, operands, bound)


def _run_plan(plan: tuple, operands: tuple, bound: dict, out: Any = None) -> Any:
    """Run ``plan`` (``out``: the einsum's result, when already computed)."""
    eq, _, _, _, scaled, expand, perm, names, _ = plan
    if out is None:
        datas = [x._data if type(x) is _NT else x for x in operands]
        if _env_state.engine:   # an engine may hand operands over, contract its values
            every = names + tuple(n for n, _ in plan.contracted)   # the product's axes
            engine = engine_for(every)
            if engine is not None:
                datas = _handed(engine, operands, every)
        out = _einsum(eq, datas)
    scale = 1
    for n in scaled:
        scale *= bound[n]
    if scale != 1:
        out = out * scale
    if expand:
        shape = tuple(out.shape)
        out = out.reshape((1,) * len(expand) + shape).expand(
            tuple(bound[n] for n in expand) + shape)
    if perm is not None:
        out = out.permute(perm + tuple(range(len(perm), out.dim())))
    return result(out, names, torch.einsum)


def _handed(engine, operands: tuple, every: tuple) -> list:
    """The operands' tensors as ``engine`` hands them to a product over ``every``."""
    return [engine.broadcast(x._data, x._names, every) if type(x) is _NT else
            engine.broadcast(x, (), every) for x in operands]


def _split_axes(names) -> tuple:
    """The names among ``names`` that an engine in scope computes piece by piece (the
    axes of a ``SerialLoop``: each chunk holds part of them)."""
    out = []
    for n in names:
        frame = current_frame(n)
        if frame is not None and frame.engine is not None and frame.engine.splits(n):
            out.append(n)
    return tuple(out)


def _run_split(plan: tuple, operands: tuple, bound: dict) -> Any:
    """``_run_plan`` when an engine splits a contracted or broadcast named axis, else None.
    A contracted split axis is kept in the einsum and summed with ``nx.lax.psum`` (which
    the engine makes exact); an output axis broadcast from nothing gets this piece's size."""
    eq, _, _, _, scaled, expand, perm, names, contracted = plan
    loop = _split_axes([n for n, _ in contracted])
    grow = _split_axes(expand)
    if not loop and not grow:
        return None
    sizes = dict(bound)
    for n in grow:
        sizes[n] = current_frame(n).engine.local_size(n)
    if not loop:
        return _run_plan(plan, operands, sizes)
    engine = current_frame(loop[0]).engine
    try:
        engine.check_contraction(tuple({n for x in operands if type(x) is _NT
                                        for n in x._names}), loop)
    except NeedsWholeAxes as e:   # summed on their whole (two axes split on one mesh dim)
        return e.engine.whole(functools.partial(_einsum_on, plan, bound), tuple(operands),
                              {}, e.names, run=lambda f, args, kwargs: f(*args))
    every = names + tuple(n for n, _ in contracted)   # the product's axes
    datas = _handed(engine, operands, every)
    # a mesh's ranks each contract their part of the loop axes and the parts are summed
    summed = engine.sum_pieces(lambda: _einsum(eq, datas), loop, operands)
    if summed is not None:
        return _run_plan(plan, operands, sizes, summed)
    # else the einsum keeps the loop axes in front of its output [kept names..., positional]
    lhs, out = eq.split("->")
    lead = "".join(c for n, c in contracted if n in loop)
    data = torch.einsum(f"{lhs}->{lead}{out}", *datas)
    kept = tuple(n for n in names if n not in expand)
    summed = psum(NamedTensor._wrap(data, loop + kept), loop)
    return _run_plan(plan, operands, sizes, summed._data if type(summed) is _NT else summed)


def _einsum_on(plan: tuple, bound: dict, *operands) -> Any:
    """The einsum ``plan`` of ``operands``, split where an engine splits its axes."""
    out = _run_split(plan, operands, bound)
    return _run_plan(plan, operands, bound) if out is None else out


def _plan_key(spec: str, operands: tuple):
    key = [spec]
    for x in operands:
        if type(x) is _NT:
            key.append((x._names, x.ndim))
        elif isinstance(x, torch.Tensor):
            key.append(((), x.dim()))
        else:
            return None
    return tuple(key)


def _plan_holds(plan: tuple, operands: tuple, bound: dict) -> bool:
    """Whether the checks ``plan`` was built with still pass for these sizes and this
    axis environment (if not, rebuilding raises the error)."""
    named, letters = plan.name_groups, plan.letter_groups
    for n in plan.env:
        if n not in bound:
            return False
    if not named and not letters:
        return True
    shapes = [x._data.shape if type(x) is _NT else x.shape for x in operands]
    # (no sets: sizes may be SymInts, which do not hash)
    for group in named:   # one name, one size
        sizes = [shapes[i][d] for i, d in group]
        if any(s != sizes[0] for s in sizes[1:]):
            return False
    for group in letters:  # one letter, one size (or 1: broadcast)
        sizes = [t for t in (shapes[i][d] for i, d in group) if t != 1]
        if any(s != sizes[0] for s in sizes[1:]):
            return False
    return True


class Prereduce(NamedTuple):
    """A braced einsum in which a term lists a named axis that another operand carries
    unlisted, the output not listing it: ``einsum(',{i}->', a, b) == a * psum(b, 'i')``
    for ``a`` carrying ``i`` (``nx.vmap``'s ``axis_name`` is such an axis).  The listing
    operand is summed over it (scaled by its size where it lacks it), then ``spec`` runs."""
    spec: str             # the spec with the pre-summed names taken out of their terms
    reduce: tuple         # (operand, names it is summed over) per listing operand
    size_of: tuple        # (name, operand, physical dim): where each name's size is read
    env: tuple = ()       # (read by _plan_holds, as an EinsumPlan's)
    name_groups: tuple = ()
    letter_groups: tuple = ()


def _term(letters: tuple, names) -> str:
    return "".join(letters) + ("" if names is None else "{" + ",".join(names) + "}")


def _prereduce(inputs: tuple, output, operands: tuple, in_names: list, batch: dict,
               out_names: tuple, name_dims: dict, what: str):
    """The :class:`Prereduce` for a call in which a term lists a name another operand
    carries unlisted, or None (where the output lists the name, it is kept elementwise)."""
    reduce: dict = {}
    for n, j in batch.items():
        if n in out_names:
            continue
        listers = [i for i, names in enumerate(in_names) if n in names]
        if len(listers) > 1:
            raise AxisSpecError(
                f"{what}: operands {listers[0]} and {listers[1]} list named axis {n!r} to "
                f"contract it, while operand {j} carries {n!r} unlisted (named_shape "
                f"{fmt_named_shape(operands[j].named_shape)}), a batch axis. Contract the "
                f"operands that list {n!r} in one einsum, then combine the result with "
                f"operand {j} in another (JAX's xeinsum takes two operands)")
        if listers:
            reduce.setdefault(listers[0], []).append(n)
    if not reduce:
        return None
    terms = [_term(letters, names if i not in reduce else
                   tuple(m for m in names if m not in reduce[i]))
             for i, (letters, names) in enumerate(inputs)]
    new = ",".join(terms) + ("" if output is None else "->" + _term(*output))
    size_of = tuple((n, *name_dims[n][0]) for ns in reduce.values() for n in ns)
    return Prereduce(new, tuple((i, tuple(ns)) for i, ns in reduce.items()), size_of,
                     name_groups=_groups(name_dims))


def _run_prereduce(pre: Prereduce, operands: tuple, bound: dict) -> Any:
    ops = list(operands)
    for i, names in pre.reduce:
        x = ops[i]
        held = tuple(n for n in names if type(x) is _NT and n in x._names)
        scale = 1
        for n, j, d in pre.size_of:
            if n in names and n not in held:   # the operand is replicated along n
                y = operands[j]
                scale *= bound[n] if n in bound else y._data.shape[d]
        if held:
            x = psum(x, held)
        ops[i] = x * scale if scale != 1 else x
    return _named_einsum(pre.spec, tuple(ops))


class EinsumPlan(NamedTuple):
    """A named einsum translated to one torch einsum over the physical dims."""
    eq: str
    env: tuple            # listed names no operand carries (sized by the environment)
    name_groups: tuple    # equal-size (operand, dim) groups per named axis
    letter_groups: tuple  # the same per positional letter
    scaled: tuple         # replicated names that scale the sum
    expand: tuple         # replicated names the output gets by expansion
    perm: tuple | None    # output permutation
    names: tuple          # output names
    contracted: tuple     # (name, letter) of named axes summed


def _build_plan(spec: str, operands: tuple) -> tuple:
    """Check the call and translate it: an :class:`EinsumPlan`, or a :class:`Prereduce`.
    Dims are physical; sizes of replicated names come from the axis environment at each
    call."""
    what = f"einsum({spec!r})"
    inputs, output, braced = parse_einsum_spec(spec)
    if len(inputs) != len(operands):
        raise AxisSpecError(f"{what}: the spec has {len(inputs)} operand terms but "
                            f"{len(operands)} operands were given")
    ops = _read_operands(inputs, output, operands, braced, what)
    in_names, letter_of = ops.in_names, ops.letter_of
    if braced:
        out_names = (output[1] or ()) if output is not None else _named_once(in_names)
        pre = _prereduce(inputs, output, operands, in_names, ops.batch, out_names,
                         ops.name_dims, what)
        if pre is not None:
            return pre
        out_names += tuple(n for n in ops.batch if n not in out_names)
        # the batch names join the terms of the operands that carry them
        in_names = [names + tuple(n for n in (operands[i]._names if type(operands[i]) is _NT
                                               else ()) if n in ops.batch)
                    for i, names in enumerate(in_names)]
    else:
        out_names = tuple(letter_of)
    env, expand, scaled = _replicated(in_names, out_names, ops.name_size, what)
    pos_out = _positional_output(inputs, output, ops.pos_size, what)
    kept = tuple(n for n in out_names if n in letter_of)
    eq = ",".join(ops.terms) + "->" + "".join(letter_of[n] for n in kept) + pos_out
    names, order = expand + kept, tuple(out_names)
    # present the output names in the order the spec lists them
    perm = None if names == order else tuple(names.index(n) for n in order)
    contracted = tuple((n, letter_of[n]) for n in letter_of if n not in out_names)
    return EinsumPlan(eq, env, _groups(ops.name_dims), _groups(ops.letter_dims), scaled, expand,
                      perm, order, contracted)


# (spec, per operand (names it carries, positional ndim)) -> _build_plan(...), used
# while the sizes it checked still agree
_PLANS = PlanCache("einsum", lambda spec, operands, bound: _build_plan(spec, operands),
                   maxsize=1024,
                   validate=lambda plan, spec, operands, bound: _plan_holds(plan, operands, bound))


def _groups(dims: dict) -> tuple:
    """The (operand, dim) groups that must agree in size: those of more than one dim."""
    return tuple(tuple(g) for g in dims.values() if len(g) > 1)


class _Operands(NamedTuple):
    """The operands read against their terms."""
    terms: list        # per operand, its physical term (a fresh letter per named dim)
    in_names: list     # per operand, the names its term lists (unbraced: that it carries)
    batch: dict        # braced: a name an operand carries unlisted -> the first such operand
    letter_of: dict    # axis name -> fresh letter
    name_size: dict    # axis name -> (size, where)
    pos_size: dict     # positional letter -> (size, where)
    name_dims: dict    # axis name -> [(operand, physical dim)]
    letter_dims: dict  # positional letter -> [(operand, physical dim)]


def _read_operands(inputs: tuple, output, operands: tuple, braced: bool,
                   what: str) -> _Operands:
    """Check each operand against its term (a tensor; its positional rank; one size per
    letter and per name) and spell its named dims in fresh letters."""
    used = {c for letters, _ in inputs for c in letters if c != "..."}
    if output is not None:
        used |= {c for c in output[0] if c != "..."}
    fresh = iter(c for c in string.ascii_letters if c not in used)
    ops = _Operands([], [], {}, {}, {}, {}, {}, {})
    for i, ((letters, listed), x) in enumerate(zip(inputs, operands)):
        if type(x) is _NT:
            data, carried, p = x._data, x._names, x.ndim
        elif isinstance(x, torch.Tensor):
            data, carried, p = x, (), x.dim()
        else:
            raise AxisTypeError(f"{what}: operand {i} is a {type(x).__name__}, not a tensor")
        if braced:
            # a named axis the operand carries but its term skips is vectorized over, as
            # by every op (a batch axis, kept in the output): only listed names contract
            listed = listed or ()
            for n in carried:
                if n not in listed:
                    ops.batch.setdefault(n, i)
        ops.in_names.append(listed if braced else carried)
        _positional_dims(letters, p, i, data.shape, len(carried), ops, what)
        ops.terms.append(_named_dims(carried, data.shape, i, fresh, ops, what) + "".join(letters))
    return ops


def _positional_dims(letters: tuple, p: int, i: int, shape, k: int, ops: _Operands,
                     what: str) -> None:
    """Check operand ``i``'s ``p`` positional dims (after its ``k`` named ones) against its
    letters, one size per letter (1 broadcasts), and record the dim each letter labels."""
    n_ell = letters.count("...")
    fixed = len(letters) - n_ell
    if (n_ell == 0 and fixed != p) or fixed > p:
        raise AxisSpecError(f"{what}: operand {i} has {p} positional dims (shape "
                            f"{tuple(shape[k:])}) but its term has {fixed} letters")
    pos_size = ops.pos_size
    d = 0
    for c in letters:
        if c == "...":
            d += p - fixed
            continue
        s = shape[k + d]
        if c in pos_size and pos_size[c][0] != s and 1 not in (s, pos_size[c][0]):
            raise AxisSizeError(f"{what}: inconsistent sizes for letter {c!r}: "
                                f"{pos_size[c][0]} ({pos_size[c][1]}) vs {s} (operand {i}, "
                                f"dim {d})")
        if c not in pos_size or pos_size[c][0] == 1:
            pos_size[c] = (s, f"operand {i}, dim {d}")
        ops.letter_dims.setdefault(c, []).append((i, k + d))
        d += 1


def _named_dims(carried: tuple, shape, i: int, fresh, ops: _Operands, what: str) -> str:
    """Check the sizes of operand ``i``'s named dims (one size per name), record them, and
    spell them in fresh letters."""
    name_size, letter_of = ops.name_size, ops.letter_of
    phys = ""
    for j, n in enumerate(carried):
        s = shape[j]
        if n in name_size and name_size[n][0] != s:
            raise AxisSizeError(
                f"{what}: inconsistent sizes for axis {n!r}: {name_size[n][0]} "
                f"({name_size[n][1]}) vs {s} (operand {i})")
        name_size.setdefault(n, (s, f"operand {i}"))
        ops.name_dims.setdefault(n, []).append((i, j))
        if n not in letter_of:
            letter_of[n] = next(fresh)
        phys += letter_of[n]
    return phys


def _named_once(in_names: list) -> tuple:
    """Implicit mode's output names: those that appear in exactly one term."""
    counts = collections.Counter(n for names in in_names for n in names)
    return tuple(n for n in counts if counts[n] == 1)


def _replicated(in_names: list, out_names: tuple, name_size: dict, what: str) -> tuple:
    """``(env, expand, scaled)``: the names listed but carried by no operand (replicated
    axes, sized by the environment), those of them the output gets by expansion, and those
    that scale the sum.  Each must be bound."""
    listed_anywhere = {n for names in in_names for n in names}
    bound = bound_axes()
    for n in out_names:
        if n not in listed_anywhere and n not in bound:
            raise UnboundEinsumAxisError(
                f"{what}: the output lists named axis {n!r}, which no input lists and no "
                f"enclosing map binds (bound: {fmt_names(bound)})")
    for n in listed_anywhere | set(out_names):
        if n not in name_size and n not in bound:
            by = "".join(f"; operand {i}'s term lists it"
                         for i, names in enumerate(in_names) if n in names)
            raise UnboundAxisError(f"{what}: axis {n!r} is listed but no operand carries it "
                                   f"and it is not bound here (bound: {fmt_names(bound)}){by}")
    env = tuple(n for n in listed_anywhere | set(out_names) if n not in name_size)
    expand = tuple(n for n in out_names if n not in name_size)
    scaled = tuple(n for n in env if n not in out_names)
    return env, expand, scaled


def _positional_output(inputs: tuple, output, pos_size: dict, what: str) -> str:
    """The output's positional letters: as the spec lists them (each in some input), or in
    implicit mode the letters that appear once, sorted, after the ellipsis if any."""
    if output is not None:
        for c in output[0]:
            if c != "..." and c not in pos_size:
                raise AxisSpecError(f"{what}: output letter {c!r} appears in no input term")
        return "".join(output[0])
    once = sorted(c for c in pos_size if sum(t[0].count(c) for t in inputs) == 1)
    has_ellipsis = any("..." in t[0] for t in inputs)
    return ("..." if has_ellipsis else "") + "".join(once)


class UnboundEinsumAxisError(UnboundAxisError, AxisSpecError):
    """An einsum output lists a name that nothing lists or binds: unbound (a NameError),
    and a malformed spec (a ValueError)."""


register([torch.einsum, getattr(torch.functional, "einsum", None)], _einsum_rule, kind="einsum")
