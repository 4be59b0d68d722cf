"""``vmap`` with torch.func's signature, plus JAX's ``axis_name``/``axis_size``; and
``vectorize``, NumPy-style generalized ufuncs mapped with it.

Plain tensors with no axis name go straight to :func:`torch.func.vmap`.  Otherwise the
mapped dims become a named axis (bound in the axis environment, like xmap does), so
the collectives of :mod:`named_axes.lax` work inside and NamedTensors (from an
enclosing xmap) pass through; the axis is placed back per ``out_dims``, and a result
that lacks it (e.g. after ``psum``) is broadcast along it, as in JAX.

>>> import torch, named_axes as nx
>>> nx.vmap(lambda x: x / x.sum(), axis_name='i')(torch.ones(3, 2)).shape
torch.Size([3, 2])
>>> dot = nx.vectorize(lambda a, b: (a * b).sum(), signature='(n),(n)->()')
>>> dot(torch.ones(4, 3), torch.ones(3)).shape
torch.Size([4])
"""
from __future__ import annotations

import functools
import itertools
import re
from typing import Any, Callable, Hashable, Iterable

import numpy as np
import torch

from .. import _env
from .._errors import AxisSizeError, AxisSpecError, AxisTypeError, fmt_named_shape, fmt_spec
from .._layout import from_numpy, insert_named
from .._parsing import parse_mapping
from .._tape import taped
from .._tensor import NamedTensor
from ._randomness import Draws as _Draws
from ._tree import Hidden
from .._levels import ORIGINAL as _functorch
from .._torch_private import tree_flatten, tree_map, tree_unflatten

__all__ = ["vmap", "vectorize"]

_counter = itertools.count()


def _spread(dims: Any, tree: Any, what: str) -> list:
    """The per-leaf dims of ``tree`` given a pytree prefix ``dims`` (int/None leaves)."""
    if dims is None or (isinstance(dims, int) and not isinstance(dims, bool)):
        return [dims] * len(tree_flatten(tree)[0])
    if type(dims) is type(tree) and isinstance(dims, (tuple, list)):   # (a namedtuple too)
        if len(dims) != len(tree):
            raise AxisSpecError(f"{what}: {len(dims)} entries for {len(tree)} values")
        return [d for sub, t in zip(dims, tree) for d in _spread(sub, t, what)]
    if isinstance(dims, dict) and isinstance(tree, dict):
        missing, extra = set(tree) - set(dims), set(dims) - set(tree)
        if missing or extra:
            raise AxisSpecError(f"{what}: no entry for keys {sorted(map(repr, missing))}"
                                if missing else f"{what}: entries for keys "
                                f"{sorted(map(repr, extra))}, which the value lacks")
        return [d for k in tree for d in _spread(dims[k], tree[k], what)]
    raise AxisSpecError(f"{what}: {fmt_spec(dims)} does not match the structure of the values "
                        f"({type(tree).__name__}); use an int, None, or a matching container")


def _check_dims(dims: Any, what: str) -> None:
    """Refuse, when vmap is made, a dims spec whose leaves are not ints or None (JAX and
    torch refuse True, 0.5, 'a'; torch's message would print a tensor given by mistake)."""
    if isinstance(dims, (tuple, list, dict)):
        for d in (dims.values() if isinstance(dims, dict) else dims):
            _check_dims(d, what)
    elif dims is not None and (not isinstance(dims, int) or isinstance(dims, bool)):
        raise AxisTypeError(f"{what}: {fmt_spec(dims)} is not a dim; use an int, None, or a "
                            f"tuple/list/dict of them")


_UNSET = object()   # (in_axes / out_axes not given)


def _jax_names(in_dims: Any, out_dims: Any, in_axes: Any, out_axes: Any) -> tuple:
    """``(in_dims, out_dims)``, given by torch's names or JAX's (not both)."""
    for dims, axes, names in ((in_dims, in_axes, "in_dims/in_axes"),
                              (out_dims, out_axes, "out_dims/out_axes")):
        if axes is not _UNSET and not (type(dims) is int and dims == 0):
            raise AxisTypeError(f"vmap: {names} are one argument (torch's and JAX's name for "
                                f"it); give one of them")
    return (in_dims if in_axes is _UNSET else in_axes,
            out_dims if out_axes is _UNSET else out_axes)


