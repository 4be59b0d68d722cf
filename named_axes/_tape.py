"""Which named axes a value inside ``nx.grad`` / ``nx.vjp`` carries as JAX sees it, and
which its cotangent will: decided from the program, never from the values.

The grad family broadcasts the differentiated inputs along the named axes of the
computation (``added``); JAX computes them once.  A :class:`Tape` notes every op on named
values with the added axes its outputs really carry and, per operand, the axes its
derivative *reads* and *removes*; walking back from the loss gives each input's cotangent
axes as JAX's transpose rules do (docs/architecture.md, "xmap and transforms").  A value
built where the tape cannot see makes it *opaque*: every copy is kept, never another value.

>>> import torch
>>> from named_axes._tensor import NamedTensor
>>> tape = Tape(('j',))
>>> w = NamedTensor._wrap(torch.ones(4, 3), ('j',))     # an input, broadcast along j
>>> c = NamedTensor._wrap(torch.randn(4, 3), ('j',))    # closed over: really carries j
>>> tape.root(w, ())
>>> s, p = NamedTensor._wrap(torch.ones(4, 3), ('j',)), NamedTensor._wrap(torch.ones(4, 3), ('j',))
>>> tape.note("linear", (w, c), (s,)); tape.note("bilinear", (w, c), (p,))
>>> ct = lambda v: sorted(tape.cotangent_axes([(tape.node(v), frozenset())])[tape.node(w)])
>>> ct(s), ct(p)
([], ['j'])
"""
from __future__ import annotations

import functools
from typing import Iterable

import torch

from ._env import TAPES
from ._tensor import NamedTensor
from ._torch_private import is_functorch_wrapped, tree_flatten

__all__ = ["TAPES", "Tape", "Node", "note", "note_call", "kind_of", "taped", "noted_rule",
           "transposed", "suspended", "note_result", "aliased"]

_NT = NamedTensor
_Tensor = torch.Tensor
_EMPTY = frozenset()


class Node:
    """One value as the tape knows it: ``true`` (the added axes it really carries),
    ``phys`` (the added axes it physically carries), ``edges``: ``(operand node, reads,
    removes)`` per operand its value depends on differentiably."""

    __slots__ = ("true", "phys", "edges")

    def __init__(self, true: frozenset, phys: frozenset, edges: tuple) -> None:
        self.true, self.phys, self.edges = true, phys, edges


