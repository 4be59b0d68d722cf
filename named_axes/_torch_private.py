"""The private torch APIs named_axes uses, each with why and the public one considered.

Every private torch name the library reaches goes through this module, so a torch
upgrade that moves one breaks here, loudly, in one place.

>>> from named_axes import _torch_private
>>> _torch_private.functorch_level() is None      # no torch.func transform running
True
"""
from __future__ import annotations

import torch

__all__ = ["functorch_level", "functorch_active", "functorch_transform_kind", "dynamo_operator_tables",
           "dynamo_forget_handlers"]


# The innermost active torch.func transform's level, or None (a C function: called on
# every named value built, see _levels).  Why: named values must not silently change
# meaning under a torch.func transform that named_axes did not open; the level tells
# ours from a user's.  Public alternative considered: none (torch.func exposes no level).
functorch_level = torch._C._functorch.maybe_current_level
# Whether any torch.func transform is active: the cheap test done on every named value
# built (dynamo traces it inside its torch.func operators, unlike the level).
functorch_active = torch._C._are_functorch_transforms_active


def functorch_transform_kind() -> str | None:
    """The innermost active torch.func transform's kind (``"Grad"``, ``"Jvp"``,
    ``"Vmap"``, ``"Functionalize"``), or None.

    Why: only differentiating transforms give named values another meaning.  Public
    alternative considered: none.
    """
    interpreter = torch._C._functorch.peek_interpreter_stack()
    return None if interpreter is None else interpreter.key().name


def dynamo_operator_tables() -> tuple:
    """Dynamo's reverse-operator table and its binop table (``None`` where this torch
    has neither), for :func:`named_axes.enable_dynamo_matmul`.

    Why: dynamo's tables lack ``matmul`` (``_compile_compat``).  Public alternative
    considered: none; the fix is an explicit opt-in, never applied at import.
    """
    from torch._dynamo.variables import builtin

    populate = getattr(builtin, "populate_builtin_to_tensor_fn_map", None)
    reverse = getattr(builtin, "BUILTIN_TO_TENSOR_RFN_MAP", None)
    if populate is not None:
        populate()
    binops = getattr(builtin.BuiltinVariable, "_binops", None)
    return reverse, (binops() if binops is not None else None)


def dynamo_forget_handlers(ops: tuple) -> None:
    """Drop dynamo's cached handlers for the operators ``ops``, so that a table entry
    added or removed after dynamo traced them takes effect.

    Why: dynamo caches the handlers it derives from its tables (``_binop_handlers``
    and ``call_function_handler_cache``).  Public alternative considered:
    ``torch._dynamo.reset()`` clears compiled frames, not these.
    """
    from torch._dynamo.variables import builtin

    cls = builtin.BuiltinVariable
    handlers = getattr(cls, "_binop_handlers", None)
    if handlers is not None and hasattr(handlers, "cache_clear"):
        handlers.cache_clear()
    cache = getattr(cls, "call_function_handler_cache", None)
    if cache is not None:
        for key in [k for k in cache if k and k[0] in ops]:
            del cache[key]
