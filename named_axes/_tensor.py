"""NamedTensor: one physical tensor plus the names of its leading dims.

A value inside a named program has a positional ``shape`` and an order-free
``named_shape``.  Physically it is stored as ``[named dims..., positional dims...]``
in ``_data``; ``_names`` names the leading dims.  The physical tensor may be
anything torch runs (plain, functorch-batched, fake, proxy, DTensor, XLA), which is
what lets torch.func, make_fx, DTensor and torch-xla compose underneath.

Every torch function, Tensor method and operator applied to a NamedTensor goes
through :func:`named_axes._dispatch.dispatch`.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.ones(3, 4), {0: 'batch'})
>>> x.shape, x.named_shape
(torch.Size([4]), {'batch': 3})
>>> (x * 2).sum('batch').shape
torch.Size([4])
"""
from __future__ import annotations

import html
from typing import Any

import torch

from ._env import RECORDERS, TAPES
from ._env import _state as _env_state
from ._errors import AxisSpecError, AxisTypeError, ShapeError, fmt_named_shape
from ._levels import check_foreign as _check_foreign
from ._torch_private import functorch_active as _functorch_active
from ._torch_private import is_functorch_wrapped as _functorch_wrapped

__all__ = ["NamedTensor", "data_and_names"]

_Tensor = torch.Tensor
_INTS = "; ints index positional dims"


def _record(value: "NamedTensor") -> None:
    shape, names = value._data.shape, value._names
    for tape in TAPES:
        tape.made[id(value)] = value
    for rec in RECORDERS:
        for i, n in enumerate(names):
            if n not in rec:
                rec[n] = shape[i]


def _conversion(what: str, convert):
    """A conversion that needs a single value: ``convert`` of the physical tensor of a
    value with no named axes (see :meth:`NamedTensor._scalar`)."""
    def method(self, *args, **kwargs):
        return convert(self._scalar(what), *args, **kwargs)
    return method


