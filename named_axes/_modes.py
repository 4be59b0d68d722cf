"""Which torch dispatch modes are active: ones building a graph, or ones running values.

Under a mode that sees no real values (make_fx's tracer, ``FakeTensorMode``) the library
builds traceable code (collectives as named ops, no reads of values).  Under modes that
run every op on real tensors -- the library's own, marked ``runs_values = True``, and
torch's ``CommDebugMode`` -- the eager code paths run, exactly as without a mode.

>>> from named_axes._modes import building_graph, modes_run_values
>>> modes_run_values(), building_graph()
(True, False)
"""
from __future__ import annotations

import torch

from ._torch_private import dispatch_depth, dispatch_modes

__all__ = ["modes_run_values", "building_graph", "shapes_only", "lowering_for_compile",
           "LOWERING", "observed"]

# > 0 while an xmap runs as one call of torch.compile's graph (_xmap_graph): the graph
# traced there goes to the user's backend, so it holds positional code (as dynamo's)
LOWERING = [0]
_is_compiling = torch.compiler.is_dynamo_compiling


def lowering_for_compile() -> bool:
    """Whether the code runs for torch.compile's backend: traced by dynamo, or inside an
    xmap that dynamo's graph holds as one call."""
    return _is_compiling() or LOWERING[0] > 0


def modes_run_values() -> bool:
    """Whether every active dispatch mode runs ops on real values (none, or modes marked
    ``runs_values``)."""
    if not dispatch_depth():
        return True
    return all(getattr(m, "runs_values", False) or _observes(m) for m in dispatch_modes())


def _observes(mode) -> bool:
    """Whether ``mode`` is torch's ``CommDebugMode`` (it counts collectives on values)."""
    cls = type(mode)
    return cls.__name__ == "CommDebugMode" and cls.__module__.startswith(
        "torch.distributed.tensor.debug")


def observed() -> bool:
    """Whether an active dispatch mode sees the ops run now (a trace, a recorder), so that
    the library's checks run on copies of values must not run.  A mode marked ``unseen``
    (the SerialLoop's keeper of written tensors) is not counted."""
    return dispatch_depth() > 0 and not all(getattr(m, "unseen", False)
                                            for m in dispatch_modes())


def building_graph() -> bool:
    """Whether a graph is being built: dynamo runs, or a dispatch mode that does not run
    values (make_fx's tracer, ``FakeTensorMode``) is on the stack."""
    return _is_compiling() or (dispatch_depth() > 0 and not modes_run_values())


def shapes_only() -> bool:
    """Whether ``nx.eval_shape`` runs the program (its fake-tensor mode is marked
    ``shapes_only``): what depends on values only need not be decided."""
    if _is_compiling():   # (dynamo cannot trace the mode stack)
        return False
    return any(getattr(m, "shapes_only", False) for m in dispatch_modes())