class Tape:
    """The record of one differentiated call (see the module docstring)."""

    def __init__(self, added: Iterable, parent: "Tape | None" = None) -> None:
        self.added = frozenset(added)
        self.parent = parent     # where values this tape did not see are known
        self.nodes: dict = {}    # id(value) -> (value, Node); the value kept alive
        self.made: dict = {}     # id -> NamedTensor built in the region (kept alive)
        self.by_data: dict = {}  # id(physical tensor) -> (tensor, Node) of a noted value
        self.opaque = False
        # the call differentiates at its own torch.func level, under no other transform:
        # a value depends on its inputs iff torch.func wraps it (a tensor that requires
        # grad for an autograd graph outside the call does not)
        self.own_level = False

    def __enter__(self) -> "Tape":
        TAPES.append(self)
        return self

    def __exit__(self, *exc) -> None:
        TAPES.remove(self)

    def node(self, value) -> Node | None:
        hit = self.nodes.get(id(value))
        return hit[1] if hit is not None and hit[0] is value else None

    def phys(self, value) -> frozenset:
        names = value._names if type(value) is _NT else ()
        return self.added.intersection(names)

    def true(self, value) -> frozenset:
        """The added axes ``value`` really carries (untracked: the ones it has)."""
        n = self.node(value)
        if n is not None:
            return n.true
        return self.parent.true(value) if self.parent is not None else self.phys(value)

    def _set(self, value, node: Node) -> None:
        self.nodes[id(value)] = (value, node)
        if type(value) is _NT:
            self.by_data[id(value._data)] = (value._data, node)

    def root(self, value, own: Iterable) -> None:
        """Note a differentiated input, broadcast along ``added``; ``own``: its names
        before the broadcast."""
        self._set(value, Node(self.added.intersection(own), self.phys(value), ()))

    def note(self, kind: str, operands: Iterable, outputs: Iterable,
             along: frozenset = _EMPTY, collective: tuple | None = None) -> None:
        """Note an op of ``kind`` (see :func:`kind_of`) that made ``outputs`` from
        ``operands`` (tensors and NamedTensors; other values are skipped); ``along``:
        named axes a torch op runs along (``x.cumsum('j')``), which its derivative reads
        unless it sums them."""
        ops = []   # (value, node, true, phys, differentiable)
        for v in operands:
            if type(v) is _NT or isinstance(v, _Tensor):
                node = self.follow(v)
                ops.append((v, node, node.true if node else self.true(v),
                            node.phys if node else self.phys(v), _float(v)))
        carried, had = _EMPTY, _EMPTY
        for _, _, true, phys, _ in ops:
            carried, had = carried | true, had | phys
        edges_for = kind != "constant"
        for out in outputs:
            if not (type(out) is _NT or isinstance(out, _Tensor)):
                continue
            phys = self.phys(out)
            true = phys & (carried | (phys - had))
            edges = _edges(kind, ops, phys, along) if edges_for and _float(out) else ()
            old = self.node(out)
            if old is not None and not any(out is v for v, *_ in ops):
                # built inside this op by ops noted already (an nx.lax op calling
                # torch): what they read counts too
                true, edges = true | old.true, old.edges + edges
            self._set(out, Node(true, phys, edges))

    def _unseen(self, v) -> Node | None:
        """The node of an operand that depends on the inputs but no noted op made: a
        plain tensor made by plain torch ops (``psum(x) * 0.5``), which read no named
        axis, from one of the plain values noted so far; else the tape is opaque."""
        if type(v) is _NT:
            hit = self.by_data.get(id(v._data))
            if hit is not None and hit[0] is v._data and self.phys(v) == hit[1].phys:
                return hit[1]   # the same physical tensor, named again (rebox)
            self.opaque = True
            return None
        return Node(_EMPTY, _EMPTY, tuple((n, _EMPTY, _EMPTY) for p, n in self.nodes.values()
                                          if type(p) is not _NT and _float(p)))

    def follow(self, value) -> Node | None:
        """``value``'s node.  One that no noted op made but that may depend on the
        inputs gets :meth:`_unseen`'s (kept: ``node`` finds it again), or None with the
        tape opaque."""
        n = self.node(value)
        if n is None and _derived(value, self.made, self.own_level):
            n = self._unseen(value)
            if n is not None:
                self.nodes[id(value)] = (value, n)
        return n

    @staticmethod
    def cotangent_axes(seeds: Iterable) -> dict:
        """Node -> the added axes of its cotangent, for every node that the ``seeds``,
        ``(node, the axes of its cotangent)``, reach."""
        ct: dict = {}
        work = []
        for n, c in seeds:
            if n is not None:
                ct[n] = ct.get(n, _EMPTY) | c
                work.append(n)
        while work:
            n = work.pop()
            c = ct[n]
            for src, reads, removes in n.edges:
                new = ((c - removes) | reads) & src.phys
                old = ct.get(src)
                if old is None or not new <= old:
                    ct[src] = new if old is None else new | old
                    work.append(src)
        return ct

    def forget_values(self) -> None:
        """Drop the values noted (the nodes stay): once a call's results are built."""
        self.nodes, self.made, self.by_data = {}, {}, {}


def _derived(v, made: dict, own_level: bool = False) -> bool:
    """Whether ``v``, which no noted op made, may still depend on the inputs: a
    NamedTensor built in the region, or a plain tensor made by ops autograd records
    (at the call's own torch.func level, when it has one: ``Tape.own_level``)."""
    if torch.compiler.is_dynamo_compiling():
        # dynamo traces neither torch.func's wrappers nor the requires_grad of the
        # tensors torch.func.grad differentiates: assume the value may depend on them
        # (more axes kept, never other values)
        return type(v) is not _NT or id(v) in made
    if type(v) is _NT:
        data = v._data
        return id(v) in made and (is_functorch_wrapped(data) if own_level
                                  else data.requires_grad)
    if own_level:
        return is_functorch_wrapped(v)
    return v.requires_grad and (v.grad_fn is not None or is_functorch_wrapped(v))


def _float(v) -> bool:
    data = v._data if type(v) is _NT else v
    return data.is_floating_point() or data.is_complex()


def _edges(kind: str, ops: list, out_phys: frozenset, along: frozenset) -> tuple:
    """Per operand derived from an input: ``(node, reads, removes)``."""
    edges = []
    for k, (_, node, _, phys, diff) in enumerate(ops):
        if node is None or not diff:
            continue
        reads, removes = _EMPTY, phys - out_phys
        if kind not in ("sum", "bilinear"):
            # an axis the op takes away other than by a sum (an index along it, a max,
            # all_gather, whose transpose is psum_scatter) comes back in the cotangent,
            # as does one a torch op runs along (a cumsum mixes its instances)
            reads, removes = removes | (along & phys), _EMPTY
        mine = kind
        if kind in ("quotient", "rquotient"):   # x / y reads y for x, both for y
            mine = "bilinear" if k == (0 if kind == "quotient" else 1) else "nonlinear"
        for m, (_, _, true, _, other_diff) in enumerate(ops):
            if mine == "nonlinear" or (mine == "bilinear" and m != k) or not other_diff:
                reads = reads | true
        edges.append((node, reads, removes))
    return tuple(edges)


