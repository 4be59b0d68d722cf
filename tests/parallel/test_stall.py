"""A rank that never reaches a collective: the others wait the process group's timeout
(5 s here), then raise an AxisResourceError naming it -- not gloo's raw "Timed out
waiting ... for recv operation", and no hang.

This file is also the rank worker: ``torchrun ... test_stall.py OUT``.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_ranks_that_wait_name_the_rank_that_did_not_arrive(tmp_path):
    sys.path.insert(0, HERE)
    from _ranks import launch

    ranks = launch(os.path.abspath(__file__), 4, tmp_path, timeout=200)
    for r in range(3):
        got = ranks[r]
        assert got["error"] == "AxisResourceError", got
        msg = got["message"]
        assert "all-reduce (sum) over mesh dim 'x'" in msg, msg
        assert "ranks [3] did not arrive" in msg and "rank 3 is not in a collective" in msg, msg
        assert got["seconds"] < 30, got   # the 5 s timeout and a moment for the reports
    assert ranks[3]["error"] is None


def _main(out: str) -> None:
    import time
    from datetime import timedelta

    import numpy as np
    import torch
    import torch.distributed as dist

    import named_axes as nx

    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    f = nx.xmap(lambda v: nx.lax.psum(v, "i"), in_axes=["i", ...], out_axes=[...],
                axis_resources={"i": "x"})
    result = {"error": None}
    with nx.Mesh(np.array(nx.devices()), ("x",)):
        f(torch.ones(4))   # every rank: the input check passes once
        t = time.monotonic()
        try:
            if rank == 3:
                time.sleep(12)   # busy elsewhere, past the others' timeout and reports
            else:
                f(torch.ones(4))
        except Exception as e:  # noqa: BLE001 - recorded and judged by the test
            result = {"error": type(e).__name__, "message": str(e)}
        result["seconds"] = time.monotonic() - t
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
    sys.stdout.flush()
    os._exit(0)   # no destroy_process_group: the group saw a timeout


if __name__ == "__main__":
    _main(sys.argv[1])
