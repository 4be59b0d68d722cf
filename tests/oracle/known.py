"""Known bug classes: failures the oracle expects until the library is fixed.

``KNOWN_CLASSES`` maps a class name to ``(match, repro)``: ``match(prog, diff)`` says
whether a failing program belongs to the class, ``repro`` is the minimal JAX code +
named_axes code + both outputs.  A failure matching a class is counted (the test report
lists how many programs of each class fail) instead of failing the suite; any failure
matching no class fails it.  Remove an entry when its fix lands: its programs then
have to pass.  Nothing here loosens a comparison.
"""
from __future__ import annotations


def _ops(body):
    for op in body:
        yield op
        yield from _ops(op.get("body", ()))


def uses(prog, pred) -> bool:
    return any(pred(op) for op in _ops(prog["body"]))


KNOWN_CLASSES: dict = {}

# -- found by the mesh runs (tests/oracle/mesh_runs.py: DTensor over 4 gloo ranks) ------
_DTENSOR_JVP_REPRO = """\
torch's DTensor, not named_axes: forward-mode AD through an op whose other operand is
not a dual tensor (nx.jvp of `w * y` with `y` closed over, on the DTensor engine) makes
a zero tangent with aten.to.dtype_layout(device='meta'), and DTensor's C++ fast path
takes it for an out= variant (torch 2.13):

    # torchrun --nproc-per-node=4
    dm = init_device_mesh("cpu", (4,))
    x = distribute_tensor(torch.arange(8.0), dm, [Shard(0)])
    y = distribute_tensor(torch.arange(8.0) + 1, dm, [Shard(0)])
    torch.func.jvp(lambda v: v * y, (x,), (torch.ones_like(x),))
    # AssertionError: out variant should have at least one out arg

named_axes (vectorized, SerialLoop, one-device mesh) gives the tangent; only the
DTensor engine raises.  Fix: upstream, or a DTensor handler for to.dtype_layout on meta."""
KNOWN_CLASSES["dtensor_jvp_non_dual_operand"] = (
    lambda prog, d: (d.kind == "resources_raw_error"
                     and "out variant should have at least one out arg" in d.msg
                     and uses(prog, lambda op: op.get("mode") == "jvp")),
    _DTENSOR_JVP_REPRO)
# Fixed and removed (their programs must now pass): empty_sequence_spec (a top-level
# in_axes=() is "no arguments", out_axes=() refused, a nested () a rank-0 mapping),
# vjp_primal_gains_closure_axes (vjp's primal output folds replicated copies),
# serial_loop_grad (reduce_axes over a SerialLoop axis adds every chunk's part; chunk
# outputs with differing layouts are broadcast alike before they are joined).


def classify(prog, diff) -> str | None:
    for name, (match, _repro) in KNOWN_CLASSES.items():
        if match(prog, diff):
            return name
    return None
