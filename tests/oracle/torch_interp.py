"""Run an oracle program under named_axes (the pytest process's side).

The same DSL as ``jax_runner.py``, mapped onto ``nx.xmap`` / ``nx.lax`` / torch:
named reductions use the library's own spellings (``x.sum(('b', 0))``, ``nx.sum(x,
dim=...)``, ``nx.amax(x, axis=...)``, ``x.max('b')[0]``), braced einsum is
``nx.einsum('n{b,k},{k,m}->n{b,m}', ...)``, gradients are ``nx.grad`` /
``nx.value_and_grad`` / ``nx.vjp`` with ``reduce_axes=``, and ``nx.jvp``; slicing and
control flow (``dsl.LaxOps``) are ``nx.lax``'s functions of ``jax.lax``'s names.

:func:`run` returns ``{"status": "ok", "outs": [np.ndarray...], "named": [...]}`` or
``{"status": "rejected", "exc": ..., "named_axis_error": bool}``.  ``resources`` (a
program's ``resources`` entry) runs the program with ``axis_resources``: ``["loop", k]``
is ``nx.SerialLoop(k)``, a string is a mesh axis of a one-device ``('x', 'y')`` mesh.
"""
from __future__ import annotations

import numpy as np
import torch

import named_axes as nx
from named_axes import lax

import dsl

_RED = {"sum": (nx.sum, "sum", torch.sum), "mean": (nx.mean, "mean", torch.mean),
        "amax": (nx.amax, "amax", torch.amax), "amin": (nx.amin, "amin", torch.amin)}


def _axes(a):
    return tuple(a) if isinstance(a, list) else a


def _names(v):
    ns = getattr(v, "named_shape", None)
    return None if ns is None else {str(k): int(s) for k, s in dict(ns).items()}


class TorchBackend(dsl.LaxOps):
    lax = lax

    def op_un(self, op, v, env):
        x = v[0]
        return {"sin": torch.sin, "tanh": torch.tanh, "neg": torch.neg, "abs": torch.abs,
                "square": lambda t: t * t}[op["f"]](x)

    def op_custom(self, op, v, env):
        """sin with a derivative rule of its own (twice the true one), so a rule that is
        not used shows: ``cvjp`` by custom_vjp, ``cjvp`` by custom_jvp."""
        return _CUSTOM[op["f"]](v[0])

    def op_bin(self, op, v, env):
        # a fori_loop index with Python bounds is a Python int here (JAX: an int32 scalar)
        a, b = (x if isinstance(x, (torch.Tensor, nx.NamedTensor)) else
                torch.tensor(x, dtype=torch.int32) for x in v)
        return {"add": torch.add, "sub": torch.sub, "mul": torch.mul,
                "maximum": torch.maximum}[op["f"]](a, b)

    def op_scale(self, op, v, env):
        return v[0] * op["c"]

    def op_cast(self, op, v, env):
        return v[0].to(torch.float32)

    def op_reduce(self, op, v, env):
        x = v[0]
        axes = tuple(op["axes"])
        fn, meth, tfn = _RED[op["f"]]
        one = axes[0] if len(axes) == 1 else axes
        style = op["style"]
        if style == "method":
            return getattr(x, meth)(one)
        if style == "nx":
            return fn(x, dim=one)
        if style == "axis":
            return fn(x, axis=one)
        if style == "torch":
            return tfn(x, dim=axes)
        if style == "maxpair":
            return (x.max(one) if op["f"] == "amax" else x.min(one))[0]
        raise ValueError(style)

    def op_coll(self, op, v, env):
        return getattr(lax, op["f"])(v[0], _axes(op["axes"]))

    def op_pdot(self, op, v, env):
        pc = tuple(tuple(p) for p in op["pos_contract"])
        return lax.pdot(v[0], v[1], _axes(op["axes"]), pos_contract=pc)

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
        return nx.einsum(op["spec"], *v)

    def op_one_hot(self, op, v, env):
        return nx.one_hot(v[0], op["n"], dim=op["dim"])

    def op_xmap(self, op, v, env):
        def fn(*params):
            return dsl.outputs(op["out"], dsl.run_body(op["body"], list(params), self))
        return nx.xmap(fn, in_axes=dsl.decode_spec(op["in_axes"]),
                       out_axes=dsl.decode_spec(op["out_axes"]),
                       axis_sizes=op.get("axis_sizes") or None)(*v)

    def op_vmap(self, op, v, env):
        def fn(*params):
            return dsl.outputs(op["out"], dsl.run_body(op["body"], list(params), self))
        return nx.vmap(fn, in_dims=tuple(op["in_dims"]), axis_name=op["axis_name"])(*v)

    def op_grad(self, op, v, env):
        outer = list(env)
        n = len(v)

        def fn(*params):
            return dsl.run_body(op["body"], outer + list(params), self)[op["ret"]]

        red = tuple(op.get("reduce", ()))
        argnums = tuple(range(n))
        mode = op["mode"]
        if mode == "grad":
            return tuple(nx.grad(fn, argnums=argnums, reduce_axes=red)(*v))
        if mode == "vg":
            val, gs = nx.value_and_grad(fn, argnums=argnums, reduce_axes=red)(*v)
            return (val,) + tuple(gs)
        if mode == "vjp":
            out, pb = nx.vjp(fn, *v, reduce_axes=red)
            return (out,) + tuple(pb(torch.cos(out) + 0.5))
        if mode == "jvp":
            out, t = nx.jvp(fn, tuple(v), tuple(torch.cos(p) + 0.5 for p in v))
            return (out, t)
        if mode == "remat":
            return tuple(nx.grad(nx.checkpoint(fn), argnums=argnums, reduce_axes=red)(*v))
        if mode == "linearize":
            out, f_jvp = nx.linearize(fn, *v)
            return (out, f_jvp(*[torch.cos(p) + 0.5 for p in v]))
        if mode in ("jacrev", "jacfwd"):
            return tuple(getattr(nx, mode)(fn, argnums=argnums)(*v))
        if mode == "hessian":
            return (nx.hessian(fn)(v[0]),)
        if mode == "grad2":
            return (nx.grad(lambda p: (nx.grad(fn)(p) * torch.sin(p)).sum())(v[0]),)
        if mode == "lt":
            ct = torch.cos(fn(*v)) + 0.5
            return tuple(nx.linear_transpose(fn, *v, reduce_axes=red)(ct))
        raise ValueError(mode)

    op_xform = op_grad   # the rest of the derivative family (programs.cat_transform)



