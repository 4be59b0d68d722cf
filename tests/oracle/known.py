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

# -- found by the mesh runs (tests/oracle/mesh_runs.py) ----------------------------------
_LOOP_GRAD_NAMES_REPRO = """\
named_axes/transforms (grad's per-example region), not an engine: under a SerialLoop on
axis 'c', a gradient whose loss does not depend on 'c' still carries 'c' (replicated)
when the differentiated function computes anything from a closed-over value carrying
'c'.  Values agree (a psum over 'c' multiplies by its size either way); only the named
shape seen inside the xmap differs (make test-oracle does not compare it there; the mesh
runs do).  Same on one process, without a mesh:

    def loss(w, y, z):
        unused = z * z            # z carries 'c'
        return (w * y).sum()
    def f(w, y, z):
        g = nx.grad(lambda w: loss(w, y, z))(w)
        print(g.named_shape)
        return g
    kw = dict(in_axes=(['b', ...], ['b', 'a', ...], ['c', ...]),
              out_axes=['a', 'b', 'c', ...])
    args = (torch.randn(2), torch.randn(2, 4), torch.randn(3))
    nx.xmap(f, **kw)(*args)                                         # {'a': 4, 'b': 2}
    nx.xmap(f, axis_resources={'c': nx.SerialLoop(3)}, **kw)(*args)  # {'c': 3, 'a': 4, 'b': 2}

grad's `added` axes are dropped by drop_replicated, which cannot see that a loop-chunked
gradient is the same in every chunk (_chunked/_sum_over_chunks in transforms/_grad.py)."""
KNOWN_CLASSES["serial_loop_grad_keeps_loop_axis"] = (
    lambda prog, d: (d.kind == "resources_named_shape" and "SerialLoop" in d.where
                     and uses(prog, lambda op: op.get("op") == "grad")),
    _LOOP_GRAD_NAMES_REPRO)
# Fixed and removed (their programs must now pass): empty_sequence_spec (a top-level
# in_axes=() is "no arguments", out_axes=() refused, a nested () a rank-0 mapping),
# vjp_primal_gains_closure_axes (vjp's primal output folds replicated copies),
# serial_loop_grad (reduce_axes over a SerialLoop axis adds every chunk's part; chunk
# outputs with differing layouts are broadcast alike before they are joined),
# dtensor_jvp_non_dual_operand (nx.jvp on the DTensor engine where DTensor's forward-mode
# AD fails -- an operand that is not a dual tensor, a tangent of a SerialLoop chunk --
# now raises AxisResourceError, not a raw AssertionError/NotImplementedError).


def classify(prog, diff) -> str | None:
    for name, (match, _repro) in KNOWN_CLASSES.items():
        if match(prog, diff):
            return name
    return None
