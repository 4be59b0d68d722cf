"""Two "nodes" of 2 processes each on 127.0.0.1: two ``torchrun`` launchers with
``--nnodes=2 --node-rank=0/1`` meeting at one rendezvous (the command in
docs/parallelism.md's Multi-node section), bounded by timeouts.  On the 2x2 mesh
``('dp', 'mp')`` built from the 4 global ranks, ``dp`` spans the nodes and ``mp`` stays
inside one; the tutorial's loss and gradients equal the one-process run, and a
sharded-from-the-start value made from each process's rows sums to the right total.

This file is also the rank worker: ``torchrun ... test_multinode.py OUT``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_two_nodes_of_two_processes(tmp_path):
    import torch.distributed as dist

    from _ranks import free_port

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    port = free_port()
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               "--nproc-per-node=2", f"--node-rank={node}", "--master-addr=127.0.0.1",
               f"--master-port={port}", os.path.abspath(__file__), str(tmp_path)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=dict(os.environ, OMP_NUM_THREADS="1")))
    errors = []
    for node, p in enumerate(procs):
        try:
            _, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"node {node}'s launcher did not finish in 300 s")
        if p.returncode:
            errors.append(f"node {node} (rc={p.returncode}):\n{err[-3000:]}")
    ranks = []
    for r in range(4):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote nothing\n" + "\n".join(errors)
        res = json.loads(path.read_text())
        assert "exception" not in res, f"rank {r}:\n{res['exception']}"
        ranks.append(res)
    assert not errors, "\n".join(errors)
    assert [r["node"] for r in ranks] == [0, 0, 1, 1]   # node-major rank order
    for res in ranks:
        assert res["world"] == 4 and res["local_world"] == 2
        assert res["tutorial_err"] < 1e-10
        assert res["local_rows"] == 2 and res["total"] == float(sum(range(16)))


def _scenario(rank, results):
    import numpy as np
    import torch

    import named_axes as nx
    from named_axes import parallel as P

    sys.path.insert(0, HERE)
    import _tutorial_program as T
    from _ranks import err

    results["node"] = int(os.environ["GROUP_RANK"])
    results["world"] = int(os.environ["WORLD_SIZE"])
    results["local_world"] = int(os.environ["LOCAL_WORLD_SIZE"])
    d = T.data(seed=3)
    ref = T.loss_and_grads(T.loss, *d)
    mesh = P.Mesh(np.array(P.devices()).reshape(2, 2), ("dp", "mp"))
    with mesh:
        out = T.loss_and_grads(T.xmapped({"batch": "dp", "hidden": "mp"}), *d)
    results["tutorial_err"] = err(ref, out)
    # each process holds only its rows of a batch sharded over dp (across the nodes)
    sharding = nx.NamedSharding(mesh, {"b": "dp"})
    rows = sharding.local_index((8, 2), names=("b", None))[0]
    local = torch.arange(16.0).reshape(8, 2)[rows]
    x = nx.make_array_from_process_local_data(sharding, local, axes=["b", ...])
    with mesh:
        total = nx.xmap(lambda v: nx.lax.psum(v.sum(), "b"), in_axes=["b", ...],
                        out_axes=[...], axis_resources={"b": "dp"})(x)
    results["local_rows"] = local.shape[0] // 2
    results["total"] = float(nx.device_get(total))


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    from _ranks import run_rank

    run_rank([_scenario])