def _check_args(in_dims: Any, out_dims: Any, axis_size: Any, spelling: str) -> None:
    """in_dims/out_dims leaves are ints or None, axis_size a non-negative int, checked when
    vmap is made."""
    _check_dims(in_dims, f"{spelling}: in_dims")
    _check_dims(out_dims, f"{spelling}: out_dims")
    if axis_size is not None and (not isinstance(axis_size, int) or isinstance(axis_size, bool)
                                  or axis_size < 0):
        raise AxisTypeError(f"{spelling}: axis_size={fmt_spec(axis_size)}; a size is a "
                            f"non-negative int")


@taped("linear")
def _to_named(leaf: Any, dim: int | None, name: Hashable, what: str) -> tuple[Any, int | None]:
    """``leaf`` with positional dim ``dim`` turned into named axis ``name``; its size."""
    if dim is None:
        return leaf, None
    if not isinstance(leaf, (torch.Tensor, NamedTensor)):
        raise AxisTypeError(f"{what}: in_dims={dim} for a {type(leaf).__name__}, which has no "
                            f"dims; use None for it")
    named = isinstance(leaf, NamedTensor)
    data, names, p = (leaf._data, leaf._names, leaf.ndim) if named else (leaf, (), leaf.dim())
    if not -p <= dim < p:
        raise AxisSpecError(f"{what}: in_dim={dim} for an input with {p} positional dims "
                            f"(shape {tuple(data.shape[len(names):])})")
    d = len(names) + dim % p
    data = data.movedim(d, 0)
    return NamedTensor._wrap(data, (name,) + names), data.shape[0]


@taped("linear")
def _place(leaf: Any, dim: int | None, name: Hashable, size: int, what: str) -> Any:
    if not isinstance(leaf, (torch.Tensor, NamedTensor)):
        if dim is None or leaf is None:   # (JAX: None is an empty subtree)
            return leaf
        leaf = torch.as_tensor(leaf)
    nt = leaf if isinstance(leaf, NamedTensor) else NamedTensor._wrap(leaf, ())
    if dim is None:
        if name in nt._names:
            raise AxisSpecError(f"{what}: out_dims=None for an output that varies along the "
                                f"mapped axis; give it an out_dim")
        return leaf
    out = insert_named(nt, parse_mapping({dim: name}), sizes={name: size}, what=what)
    if isinstance(out, NamedTensor) and not out._names:
        return out._data
    return out


