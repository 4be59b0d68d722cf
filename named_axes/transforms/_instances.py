"""Per-instance cotangents inside named programs: JAX 0.4.30's xmap convention.

Every value, and every cotangent, is one *per instance* of the named axes; a value
lacking axis ``a`` has one physical cotangent where JAX has ``size(a)``.  A
:class:`Region` records the axes a differentiated call meets, its inputs are broadcast
along them (a first run meeting a new one runs again: :func:`rerun_on_redo`), the loss
is seeded once per instance, and a :class:`GradTape` decides from the program, never
from the values, which copies each result keeps (:func:`fold_copies`).  See
docs/architecture.md ("Per-instance cotangents") and docs/guide.md §4.

>>> import torch, named_axes as nx
>>> xb = nx.named(torch.tensor([[1., 2.], [3., 4.]]), {0: 'b'})
>>> per_example = nx.xmap(lambda w: nx.grad(lambda w: nx.lax.pmean((xb * w).sum(), 'b'))(w),
...                       in_axes=[...], out_axes=['b', ...], axis_sizes={'b': 2})
>>> per_example(torch.ones(2))     # xb per instance, though xb is closed over
tensor([[1., 2.],
        [3., 4.]])
"""
from __future__ import annotations

import contextlib
import os

import torch

from .._engine import engine_for
from .._env import INNER, REPLICATED
from .._errors import AxisTypeError
from .._modes import modes_run_values as _modes_run_values
from .._tensor import RECORDERS, NamedTensor
from .._tape import Tape
from .._torch_private import is_functorch_wrapped, tree_flatten, tree_unflatten

__all__ = ["Region", "REGIONS", "Redo", "rerun_on_redo", "current", "instance_count",
           "GradTape", "static_tape", "without", "fold_copies", "fold_pullback"]

REGIONS: list = []  # open regions, innermost last


class Redo(Exception):
    """Raised inside a first run that met axes its inputs were not broadcast along."""


class Region:
    """One differentiated call: which named axes its values carry.

    ``expanded``: the axes the differentiated inputs are broadcast along.
    ``axes``: every relevant axis (name -> size), final once the function has run.
    """

    __slots__ = ("seen", "reduce", "axes", "early", "transposed")

    def __init__(self, expanded: dict, reduce_axes: tuple) -> None:
        # the axes already known count as seen: noting them again would be a write, which
        # dynamo refuses inside a custom rule's backward (traced with its forward)
        self.seen: dict = dict(expanded)
        self.reduce = reduce_axes
        self.axes: dict = dict(expanded)
        self.early: list = []   # (rule, axes) read by custom rules before the region settled
        self.transposed: list = []   # custom_jvp rules dynamo traced here (_grad.vjp)

    def __enter__(self) -> "Region":
        RECORDERS.append(self.seen)
        REGIONS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        # by identity: list.remove compares by ==, and two regions' dicts may be equal
        del RECORDERS[max(i for i, r in enumerate(RECORDERS) if r is self.seen)]
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
            if n is INNER or n is REPLICATED or n in inner or n in self.axes:
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
        """The axes a custom rule's backward reads (:mod:`._custom`): under dynamo, which
        traces the backward where the forward calls the rule, as they are now
        (:meth:`settle` checks that none came later)."""
        if torch.compiler.is_dynamo_compiling():
            axes = dict(self.axes)
            self.early.append((rule, axes))
            return axes
        return self.axes

    def seed_scale(self, names: tuple) -> int:
        """How many instances a loss carrying ``names`` stands for."""
        return instance_count(self.axes, names)


def instance_count(axes: dict, names: tuple, skip: tuple = ()) -> int:
    """How many instances of ``axes`` (name -> size) a value carrying ``names`` stands
    for, leaving out ``skip``: on a mesh, where a lacking axis is split over ranks, those
    of every rank (the value is replicated there, and its cotangent is the whole on each,
    :mod:`..parallel._local_comms`)."""
    count = 1
    for n, s in axes.items():   # a loop: dynamo cannot trace prod(<generator>)
        if n not in names and n not in skip:
            engine = engine_for((n,))
            count *= s if engine is None else engine.seed_size(n, s)
    return count


def rerun_on_redo(once, sizes: dict):
    """``once(sizes, True)``, run again as ``once(more sizes, False)`` when that first run
    met axes its inputs were not broadcast along (a closed-over value carries them)."""
    try:
        return once(sizes, True)
    except Redo as redo:
        return once({**sizes, **redo.args[0]}, False)


def current() -> Region | None:
    return REGIONS[-1] if REGIONS else None