@nx.custom_vjp
def _cvjp(x):
    return torch.sin(x)


_cvjp.defvjp(lambda x: (torch.sin(x), x), lambda x, g: (2 * g * torch.cos(x),))


@nx.custom_jvp
def _cjvp(x):
    return torch.sin(x)


_cjvp.defjvp(lambda primals, tangents: (torch.sin(primals[0]),
                                        2 * torch.cos(primals[0]) * tangents[0]))
_CUSTOM = {"cvjp": _cvjp, "cjvp": _cjvp}

def flatten_like(tagged, value) -> list:
    if isinstance(tagged, dict) and ("tuple" in tagged or "list" in tagged):
        kids = tagged.get("tuple", tagged.get("list"))
        if not isinstance(value, (tuple, list)) or len(value) != len(kids):
            raise TypeError(f"output structure {type(value).__name__} != {tagged}")
        return [x for t, c in zip(kids, value) for x in flatten_like(t, c)]
    if isinstance(tagged, dict) and "dict" in tagged:
        return [x for k, t in tagged["dict"] for x in flatten_like(t, value[k])]
    return [value]


def _resources(res: dict) -> dict:
    return {n: nx.SerialLoop(r[1]) if isinstance(r, list) else r for n, r in res.items()}


def run(prog: dict, resources: dict | None = None, jit: bool = False,
        backend: str = "eager", compiled: bool = False, fill: float | None = None) -> dict:
    be = TorchBackend()
    named: list = []

    def fn(*args):
        env = dsl.run_body(prog["body"], flatten_like(prog["args"], args), be)
        res = dsl.outputs(prog["out"], env)
        named[:] = [_names(x) for x in flatten_like(prog["out"], res)]
        return res

    args = dsl.build_args(prog, torch.from_numpy, fill)
    kw = {}
    if resources:
        kw["axis_resources"] = _resources(resources)
    try:
        f = nx.xmap(fn, in_axes=dsl.decode_spec(prog["in_axes"]),
                    out_axes=dsl.decode_spec(prog["out_axes"]),
                    axis_sizes=prog.get("axis_sizes") or None, **kw)
        if jit:   # traced once by make_fx, run from the graph (the second call: the cache)
            f = nx.jit(f, backend=backend)
            f(*args)
        if compiled:   # torch.compile(xmap(f), fullgraph=True): dynamo traces the program
            nx.enable_dynamo_matmul()   # programs may write `a @ b` (docs/guide.md §4)
            torch._dynamo.reset()
            f = torch.compile(f, fullgraph=True, backend="eager")
        if resources and any(isinstance(r, str) for r in resources.values()):
            mesh = nx.Mesh(np.array(nx.devices()[:1]).reshape(1, 1), ("x", "y"))
            with mesh:
                res = f(*args)
        else:
            res = f(*args)
        flat = flatten_like(prog["out"], res)
        outs = []
        for o in flat:
            if not isinstance(o, torch.Tensor) or isinstance(o, nx.NamedTensor):
                raise TypeError(f"xmap returned a {type(o).__name__}, not a plain tensor")
            outs.append(o.detach().numpy())
    except nx.NamedAxisError as e:
        return {"status": "rejected", "exc": type(e).__name__, "msg": str(e)[:300],
                "named_axis_error": True}
    except Exception as e:  # noqa: BLE001 - recorded, judged by the comparison
        return {"status": "rejected", "exc": type(e).__name__, "msg": str(e)[:300],
                "named_axis_error": False}
    return {"status": "ok", "outs": outs, "named": named}
