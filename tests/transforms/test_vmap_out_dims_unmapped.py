"""nx.vmap places an output that does not vary along the mapped axis at any out_dims, as
jax.vmap and the per-instance loop do (``torch.stack(outs, out_dim)``).  Was: the plain
path (no axis name, plain inputs) handed out_dims to torch.func.vmap, which in torch 2.13
expands such an output wrongly for out_dims other than 0 -- a RuntimeError about
'expanded size', or silently a garbage shape such as (34359738368, 4)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.randn(2, 4)
W = torch.randn(3, 4)

OUTPUTS = {
    "passed through": lambda a, b: b,
    "computed": lambda a, b: b * 2,
    "new": lambda a, b: torch.ones(3, 4),
    "1-d": lambda a, b: b[0],
    "0-d": lambda a, b: b.sum(),
}
PATHS = {"plain": {}, "named": {"axis_name": "i"}, "chunked": {"chunk_size": 1}}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("out_dim", [1, -1, 2])
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_unmapped_output_at_out_dims_equals_the_loop(name, out_dim, path):
    f = OUTPUTS[name]
    per_instance = [f(x, W) for x in X]
    rank = per_instance[0].dim() + 1
    vm = nx.vmap(f, in_dims=(0, None), out_dims=out_dim, **PATHS[path])
    if not -rank <= out_dim < rank:   # (jax.vmap refuses it too)
        with pytest.raises(nx.AxisSpecError, match=f"out_dims={out_dim}"):
            vm(X, W)
        return
    torch.testing.assert_close(vm(X, W), torch.stack(per_instance, out_dim))


def test_mixed_outputs_and_out_dims_containers():
    f = lambda a, b: (a * 2, {"w": b, "s": b.sum()})   # noqa: E731
    got = nx.vmap(f, in_dims=(0, None), out_dims=(1, {"w": -1, "s": 0}))(X, W)
    torch.testing.assert_close(got[0], (X * 2).T)
    torch.testing.assert_close(got[1]["w"], W[..., None].expand(3, 4, 2))
    torch.testing.assert_close(got[1]["s"], W.sum().expand(2))
