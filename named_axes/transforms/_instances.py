"""Per-instance cotangents inside named programs: JAX 0.4.30's xmap convention.

Inside a named program every value is one value *per instance* of the named axes (a
value lacking an axis is replicated along it), and so is every cotangent: the gradient
of a differentiated input is, per instance, the derivative of the sum of all instances'
losses with respect to that instance's copy of the input; ``psum`` transposes to
``psum``.  However a value entered the function (argument, closure, intermediate), the
rule is the same (docs/guide.md §4).

Physically a NamedTensor stores one slice per named index of the axes it carries, so a
value that lacks axis ``a`` has one cotangent where JAX has ``size(a)`` of them.  The
grad family makes that exact with three steps, all decided here:

1. *Which axes matter* — a :class:`Region` records the named axes of every value built
   while the differentiated function runs (``NamedTensor._wrap`` notes them), except
   axes bound by frames opened inside it (a nested xmap's own axes).  The
   differentiated inputs are broadcast along those axes (not along ``reduce_axes``) so
   autodiff sees one copy per instance; if the first run meets an axis it did not
   broadcast along (a closed-over named value), it is run again with it.
2. *The seed* — the loss is summed over all instances: a loss lacking a relevant axis
   counts once per index of it (``loss.sum() * size``).  With plain derivative rules for
   the collectives this is JAX's transpose convention (``psum`` of a replicated value
   is ``size * value``, ``pmean`` of a per-instance one is their mean).
3. *User rules* — a :class:`~named_axes.custom_vjp` whose output lacks a relevant axis
   receives the sum of the instances' cotangents; its ``bwd`` sees each instance's
   share (the sum divided by the size, per instance), and its results are summed back
   (a replicated result counts once per instance).  Exact for rules linear in the
   cotangent and uniform across instances (``f_psum``/``g_psum``, clipping by a
   constant...), which is what JAX code writes.

>>> import torch, named_axes as nx
>>> xb = nx.named(torch.tensor([[1., 2.], [3., 4.]]), {0: 'b'})
>>> per_example = nx.xmap(lambda w: nx.grad(lambda w: nx.lax.pmean((xb * w).sum(), 'b'))(w),
...                       in_axes=[...], out_axes=['b', ...], axis_sizes={'b': 2})
>>> per_example(torch.ones(2))     # xb per instance, though xb is closed over
tensor([[1., 2.],
        [3., 4.]])
"""
from __future__ import annotations


import torch

from .._env import INNER, bound_axes
from .._errors import AxisTypeError
from .._modes import modes_run_values as _modes_run_values
from .._tensor import RECORDERS, NamedTensor
from .._torch_private import dispatch_depth, is_functorch_wrapped, tree_flatten, tree_unflatten

__all__ = ["Region", "REGIONS", "Redo", "current", "lacking", "drop_replicated", "fold_copies"]

_is_wrapped = is_functorch_wrapped
_dispatch_depth = dispatch_depth

REGIONS: list = []  # open regions, innermost last


class Redo(Exception):
    """Raised inside a first run that met axes its inputs were not broadcast along."""


