"""The lowered positional program of a named program, as a ``torch.fx.GraphModule``.

``make_graph`` is the analogue of ``jax.make_jaxpr``: traced with ``make_fx``, the graph
holds plain aten ops and the collectives of :mod:`named_axes.lax` as named nodes.
``named_call`` marks a sub-program in the graph and in profiler traces.

>>> import torch, named_axes as nx
>>> f = lambda x: x.sin().sum('b')
>>> g = nx.make_graph(f, axis_env=[('b', 2)])(nx.named(torch.ones(2, 3), 'b ...'))
>>> 'aten.sin' in g.code and 'aten.sum' in g.code
True
"""
from __future__ import annotations

import contextlib
import functools
import html
from typing import Any, Callable, Sequence

import torch
import torch.fx
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx

from .. import _env
from .._errors import AxisSpecError, AxisTypeError
from ..lax._common import LABEL_AXES
from ._tree import rebox, unbox

__all__ = ["make_graph", "named_call", "NamedGraphModule", "trace_flat", "TENSOR"]


class _TensorLeaf:
    """The mark of a tensor among a traced result's constants (None is a constant too)."""

    def __repr__(self) -> str:   # (stable: the program store's records print it)
        return "TENSOR"


TENSOR = _TensorLeaf()


class NamedGraphModule(torch.fx.GraphModule):
    """A GraphModule that prints its code (``str``) and renders it in notebooks.

    ``in_names`` / ``out_names`` give the named axes (leading physical dims) of each
    flat input / output; ``None`` for a plain leaf.
    """

    in_names: list
    out_names: list

    def __str__(self) -> str:
        """The code, each collective's line ending with the axis names it was called
        with (``psum = torch.ops.named_axes.psum.default(mul, [0])  # psum over 'b'``)."""
        labels = {}
        for node in self.graph.nodes:
            custom = node.meta.get("custom") or {}
            if "axis_name" in custom and "named_axes." in str(node.target):
                labels[node.name] = f"{custom['collective']} over {custom['axis_name']!r}"
        lines = []
        for line in self.code.split("\n"):
            name = line.strip().split(" = ", 1)[0]
            lines.append(f"{line}  # {labels[name]}" if name in labels and " = " in line else line)
        return (f"# inputs' named axes:  {self.in_names}\n"
                f"# outputs' named axes: {self.out_names}" + "\n".join(lines))

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


def trace_flat(fun: Callable, args: tuple, *, axis_env: Sequence = (), mode: str = "real",
               label_axes: bool = False, fake_mode: Any = None):
    """Trace ``fun(*args)`` into an aten graph over the flat physical leaves.

    Returns ``(graph_module, leaves, (spec, names), out_info)`` where ``out_info`` is
    ``[out_spec, out_names, out_consts]``: how to rebuild the result from the graph's
    flat tensor outputs (non-tensor output leaves are constants kept in ``out_consts``,
    :data:`TENSOR` marking the tensors).
    ``fake_mode``: with ``mode="fake"``, the FakeTensorMode to trace in (make_fx's own
    otherwise).
    """
    leaves, spec, names = unbox(tuple(args))
    tensor_pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    out_info: list = []

    def flat_fun(*tensors):
        call = list(leaves)
        for i, t in zip(tensor_pos, tensors):
            call[i] = t
        out = fun(*rebox(call, spec, names))
        o_leaves, o_spec, o_names = unbox(out)
        consts = [TENSOR if isinstance(o, torch.Tensor) else o for o in o_leaves]
        out_info[:] = [o_spec, o_names, consts]
        return [o for o in o_leaves if isinstance(o, torch.Tensor)]

    env = dict(axis_env)
    with contextlib.ExitStack() as stack:
        if env:
            stack.enter_context(_env.bind(env, kind="make_graph"))
        if label_axes:   # collectives record their axis names in node.meta (make_graph)
            stack.enter_context(fx_traceback.preserve_node_meta())
            stack.callback(LABEL_AXES.__setitem__, 0, LABEL_AXES[0])
            LABEL_AXES[0] = True
        # closed-over real tensors (parameters) are constants of the graph, also when faking
        inputs = [leaves[i] for i in tensor_pos]
        if fake_mode is not None:   # (make_fx traces in the fake mode of its inputs)
            inputs = [fake_mode.from_tensor(t) for t in inputs]
        gm = make_fx(flat_fun, tracing_mode=mode, _allow_non_fake_inputs=mode != "real")(
            *inputs)
    # Dead ops out: torch's ZeroTensor fallback runs ops on meta tensors and the trace
    # records them, which raise when run (mixed dtypes on 'meta').  Random and mutating
    # ops stay, and named_call's profiler nodes (torch 2.9 does not count them impure).
    if gm.graph.eliminate_dead_code(is_impure_node=lambda node: node.is_impure() or getattr(
            node.target, "namespace", None) == "profiler"):
        gm.recompile()
    return gm, leaves, (spec, names, tensor_pos), out_info


