"""Show programs of a corpus by id: the program, JAX's result and named_axes's runs.

    NX_ORACLE_N=2000 .venv/bin/python tests/oracle/show.py p0_01372 [...]

(reads the JAX results from tests/oracle/.cache; run make test-oracle first)
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import compare  # noqa: E402
import oracle_programs as programs  # noqa: E402
import torch_interp  # noqa: E402


def main(ids):
    corpus = {p["id"]: p for p in programs.generate(int(os.environ.get("NX_ORACLE_N", "2000")),
                                                    int(os.environ.get("NX_ORACLE_SEED", "0")))}
    results, arrays = {}, {}
    for js in glob.glob(os.path.join(os.path.dirname(__file__), ".cache", "*[0-9a-f].json")):
        results.update(json.load(open(js))["results"])
        arrays.update(dict(np.load(js[:-5] + ".npz")))
    for i in ids:
        p = corpus[i]
        print(f"== {i} ({p['cat']}) axes={p['axes']} axis_sizes={p['axis_sizes']}")
        print("arrays:", [(a["shape"], a["dtype"]) for a in p["arrays"]])
        print("in_axes:", p["in_axes"], "\nout_axes:", p["out_axes"])
        print("body:", json.dumps(p["body"]), "\nout:", p["out"])
        j = results.get(i)
        print("JAX:", j)
        v = torch_interp.run(p)
        print("named_axes:", v.get("status"), v.get("exc", ""), v.get("msg", ""))
        if j:
            for d in compare.vs_jax(p, j, arrays, v):
                print("  vs JAX:", d.kind, d.msg)
        for r in p["resources"]:
            for d in compare.vs_vectorized(r, torch_interp.run(p, r), v):
                print("  ", d.where, d.kind, d.msg)


if __name__ == "__main__":
    main(sys.argv[1:])
