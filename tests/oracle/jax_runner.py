"""Run an oracle corpus under JAX 0.4.30's ``xmap`` (in ``.venv-jax``), in one process.

    python tests/oracle/jax_runner.py CORPUS.json RESULTS.json RESULTS.npz

For each program it records either ``{"status": "ok", "outs": [{"shape", "dtype",
"named"}, ...]}`` (output ``j``'s values under the npz key ``"<id>__<j>"``; ``named`` is
the output's named shape inside the xmap, read from JAX's aval) or
``{"status": "rejected", "exc": <exception type>, "msg": ...}``.  Outputs are listed
in the document order of the program's ``out`` tree (see ``dsl.flatten_like``).

How the DSL maps onto JAX (the torch side is ``torch_interp.py``):
named reductions are ``lax.psum``/``pmean``/``pmax``/``pmin`` over the names followed
by the positional ``jnp`` reduction; braced einsum is the positional ``jnp.einsum``
followed by a ``psum`` over the contracted named axes; ``reduce_axes=names`` on a
gradient is ``lax.psum`` of the gradient over ``names`` (0.4.30's ``grad`` no longer takes
``reduce_axes``); a vjp's cotangent is ``cos(out) + 0.5``, a jvp's tangents
``cos(primal) + 0.5``; slicing and control flow (``dsl.LaxOps``) call the ``jax.lax``
functions of the same names, as the torch side calls ``nx.lax``'s.
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
warnings.simplefilter("ignore")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental.maps import xmap  # noqa: E402

import dsl  # noqa: E402


def _axes(a):
    return tuple(a) if isinstance(a, list) else a


def _pair(p):
    return tuple(tuple(x) for x in p)


def _named_shape(v):
    try:
        ns = jax.core.get_aval(v).named_shape
    except Exception:
        return None
    return {str(k): int(s) for k, s in ns.items()}


class JaxBackend(dsl.LaxOps):
    lax = lax

    def op_un(self, op, v, env):
        f = op["f"]
        x = v[0]
        return {"sin": jnp.sin, "tanh": jnp.tanh, "neg": jnp.negative, "abs": jnp.abs,
                "square": lambda t: t * t}[f](x)

    def op_custom(self, op, v, env):
        return _CUSTOM[op["f"]](v[0])

    def op_bin(self, op, v, env):
        a, b = v
        return {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply,
                "maximum": jnp.maximum}[op["f"]](a, b)

    def op_scale(self, op, v, env):
        return v[0] * op["c"]

    def op_cast(self, op, v, env):
        return v[0].astype(jnp.float32)

    def op_reduce(self, op, v, env):
        x = v[0]
        names = tuple(a for a in op["axes"] if isinstance(a, str))
        ints = tuple(a for a in op["axes"] if not isinstance(a, str))
        coll = {"sum": lax.psum, "mean": lax.pmean, "amax": lax.pmax, "amin": lax.pmin}[op["f"]]
        posf = {"sum": jnp.sum, "mean": jnp.mean, "amax": jnp.max, "amin": jnp.min}[op["f"]]
        if names:
            x = coll(x, names)
        if ints:
            x = posf(x, axis=ints)
        return x

    def op_coll(self, op, v, env):
        return getattr(lax, op["f"])(v[0], _axes(op["axes"]))

    def op_pdot(self, op, v, env):
        return lax.pdot(v[0], v[1], _axes(op["axes"]), pos_contract=_pair(op["pos_contract"]))

    def op_pshuffle(self, op, v, env):
        return lax.pshuffle(v[0], _axes(op["axes"]), op["perm"])

    def op_ppermute(self, op, v, env):
        return lax.ppermute(v[0], _axes(op["axes"]), [tuple(p) for p in op["perm"]])

    def op_all_gather(self, op, v, env):
        return lax.all_gather(v[0], _axes(op["axes"]), axis=op["axis"], tiled=op["tiled"])

    def op_all_to_all(self, op, v, env):
        return lax.all_to_all(v[0], _axes(op["axes"]), op["split"], op["concat"],
                              tiled=op["tiled"])

    def op_psum_scatter(self, op, v, env):
        return lax.psum_scatter(v[0], _axes(op["axes"]), scatter_dimension=op["dim"],
                                tiled=op["tiled"])

    def op_axis_index(self, op, v, env):
        return lax.axis_index(_axes(op["axes"]))

    def op_einsum(self, op, v, env):
        out = jnp.einsum(op["pos"], *v)
        if op["contract"]:
            out = lax.psum(out, tuple(op["contract"]))
        return out

    def op_one_hot(self, op, v, env):
        return jax.nn.one_hot(v[0], op["n"], axis=op["dim"])

    def op_xmap(self, op, v, env):
        def fn(*params):
            return dsl.outputs(op["out"], dsl.run_body(op["body"], list(params), self))
        return xmap(fn, in_axes=dsl.decode_spec(op["in_axes"], strings=False),
                    out_axes=dsl.decode_spec(op["out_axes"], strings=False),
                    axis_sizes=op.get("axis_sizes") or {})(*v)

    def op_vmap(self, op, v, env):
        def fn(*params):
            return dsl.outputs(op["out"], dsl.run_body(op["body"], list(params), self))
        return jax.vmap(fn, in_axes=tuple(op["in_dims"]), axis_name=op["axis_name"])(*v)

    def op_grad(self, op, v, env):
        outer = list(env)
        n = len(v)

        def fn(*params):
            e = dsl.run_body(op["body"], outer + list(params), self)
            return e[op["ret"]]

        red = tuple(op.get("reduce", ()))

        def reduce(gs):
            return tuple(lax.psum(g, red) for g in gs) if red else tuple(gs)

        mode = op["mode"]
        argnums = tuple(range(n))
        if mode == "grad":
            return reduce(jax.grad(fn, argnums=argnums)(*v))
        if mode == "vg":
            val, gs = jax.value_and_grad(fn, argnums=argnums)(*v)
            return (val,) + reduce(gs)
        if mode == "vjp":
            out, pb = jax.vjp(fn, *v)
            return (out,) + reduce(pb(jnp.cos(out) + 0.5))
        if mode == "jvp":
            out, t = jax.jvp(fn, tuple(v), tuple(jnp.cos(p) + 0.5 for p in v))
            return (out, t)
        if mode == "remat":
            return reduce(jax.grad(jax.checkpoint(fn), argnums=argnums)(*v))
        if mode == "linearize":
            out, f_jvp = jax.linearize(fn, *v)
            return (out, f_jvp(*[jnp.cos(p) + 0.5 for p in v]))
        if mode in ("jacrev", "jacfwd"):
            return tuple(getattr(jax, mode)(fn, argnums=argnums)(*v))
        if mode == "hessian":
            return (jax.hessian(fn)(v[0]),)
        if mode == "grad2":
            return (jax.grad(lambda p: (jax.grad(fn)(p) * jnp.sin(p)).sum())(v[0]),)
        if mode == "lt":
            ct = jnp.cos(fn(*v)) + 0.5
            return reduce(jax.linear_transpose(fn, *v)(ct))
        raise ValueError(mode)

    op_xform = op_grad   # the rest of the derivative family (programs.cat_transform)



@jax.custom_vjp
def _cvjp(x):
    return jnp.sin(x)


_cvjp.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (2 * g * jnp.cos(x),))


@jax.custom_jvp
def _cjvp(x):
    return jnp.sin(x)


_cjvp.defjvp(lambda primals, tangents: (jnp.sin(primals[0]),
                                        2 * jnp.cos(primals[0]) * tangents[0]))
_CUSTOM = {"cvjp": _cvjp, "cjvp": _cjvp}

def flatten_like(tagged, value) -> list:
    """The leaves of ``value`` in the document order of the tagged tree ``tagged``."""
    if isinstance(tagged, dict) and ("tuple" in tagged or "list" in tagged):
        kids = tagged.get("tuple", tagged.get("list"))
        return [x for t, c in zip(kids, value) for x in flatten_like(t, c)]
    if isinstance(tagged, dict) and "dict" in tagged:
        return [x for k, t in tagged["dict"] for x in flatten_like(t, value[k])]
    return [value]


def run_program(prog: dict, arrays: dict) -> dict:
    be = JaxBackend()
    named = []

    def fn(*args):
        flat = flatten_like(prog["args"], args)
        env = dsl.run_body(prog["body"], list(flat), be)
        res = dsl.outputs(prog["out"], env)
        named[:] = [_named_shape(x) for x in flatten_like(prog["out"], res)]
        return res

    args = dsl.build_args(prog, jnp.asarray)
    try:
        res = xmap(fn, in_axes=dsl.decode_spec(prog["in_axes"], strings=False),
                   out_axes=dsl.decode_spec(prog["out_axes"], strings=False),
                   axis_sizes=prog.get("axis_sizes") or {})(*args)
        outs = [np.asarray(r) for r in flatten_like(prog["out"], res)]
    except Exception as e:  # noqa: BLE001 - a rejection is a result
        return {"status": "rejected", "exc": type(e).__name__, "msg": str(e)[:300]}
    rec = []
    for j, o in enumerate(outs):
        arrays[f"{prog['id']}__{j}"] = o
        rec.append({"shape": list(o.shape), "dtype": str(o.dtype),
                    "named": named[j] if j < len(named) else None})
    return {"status": "ok", "outs": rec}


def main(argv) -> int:
    corpus_path, out_json, out_npz = argv[1:4]
    corpus = dsl.load(corpus_path)
    arrays: dict = {}
    results = {}
    t0 = time.time()
    for prog in corpus:
        results[prog["id"]] = run_program(prog, arrays)
        jax.clear_caches() if len(results) % 500 == 0 else None
    np.savez(out_npz, **arrays)
    with open(out_json, "w") as f:
        json.dump({"jax": jax.__version__, "seconds": time.time() - t0,
                   "results": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
