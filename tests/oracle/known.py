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


def _has_empty_seq_spec(t) -> bool:
    if isinstance(t, dict):
        if t.get("map") in ("list", "tuple") and not t.get("items"):
            return True
        return any(_has_empty_seq_spec(v) for v in t.values())
    if isinstance(t, list):
        return any(_has_empty_seq_spec(v) for v in t)
    return False


def _empty_seq_spec(prog, d):
    return d.kind == "accepts_jax_rejects" and _has_empty_seq_spec(
        [prog["in_axes"], prog["out_axes"], prog["body"]])


def _vjp_primal_axes(prog, d):
    return (d.kind == "rejects_jax_accepts" and "does not place" in d.msg
            and uses(prog, lambda op: op["op"] == "grad"))


def _serial_loop_grad(prog, d):
    return (d.where.startswith("axis_resources") and "SerialLoop" in d.where
            and uses(prog, lambda op: op["op"] == "grad"))


KNOWN_CLASSES: dict = {
    "empty_sequence_spec": (_empty_seq_spec, """\
JAX 0.4.30 reads an empty list/tuple spec ([] or ()) as an empty CONTAINER (a pytree
prefix with no entries), named_axes as a rank-0 mapping naming nothing.
  JAX:  xmap(lambda x: x, in_axes=(), out_axes=[...])(np.ones(()))
        -> ValueError: xmap in_axes specification must be a tree prefix of the
           corresponding value, got specification () for value tree PyTreeDef((*,))
        xmap(lambda x: x, in_axes=[...], out_axes=())(np.ones(()))
        -> ValueError: xmapped functions cannot have no return values
  nx:   nx.xmap(lambda x: x, in_axes=(), out_axes=[...])(torch.ones(()))  -> tensor(1.)
        (accepted; SPEC's reading rule 'a list/tuple whose elements are all names, None
        or ... is one mapping' is vacuously true for [] -- JAX's is not)"""),
    "vjp_primal_gains_closure_axes": (_vjp_primal_axes, """\
The primal output of nx.vjp / nx.value_and_grad gains the named axes of a closed-over
value the function touches, even when the output does not depend on it.
  JAX:  xb = np.array([[1., 2.], [3., 4.]]); w = np.array([1., 2.])
        def f(xb, w):
            def loss(w):
                _ = w + xb                    # dead use of the closed-over xb ('b')
                return (w * w).sum()
            return jax.vjp(loss, w)[0]
        xmap(f, in_axes=(['b', ...], [...]), out_axes=[...])(xb, w)   -> 5.0
  nx:   the same with nx.vjp / nx.xmap on torch tensors
        -> AxisSpecError: ... the output has named axis 'b' (named_shape {'b': 2}) that
           out_axes [Ellipsis] does not place"""),
    "serial_loop_grad": (_serial_loop_grad, """\
Gradients inside an xmap whose axis runs as nx.SerialLoop(k) disagree with the vectorized
run (and with JAX): reduce_axes over the loop axis keeps only one chunk's partial sum;
some programs also fail with a raw torch error (p0_01893: 'Tensors must have same number
of dimensions: got 2 and 1' under SerialLoop(4)).
  JAX:  x = np.arange(4.).reshape(4, 1); w = np.ones(1)
        xmap(lambda x, w: lax.psum(jax.grad(lambda w: (x * w).sum())(w), 'c'),
             in_axes=(['c', ...], [...]), out_axes=[...])(x, w)        -> [6.]
  nx:   nx.xmap(lambda x, w: nx.grad(lambda w: (x * w).sum(), reduce_axes=('c',))(w),
                in_axes=(['c', ...], [...]), out_axes=[...],
                axis_resources={'c': nx.SerialLoop(2)})(x, w)         -> tensor([1.])
        (vectorized, without axis_resources: tensor([6.]))"""),
}


def classify(prog, diff) -> str | None:
    for name, (match, _repro) in KNOWN_CLASSES.items():
        if match(prog, diff):
            return name
    return None
