"""xmap: give a positional signature to a program that uses named axes.

Every call's checks live here; a repeated call runs the plan its first call left
(:mod:`._xmap_call`).

>>> import torch, named_axes as nx
>>> x = torch.arange(10.).reshape(2, 5)
>>> nx.xmap(torch.vdot, in_axes=({0: 'left'}, {1: 'right'}),
...         out_axes=['left', 'right', ...])(x, x.T)
tensor([[ 30.,  80.],
        [ 80., 255.]])
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import torch

from . import _env
from ._errors import (AxisResourceError, AxisSizeError, AxisSpecError, AxisTypeError,
                      fmt_named_shape, fmt_names, fmt_spec, resource_clash_message)
from ._layout import apply_insert, insert_plan
from ._parsing import check_name, is_mapping, match_prefix, parse_mapping, path_str
from ._plancache import PlanCache
from ._tensor import NamedTensor
from ._xmap_call import (_MAX_PLANS, _OutOps, _Plan, _as_torch, _flatten, _flatten_key, _is_array,
                         _is_leaf, _unflatten)
from ._xmap_graph import GraphCall
from .parallel import backend_device, resource_conflicts, run_partitioned
from .parallel._auto import auto_resources
from .transforms._jit import on_mesh_under_dynamo, run_jitted

__all__ = ["xmap"]

_dynamo_tracing = torch.compiler.is_dynamo_compiling


class _Xmapped:
    """The function xmap returns (a class so that repr and torch.compile see a plain callable)."""

    def __init__(self, fun, in_axes, out_axes, axis_sizes, axis_resources, donate_argnums, backend):
        self.fun = fun
        self.in_axes = in_axes
        self.out_axes = out_axes
        self.axis_sizes = dict(axis_sizes or {})
        self.axis_resources = dict(axis_resources or {})
        self.donate_argnums = donate_argnums
        self.backend = backend
        functools.update_wrapper(self, fun, updated=())
        extras = "".join(f", {k}={fmt_spec(v)}" for k, v in (
            ("axis_sizes", axis_sizes), ("axis_resources", axis_resources)) if v)
        self._spelling = (f"xmap({getattr(fun, '__name__', 'fun')}, in_axes={fmt_spec(in_axes)}, "
                          f"out_axes={fmt_spec(out_axes)}{extras})")
        # a list of mappings is a container of them, matched like a tuple of arguments
        self._in_spec = (tuple(in_axes) if isinstance(in_axes, list) and not is_mapping(in_axes)
                         else in_axes)
        # call plans by argument structure; partitioned / device-moving calls plan each call
        self._plans = PlanCache(f"xmap {self._spelling[:40]}", maxsize=_MAX_PLANS)
        self._plannable = not self.axis_resources and backend is None
        # under torch.compile: one node of dynamo's graph where the body allows it
        self._graph = None if not self._plannable or torch.compiler.is_dynamo_compiling() else \
            GraphCall(lambda a: self._call(a, {}), fun)   # (an xmap made in dynamo's trace: none)

    def __repr__(self) -> str:
        return f"<{self._spelling}>"

    def replaced(self, fun: Callable | None = None, axis_resources: Mapping | None = None):
        """This xmap with another body (the cost model's trace) and ``axis_resources``
        (none unless given)."""
        return _Xmapped(fun or self.fun, self.in_axes, self.out_axes, self.axis_sizes,
                        axis_resources, self.donate_argnums, self.backend)

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        if _dynamo_tracing():   # (every read here is a guard on each compiled call)
            graph = self._graph
            if graph is not None and graph.applies(args, kwargs):
                return graph.call(*args)   # one node of dynamo's graph: see _xmap_graph
            if not kwargs and on_mesh_under_dynamo(self):   # torch.compile on a mesh:
                return run_jitted(self, args)               # the call as nx.jit's program
            return self._call(args, kwargs)   # (no Python-object caches in a trace)
        leaves: list = []
        key: list = []
        if kwargs or not self._plannable or not _flatten_key(args, leaves, key):
            return self._call(args, kwargs)
        key = tuple(key)
        plan = self._plans.lookup(key)
        if plan is None:
            return self._call(args, kwargs, key)
        sizes = plan.sizes(leaves)
        if sizes is None:   # a check failed: the error, spelled
            sizes = plan.sizes(leaves, f"{self._spelling}(<inputs>)")
        named = plan.enter(leaves)
        _env.push(_env.xmap_frame(sizes))
        try:
            out = self.fun(*(named if plan.flat else _unflatten(args, named)))
        finally:
            _env.pop()
        return self._exit(plan, out, sizes)

    def _call(self, args: tuple, kwargs: dict, key: tuple | None = None):
        """The call with every check: its plan is built (and with ``key``, cached for
        this argument structure) before it runs."""
        if kwargs:
            raise AxisTypeError(f"{self._spelling}: keyword arguments are not supported; pass "
                                f"them positionally (in_axes describes positional arguments)")
        what = f"{self._spelling}(<inputs>)"
        if self._graph is not None and not torch.compiler.is_dynamo_compiling():
            self._graph.register()   # (dynamo loaded since the xmap was made)
        for i in self.donate_argnums:
            if not -len(args) <= i < len(args):
                raise AxisSpecError(f"{what}: donate_argnums={self.donate_argnums!r} names "
                                    f"argument {i}, but the call has {len(args)} arguments")
        pairs = _env.conflicts()
        if self.axis_resources:   # with those between its axes and the enclosing xmaps'
            pairs = pairs | resource_conflicts(self._resources_in_force())
        plan, leaves = self._plan(args, what, pairs)
        sizes = plan.sizes(leaves, what)
        if key is not None:
            self._plans.store(key, plan)
        named = plan.enter(leaves)
        out_tree: list = []

        def body(named_leaves, engine=None):
            call_args = _unflatten(args, list(named_leaves))
            with _env.bind(sizes, resources=self.axis_resources, engine=engine,
                           conflicts=pairs):
                out = self.fun(*call_args)
            out_tree[:] = [out]
            return _flatten(out)

        if not self.axis_resources:
            body(named)
            return self._exit(plan, out_tree[0], sizes, pairs)
        out_leaves = run_partitioned(
            body, named, axis_sizes=sizes, axis_resources=self.axis_resources,
            backend=self.backend, donate_argnums=self.donate_argnums)
        return self._exit_checked(_unflatten(out_tree[0], out_leaves), sizes, what,
                                  plan.carried, pairs)[0]

    def _resources_in_force(self) -> dict:
        """The axis resources of the enclosing xmaps and this one (this one's win): JAX
        checks nested xmaps against the outer axis_resources too."""
        merged: dict = {}
        for frame in _env.frames():
            merged.update(frame.resources)
        merged.update(self.axis_resources)
        return merged

    def _check_conflicts(self, names, pairs: frozenset, what: str, how: str) -> None:
        """Two axes mapped to one resource may not meet in one value (docs/guide.md §5), whichever
        way the value was formed: an argument, an output, an op."""
        if not pairs or len(names) < 2:
            return
        names = set(names)
        for pair in pairs:
            if pair <= names:
                raise AxisResourceError(resource_clash_message(
                    what, *pair, self._resources_in_force(), how=how))

    def _plan(self, args: tuple, what: str, pairs: frozenset) -> tuple:
        """The checked :class:`_Plan` of a call and its leaves (physical tensors, numpy
        values as torch's, moved to ``backend``'s device)."""
        if type(self._in_spec) is tuple and not self._in_spec and args:
            # JAX: a top-level in_axes=() is the empty argument list, not a rank-0 mapping
            raise AxisSpecError(
                f"{what}: in_axes=() describes an empty argument list, but the call has "
                f"{len(args)} arguments; give one axis mapping per argument, or a single "
                f"mapping for all ([] asserts rank 0, [...] names nothing)")
        # a single mapping at the top applies to the array arguments only
        top_mapping = is_mapping(self._in_spec)
        device = _backend_device(self.backend)
        leaves, record, paths, names = [], [], [], {}   # (names: a set in input order)
        for path, leaf, mapping in match_prefix(self._in_spec, args, _is_leaf, what=what):
            paths.append(path)
            rec = None
            if _is_array(leaf):
                leaf = _as_torch(leaf) if device is None else _as_torch(leaf).to(device)
                rec = self._name_input(leaf, path, mapping, what, pairs)
                names.update((n, None) for _, n in rec[0])
                leaf = leaf._data if isinstance(leaf, NamedTensor) else leaf
            elif mapping.entries and not top_mapping and leaf is not None:
                raise AxisTypeError(
                    f"{what}: {path_str(path)} is {_article(type(leaf).__name__)}, which has "
                    f"no axes, but in_axes names {fmt_names(mapping.names)} for it")
            leaves.append(leaf)
            record.append(rec)
        for name, s in self.axis_sizes.items():
            check_name(name, where=f"{what}: axis_sizes")
            if not isinstance(s, int) or s < 0:
                raise AxisSizeError(f"{what}: axis_sizes gives axis {name!r} size {fmt_spec(s)}; "
                                    f"sizes are non-negative ints")
        defined = {**names, **self.axis_sizes}
        for name in _spec_names(self._in_spec):
            if name not in defined:   # JAX: "Failed to infer size of axes"
                raise AxisSizeError(
                    f"{what}: the size of axis {name!r} cannot be inferred: in_axes names it, "
                    f"but no argument carries it (an empty container in its place?); give it "
                    f"with axis_sizes={{{name!r}: n}}")
        for name in self.axis_resources:
            if name not in defined:
                raise AxisResourceError(
                    f"{what}: axis_resources assigns axis {name!r}, which no input and no "
                    f"axis_sizes entry defines (defined: {fmt_names(defined)})")
        return _Plan(record, paths, self.axis_sizes, all(_is_leaf(a) for a in args)), leaves

    def _name_input(self, x: Any, path: tuple, mapping, what: str, pairs: frozenset) -> tuple:
        """The record of one array argument: ``(resolved, names before, physical ndim)``."""
        base, before = (x._data, x._names) if isinstance(x, NamedTensor) else (x, ())
        resolved = mapping.resolve(x.ndim, what=f"{what}: {path_str(path)}")
        for _, name in resolved:
            if name in before:
                raise AxisSpecError(f"{what}: axis {name!r} is already bound by an enclosing "
                                    f"xmap/vmap; use a new name" if name in _env._state.bound
                                    else f"{what}: {path_str(path)} already has a named axis "
                                    f"{name!r} (made outside this xmap); use a new name")
        self._check_conflicts(before + tuple(n for _, n in resolved), pairs,
                              f"{what}: {path_str(path)}", f"{path_str(path)} would carry both")
        return resolved, before, base.dim()

    def _exit(self, plan: _Plan, out: Any, sizes: dict, pairs: frozenset = frozenset()):
        """Place the output's named axes per out_axes, by the cached output plan."""
        if type(out) is NamedTensor:   # the common single output, keyed as _flatten_key does
            data = out._data
            ops = plan.outs.lookup(((out._names, data.dim()),))
            if ops and not ops.escapes(plan.carried):
                return apply_insert(data, ops[0], sizes)
        leaves: list = []
        key: list = []
        ops = False   # (False: not cacheable, None: not cached yet)
        if _flatten_key(out, leaves, key):
            key = tuple(key)
            ops = plan.outs.lookup(key)
        if ops and not ops.escapes(plan.carried):
            results = [x if op is None else apply_insert(x, op, sizes)
                       for x, op in zip(leaves, ops)]
            return results[0] if _is_leaf(out) else _unflatten(out, results)
        result, new_ops = self._exit_checked(out, sizes, f"{self._spelling}(<inputs>)",
                                             plan.carried, pairs)
        if ops is None:   # its output plan, now that the checks passed
            plan.outs.store(key, new_ops)
        return result

    def _exit_checked(self, out: Any, sizes: dict, what: str, carried: frozenset,
                      pairs: frozenset) -> tuple:
        """The output placed with every check, and its :class:`_OutOps` (False where a
        Python number became a tensor: such an output is not cached)."""
        results, ops = [], _OutOps()
        for path, leaf, mapping in match_prefix(self.out_axes, out, _is_leaf,
                                                what=f"{what}: out_axes", base="output"):
            label = path_str(path, "output")
            for n in mapping.names:
                if n not in sizes:
                    raise AxisSpecError(
                        f"{what}: out_axes places axis {n!r}, which this xmap does not define "
                        f"(defined: {fmt_names(sizes)}); name it in in_axes or axis_sizes")
            op = None
            if leaf is None or isinstance(leaf, str):
                pass   # JAX: None is an empty subtree; strings pass
            elif _is_array(leaf) or ((mapping.entries or mapping.rank)
                                     and isinstance(leaf, (int, float, bool, complex))):
                # numpy values (0-d stays 0-d); JAX broadcasts a number like an array
                if not isinstance(leaf, (torch.Tensor, NamedTensor)):
                    ops = False
                    leaf = _as_torch(leaf) if _is_array(leaf) else torch.as_tensor(leaf)
                if isinstance(leaf, torch.Tensor):
                    leaf = NamedTensor._wrap(leaf, ())
                self._check_escape(leaf, mapping, sizes, carried, f"{what}: {label}")
                self._check_conflicts(
                    set(leaf._names) | set(mapping.names), pairs, f"{what}: {label}",
                    f"it carries {fmt_names(leaf._names)} and out_axes {mapping.spelling} "
                    f"places {fmt_names(mapping.names)}")
                left = [n for n in leaf._names if n in sizes and n not in mapping.names]
                if left:
                    raise AxisSpecError(
                        f"{what}: {label} has named axis {left[0]!r} (named_shape "
                        f"{fmt_named_shape(leaf.named_shape)}) that out_axes {mapping.spelling} "
                        f"does not place; add it to out_axes, or reduce it (e.g. nx.lax.psum) "
                        f"before returning")
                op = insert_plan(leaf._names, leaf.ndim, mapping, what=f"{what}: {label}")
                leaf = apply_insert(leaf._data, op, sizes)
            elif mapping.entries:
                raise AxisTypeError(f"{what}: {label} is {_article(type(leaf).__name__)}, but "
                                    f"out_axes places axes {fmt_names(mapping.names)} on it")
            results.append(leaf)
            if ops is not False:
                ops.append(op)
        if ops is not False:
            ops.kept = tuple({n: None for op in ops if op is not None for n in op[2]})
        return _unflatten(out, results), ops

    @staticmethod
    def _check_escape(leaf: NamedTensor, mapping, sizes: dict, carried: frozenset,
                      label: str) -> None:
        """An output may keep a named axis only if an enclosing xmap/vmap binds it (or an
        argument carried it in); an axis created inside (``one_hot(..., dim='classes')``)
        or closed over from no binding site would escape its scope."""
        bound = _env._state.bound
        placed = mapping.names
        for n in leaf._names:
            if n in placed or n in sizes or n in carried or n in bound:
                continue
            raise AxisSpecError(
                f"{label} has named axis {n!r} (named_shape "
                f"{fmt_named_shape(leaf.named_shape)}) that out_axes {mapping.spelling} does not "
                f"place and no enclosing xmap binds (it was created inside the function or "
                f"closed over); make it positional before returning (nx.positional), reduce "
                f"it, or give it a size in axis_sizes and place it in out_axes")


def _article(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _backend_device(backend):
    """The device ``backend=`` runs on (None: the arguments' own)."""
    if backend is not None and str(backend).lower() not in ("cpu", "cuda", "gpu", "xla", "tpu"):
        raise AxisSpecError(f"backend={fmt_spec(backend)}: expected 'cpu', 'cuda'/'gpu' or "
                            f"'xla'/'tpu'")
    return backend_device(backend)


def xmap(fun: Callable, in_axes: Any, out_axes: Any, *, axis_sizes: Mapping | None = None,
         axis_resources: Mapping | str | None = None, donate_argnums=(), backend=None):
    """Assign a positional signature to a program that uses named axes.

    Each argument's axes listed in ``in_axes`` become named axes inside ``fun``; each
    result's named axes are placed back as positional axes per ``out_axes``.  With no
    ``axis_resources`` the program runs vectorized on one device (like vmap); with
    them, named axes are split over the mesh axes of the enclosing :class:`Mesh` (or
    computed in chunks for :class:`SerialLoop`).  Results never depend on resources.

    Args:
        fun: the named program; arguments and results are tensors or pytrees of them.
        in_axes: a pytree prefix of the arguments whose leaves are axis mappings
            (``{pos: name}``, ``['a', 'b', ...]`` or ``'a b ...'``).
        out_axes: the same for the results.
        axis_sizes: sizes of axes that no input carries.
        axis_resources: named axis -> mesh axis (or tuple of them, or ``SerialLoop(n)``);
            ``'auto'``: chosen per call by a cost model (:func:`named_axes.plan_resources`).
        donate_argnums: arguments whose buffers the computation may reuse.
        backend: ``'cpu'``, ``'cuda'`` or ``'xla'``.

    Returns:
        The positional function.

    Raises:
        AxisSizeError: one axis name with two sizes.
        AxisSpecError: a malformed spec, or an output axis that out_axes leaves unplaced.
        UnboundAxisError: a name used inside ``fun`` that no enclosing map binds.

    >>> import torch, named_axes as nx
    >>> f = nx.xmap(lambda x: x, in_axes={0: 'batch'}, out_axes={1: 'batch'})
    >>> f(torch.zeros(20, 5)).shape
    torch.Size([5, 20])
    """
    if not callable(fun):
        raise AxisTypeError(f"xmap: fun must be callable, got {type(fun).__name__}")
    donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
    for i in donate_argnums:
        if not isinstance(i, int):
            raise AxisTypeError(f"xmap: donate_argnums must be ints, got {fmt_spec(i)}")
    if axis_sizes is not None and not isinstance(axis_sizes, Mapping):
        raise AxisTypeError(f"xmap: axis_sizes must be a dict name -> size, got "
                            f"{fmt_spec(axis_sizes)}")
    if axis_resources == "auto":   # chosen per call by the cost model (parallel/_auto.py)
        auto = _AutoXmapped(fun, in_axes, out_axes, axis_sizes, None, donate_argnums, backend)
        auto._spelling = auto._spelling[:-1] + ", axis_resources='auto')"
        return auto
    if axis_resources is not None and not isinstance(axis_resources, Mapping):
        raise AxisTypeError(f"xmap: axis_resources must be a dict name -> resource or "
                            f"'auto', got {fmt_spec(axis_resources)}")
    for name in dict(axis_resources or {}):
        check_name(name, where="xmap axis_resources")
    _spec_names(in_axes, "in_axes")
    _spec_names(out_axes, "out_axes")
    if type(out_axes) is tuple and not out_axes:
        # as JAX: "xmapped functions cannot have no return values"
        raise AxisSpecError("xmap out_axes=(): xmapped functions cannot have no return values "
                            "(a rank-0 output is out_axes=[] or {})")
    return _Xmapped(fun, in_axes, out_axes, axis_sizes, axis_resources, donate_argnums, backend)


class _AutoXmapped(_Xmapped):
    """``xmap(..., axis_resources='auto')``: each call runs this xmap with the resources
    the cost model chooses for the mesh in scope (:func:`named_axes.plan_resources`)."""

    def __call__(self, *args, **kwargs):
        res = auto_resources(self, args)   # ({} with no mesh in scope)
        run = self.__dict__.setdefault("_chosen", {}).get(repr(res))
        if run is None:
            run = self._chosen[repr(res)] = self.replaced(axis_resources=res)
        return run(*args, **kwargs)


def _spec_names(spec, what: str = "in_axes") -> list:
    """Every axis name the mappings of a spec tree give; parsing them all, so that
    :func:`xmap` rejects a bad spec when it is made, not when it is called."""
    if is_mapping(spec):
        return list(parse_mapping(spec).names)
    if isinstance(spec, (list, tuple, dict)):
        subs = spec.values() if isinstance(spec, dict) else spec
        return [n for s in subs for n in _spec_names(s, what)]
    raise AxisTypeError(f"xmap {what}: {fmt_spec(spec)} is neither an axis mapping nor a "
                        f"container of them")