def note(kind: str, operands: Iterable, outputs: Iterable, along: Iterable = (),
         collective: tuple | None = None) -> None:
    """Note an op on every open tape; ``collective``: ``(its name, the axis_name it was
    called with)`` for an ``nx.lax`` collective (a cost trace prices its communication,
    parallel/_cost_trace.py)."""
    operands, outputs, along = tuple(operands), tuple(outputs), frozenset(along)
    for tape in TAPES:
        tape.note(kind, operands, outputs, along, collective)


def note_result(kind: str, args: tuple, kwargs, out, along: bool = False,
                collective: tuple | None = None) -> None:
    """Note the call ``op(*args, **kwargs) -> out`` of an op of ``kind``; ``along``: its
    string arguments (and a dict index's keys) name axes it runs along."""
    leaves = _leaves(args, kwargs)
    note(kind, leaves, _leaves((out,), None), _named_in(leaves, args) if along else (),
         collective)


def noted_rule(operands: Iterable, outputs: Iterable) -> list:
    """Note a call of a custom rule as a nonlinear op, for :func:`transposed` to refine."""
    operands, outputs = tuple(operands), tuple(outputs)
    note("nonlinear", operands, outputs)
    return [(tape, [tape.node(v) for v in operands], [tape.node(o) for o in outputs])
            for tape in TAPES]


def transposed(noted: list, cts: Iterable, run):
    """``run()``: a custom rule's backward on the cotangents ``cts``, returning one
    cotangent per operand noted by :func:`noted_rule`.  It runs under two sub-tapes, the
    cotangents carrying no added axis and every one: what reaches each result in the first
    are the axes the rule reads, what is missing in the second those it removes."""
    if not noted:
        return run()
    cts = [c for c in cts if type(c) is _NT]
    subs = []
    for tape, operands, outputs in noted:   # (nodes)
        none, every = Tape(tape.added, tape), Tape(tape.added, tape)
        for c in cts:
            none.root(c, ())
            every.root(c, tape.added)
        subs.append((tape, operands, outputs, none, every))
    # the backward's values are not the forward's: only these see it
    with suspended([t for *_, none, every in subs for t in (none, every)]):
        results = run()
    flat = tree_flatten(list(results), is_leaf=lambda x: x is None)[0]
    for tape, operands, outputs, none, every in subs:
        edges = tuple((n, none.true(g), tape.added - every.true(g))
                      for n, g in zip(operands, flat) if n is not None and g is not None)
        for n in outputs:
            if n is not None:
                n.edges = edges
    return results


def aliased(values: Iterable, others: Iterable) -> None:
    """Open tapes know each of ``others`` as the value at its position in ``values`` (the
    same value as another object: an ``autograd.Function``'s output)."""
    for tape in TAPES:
        for v, o in zip(values, others):
            node = tape.node(v)
            if node is not None and tape.node(o) is None:
                tape._set(o, node)


class suspended:
    """Only ``tapes`` (default: none) see the ops run inside (a custom rule's own
    forward: the call is noted as a whole, :func:`noted_rule`)."""

    def __init__(self, tapes: list = ()) -> None:
        self.tapes = list(tapes)

    def __enter__(self) -> None:
        self.saved = TAPES[:]
        TAPES[:] = self.tapes

    def __exit__(self, *exc) -> None:
        TAPES[:] = self.saved


_KINDS: dict = {}


def note_call(func, args: tuple, kwargs: dict, out) -> None:
    """Note the call ``func(*args, **kwargs) -> out`` on every open tape."""
    if torch.compiler.is_dynamo_compiling():
        # dynamo traces no str method on a function's name (nor hashes every function):
        # the kinds of the names torch and nx.lax spell, nonlinear (reads all) otherwise
        kind = _KIND_BY_NAME.get(getattr(func, "__name__", None), "nonlinear")
    else:
        kind = _KINDS.get(func)
        if kind is None:
            kind = _KINDS[func] = kind_of(getattr(func, "__name__", ""))
    note_result(kind, args, kwargs, out, along=True)


def _named_in(leaves: list, args: tuple) -> list:
    """The axis names among an op's arguments: strings, and the keys of a dict index
    (``x[{'j': slice(0, 2)}]``)."""
    return [a for a in leaves if type(a) is str] + [
        k for a in args if type(a) is dict for k in a if type(k) is str]


