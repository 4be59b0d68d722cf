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

def _compile_custom_rule(prog, diff) -> bool:
    """torch.compile(fullgraph=True) of a custom_vjp inside nx.grad: dynamo traces the
    rule's backward while it traces the forward, before the differentiated region knows
    its axes, so the per-instance cotangent shares came out wrong (half, seed 0 p0_00233);
    it now refuses with an AxisTypeError (which dynamo reports as its own
    Observed...Error).  nx.jit of the same program traces in order and agrees with JAX."""
    # (the runner keeps 300 characters of dynamo's message, which starts with its own text)
    return (diff.where == "torch.compile" and ("cannot be traced by torch.compile" in diff.msg
                                               or "Observed exception" in diff.msg)
            and uses(prog, lambda op: op.get("op") == "custom" and op.get("f") == "cvjp"))


KNOWN_CLASSES["compile_custom_rule"] = (
    _compile_custom_rule,
    "seed 0, p0_00233: torch.compile(xmap(lambda x: nx.grad(lambda x: psum(-1.5 * "
    "(cvjp(x) ** 2 - cvjp(x)), 'b'))(x)), fullgraph=True): refused (gave half the "
    "gradient before); eager and nx.jit agree with JAX")

# Fixed and removed (their programs must now pass): serial_loop_grad_keeps_loop_axis (a
# gradient's loop-chunked copies are folded when equal across every chunk),
# empty_sequence_spec (a top-level
# in_axes=() is "no arguments", out_axes=() refused, a nested () a rank-0 mapping),
# vjp_primal_gains_closure_axes (vjp's primal output folds replicated copies),
# serial_loop_grad (reduce_axes over a SerialLoop axis adds every chunk's part; chunk
# outputs with differing layouts are broadcast alike before they are joined),
# dtensor_jvp_non_dual_operand (nx.jvp on the DTensor engine where DTensor's forward-mode
# AD fails -- an operand that is not a dual tensor, a tangent of a SerialLoop chunk --
# now raises AxisResourceError, not a raw AssertionError/NotImplementedError).


def _dtensor_outer_backward_of_inner_derivative(prog, diff) -> bool:
    """The DTensor engine's DTensor path (SerialLoop with a mesh, or a collective over a
    split axis inside a derivative taken within the body): a plain tensor saved inside
    torch.func (whose saved-tensor hooks are off) meets DTensors in the *outer* backward,
    which runs in the caller's autograd call, outside the engine; or a torch.func
    decomposition there reaches a prims op DTensor has no rule for.  The local-shard path
    (the default) does not save DTensors at all: only runs on DTensors qualify (that
    path, a SerialLoop with the mesh, or a collective inside the derivative, which the
    local path hands to DTensors)."""
    inner_collective = uses(prog, lambda op: op.get("op") in ("grad", "xform") and any(
        o.get("op") == "coll" for o in _ops(op.get("body", ()))))
    on_dtensors = ("dtensor path" in diff.where or "loop" in diff.where.lower()
                   or inner_collective)
    return (diff.kind == "resources_grad_raw_error" and on_dtensors
            and ("got mixed torch.Tensor and DTensor" in diff.msg
                 or "prims." in diff.msg and "sharding strategy" in diff.msg)
            and uses(prog, lambda op: op.get("op") in ("grad", "xform")))


KNOWN_CLASSES["dtensor_outer_backward_of_inner_derivative"] = (
    _dtensor_outer_backward_of_inner_derivative,
    "mesh oracle seed 99, p99_00131: xmap(lambda x, y: nx.vjp(lambda v: psum(abs(v * y), "
    "'c'), x)[1](cos(out))[0], axis_resources={'c': 'x'}) then torch.autograd.grad of its "
    "output: RuntimeError prims.add got mixed torch.Tensor and DTensor; seed 101, "
    "p101_00385: a custom_jvp inside nx.vjp, SerialLoop with the mesh: NotImplementedError "
    "prims.add has no sharding strategy (the forward and the local-shard path agree with "
    "the vectorized run)")


def classify(prog, diff) -> str | None:
    for name, (match, _repro) in KNOWN_CLASSES.items():
        if match(prog, diff):
            return name
    return None
