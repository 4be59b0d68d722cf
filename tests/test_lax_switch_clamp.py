"""nx.lax.switch and nx.lax.clamp, as JAX 0.4.30's (values and derivatives measured
there): switch clamps its index into range and selects per instance for a named index;
clamp takes (min, x, max), max wins where min > max, bounds have shape () or x's and x's
dtype, and no derivative flows at a tie."""
import pytest
import torch

import named_axes as nx

BR = [lambda x: x, lambda x: x * 10, lambda x: x * 100]


@pytest.mark.parametrize("index,want", [(-1, 1.), (0, 1.), (1, 10.), (5, 100.),
                                        (torch.tensor(2, dtype=torch.int32), 100.)])
def test_switch_clamps_the_index(index, want):
    assert nx.lax.switch(index, BR, torch.tensor(1.)).item() == want


def test_switch_per_instance_index_and_its_gradient():
    f = nx.xmap(lambda i, x: nx.lax.switch(i, BR, x), in_axes=(['i'], [...]),
                out_axes=['i', ...])
    got = f(torch.tensor([0, 2, 1, 7, -3]), torch.ones(2))
    assert torch.equal(got, torch.tensor([[1.] * 2, [100.] * 2, [10.] * 2, [100.] * 2, [1.] * 2]))
    g = nx.xmap(lambda x: nx.grad(lambda x: nx.lax.switch(
        nx.lax.axis_index('i') - 1, [lambda v: v * v, lambda v: v * 3, torch.sin], x))(x),
        in_axes=['i', ...], out_axes=['i', ...])(torch.arange(5.))
    assert torch.allclose(g, torch.tensor([0., 2., 3., -0.9899925, -0.6536436]))   # JAX


def test_switch_refusals():
    with pytest.raises(TypeError, match="switch: index"):          # JAX: TypeError
        nx.lax.switch(1.0, BR, torch.tensor(1.))
    with pytest.raises(ValueError, match="switch: branches is empty"):   # JAX: ValueError
        nx.lax.switch(0, [], torch.tensor(1.))
    with pytest.raises(TypeError, match="identical types"):         # JAX: TypeError
        nx.lax.switch(torch.tensor(1), [lambda x: x, lambda x: torch.ones(2)], torch.tensor(1.))
    assert nx.lax.switch(1, BR, operand=torch.tensor(1.)).item() == 10


def test_clamp_values():
    x = torch.tensor([-1., 0.5, 2., 5.])
    assert torch.equal(nx.lax.clamp(0., x, 1.), torch.tensor([0., 0.5, 1., 1.]))
    assert torch.equal(nx.lax.clamp(3., x, 1.), torch.ones(4))       # JAX: max wins
    assert torch.equal(nx.lax.clamp(0, torch.arange(3), 1), torch.tensor([0, 1, 1]))
    got = nx.xmap(lambda lo, x: nx.lax.clamp(lo, x, 5.), in_axes=(['i'], ['j', ...]),
                  out_axes=['i', 'j', ...])(torch.tensor([0., 2.]), torch.arange(6.).reshape(3, 2))
    assert torch.equal(got, torch.tensor([[[0., 1.], [2., 3.], [4., 5.]],
                                          [[2., 2.], [2., 3.], [4., 5.]]]))


def test_clamp_refusals():
    x = torch.tensor([-1., 0.5, 2.])
    with pytest.raises(ValueError, match=r"clamp: min needs positional shape \(\) or x's"):
        nx.lax.clamp(torch.zeros(2), x, 1.)
    with pytest.raises(TypeError, match="clamp: min, x and max need one dtype"):
        nx.lax.clamp(0., x.half(), 1.)                                # JAX: TypeError


def test_clamp_derivatives_are_jaxs():
    x = torch.tensor([-1., 0., 0.5, 1., 2.])
    g = torch.func.grad(lambda lo, x, hi: nx.lax.clamp(lo, x, hi).sum(), argnums=(0, 1, 2))
    for lo in (torch.zeros(5), torch.tensor([0., 2., 0., 0., 0.])):
        glo, gx, ghi = g(lo, x, torch.ones(5))
        assert torch.equal(glo, torch.tensor([1., 0., 0., 0., 0.]))
        assert torch.equal(gx, torch.tensor([0., 0., 1., 0., 0.]))
        assert torch.equal(ghi, torch.tensor([0., 0., 0., 0., 1.]))