class Region:
    """One differentiated call: which named axes its values carry.

    ``expanded``: the axes the differentiated inputs are broadcast along.
    ``axes``: every relevant axis (name -> size), final once the function has run.
    """

    __slots__ = ("seen", "expanded", "reduce", "axes", "inner_mode", "early", "transposed")

    def __init__(self, expanded: dict, reduce_axes: tuple, inner_mode: bool = True) -> None:
        # the axes already known count as seen: noting them again would be a write, which
        # dynamo refuses inside a custom rule's backward (traced with its forward)
        self.seen: dict = dict(expanded)
        self.expanded = expanded
        self.reduce = reduce_axes
        self.axes: dict = dict(expanded)
        self.inner_mode = inner_mode
        self.early: list = []   # (rule, axes) read by custom rules before the region settled
        self.transposed: list = []   # custom_jvp rules dynamo traced here (_vjp.vjp)

    def __enter__(self) -> "Region":
        RECORDERS.append(self.seen)
        REGIONS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        RECORDERS.remove(self.seen)
        REGIONS.remove(self)

    def settle(self, first_run: bool) -> None:
        """Fold the recorded axes into ``axes``; :class:`Redo` if a first run must
        broadcast its inputs along more axes.

        Raises:
            AxisTypeError: under dynamo, a custom rule read ``axes`` before an axis
                joined them (see :meth:`axes_for_rule`).
        """
        inner = self.seen.get(INNER, ())
        missing = {}
        for n, size in self.seen.items():
            if n is INNER or n in inner or n in self.axes:
                continue
            self.axes[n] = size
            if n not in self.reduce:
                missing[n] = size
        if missing and first_run:
            raise Redo(missing)
        for rule, axes in self.early:
            if axes != self.axes:
                late = next(n for n in self.axes if n not in axes)
                raise AxisTypeError(
                    f"{rule} inside nx.grad / nx.vjp under torch.compile: the "
                    f"differentiated function meets axis {late!r}, which no argument "
                    f"carries, only after this call, and dynamo traces the rule's backward "
                    f"where the call is traced, before the axis is known. Pass the value "
                    f"carrying {late!r} as an argument of the differentiated function, or "
                    f"compile the step with nx.jit")

    def axes_for_rule(self, rule: str) -> dict:
        """The axes a custom rule's backward reads (:mod:`._custom`).

        Autograd runs a backward after the differentiated function returned, when
        ``axes`` are final; dynamo traces it where the forward calls the rule, so it
        reads them as they are then, and :meth:`settle` checks that none came later.
        """
        if torch.compiler.is_compiling():
            axes = dict(self.axes)
            self.early.append((rule, axes))
            return axes
        return self.axes

    def seed_scale(self, names: tuple) -> int:
        """How many instances a loss carrying ``names`` stands for."""
        scale = 1
        for n, s in self.axes.items():   # a loop: dynamo cannot trace prod(<generator>)
            if n not in names:
                scale *= s
        return scale


def current() -> Region | None:
    return REGIONS[-1] if REGIONS else None


def lacking(axes: dict, names: tuple) -> dict:
    """The axes of ``axes`` (name -> size) that ``names`` lacks."""
    return {n: s for n, s in axes.items() if n not in names}



def _concrete(t) -> bool:
    """Whether ``t`` holds real values we may read (not traced, fake or batched)."""
    # plain tensors and subclasses that hold real values (DTensor: every rank runs the
    # same comparison); fake and proxy tensors only exist under a dispatch mode
    # (is_compiling first: dynamo refuses to trace _is_wrapped)
    return (not torch.compiler.is_compiling() and isinstance(t, torch.Tensor)
            and not _is_wrapped(t) and _modes_run_values())


# Copies along an axis are folded when equal up to this many units in the last place:
# the same sum reduced in another order (gloo's ring all-reduce adds each part of the
# buffer starting at a different rank) differs in the last bits, and the named shape of
# a result must not depend on where it ran (mesh oracle, seed 101, p101_00160).
_FOLD_ULPS = 16


