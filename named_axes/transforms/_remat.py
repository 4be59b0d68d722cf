"""``checkpoint`` (alias ``remat``): recompute a function's activations in the backward pass.

Built on :func:`torch.utils.checkpoint.checkpoint` (non-reentrant), which works on the
physical tensors under NamedTensors and composes with ``torch.autograd``; under
torch.func transforms, ``torch.utils.checkpoint`` is traced through as a plain call.

>>> import torch, named_axes as nx
>>> f = nx.checkpoint(lambda x: x.sin().sin())
>>> x = torch.ones(2, requires_grad=True)
>>> f(x).sum().backward(); x.grad.shape
torch.Size([2])
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import torch
import torch.utils.checkpoint

from .._env import frames, within
from .._errors import AxisTypeError
from .._modes import building_graph
from .._torch_private import functorch_active
from . import _xla_rng
from ._tree import rebox, unbox

__all__ = ["checkpoint", "remat"]


def checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Any = None,
               static_argnums: tuple = ()) -> Callable:
    """``fun`` whose intermediate values are recomputed, not stored, for the backward pass.

    Args:
        fun: the function (named or positional values).
        prevent_cse: accepted for JAX compatibility (torch does not CSE across it).
        policy: a ``torch.utils.checkpoint`` policy function (``ctx, op, ...) ->
            CheckpointPolicy``) choosing which ops to save; None saves nothing.  Under
            ``nx.jit`` the compiled program's partitioner chooses instead.
        static_argnums: accepted for JAX compatibility (arguments are passed as they are).

    >>> import torch, named_axes as nx
    >>> nx.grad(nx.remat(lambda x: (x ** 2).sum()))(torch.tensor([1., 2.]))
    tensor([2., 4.])
    """
    if not callable(fun):
        raise AxisTypeError(f"checkpoint: fun must be callable, got {type(fun).__name__}")

    @functools.wraps(fun)
    def run(*args, **kwargs):
        # Nothing to recompute without grad; torch.utils.checkpoint is not supported
        # under torch.func transforms, nor under dynamo with our Python side effects.
        if (not torch.is_grad_enabled() or functorch_active()
                or torch.compiler.is_dynamo_compiling()):
            return fun(*args, **kwargs)
        extra = _policy_contexts(policy)
        # checkpoint sees the physical tensors (a NamedTensor would be a constant to it)
        leaves, spec, names = unbox((args, kwargs))
        out_box: list = []
        here = _here()

        def phys_fun(*phys):
            a, kw = rebox(phys, spec, names)
            with here():   # (a recomputation may stop where its forward paused)
                o_leaves, o_spec, o_names = unbox(fun(*a, **kw))
                out_box[:] = [o_spec, o_names]
                return tuple(o_leaves)

        run_args = leaves
        if any(isinstance(t, torch.Tensor) and t.device.type == "xla" for t in leaves):
            # checkpoint asks torch.<device> of its tensor arguments for the random and
            # autocast state, and torch-xla has no torch.xla: the XLA tensors reach the
            # function by closure (checkpoint without reentrance recomputes closures
            # alike) and the recomputation replays the random state here
            replay, run_args = _xla_rng.replaying(phys_fun), ()
            phys_fun = lambda: replay(*leaves)   # noqa: E731
            extra["preserve_rng_state"] = False

        # early stop ends recomputation by raising inside an op; the dispatcher's fallbacks
        # may catch that, so recompute the whole function instead
        with torch.utils.checkpoint.set_checkpoint_early_stop(False):
            out = torch.utils.checkpoint.checkpoint(phys_fun, *run_args, use_reentrant=False,
                                                    **extra)
        return rebox(list(out), *out_box)

    return run


def _policy_contexts(policy: Any) -> dict:
    """``torch.utils.checkpoint.checkpoint``'s ``context_fn`` for ``policy``, if any.
    Not under make_fx's trace: there selective checkpointing leaves tags in fx's
    process-wide node meta, on which AOT autograd's partitioner fails in every later
    program (the compiled program's rematerialization is the partitioner's own)."""
    if policy is None or (building_graph() and not torch.compiler.is_dynamo_compiling()):
        return {}
    return {"context_fn": functools.partial(
        torch.utils.checkpoint.create_selective_checkpoint_contexts, policy)}


def _here() -> Callable:
    """A context manager factory: each run of the function in the axis environment here,
    a recomputation also in the serial loop chunk running now (``resume_here``: it may
    have paused, or another run since)."""
    scope = list(frames())
    engines = [e for f in scope for e in (f.engine, getattr(f.engine, "inner", None))]
    resumes = [e.resume_here() for e in engines if hasattr(e, "resume_here")]
    runs: list = []

    @contextlib.contextmanager
    def entered():
        with within(scope), contextlib.ExitStack() as stack:
            if runs:
                for resume in resumes:
                    stack.enter_context(resume())
            runs.append(None)
            yield

    return entered


remat = checkpoint