class NamedTensor:
    """A tensor with positional axes and named axes (see the module docstring).

    Build one with :func:`named_axes.named` or inside :func:`named_axes.xmap`.
    """

    __slots__ = ("_data", "_names", "__weakref__")
    __array_priority__ = 1000  # numpy defers binary ops to us

    def __init__(self, data: torch.Tensor, names: tuple = ()) -> None:
        if not isinstance(data, _Tensor):
            raise AxisTypeError(f"NamedTensor needs a torch.Tensor, got {type(data).__name__}")
        names = tuple(names)
        if len(names) > data.dim():
            raise AxisTypeError(
                f"NamedTensor: {len(names)} names {names} for a tensor with {data.dim()} dims"
            )
        if len(set(names)) != len(names):
            raise AxisTypeError(f"NamedTensor: repeated axis name in {names}")
        self._data = data
        self._names = names

    @classmethod
    def _wrap(cls, data: torch.Tensor, names: tuple) -> "NamedTensor":
        """Build without checks (the hot path)."""
        self = object.__new__(cls)
        self._data = data
        self._names = names
        if names:
            if RECORDERS:
                _record(self)
            if _functorch_active():
                _check_foreign()
        return self

    # -- shapes ---------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        """The positional shape."""
        return self._data.shape[len(self._names):]

    @property
    def named_shape(self) -> dict:
        """The named shape: a dict name -> size (its order carries no meaning)."""
        shape = dict(zip(self._names, self._data.shape))
        if _env_state.engine:   # a SerialLoop chunk holds part of an axis: report the axis size
            bound = _env_state.bound
            for n in shape:
                size = bound.get(n)
                if size is not None:
                    shape[n] = size
        return shape

    @property
    def names(self) -> tuple:
        """PyTorch's ``Tensor.names`` in this model: the named axes (in storage order, which
        carries no meaning: compare ``named_shape``), then ``None`` per positional dim.

        >>> import torch, named_axes as nx
        >>> nx.named(torch.zeros(2, 3), 'batch ...').names
        ('batch', None)
        """
        return self._names + (None,) * (self._data.dim() - len(self._names))

    def dim(self) -> int:
        return self._data.dim() - len(self._names)

    ndimension = dim
    ndim = property(dim)

    def size(self, dim: Any = None):
        if dim is None:
            return self.shape
        if isinstance(dim, int):
            return self.shape[dim]
        self._named_dim(dim, f"Tensor.size({dim!r})", _INTS)
        return self.named_shape[dim]   # (a SerialLoop chunk holds part of the axis)

    def stride(self, dim: Any = None):
        """Strides of the positional dims, as torch's; ``x.stride(name)``: the stride of a
        named axis in the physical tensor.

        >>> import torch, named_axes as nx
        >>> x = nx.named(torch.zeros(2, 3), 'N ...')
        >>> x.stride(), x.stride(0), x.stride('N')
        ((1,), 1, 3)
        """
        k = len(self._names)
        if dim is None:
            return self._data.stride()[k:]
        if isinstance(dim, int):
            return self._data.stride()[k:][dim]
        return self._data.stride(self._named_dim(dim, f"Tensor.stride({dim!r})", _INTS))

    def _named_dim(self, name: Any, op: str, hint: str = "") -> int:
        """The physical dim of named axis ``name`` (an error saying ``op`` if none)."""
        try:
            return self._names.index(name)
        except ValueError:
            raise AxisSpecError(f"{op}: the value has no named axis {name!r} (named_shape "
                                f"{fmt_named_shape(self.named_shape)}){hint}") from None

    def numel(self) -> int:
        """The number of positional elements (per instance of the named axes, as under
        vmap: ``x.sum() / x.numel()`` is a mean).  All elements:
        ``x.numel() * math.prod(x.named_shape.values())``.

        >>> import torch, named_axes as nx
        >>> nx.named(torch.zeros(2, 3), 'batch ...').numel()
        3
        """
        return self.shape.numel()

    nbytes = property(lambda self: self.numel() * self._data.element_size(),
                      doc="Bytes of the positional elements (per instance, as numel()).")

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a NamedTensor with no positional dimensions")
        return self._data.shape[len(self._names)]

    # -- plain attributes of the physical tensor --------------------------------
    dtype = property(lambda self: self._data.dtype)
    device = property(lambda self: self._data.device)
    layout = property(lambda self: self._data.layout)
    is_cuda = property(lambda self: self._data.is_cuda)
    is_leaf = property(lambda self: self._data.is_leaf)
    grad_fn = property(lambda self: self._data.grad_fn)

    @property
    def requires_grad(self) -> bool:
        return self._data.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._data.requires_grad = value

    data = property(lambda self: NamedTensor._wrap(self._data.data, self._names))
    real = property(lambda self: NamedTensor._wrap(self._data.real, self._names))
    imag = property(lambda self: NamedTensor._wrap(self._data.imag, self._names))
    T = property(lambda self: self.permute(*reversed(range(self.ndim))))
    mT = property(lambda self: self.transpose(-2, -1))
    mH = property(lambda self: self.mT.conj())

    @property
    def H(self):
        if self.ndim not in (0, 2):   # torch's rule, per instance
            raise ShapeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                             f"{self.ndim}-D positional values (named shape "
                             f"{fmt_named_shape(self.named_shape)})")
        return self.T.conj()

    # -- conversions that need a single value ------------------------------------
    def _scalar(self, what: str):
        if self._names:
            raise AxisTypeError(
                f"{what} of a NamedTensor with named axes {fmt_named_shape(self.named_shape)} "
                f"is ambiguous: reduce or place the named axes first (e.g. with xmap out_axes)"
            )
        return self._data

    __bool__ = _conversion("bool()", bool)
    __float__ = _conversion("float()", float)
    __int__ = _conversion("int()", int)
    __index__ = _conversion("index", lambda t: t.__index__())
    item = _conversion(".item()", lambda t: t.item())
    tolist = _conversion(".tolist()", lambda t: t.tolist())
    numpy = _conversion(".numpy()", lambda t, *args, **kwargs: t.numpy(*args, **kwargs))

    def __format__(self, spec: str) -> str:
        # f"{x:.2f}" formats one number (torch: item()), which named axes make ambiguous
        return format(self._scalar(f"format spec {spec!r}"), spec) if spec else str(self)

    def __array__(self, dtype=None, copy=None):
        arr = self._scalar("numpy conversion").detach().cpu().numpy()
        return arr if dtype is None else arr.astype(dtype)

    # -- pickling, copies (torch.save / torch.load(weights_only=True), deepcopy) --------
    def __reduce__(self):
        return (_rebuild_named, (self._data, self._names))

    def __deepcopy__(self, memo):
        import copy

        out = NamedTensor._wrap(copy.deepcopy(self._data, memo), self._names)
        memo[id(self)] = out
        return out

    __hash__ = object.__hash__

    # -- dispatch ----------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

    def __getattr__(self, name: str):
        # Tensor attributes not spelled out here: plain metadata comes from the physical
        # tensor; methods are bound once at import (see _bind_tensor_methods).
        if not name.startswith("__") and hasattr(_Tensor, name):
            return getattr(self._data, name)
        raise AttributeError(f"'NamedTensor' object has no attribute {name!r}")

    def __iter__(self):
        return iter(self.unbind(0))

    def __reversed__(self):
        return reversed(self.unbind(0))

    def __contains__(self, item) -> bool:
        hits = (self == item).any()
        return bool(hits._scalar("`item in x`") if type(hits) is NamedTensor else hits)

    # -- display -------------------------------------------------------------------
    def __repr__(self) -> str:
        extras = []
        if self._data.dtype != torch.get_default_dtype():
            extras.append(f"dtype={self._data.dtype}")
        if self._data.device.type != "cpu":
            extras.append(f"device={self._data.device}")
        if self._data.requires_grad:
            extras.append("requires_grad=True")
        head = (f"NamedTensor(shape={tuple(self.shape)}, "
                f"named_shape={fmt_named_shape(self.named_shape)}"
                + "".join(", " + e for e in extras) + ")")
        values = _preview(self)
        return head if values is None else head + "\n" + values

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>named</td><td><b>{html.escape(repr(n))}</b></td><td>{s}</td></tr>"
            for n, s in self.named_shape.items()
        ) + "".join(
            f"<tr><td>positional</td><td>{i}</td><td>{s}</td></tr>"
            for i, s in enumerate(self.shape)
        )
        values = _preview(self)
        preview = "(no values: symbolic tensor)" if values is None else html.escape(values)
        return (
            "<div class='named-axes-tensor'><b>NamedTensor</b> "
            f"<code>{html.escape(str(self._data.dtype))}</code> on "
            f"<code>{html.escape(str(self._data.device))}</code>"
            "<table><tr><th>kind</th><th>axis</th><th>size</th></tr>"
            f"{rows}</table><pre>{preview}</pre></div>"
        )


