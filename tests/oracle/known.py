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
        for key in ("body", "t_body", "f_body"):    # f_body, t_body: cond's branches
            yield from _ops(op.get(key, ()))


def uses(prog, pred) -> bool:
    return any(pred(op) for op in _ops(prog["body"]))


KNOWN_CLASSES: dict = {}

def _compile_custom_rule(prog, diff) -> bool:
    """torch.compile(fullgraph=True) of a custom rule inside nx.grad that dynamo cannot
    trace in order: a custom_vjp before a reduce axis no argument carries (seed 0,
    p0_01947), a custom_jvp in an nx.vjp pullback, or a custom_jvp under nx.jvp (forward
    mode: dynamo traces no Function with a jvp method; seed 3913, p3913_00557, gave half
    the tangent before it was refused).  Refused with an AxisTypeError,
    which dynamo reports as its own "Observed exception"; eager and nx.jit agree with
    JAX."""
    # (the runner keeps 300 characters of dynamo's message, which starts with its own text)
    return (diff.where == "torch.compile" and "Observed exception" in diff.msg
            and uses(prog, lambda op: op.get("op") == "custom"
                     and op.get("f") in ("cvjp", "cjvp")))


KNOWN_CLASSES["compile_custom_rule"] = (
    _compile_custom_rule,
    "seed 0, p0_01947: torch.compile(xmap(...nx.grad(..., reduce_axes=...) of a "
    "custom_vjp...), fullgraph=True): the reduce axis arrives after dynamo traced the "
    "rule's backward; refused, eager and nx.jit agree with JAX")

# Fixed and removed (their programs must now pass): serial_loop_grad_keeps_loop_axis (a
# gradient's loop-chunked copies are folded when equal across every chunk),
# empty_sequence_spec (a top-level
# in_axes=() is "no arguments", out_axes=() refused, a nested () a rank-0 mapping),
# vjp_primal_gains_closure_axes (vjp's primal output folds replicated copies),
# serial_loop_grad (reduce_axes over a SerialLoop axis adds every chunk's part; chunk
# outputs with differing layouts are broadcast alike before they are joined),
# dtensor_jvp_non_dual_operand (nx.jvp on the DTensor engine where DTensor's forward-mode
# AD fails -- an operand that is not a dual tensor, a tangent of a SerialLoop chunk --
# now raises AxisResourceError, not a raw AssertionError/NotImplementedError),
# dtensor_outer_backward_of_inner_derivative (the outer backward of a derivative taken in
# the body failed on DTensors: every mesh call now runs on the local-shard path).


# -- nx.lax control flow (lax_programs.py): differences of JAX or torch, not bugs ----------

_CONTROL = ("cond", "fori", "scan", "while")


def _in_control(op, pred) -> bool:
    """Whether ``pred`` holds for an op inside a control-flow op's sub-bodies."""
    return op.get("op") in _CONTROL and any(
        pred(o) for key in ("body", "t_body", "f_body") for o in _ops(op.get(key, ())))


def _jax_collective_transpose_in_control_flow(prog, diff) -> bool:
    """JAX 0.4.30's xmap mis-transposes collectives inside control flow: reverse mode
    through a ``ppermute`` inside ``cond`` / ``fori_loop`` / ``scan`` raises where the
    transpose runs with the xmap axis unbound ("NameError: unbound axis name", "vmap has
    mapped output ... but out_axes is None"), and through a ``ppermute`` or ``psum``
    inside a ``cond`` with a per-instance predicate it gives wrong gradients: JAX's own
    ``jnp.where(pred, true_fun(x), false_fun(x))`` -- what its batched cond means --
    gives other values, named_axes's (for ``cond`` and ``where`` alike).  Forward mode
    agrees with JAX."""
    coll = ("ppermute", "coll") if diff.kind == "values" else ("ppermute",)
    if not uses(prog, lambda op: op.get("op") in ("grad", "xform") and op.get("mode") != "jvp"
                and uses({"body": op["body"]}, lambda o: _in_control(
                    o, lambda p: p.get("op") in coll))):
        return False
    if diff.kind == "accepts_jax_rejects":
        return "unbound axis name" in diff.msg or "has mapped output" in diff.msg
    return diff.kind == "values" and uses(prog, lambda op: op.get("op") == "cond"
                                          and op.get("pred") is None)


