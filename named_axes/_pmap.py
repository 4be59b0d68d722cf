"""``pmap``: map a function over a leading axis split across devices (JAX's pmap).

Built on xmap: the mapped axis gets a name (``axis_name`` or a private one), and that
name is mapped to a one-dimensional mesh over ``devices`` (default: every device of
the job).  The axis size must be divisible by the number of devices; with one device
(the CPU) pmap runs vectorized.  Collectives over ``axis_name`` work inside, and
results that lack the axis are replicated along it in the output, as in JAX.  A pmap
inside a program already split over devices (an enclosing pmap, or an xmap on a mesh)
runs vectorized within it, on that program's devices.

>>> import torch, named_axes as nx
>>> f = nx.pmap(lambda x: x - nx.lax.pmean(x, 'i'), axis_name='i')
>>> f(torch.tensor([1., 2., 3.]))
tensor([-1.,  0.,  1.])
"""
from __future__ import annotations

import functools
import itertools
from typing import Any, Callable, Hashable, Sequence

from ._env import bound_axes
from ._errors import AxisResourceError, AxisSizeError, AxisSpecError, AxisTypeError, fmt_spec
from ._parsing import match_prefix, path_str
from ._xmap import _article, xmap
from ._xmap_call import _is_array, _is_leaf
from .parallel._devices import devices as all_devices
from .parallel._mesh import Mesh, current_mesh

__all__ = ["pmap"]

_counter = itertools.count()


class _PmapAxis:
    """A private name: the mapped axis of ``pmap(fun)`` with no ``axis_name``."""

    def __init__(self) -> None:
        self.n = next(_counter)

    def __repr__(self) -> str:
        return f"<pmap axis {self.n}>"


def _mesh_axis() -> str:
    """A fresh name for the mesh axis a pmap splits over: a string, as torch-xla rebuilds a
    mesh from its text (with ``ast.literal_eval``) to shard gradients."""
    return f"<pmap mesh axis {next(_counter)}>"


def _spec(ax: Any, name: Hashable, what: str) -> Any:
    if ax is None:
        return {}
    if isinstance(ax, int) and not isinstance(ax, bool):
        return {ax: name}
    if isinstance(ax, (tuple, list)):
        return type(ax)(_spec(a, name, what) for a in ax)
    if isinstance(ax, dict):
        return {k: _spec(v, name, what) for k, v in ax.items()}
    raise AxisSpecError(f"pmap: {what}={fmt_spec(ax)}: expected an int, None, or a tuple/list/dict of them")


def _mapped_size(args: tuple, xin: Any, in_axes: Any, kw: int | None) -> int | None:
    """The size of the mapped dims (``xin``: pmap's ``in_axes`` as xmap's; ``kw``: the
    position of the keyword arguments' dict, None without), or None when no argument is
    mapped; every mapped leaf is checked here, named as the caller wrote it."""
    size, first = None, ""
    for path, a, mapping in match_prefix(xin, args, _is_leaf, what=f"pmap: in_axes={fmt_spec(in_axes)}"):
        keyword = kw is not None and path[0] == kw
        where = (f"keyword argument {path[1]!r}" + "".join(f"[{p!r}]" for p in path[2:])
                 if keyword else path_str(path))
        how = (f"pmap maps {where} over its leading axis (as JAX maps keyword arguments), "
               f"but it is" if keyword else f"pmap: in_axes={fmt_spec(in_axes)} maps {where},")
        if mapping.entries and a is not None and not _is_array(a):   # JAX maps every leaf
            raise AxisTypeError(f"{how} {_article(type(a).__name__)}, which has no axes; "
                                + ("pass it positionally with in_axes None" if keyword else
                                   "give it in_axes None or list it in static_broadcasted_argnums"))
        if mapping.entries and _is_array(a):
            pos = mapping.entries[0][0]
            if not -a.ndim <= pos < a.ndim:
                raise AxisSpecError(
                    (f"{how} 0-d (positional shape ())" if keyword else f"pmap: in_axes={in_axes} for an "
                     f"argument with {a.ndim} positional dims (shape {tuple(a.shape)}): {where}"))
            if size is not None and a.shape[pos] != size:
                raise AxisSizeError(f"pmap: inconsistent sizes of the mapped axes: {size} "
                                    f"({first}) vs {a.shape[pos]} ({where}, dim {pos})")
            size, first = a.shape[pos], first or f"{where}, dim {pos}"
    return size


def _call_form(fun: Callable, in_axes: Any, args: tuple, kwargs: dict, static: tuple) -> tuple:
    """JAX's pmap calling conventions on xmap's: ``(fun, in_axes, args)`` with the
    ``static_broadcasted_argnums`` passed in unmapped (in_axes None) and the keyword
    arguments mapped over their leading axis, passed as one trailing dict."""
    n = len(args)
    bad = [i for i in static if not 0 <= i < n]
    if bad:
        raise AxisSpecError(f"pmap: static_broadcasted_argnums={static!r} names argument "
                            f"{bad[0]}, but the call has {n} positional arguments (static "
                            f"arguments are passed positionally)")
    per = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * n
    dyn = [i for i in range(n) if i not in static]
    if static and (not dyn or dyn[-1] < len(per)):   # (JAX reads in_axes[i] for i in dyn)
        per = tuple(None if i in static else per[i] for i in range(n))
    if kwargs:
        per, args = per + ({k: 0 for k in kwargs},), args + (dict(kwargs),)
        fun = functools.partial(_call_with_kwargs, fun)
    return fun, per, args