def data_and_names(leaf: Any) -> tuple | None:
    """``(data, names)`` of a leaf: a NamedTensor's, ``(leaf, ())`` for a tensor, None
    for anything else.

    >>> data_and_names(torch.ones(1)), data_and_names(3)
    ((tensor([1.]), ()), None)
    """
    if isinstance(leaf, NamedTensor):
        return leaf._data, leaf._names
    if isinstance(leaf, torch.Tensor):
        return leaf, ()
    return None


def _rebuild_named(data: torch.Tensor, names: tuple) -> NamedTensor:
    """Unpickle a NamedTensor (a safe global for ``torch.load(weights_only=True)``)."""
    return NamedTensor(data, names)


def _preview(value: NamedTensor) -> str | None:
    """``value``'s values laid out as stored, or None where there are none to show."""
    data, names = value._data, value._names
    if type(data) is not torch.Tensor or data.is_meta or _functorch_wrapped(data):
        return None   # (a torch.func wrapper's repr is not torch's `tensor(...)`)
    order = " × ".join([repr(n) for n in names] + [str(s) for s in data.shape[len(names):]])
    # torch's own repr, under the user's print options, less `tensor(` and what follows
    # the values (`, dtype=...)`); its lines after the first are indented for `tensor(`
    lead = len("tensor(")
    try:
        text = repr(data.detach())
        body = text[lead:text.rindex("]") + 1] if data.ndim else \
            text[lead:].split(",")[0].rstrip(")")
    except Exception:   # fake, proxy or functorch-wrapped tensors have no values to show
        return None
    body = "\n".join([line[lead:] if i else line for i, line in enumerate(body.split("\n"))])
    return f"values laid out as [{order}]:\n{body}"


def _dispatch(func, args, kwargs):
    # replaced by _dispatch.dispatch when that module is imported (it imports this one)
    raise RuntimeError("named_axes._dispatch was not imported")


# Python's operators ("", reflected "r" and in-place "i" forms), bound as the methods are
_OPERATORS = frozenset(
    [f"__{form}{op}__" for op in "add sub mul truediv floordiv mod pow matmul and or xor lshift "
     "rshift div".split() for form in ("", "r", "i")]
    + [f"__{op}__" for op in "eq ne lt le gt ge neg pos abs invert".split()])


def _make_method(name: str, method):
    def bound(self, *args, **kwargs):
        return _dispatch(method, (self, *args), kwargs)
    bound.__name__ = bound.__qualname__ = name
    bound.__doc__ = f"``Tensor.{name}`` on the positional axes (names allowed where a dim goes)."
    return bound


def _bind_tensor_methods() -> None:
    """Every public Tensor method and operator becomes a NamedTensor method that goes
    through the dispatcher: one class attribute each, so calls need no __getattr__ round
    trip (Python looks operators up on the class, never through __getattr__) and
    torch.compile sees ordinary methods."""
    for name in dir(_Tensor):
        if (name.startswith("_") and name not in _OPERATORS) or name in NamedTensor.__dict__:
            continue
        method = getattr(_Tensor, name, None)
        if callable(method) and not isinstance(method, type):
            setattr(NamedTensor, name, _make_method(name, method))


_bind_tensor_methods()