def vmap(fun: Callable, in_dims: Any = 0, out_dims: Any = 0, *, axis_name: Hashable = None,
         axis_size: int | None = None, randomness: str = "error", chunk_size: int | None = None,
         in_axes: Any = _UNSET, out_axes: Any = _UNSET) -> Callable:
    """Vectorize ``fun`` over dims ``in_dims`` of its inputs (torch.func.vmap + axis names).

    Args:
        fun: the function to map; inputs and outputs are pytrees of tensors.
        in_dims: int, None, or a pytree prefix of the arguments with those leaves.
        out_dims: the same for the outputs.
        axis_name: a name for the mapped axis, usable by ``nx.lax`` collectives inside.
        axis_size: the mapped size when no input is mapped.
        randomness, chunk_size: as in :func:`torch.func.vmap`, on every path.
        in_axes, out_axes: JAX's names for ``in_dims`` and ``out_dims``.

    Returns:
        The vectorized function.

    Raises:
        AxisSizeError: mapped inputs disagree on the size.
        AxisSpecError: an in_dim outside an input's rank, or mismatched in_dims structure.

    >>> import torch, named_axes as nx
    >>> x = torch.arange(6.).reshape(2, 3)
    >>> nx.vmap(lambda r: nx.lax.psum(r, 'i'), axis_name='i')(x)
    tensor([[3., 5., 7.],
            [3., 5., 7.]])
    """
    if not callable(fun):
        raise AxisTypeError(f"vmap: fun must be callable, got {type(fun).__name__}")
    in_dims, out_dims = _jax_names(in_dims, out_dims, in_axes, out_axes)
    spelling = (f"vmap({getattr(fun, '__name__', 'fun')}, in_dims={fmt_spec(in_dims)}, "
                f"out_dims={fmt_spec(out_dims)}"
                + (f", axis_name={fmt_spec(axis_name)}" if axis_name is not None else "") + ")")
    _check_args(in_dims, out_dims, axis_size, spelling)
    plain = _functorch["vmap"](_numbers_as_tensors(fun, out_dims, spelling), in_dims,
                               tree_map(lambda d: d and 0, out_dims),   # (see _moved)
                               randomness=randomness, chunk_size=chunk_size)

    @functools.wraps(fun)
    def mapped(*args, **kwargs):
        body = functools.partial(fun, **_unmapped(kwargs, spelling)) if kwargs else fun
        # plain inputs outside a named program: torch's own (inside one, fun may close over
        # named values and return them, which torch.func.vmap cannot)
        if axis_name is None and axis_size is None and not _env.bound_axes() and not any(
                type(leaf) is NamedTensor for leaf in tree_flatten(args)[0]):
            return _moved(plain(*args, **kwargs), out_dims, f"{spelling}(<inputs>)")
        what = f"{spelling}(<inputs>)"
        name = Hidden(f"<vmap axis {next(_counter)}>") if axis_name is None else axis_name
        if name in _env.bound_axes():
            raise AxisSpecError(f"{what}: axis {name!r} is already bound by an enclosing "
                                f"xmap/vmap; use a new name")
        call_args, size = _name_mapped(args, in_dims, name, axis_size, what)
        if chunk_size is not None and size > chunk_size and axis_name is None:
            return _chunked(body, call_args, name, size, chunk_size, out_dims, what,
                            randomness)
        with _env.bind({name: size}, kind="vmap", randomness=randomness), _Draws():
            out = body(*call_args)
        return _finish(out, out_dims, name, size, what)

    return mapped


def _numbers_as_tensors(fun: Callable, out_dims: Any, spelling: str) -> Callable:
    """``fun`` for torch.func.vmap: a Python number it returns where out_dims places the
    axis becomes a 0-d tensor, which torch then broadcasts; jax.vmap broadcasts a number
    like an array (as the named path does, :func:`_place`), torch.func.vmap refuses it."""
    @functools.wraps(fun)
    def run(*args, **kwargs):
        out = fun(*args, **kwargs)
        if type(out) is torch.Tensor:   # the common case
            return out
        flat, spec = tree_flatten(out)
        if not any(type(o) in (bool, int, float, complex) for o in flat):
            return out
        dims = _spread(out_dims, out, f"{spelling}: out_dims")
        return tree_unflatten([torch.as_tensor(o) if d is not None and type(o) in
                               (bool, int, float, complex) else o
                               for o, d in zip(flat, dims)], spec)
    return run


def _moved(out: Any, out_dims: Any, what: str) -> Any:
    """torch.func.vmap's outputs, mapped at dim 0, with the mapped dim moved to out_dims
    (torch 2.13 expands an unmapped output to out_dims other than 0 into garbage sizes:
    vmap(lambda a, b: b.sum(), (0, None), out_dims=-1) gave shape (34359738368, 4))."""
    if type(out_dims) is int and out_dims == 0:
        return out
    flat, spec = tree_flatten(out)
    dims = _spread(out_dims, out, f"{what}: out_dims")
    for i, (o, d) in enumerate(zip(flat, dims)):
        if d and isinstance(o, torch.Tensor):
            if not -o.dim() <= d < o.dim():
                raise AxisSpecError(f"{what}: out_dims={d} for output {i}, which has "
                                    f"{o.dim() - 1} dims (shape {tuple(o.shape[1:])})")
            flat[i] = o.movedim(0, d)
    return tree_unflatten(flat, spec)