KNOWN_CLASSES["jax_collective_transpose_in_control_flow"] = (
    _jax_collective_transpose_in_control_flow,
    "seed 0, p0_00871: jax.xmap(lambda p, w: jax.value_and_grad(lambda p: lax.scan(lambda c, "
    "x: (ppermute(c, 'a', [(0, 1), (1, 0)]) * -1.5 + c, c), (p * w)[0], p * w)[1].sum())(p)): "
    "JAX raises NameError 'unbound axis name' ('vmap has mapped output ... out_axes is None' "
    "for cond); named_axes differentiates it (its SerialLoop and mesh runs agree).  Wrong "
    "values: grad of pmean(sum(lax.cond(axis_index('c') > 0, lambda u: 2 * ppermute(u, 'c', "
    "ring) + u, f, x))) over c=4 swaps rows 0 and 3 of the gradient against JAX's own "
    "jnp.where(pred, 2 * ppermute(x) + x, f(x)), which named_axes gives for both (likewise "
    "psum(u, 'c') * -1.5 + u; tests/test_lax_control.py checks ours, cond against where and "
    "where against JAX)")


def _int_carry_widened(prog, diff) -> bool:
    """An int32 loop carry (or ``cond`` branch) combined with an int64 value: torch sums
    integers in int64 (``psum``, like ``torch.sum``) and ``nx.lax.axis_index`` is int64
    (torch's index dtype), so the new carry (one branch) is int64 and the loop (cond)
    refuses the dtype change as JAX refuses one; in JAX (no x64) every integer is int32
    and the program runs.  A dtype policy of the collectives, not of the control flow."""
    return (diff.kind == "rejects_jax_accepts" and "torch.int32" in diff.msg
            and "torch.int64" in diff.msg and "identical types" in diff.msg
            and uses(prog, lambda op: op.get("op") in _CONTROL))


KNOWN_CLASSES["int_carry_widened_to_int64"] = (
    _int_carry_widened,
    "seed 0, p0_01160: lax.cond(axis_index('d') * -1 + 3 > 1, lambda c, w: psum(c, 'a') + c, "
    "lambda c, w: ppermute(c, 'a', ring) + c, c, w) with an int32 c: the true branch is int64 "
    "here (torch.sum's integer rule), so the branches' types differ and cond refuses; JAX "
    "keeps int32 (the same for a loop carry)")


def _untaken_code_unchecked(prog, diff) -> bool:
    """Eager control flow checks the code it runs: ``cond`` with a Python predicate
    calls one branch, a loop with Python bounds and no trip never calls its body, so a
    branch or body returning the wrong positional shape or dtype goes unnoticed there;
    JAX traces every branch and body and refuses.  (Where both branches or the body run
    -- a per-instance predicate, a trip -- or a tensor's value decided, and what it
    skipped runs on fake values, named_axes refuses as JAX does.)"""
    return (diff.kind == "accepts_jax_rejects" and prog.get("expect") == "reject"
            and ("identical types" in diff.msg or "must have equal types" in diff.msg)
            and uses(prog, lambda op: op.get("op") in _CONTROL))


KNOWN_CLASSES["untaken_code_unchecked"] = (
    _untaken_code_unchecked,
    "seed 1, p1_00262: lax.cond(True, f, g, x) where g returns x with a dim of size 1 added: "
    "JAX raises TypeError (the branches' types differ), nx.lax.cond calls f only; seed 0, "
    "p0_00917: while_loop(lambda c: c[0] < axis_index('d') - 4, body, ...) with d of size 1 "
    "never steps, so its body (which adds dims to the carry) is never called here")