class GradTape(Tape):
    """The :class:`~named_axes._tape.Tape` of one ``nx.grad`` / ``nx.vjp`` call: it knows
    the differentiated inputs (``roots``) and, once the function ran (``decide``), the
    added axes each result keeps -- the value and aux: the ones they really carry; each
    gradient: its input's own, and its cotangent's."""

    def __init__(self, added: tuple, own_level: bool) -> None:
        super().__init__(added)
        self.own_level = own_level
        self.root_leaves: list = []   # per differentiated argument: its leaves
        self.keep: list | None = None   # per result tree: per leaf, the added axes kept
        self.grads = False

    def roots(self, rebuilt, orig) -> None:
        """Note the leaves of ``rebuilt`` (an argument broadcast along the added axes)
        as inputs; ``orig``: the argument as given."""
        mine = tree_flatten(rebuilt)[0]
        for leaf, o in zip(mine, tree_flatten(orig)[0]):
            if type(leaf) is NamedTensor:
                self.root(leaf, o._names if type(o) is NamedTensor else ())
        self.root_leaves.append(mine)

    def decide(self, loss, aux=None, grads: bool = True) -> None:
        """Once the function ran: the axes its value ``loss`` and ``aux`` keep, and what
        the gradients' analysis (after the backward: :meth:`settle_gradients`,
        :meth:`pullback_keep`) starts from."""
        value = [self.true(v) if _is_tensor(v) else _EMPTY for v in tree_flatten(loss)[0]]
        aux = [self.true(v) if _is_tensor(v) else _EMPTY for v in tree_flatten(aux)[0]]
        self.keep, self.grads = [value, aux], grads
        self.sink_nodes = [self.follow(loss)] if grads else []
        self.out_nodes = [self.follow(v) for v in tree_flatten(loss)[0]]
        self.root_nodes = [[self.node(leaf) for leaf in mine] for mine in self.root_leaves]
        self.root_leaves = []
        if not grads:   # a pullback may outlive the call: keep the nodes only
            self.forget_values()

    def settle_gradients(self) -> None:
        """``keep`` for the gradients: the axes of their cotangents."""
        value, aux = self.keep
        self.keep = [value, *self._gradient_axes([(n, _EMPTY) for n in self.sink_nodes]), aux]
        self.forget_values()

    def pullback_keep(self, cts: list) -> list:
        """Per differentiated argument, per leaf: the axes its cotangent keeps when the
        outputs' cotangents are ``cts`` (a NamedTensor's added axes count)."""
        return self._gradient_axes([
            (n, self.added.intersection(c._names) if type(c) is NamedTensor else _EMPTY)
            for n, c in zip(self.out_nodes, cts)])

    def _gradient_axes(self, seeds: list) -> list:
        # JAX's: a cotangent may lack its input's own axes (grad of psum(x, 'i')); one
        # that no seed reaches is a zero with no named axis
        ct = None if self.opaque else self.cotangent_axes(seeds)
        return [[self.added if ct is None else ct.get(n, _EMPTY) for n in nodes]
                for nodes in self.root_nodes]


class _NoTape(contextlib.nullcontext):
    """Stands for a :class:`GradTape` where none is needed (no added axis)."""
    keep = None

    def roots(self, *args, **kwargs) -> None:
        pass

    decide = roots


_EMPTY = frozenset()


# torch < 2.10's dynamo breaks the graph inside the tape (under torch.func's grad): there
# the copies along the added axes are kept under torch.compile (the same values)
_DYNAMO_TRACES_TAPE = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 10)


def static_tape(added: tuple, own_level: bool = False):
    """A :class:`GradTape` for a call whose inputs are broadcast along ``added``
    (``own_level``: see ``Tape.own_level``)."""
    if not added or not _DYNAMO_TRACES_TAPE and torch.compiler.is_dynamo_compiling():
        return _NoTape()
    return GradTape(added, own_level)


def _is_tensor(v) -> bool:
    return type(v) is NamedTensor or isinstance(v, torch.Tensor)


# Tests set NAMED_AXES_CHECK_FOLDS=1: every fold then checks, where values can be read,
# that the copies it drops equal the one it keeps.
_CHECK = os.environ.get("NAMED_AXES_CHECK_FOLDS") == "1"


def without(value, axes) -> object:
    """``value`` without the named axes ``axes`` (copies along them: keep the first)."""
    if type(value) is not NamedTensor:
        return value
    names, data = value._names, value._data
    drop = [n for n in names if n in axes]
    if not drop:
        return value
    for n in drop:
        d = names.index(n)
        if _CHECK:
            _check_copies(data, d, n)
        engine = engine_for((n,))
        data = data.select(d, 0) if engine is None else engine.first_copy(data, d, n)
        names = names[:d] + names[d + 1:]
    return NamedTensor._wrap(data, names)


def _check_copies(data: torch.Tensor, d: int, name) -> None:
    if (torch.compiler.is_dynamo_compiling() or not isinstance(data, torch.Tensor)
            or is_functorch_wrapped(data) or not _modes_run_values()):
        return   # no real values to read (traced, fake or batched)
    first = data.narrow(d, 0, 1)
    if hasattr(data, "full_tensor"):   # a DTensor: compare its values
        data, first = data.full_tensor(), first.full_tensor()
    if data.is_floating_point() or data.is_complex():
        tol = 16 * torch.finfo(data.dtype).eps * torch.maximum(data.abs(), first.abs())
        same = bool(((data - first).abs() <= tol).all())
    else:
        same = bool((data == first).all())
    if not same:
        raise AssertionError(f"named_axes internal: the tape folds axis {name!r} of a "
                             f"result whose copies along it differ")


def fold_pullback(grads: tuple, tape, cts: list) -> tuple:
    """``vjp``'s pullback results (one tree per primal) without the added axes their
    cotangents do not carry, given the outputs' cotangents ``cts``."""
    if tape.keep is None:
        return grads
    return tuple(_folded(g, keep, tape.added) for g, keep in zip(grads, tape.pullback_keep(cts)))


def fold_copies(trees: list, tape) -> list:
    """The value, each gradient tree and the aux tree without the added axes the tape
    found they do not keep (``trees``: ``[value, *grads, aux]``; aux optional)."""
    if tape.keep is None:
        return trees
    if tape.grads:
        tape.settle_gradients()
    out = [_folded(tree, keep, tape.added) for tree, keep in zip(trees, tape.keep)]
    return out + trees[len(out):]


def _folded(tree, keep: list, added: frozenset):
    """``tree`` with each leaf without the ``added`` axes its entry of ``keep`` lacks."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([without(v, added - k) for v, k in zip(leaves, keep)], spec)