def _unmapped(kwargs: dict, spelling: str) -> dict:
    """Keyword arguments, passed to every instance as they are (as torch.func.vmap passes
    them); one holding a tensor is refused: jax.vmap maps those over their leading axis,
    so the two references disagree on what it means."""
    for k, v in kwargs.items():
        if any(isinstance(leaf, (torch.Tensor, NamedTensor, np.ndarray))
               for leaf in tree_flatten(v)[0]):
            raise AxisTypeError(
                f"{spelling}: keyword argument {k!r} holds a tensor, which torch.func.vmap "
                f"passes unmapped and jax.vmap maps over its leading axis; pass it "
                f"positionally, with its in_dims (a dim, or None for unmapped)")
    return kwargs


def _name_mapped(args: tuple, in_dims: Any, name: Hashable, axis_size: int | None,
                 what: str) -> tuple:
    """``(args, size)``: ``args`` with each mapped dim turned into the named axis
    ``name``, and the axis' size (the inputs' and ``axis_size`` must agree on it)."""
    leaves, spec = tree_flatten(tuple(args))
    dims = _spread(tuple(in_dims) if type(in_dims) is list else in_dims, tuple(args), what)
    size, where = axis_size, "axis_size"
    new = []
    for i, (leaf, d) in enumerate(zip(leaves, dims)):
        if type(leaf) is NamedTensor and name in leaf._names:   # (named outside: nx.named)
            raise AxisSpecError(f"{what}: input {i} already has a named axis {name!r} "
                                f"(named_shape {fmt_named_shape(leaf.named_shape)}); use a "
                                f"new axis_name")
        leaf, s = _to_named(leaf, d, name, f"{what}: input {i}")
        if s is not None:
            if size is not None and s != size:
                raise AxisSizeError(f"{what}: inconsistent sizes for axis {name!r}: {size} "
                                    f"({where}) vs {s} (input {i}, in_dim {d})")
            size, where = s, f"input {i}, in_dim {d}"
        new.append(leaf)
    if size is None:
        raise AxisSpecError(f"{what}: no input is mapped (all in_dims are None); pass "
                            f"axis_size to say how many times to run fun")
    return tree_unflatten(new, spec), size


def _finish(out, out_dims, name, size, what):
    flat, spec = tree_flatten(out)
    dims = _spread(out_dims, out, f"{what}: out_dims")
    return tree_unflatten([_place(o, d, name, size, f"{what}: output {i}")
                           for i, (o, d) in enumerate(zip(flat, dims))], spec)


def _chunked(fun, call_args, name, size, chunk_size, out_dims, what, randomness):
    """Run in serial chunks of the (anonymous, so collective-free) mapped axis; with
    ``randomness='same'`` each from the random state of the first (as torch.func.vmap)."""
    leaves, spec = tree_flatten(call_args)
    flats = []
    state = torch.get_rng_state()
    for start in range(0, size, chunk_size):
        n = min(chunk_size, size - start)
        sliced = [NamedTensor._wrap(x._data.narrow(0, start, n), x._names)
                  if isinstance(x, NamedTensor) and x._names[:1] == (name,) else x
                  for x in leaves]
        if randomness == "same":
            torch.set_rng_state(state)
        with _env.bind({name: n}, kind="vmap", randomness=randomness), _Draws():
            out = _finish(fun(*tree_unflatten(sliced, spec)), out_dims, name, n, what)
        flat, out_spec = tree_flatten(out)
        flats.append(flat)
        if len(flats) == 1:
            dims = _spread(out_dims, out, f"{what}: out_dims")
    joined = []
    for parts, d in zip(zip(*flats), dims):
        if d is None or parts[0] is None:
            joined.append(parts[0])
        elif isinstance(parts[0], NamedTensor):
            joined.append(NamedTensor._wrap(
                torch.cat([p._data for p in parts], len(parts[0]._names) + d % parts[0].ndim),
                parts[0]._names))
        else:
            joined.append(torch.cat(parts, d))
    return tree_unflatten(joined, out_spec)


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
    if isinstance(x, np.ndarray):
        return from_numpy(x)
    return torch.as_tensor(x)