def _static(argnums: int | Sequence[int]) -> tuple:
    """``static_broadcasted_argnums`` as a tuple of ints."""
    static = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in static):
        raise AxisTypeError(f"pmap: static_broadcasted_argnums must be ints, got "
                            f"{fmt_spec(argnums)}")
    return static


def _nested(devices: Sequence[Any] | None, spelling: str) -> bool:
    """Whether this pmap runs inside a named program on a mesh (an enclosing pmap, or an
    xmap with resources): its devices are taken, so the pmap runs vectorized within it (a
    second mesh over them would re-split values the engine already placed)."""
    if not bound_axes() or current_mesh() is None:
        return False
    if devices is not None:   # (as JAX refuses it)
        raise AxisResourceError(f"{spelling[:-1]}, devices=...): a pmap inside a program "
                                f"already split over devices (an enclosing pmap, or an xmap on "
                                f"a mesh) runs on that program's devices; drop devices=")
    return True


def _devices(devices: Sequence[Any] | None, backend: str | None, spelling: str,
             size: int) -> list:
    """The devices a pmap of ``size`` instances splits over: ``devices``, or all of
    ``backend``'s; checked here, so that errors name pmap, not its private mesh axis."""
    devs = list(devices) if devices is not None else all_devices(backend)
    if not devs:
        raise AxisResourceError(f"{spelling[:-1]}, devices=[]): no devices to map over; "
                                f"pass devices=None for all")
    if size % len(devs):
        raise AxisResourceError(f"{spelling}: the mapped axis has size {size}, which is not "
                                f"divisible by the number of devices it is split over "
                                f"({len(devs)}); pass devices= a list whose length divides {size}")
    return devs


def _call_with_kwargs(fun: Callable, *args):
    return fun(*args[:-1], **args[-1])


def pmap(fun: Callable, axis_name: Hashable | None = None, *, in_axes: Any = 0,
         out_axes: Any = 0, static_broadcasted_argnums: int | Sequence[int] = (),
         devices: Sequence[Any] | None = None, axis_size: int | None = None,
         backend: str | None = None, donate_argnums: Sequence[int] = ()) -> Callable:
    """Map ``fun`` over axis ``in_axes`` of its arguments, split across ``devices``.

    Args:
        fun: the per-example function; collectives over ``axis_name`` work inside.
        axis_name: the name collectives use for the mapped axis.
        in_axes: per argument, the mapped dim (int) or None (not mapped); one int for all.
            Keyword arguments are mapped over their leading axis (as in JAX).
        out_axes: where the mapped axis goes in each output (None: the output must not
            carry it; it is replicated).
        static_broadcasted_argnums: positional arguments passed to every instance as they
            are (not mapped; any Python value).
        devices: the devices to split over (default: all of :func:`named_axes.devices`).
        axis_size: the size when no argument is mapped.
        backend: ``'cpu'``, ``'cuda'`` or ``'xla'``.

    Raises:
        AxisResourceError: the axis size is not divisible by the number of devices, or
            ``devices`` is empty.
    """
    import numpy as np

    name = axis_name if axis_name is not None else _PmapAxis()
    mesh_axis = _mesh_axis()
    xin = _spec(tuple(in_axes) if type(in_axes) is list else in_axes, name, "in_axes")
    xout = _spec(out_axes, name, "out_axes")
    static = _static(static_broadcasted_argnums)

    def mapped(*args, **kwargs):
        body, xin_, kw = fun, xin, len(args) if kwargs else None
        if static or kwargs:
            body, ax, args = _call_form(fun, in_axes, args, kwargs, static)
            xin_ = _spec(ax, name, "in_axes")
        size = _mapped_size(args, xin_, in_axes, kw)
        if size is None and axis_size is None:
            raise AxisSpecError(f"pmap({getattr(fun, '__name__', 'fun')}, in_axes={fmt_spec(in_axes)}): "
                                f"no argument is mapped; give axis_size=")
        if size is not None and axis_size is not None and size != axis_size:
            raise AxisSizeError(f"pmap({getattr(fun, '__name__', 'fun')}, axis_size="
                                f"{axis_size}): the mapped arguments have size {size} along "
                                f"in_axes={fmt_spec(in_axes)}")
        n = size if size is not None else axis_size
        devs = None if _nested(devices, mapped.__name__) else _devices(devices, backend, mapped.__name__, n)
        f = xmap(body, in_axes=xin_, out_axes=xout, axis_sizes={name: n},
                 axis_resources={name: mesh_axis} if devs else {}, backend=backend,
                 donate_argnums=donate_argnums)
        f._spelling = (f"{mapped.__name__[:-1]}, axis_name={axis_name!r}, in_axes="   # (what
                       f"{fmt_spec(in_axes)}, out_axes={fmt_spec(out_axes)})")   # they wrote)
        if not devs:
            return f(*args)
        with Mesh(np.array(devs, dtype=object), (mesh_axis,)):
            return f(*args)

    mapped.__name__ = f"pmap({getattr(fun, '__name__', 'fun')})"
    mapped.__wrapped__ = fun
    return mapped
