"""``torch.nn.functional`` ops that fold the named dims into the batch dim (pooling, conv,
``F.pad`` in its non-constant modes, ``cross_entropy`` / ``nll_loss``) on named values with
an empty positional dim equal the loop over the named indices.  The fold used
``reshape(-1, ...)``, which torch refuses where another dim is empty ("cannot reshape tensor
of 0 elements into shape [-1, 0, 8] because the unspecified dimension size -1 can be any
value"): a ShapeError for calls each instance makes.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx


@pytest.mark.parametrize("call, shapes", [
    (lambda x: F.adaptive_avg_pool1d(x, 5), [(2, 0, 8)]),
    (lambda x: F.adaptive_avg_pool1d(x, 5), [(2, 3, 0, 8)]),
    (lambda x: F.pad(x, (1, 2), mode="circular"), [(2, 0, 8)]),
    (lambda x, t: F.cross_entropy(x, t, reduction="none"), [(2, 3, 5, 0), (2, 3, 0)]),
    (lambda x, t: F.cross_entropy(x, t), [(2, 3, 5, 0), (2, 3, 0)]),
], ids=["pool-unbatched", "pool-batched", "pad-circular", "cross-entropy-none",
        "cross-entropy-mean"])
def test_folded_nn_ops_with_an_empty_positional_dim_match_the_loop(call, shapes):
    torch.manual_seed(0)
    args = [torch.randn(s) if i == 0 else torch.zeros(s, dtype=torch.long)
            for i, s in enumerate(shapes)]
    got = call(*[nx.named(a, 'N ...') for a in args])
    want = torch.stack([call(*[a[i] for a in args]) for i in range(2)])
    assert got.named_shape == {'N': 2}
    torch.testing.assert_close(nx.positional(got, 'N ...'), want, equal_nan=True)
