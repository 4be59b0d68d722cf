"""psum, pmean, pmax and pmin keep None leaves of a pytree (JAX 0.4.30: an empty
subtree; psum((x, None), 'i') -> (sum, None)); torch's pytree makes None a leaf, which
they refused ('must be a tensor ... got NoneType')."""
import pytest
import torch

import named_axes as nx


@pytest.mark.parametrize("red", [nx.lax.psum, nx.lax.pmean, nx.lax.pmax, nx.lax.pmin])
def test_none_leaves_are_kept(red):
    x = torch.tensor([[1., 2., 3.], [4., 5., 6.]])
    got = nx.xmap(lambda v: red({'a': v, 'b': None, 'c': (None,)}, 'i'), in_axes=['i', ...],
                  out_axes={'a': [...], 'b': None, 'c': (None,)})(x)
    assert got['b'] is None and got['c'] == (None,)
    torch.testing.assert_close(got['a'], nx.xmap(lambda v: red(v, 'i'), in_axes=['i', ...],
                                                 out_axes=[...])(x))