def rebuild_output(flat_out: Sequence, out_info: list) -> Any:
    """The result of a traced program from its graph's flat outputs."""
    o_spec, o_names, consts = out_info
    it = iter(flat_out)
    leaves = [next(it) if c is TENSOR else c for c in consts]
    return rebox(leaves, o_spec, o_names)


def make_graph(fun: Callable, *, axis_env: Sequence | None = None) -> Callable:
    """A function of ``fun``'s arguments returning the lowered program as a GraphModule.

    Args:
        fun: a named or positional program (xmap'd or not).
        axis_env: ``[(name, size), ...]`` axes to bind while tracing, for programs that
            use collectives over names no enclosing xmap binds (like ``make_jaxpr``).

    Returns:
        ``(*args) -> NamedGraphModule``; call the module with the flat physical tensors.

    >>> import torch, named_axes as nx
    >>> f = nx.xmap(lambda x: x * 2, in_axes=['b', ...], out_axes=['b', ...])
    >>> print(nx.make_graph(f)(torch.ones(2, 3)).code.strip().splitlines()[-1].strip())
    return [mul]
    """
    env = list((axis_env.items() if isinstance(axis_env, dict) else axis_env) or ())
    for entry in env:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], int)):
            raise AxisSpecError(f"make_graph: axis_env entries are (name, size) pairs, "
                                f"got {entry!r}")

    @functools.wraps(fun)
    def build(*args):
        gm, leaves, (_, names, tensor_pos), out_info = trace_flat(fun, args, axis_env=env,
                                                                  label_axes=True)
        out = NamedGraphModule(gm, gm.graph, class_name=f"named_graph_"
                               f"{getattr(fun, '__name__', 'fun').strip('<>')}")
        out.in_names = [names[i] for i in tensor_pos]
        out.out_names = [n for n, c in zip(out_info[1], out_info[2]) if c is TENSOR]
        return out

    return build


def named_call(fun: Callable, *, name: str | None = None) -> Callable:
    """``fun`` with its calls marked ``name`` in profiler traces and (torch >= 2.10) in
    traced graphs.

    >>> import torch, named_axes as nx
    >>> f = nx.named_call(torch.sin, name='my_block')
    >>> with torch.profiler.profile() as prof:
    ...     _ = f(torch.ones(2))
    >>> any(e.name == 'my_block' for e in prof.events())
    True
    """
    if not callable(fun):
        raise AxisTypeError(f"named_call: fun must be callable, got {type(fun).__name__}")
    label = name or getattr(fun, "__name__", "named_call")

    @functools.wraps(fun)
    def call(*args, **kwargs):
        # make_fx records the block's enter and exit (torch >= 2.10; 2.9 drops them)
        with torch.profiler.record_function(label):
            return fun(*args, **kwargs)

    return call