def _leaves(args: tuple, kwargs) -> list:
    """The leaves of ``args`` and ``kwargs`` (no tree_flatten where there is no container)."""
    for a in args:
        if isinstance(a, (list, tuple, dict)):   # (torch.return_types too)
            return tree_flatten((args, kwargs))[0]
    if kwargs:
        return list(args) + tree_flatten(kwargs)[0]
    return list(args)


def taped(kind: str | None = None, output_arg: int | None = None, along: bool = False):
    """Decorate an op that builds NamedTensors itself (``nx.lax``, ``nx.einsum``...) so
    that open tapes note it; ``kind``: how its derivative reads its operands (default:
    :func:`kind_of` its name); ``output_arg``: the op writes into this argument and
    returns nothing (``__setitem__``); ``along``: its string arguments name axes it runs
    along (``nx.softmax(x, 'j')``)."""
    def decorate(fn):
        k = kind or kind_of(fn.__name__)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            if TAPES:   # inside nx.grad / nx.vjp (eager or traced by dynamo)
                note_result(k, args, kwargs, out if output_arg is None else args[output_arg],
                            along)
            return out
        return call
    return decorate


# How an op's derivative reads its operands, by the op's name: "linear" (reads only its
# integer and boolean operands: indices, masks, conditions; "sum" when it may sum a named
# axis away, which then leaves the cotangent), "bilinear" (reads the other
# operands), "quotient" (x / y: as bilinear for x, nonlinear for y), "constant" (no
# derivative flows); every other op is "nonlinear" (reads all).
_LINEAR = frozenset("""
add sub rsub neg negative positive cumsum reshape view view_as flatten
unflatten squeeze unsqueeze permute transpose swapaxes swapdims t adjoint movedim moveaxis
expand expand_as broadcast_to repeat tile flip fliplr flipud roll rot90 narrow select
getitem setitem index_select gather take take_along_dim cat concat concatenate stack
hstack vstack dstack split chunk unbind tensor_split hsplit vsplit clone contiguous to
type_as float double half bfloat16 real imag conj resolve_conj resolve_neg diagonal diag
diag_embed tril triu trace pad where masked_fill index_add scatter_add index_put index_copy
copy align_to align_as rename refine_names T mT H mH unfold as_strided narrow_copy select_scatter
slice_scatter diagonal_scatter squeeze_copy unsqueeze_copy view_copy permute_copy
psum_scatter all_to_all ppermute pshuffle dynamic_slice
dynamic_update_slice dynamic_index_in_dim dynamic_update_index_in_dim
""".split())
# linear ops that may sum a named axis away: the one way an axis leaves a cotangent
_SUMS = frozenset("sum mean nansum psum pmean".split())
_BILINEAR = frozenset("""
mul multiply matmul mm bmm mv dot vdot inner outer ger tensordot einsum linear bilinear
kron addmm addbmm baddbmm addmv addr conv1d conv2d conv3d conv_transpose1d conv_transpose2d
conv_transpose3d pdot
""".split())
_CONSTANT = frozenset("""
zeros_like ones_like empty_like full_like rand_like randn_like randint_like floor ceil
round trunc sign detach stop_gradient axis_index
""".split())


def kind_of(name: str) -> str:
    """How the op named ``name`` (``mul``, ``__mul__``, ``mul_``, ``torch.mul``) reads
    its operands in its derivative.

    >>> kind_of('__rmul__'), kind_of('add_'), kind_of('tanh')
    ('bilinear', 'linear', 'nonlinear')
    """
    base = name.rsplit(".", 1)[-1].strip("_")
    if base in ("div", "divide", "true_divide", "truediv", "idiv", "itruediv"):
        return "quotient"
    if base == "rtruediv" or base == "rdiv":   # y.__rtruediv__(x) is x / y
        return "rquotient"
    if base[:1] in ("r", "i") and base[1:] in ("add", "sub", "mul", "matmul"):   # reflected,
        base = base[1:]                                                      # in place
    for names, kind in ((_SUMS, "sum"), (_LINEAR, "linear"), (_BILINEAR, "bilinear"),
                        (_CONSTANT, "constant")):
        if base in names:
            return kind
    return "nonlinear"


_KIND_BY_NAME = {n: k for n in {*_LINEAR, *_SUMS, *_BILINEAR, *_CONSTANT, *(
    n for owner in (torch, torch.Tensor, torch.nn.functional, torch.special, torch.linalg)
    for n in dir(owner))} if (k := kind_of(n)) != "nonlinear"}
