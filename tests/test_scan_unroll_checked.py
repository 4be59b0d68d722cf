"""nx.lax.scan checks ``unroll`` as JAX 0.4.30 does (a bool or a positive int; it changes
nothing here, loops run unrolled): 0, -1, 1.5 or None were silently ignored."""
import pytest
import torch

import named_axes as nx


@pytest.mark.parametrize("unroll", [0, -1, 1.5, None])
def test_bad_unroll_refused(unroll):
    with pytest.raises(ValueError, match="unroll must be a bool or a positive int"):
        nx.lax.scan(lambda c, a: (c + a, c), torch.tensor(0.), torch.tensor([1., 2.]),
                    unroll=unroll)


@pytest.mark.parametrize("unroll", [1, 2, True, False])
def test_good_unroll_taken(unroll):
    c, ys = nx.lax.scan(lambda c, a: (c + a, c), torch.tensor(0.), torch.tensor([1., 2.]),
                        unroll=unroll)
    assert c.item() == 3. and ys.tolist() == [0., 1.]