def _copies_agree(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: ``a`` and ``b`` are equal, or (floating and complex dtypes) within
    ``_FOLD_ULPS`` units in the last place of the larger magnitude."""
    same = a == b
    if not (a.is_floating_point() or a.is_complex()):
        return same
    eps = torch.finfo(a.dtype).eps
    return same | ((a - b).abs() <= _FOLD_ULPS * eps * torch.maximum(a.abs(), b.abs()))


def _same_in_every_chunk(value: NamedTensor, name: str, chunked: tuple) -> bool:
    """Whether ``value``'s slices along the loop axis ``name`` are all equal, across
    every chunk: the largest and smallest instance agree (one replayed collective, so
    every chunk reads the same answer) -- at every index of the other axes held in part
    (``chunked``), whose chunks must all agree too (one more collective over them: a
    decision read off this chunk's part of them alone differed between chunks, and on a
    mesh the ranks then issued different collectives)."""
    from ..lax import pmax, pmin
    with torch.no_grad():
        hi, neg_lo = pmax((value, -value), name)
        rest = tuple(m for m in chunked if m != name)
        if not rest:
            hi, neg_lo = (t._data if type(t) is NamedTensor else t for t in (hi, neg_lo))
            return bool(_copies_agree(hi, -neg_lo).all())
        same = _copies_agree(hi._data, -neg_lo._data)
        keep = [hi._names.index(m) for m in rest]   # in ``names`` order, as ``rest``
        other = tuple(i for i in range(same.dim()) if i not in keep)
        per = (same.all(dim=other) if other else same).to(torch.float32)
        everywhere = pmin(NamedTensor._wrap(per, rest), rest)
    return bool(torch.equal(everywhere, torch.ones_like(everywhere)))


def _equal_along_in_every_chunk(value: NamedTensor, name: str, chunked: tuple) -> bool:
    """Whether ``value``'s slices along ``name`` (held whole here) are all equal in every
    chunk of the loop axes ``chunked`` (which ``value`` holds in part): each chunk's
    per-position answer, combined by one replayed ``pmin``."""
    from ..lax import pmin
    names, data = value._names, value._data
    d = names.index(name)
    keep = [names.index(m) for m in chunked]   # in ``names`` order, as ``chunked``
    other = tuple(i for i in range(data.dim()) if i not in keep)
    with torch.no_grad():
        same = _copies_agree(data, data.narrow(d, 0, 1))
        per = (same.all(dim=other) if other else same).to(torch.float32)
        everywhere = pmin(NamedTensor._wrap(per, chunked), chunked)
    return bool(torch.equal(everywhere, torch.ones_like(everywhere)))


# (function code, output tag, names, candidates) -> the axes folded on the last call
# whose values could be read; used when they cannot (tracing), so that a traced or
# compiled program has the named shapes an eager call of it had.
_FOLDS: dict = {}
_FOLDS_MAX = 4096
FOLD_MISSES = [0]   # lookups under tracing that found no eager decision


def drop_replicated(items: list) -> list:
    """Each ``(value, candidates, key)`` of ``items`` as ``value`` (a NamedTensor)
    without the ``candidates`` axes along which its slices are all equal (to a few units
    in the last place: ``_copies_agree``).

    The differentiated inputs are broadcast along the axes a closed-over value carries,
    so a result that JAX computes once (unbatched) comes out once per instance, all
    copies equal; they are folded back to one.  Reading values is only possible on
    real tensors.  Under tracing (make_fx, nx.jit, torch.compile, torch.func) the axes
    folded by the last eager call with the same ``key`` are folded again (nx.jit makes
    one eager call first); with no such call the copies are kept, which changes named
    shapes (an output may then need to place the axis), never values.  On a chunk of a
    ``SerialLoop`` axis the comparison spans every chunk (one replayed ``pmax``/``pmin``),
    for the loop axis itself and for every axis of a value that holds a chunk.

    The equality tests of all items are read at once: on a lazy device (XLA) every read
    runs the graph built so far, so one read per gradient leaf would cut a training
    step into dozens of graphs, each compiled on the first step.
    """
    bound = bound_axes()
    plans, tests = [], []   # per item: None, or (full key, names, [(name, test)])
    for value, candidates, key in items:
        plans.append(_fold_plan(value, candidates, key, bound, tests))
    answers = _read_all(tests)
    return [value if plan is None else _fold(value, plan, answers)
            for (value, _, _), plan in zip(items, plans)]


def _fold_plan(value, candidates: tuple, key, bound: dict, tests: list):
    """How :func:`drop_replicated` decides one item: None (no candidate axis), else
    ``(full key, names, checks)`` with ``checks`` None (traced: the values cannot be
    read) or ``[(name, answer)]``, an answer a bool or the index of a test appended to
    ``tests`` (read with all the others at once)."""
    names = value._names if type(value) is NamedTensor else ()
    candidates = tuple(n for n in candidates if n in names)
    if not candidates:
        return None
    full = (key, names, candidates) if key is not None else None
    data = value._data
    if not _concrete(data):
        return (full, names, None)
    checks = []
    # axes held in part here (a chunk of a SerialLoop axis): every chunk must make the
    # same decision, so the named shape never depends on the chunking
    chunked = tuple(m for i, m in enumerate(names)
                    if data.shape[i] != bound.get(m, data.shape[i]))
    for n in candidates:
        d = names.index(n)
        if n in chunked:
            checks.append((n, _same_in_every_chunk(value, n, chunked)))
        elif chunked:
            checks.append((n, _equal_along_in_every_chunk(value, n, chunked)))
        else:
            checks.append((n, len(tests)))
            tests.append(_copies_agree(data, data.narrow(d, 0, 1)).all())
    return (full, names, checks)


def _fold(value: NamedTensor, plan: tuple, answers: list) -> NamedTensor:
    """``value`` without the axes its plan (:func:`_fold_plan`) finds replicated, the
    decision remembered per key for traced calls (which reuse the last eager one)."""
    full, names, checks = plan
    if checks is None:   # traced: the last eager decision, else keep the copies
        # (not while dynamo traces: it cannot guard on a key holding a code object)
        folded = (_FOLDS.get(full) if full is not None
                  and not torch.compiler.is_compiling() else ())
        if folded is None:   # no eager call decided it yet: nx.jit makes one, retraces
            FOLD_MISSES[0] += 1
            folded = ()
    else:
        folded = tuple(n for n, t in checks if (t if type(t) is bool else answers[t]))
        if full is not None:
            if len(_FOLDS) >= _FOLDS_MAX:
                _FOLDS.clear()
            _FOLDS[full] = folded
    data = value._data
    for n in folded:
        d = names.index(n)
        data = data.select(d, 0)
        names = names[:d] + names[d + 1:]
    return NamedTensor._wrap(data, names) if folded else value


def _read_all(tests: list) -> list:
    """The values of 0-d bool tensors, one read per device."""
    answers = [False] * len(tests)
    by_device: dict = {}
    for i, t in enumerate(tests):
        if hasattr(t, "full_tensor"):   # a DTensor: its value, the same on every rank
            tests[i] = t = t.full_tensor()
        by_device.setdefault(t.device, []).append(i)
    for idx in by_device.values():
        for i, v in zip(idx, torch.stack([tests[i] for i in idx]).tolist()):
            answers[i] = v
    return answers


def fold_copies(trees: list, origs: list, added: tuple, code) -> list:
    """``drop_replicated`` over the value, each gradient tree and the aux tree, with one
    read of the equality tests for all of them.  A gradient keeps the axes its argument
    (``origs[i]``) carries; the value and aux (``None``) may lose any of ``added``."""
    items, specs = [], []
    for k, tree in enumerate(trees):
        leaves, spec = tree_flatten(tree)
        orig = origs[k] if k < len(origs) else None
        own = spec.flatten_up_to(orig) if orig is not None else [None] * len(leaves)
        tag = ((code, "value") if k == 0 else (code, "aux") if orig is None
               else (code, "grad", k - 1))
        for leaf, o in zip(leaves, own):
            keep = o._names if type(o) is NamedTensor else ()
            items.append((leaf, tuple(n for n in added if n not in keep), tag))
        specs.append((spec, len(leaves)))
    flat = drop_replicated(items)
    out, at = [], 0
    for spec, n in specs:
        out.append(tree_unflatten(flat[at:at + n], spec))
        at += n
    return out
