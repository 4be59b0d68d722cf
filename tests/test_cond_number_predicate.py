"""nx.lax.cond takes a number predicate as JAX 0.4.30 does (``pred != 0``: booleans,
integers and floats; complex refused): a float tensor predicate was refused with
'the predicate must be a boolean scalar', and an integer tensor one with no named axis
raised a raw AttributeError ('Tensor' object has no attribute '_names').  A per-instance float predicate selects per
instance."""
import pytest
import torch

import named_axes as nx


def test_float_predicates():
    assert nx.lax.cond(torch.tensor(0.5), lambda: 1., lambda: 2.) == 1.   # JAX: 1.0
    assert nx.lax.cond(torch.tensor(0.), lambda: 1., lambda: 2.) == 2.
    assert nx.lax.cond(torch.tensor(2), lambda: 1., lambda: 2.) == 1.
    assert nx.lax.cond(torch.tensor(0, dtype=torch.int32), lambda: 1., lambda: 2.) == 2.
    f = nx.xmap(lambda p: nx.lax.cond(p, lambda: torch.tensor(1.), lambda: torch.tensor(2.)),
                in_axes=['i'], out_axes=['i'])
    assert torch.equal(f(torch.tensor([0., -3., 0.25])), torch.tensor([2., 1., 1.]))


def test_complex_and_while_loop_predicates_still_refused():
    with pytest.raises(TypeError, match="boolean scalar"):   # JAX: TypeError
        nx.lax.cond(torch.tensor(1j), lambda: 1., lambda: 2.)
    with pytest.raises(TypeError, match="boolean scalar"):   # JAX: cond_fun must be boolean
        nx.lax.while_loop(lambda c: c * 1.0, lambda c: c - 1, torch.tensor(3))