def _jax_while_loop_reverse_mode(prog, diff) -> bool:
    """JAX cannot reverse-differentiate ``while_loop`` (nor ``fori_loop`` with traced
    bounds: it is a while_loop); named_axes runs loops as Python loops, which autograd
    differentiates either way.  (The generator mostly takes such loops in forward mode,
    where JAX checks the values.)"""
    return (diff.kind == "accepts_jax_rejects"
            and "Reverse-mode differentiation does not work for lax.while_loop" in diff.msg)


KNOWN_CLASSES["jax_while_loop_reverse_mode"] = (
    _jax_while_loop_reverse_mode,
    "seed 0, p0_00567: jax.grad(lambda p: pmean(lax.while_loop(lambda c: c[0] < -1, body, "
    "(0, p * w))[1].sum(), 'b')) inside xmap (no step, even): JAX raises ValueError "
    "'Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
    "dynamic start/stop values'")


def _compile_traced_loop_condition(prog, diff) -> bool:
    """A ``while_loop`` (or ``fori_loop`` with traced bounds) whose condition is a tensor
    runs as a Python loop and refuses to be traced (its step count is data: the
    ``AxisTypeError`` "the loop condition is traced"); under
    ``torch.compile(fullgraph=True)`` dynamo reports that exception as its own
    "Observed exception" (``Unsupported``), which is not a ``NamedAxisError``.  ``nx.jit``
    refuses with the AxisTypeError itself; the eager run agrees with JAX."""
    return (diff.where == "torch.compile" and diff.kind == "resources_raw_error"
            and "Observed exception" in diff.msg
            and uses(prog, lambda op: op.get("op") == "while" and op.get("limit") is None
                     or op.get("op") == "fori" and op.get("hi") is None))


KNOWN_CLASSES["compile_traced_loop_condition"] = (
    _compile_traced_loop_condition,
    "seed 0, p0_00077: torch.compile(xmap(lambda x: fori_loop(1, axis_index('c') * 3 + 3, "
    "body, x)), fullgraph=True): dynamo's 'Observed exception' wrapping our AxisTypeError "
    "'while_loop: the loop condition is traced (nx.jit, make_fx, torch.compile)'")


def _empty_slice(op) -> bool:
    return op.get("op") == "dslice" and (0 in op.get("sizes", ()) or op.get("size") == 0)


def _jax_xmap_empty_slice_transpose(prog, diff) -> bool:
    """JAX 0.4.30's xmap transposes a ``dynamic_slice`` of size 0 with a per-instance
    start into a nonzero cotangent (the operand's first entry gets the scale of the
    slice's input); nothing is read, so the derivative is 0, which ``jax.grad``,
    ``jax.jit`` and ``jax.vmap`` give, and named_axes too."""
    return (diff.kind == "values"
            and uses(prog, lambda op: op.get("op") in ("grad", "xform")
                     and op.get("mode") != "jvp"
                     and uses({"body": op["body"]}, _empty_slice)))


KNOWN_CLASSES["jax_xmap_empty_slice_transpose"] = (
    _jax_xmap_empty_slice_transpose,
    "seed 5, p5_02440: xmap(lambda p: jax.grad(lambda p: dynamic_slice(p * w, "
    "[axis_index('d') - 4], [0]).sum())(p), in_axes=[...], out_axes=['d', ...], "
    "axis_sizes={'d': 1})(arange(1., 5.)) with w = [2., 3., 4., 5.]: JAX gives [[2., 0., 0., "
    "0.]]; jax.vmap of the same grad over the start, and jax.grad alone, give zeros, as "
    "named_axes does")


def classify(prog, diff) -> str | None:
    for name, (match, _repro) in KNOWN_CLASSES.items():
        if match(prog, diff):
            return name
    return None
