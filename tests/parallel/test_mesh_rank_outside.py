"""An xmap mapping axes to a mesh that leaves out the calling rank raises a clear
AxisResourceError on that rank (was: a raw TypeError from DeviceMesh.get_coordinate()
being None), while the mesh's own ranks compute it.  Run on 4 gloo ranks: this file is
also the worker script (``__main__``).
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _ranks import launch, run_rank  # noqa: E402

import named_axes as nx  # noqa: E402


def _scenario(rank, results):
    import numpy as np
    from named_axes import parallel as P

    f = nx.xmap(lambda x: nx.lax.psum(x, "i"), in_axes=["i", ...], out_axes=[...],
                axis_resources={"i": "x"})
    for devices in ([0, 1], [1, 3]):
        try:
            with P.Mesh(np.array(P.devices())[devices], ("x",)):
                got = f(torch.arange(8.0)).item()
        except nx.AxisResourceError as e:
            got = str(e)
        results[str(devices)] = got


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_an_xmap_on_a_rank_outside_the_mesh_raises(tmp_path):
    ranks = launch(os.path.abspath(__file__), 4, tmp_path, timeout=300)
    for devices in ([0, 1], [1, 3]):
        for rank, res in enumerate(ranks):
            got = res[str(devices)]
            if rank in devices:
                assert got == 28.0
            else:
                assert f"rank {rank}, which is not in the mesh" in got, got
                assert str(devices) in got and "'i': ('x',)" in got, got


if __name__ == "__main__":
    run_rank([_scenario])
