"""Make ``named @ tensor`` trace correctly under ``torch.compile``.

Dynamo handles a binary operator whose left operand is not a tensor but has
``__torch_function__`` by swapping the operands and calling the *reverse* Tensor
method — but its reverse table has no entry for ``matmul`` (it is skipped when the
table is built), so ``n @ w`` was traced as ``w @ n`` (torch 2.9–2.13).  We add the
missing entries (``Tensor.__rmatmul__``), which our dispatcher handles like any
reverse operator; and ``n @ m`` between two NamedTensors, which dynamo refused to
trace at all, gets the binop-table entry that routes it to ``__matmul__``.  Nothing changes when dynamo is not used.

The ``"named_axes"`` torch.compile backend is registered here too (its code lives in
``transforms/_backend.py`` and is imported on first use).

Importing ``torch._dynamo`` costs seconds, so none of this happens at
``import named_axes``: :func:`install` runs the first time it is needed — when
``nx.jit`` compiles, or as soon as anything imports ``torch._dynamo`` (as
``torch.compile`` does before it traces), through a one-name import hook; if dynamo is
already imported when ``named_axes`` is, it runs at once.
"""
from __future__ import annotations

import operator
import sys
import threading

import torch

__all__ = ["install"]

_DYNAMO = "torch._dynamo"
_state = {"installed": False}
_lock = threading.RLock()


def install() -> None:
    """Apply the dynamo fixes and register the ``"named_axes"`` backend (once)."""
    if _state["installed"]:
        return
    with _lock:
        if _state["installed"]:
            return
        _state["installed"] = True
        _remove_hook()
        _patch()
        _register_backend()
        _bind_late_globals()


def _bind_late_globals() -> None:
    """Bind ``_tensor._dispatch`` (a stub that rebinds itself to ``_dispatch.dispatch``
    on its first call) before dynamo can see the stub.  When the first named op ran
    under ``torch.compile``, dynamo guarded on the stub's ``__code__``; the stub then
    replaced itself, the guard's code object was freed and the compiled frame was
    thrown away: one recompilation on the second call of a compiled model."""
    try:
        from . import _dispatch, _tensor
    except ImportError:  # pragma: no cover - called while named_axes is being imported
        return
    if getattr(_tensor._dispatch, "__module__", None) == _tensor.__name__ and hasattr(
            _dispatch, "dispatch"):
        _tensor._dispatch = _dispatch.dispatch


def _patch() -> None:
    try:
        from torch._dynamo.variables import builtin
    except Exception:  # pragma: no cover - dynamo unavailable on this platform
        return
    populate = getattr(builtin, "populate_builtin_to_tensor_fn_map", None)
    table = getattr(builtin, "BUILTIN_TO_TENSOR_RFN_MAP", None)
    if populate is None or table is None:  # pragma: no cover - other torch layouts
        return
    populate()
    table.setdefault(operator.matmul, torch.Tensor.__rmatmul__)
    table.setdefault(operator.imatmul, torch.Tensor.__rmatmul__)
    # Between two non-tensors (two NamedTensors) dynamo calls the dunder methods only for
    # operators listed in its binop table, where matmul is missing too.
    binops = getattr(builtin.BuiltinVariable, "_binops", None)
    if binops is not None:
        binops().setdefault(operator.matmul,
                            (["__matmul__", "__rmatmul__", "__imatmul__"], operator.imatmul))


def named_axes_backend(gm, example_inputs):
    """The ``"named_axes"`` torch.compile backend (see ``transforms/_backend.py``)."""
    from .transforms._backend import compile_named

    return compile_named(gm, example_inputs)


def _register_backend() -> None:
    try:
        from torch._dynamo.backends import registry
    except Exception:  # pragma: no cover - dynamo unavailable on this platform
        return
    # not list_backends(): it imports every backend module (AOT autograd and more)
    if "named_axes" in getattr(registry, "_COMPILER_FNS", {}):
        return
    # torch is loading our torch_dynamo_backends entry point and registers it itself
    if getattr(registry, "_BACKENDS", {}).get("named_axes") is not None:
        return
    registry.register_backend(named_axes_backend, name="named_axes")


class _DynamoHook:
    """A ``sys.meta_path`` finder that answers for no module: when ``torch._dynamo`` is
    found by the real finders, it makes that module's loader call :func:`install` once
    the package has been executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _DYNAMO:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:  # pragma: no cover - an unusual loader: patch later
            return None

        def exec_then_install(module):
            exec_module(module)
            try:
                install()
            except Exception:  # pragma: no cover - never break the user's import
                pass

        try:
            loader.exec_module = exec_then_install   # this module's loader only
        except Exception:  # pragma: no cover - a loader with slots
            return None
        return spec

    def invalidate_caches(self) -> None:
        pass


_hook = _DynamoHook()


def _remove_hook() -> None:
    try:
        sys.meta_path.remove(_hook)
    except ValueError:
        pass


if _DYNAMO in sys.modules:
    install()
else:
    sys.meta_path.insert(0, _hook)
