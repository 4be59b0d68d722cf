"""nx.vjp / nx.linear_transpose whose cotangent carries a named axis the output and the
primals lack, of a function that psums (pmeans) a value replicated along that axis:
JAX 0.4.30 transposes psum to psum per instance (vjp(lambda v: psum(v, 'i'), x)[1](c)
is c summed over 'i' in every instance: [[3, 5, 7], [3, 5, 7]] for c = [[0, 1, 2],
[3, 4, 5]]), where the pullback, mapped over the cotangent's axis, gave each instance
size * its own c ([[0, 2, 4], [6, 8, 10]]: a silent wrong answer).  The pullback cannot
transpose that per instance, so it refuses, naming the axis; given primals carrying the
axis it gives JAX's answer."""
import pytest
import torch

import named_axes as nx

X = torch.tensor([1., 2., 3.])
C = torch.arange(6.).reshape(2, 3)


def xm(f):
    return nx.xmap(f, in_axes=['i', ...], out_axes=['i', ...])(C)


@pytest.mark.parametrize("red", [nx.lax.psum, nx.lax.pmean])
def test_refused_not_mapped(red):
    with pytest.raises(ValueError, match="cotangent carries axis 'i'.*replicated along 'i'"):
        xm(lambda c: nx.vjp(lambda v: red(v, 'i'), X)[1](c)[0])
    with pytest.raises(ValueError, match="cotangent carries axis 'i'"):
        xm(lambda c: nx.linear_transpose(lambda v: red(v, 'i'), X)(c)[0])


def test_primals_carrying_the_axis_give_jaxs_answer():
    got = xm(lambda c: nx.vjp(lambda v: nx.lax.psum(v, 'i'), X + 0 * c)[1](c)[0])
    torch.testing.assert_close(got, torch.tensor([[3., 5., 7.]] * 2))       # JAX 0.4.30
    got = xm(lambda c: nx.vjp(lambda v: nx.lax.pmean(v, 'i'), X + 0 * c)[1](c)[0])
    torch.testing.assert_close(got, torch.tensor([[1.5, 2.5, 3.5]] * 2))


def test_what_maps_still_maps():
    # no collective over the axis: the pullback per instance, as JAX's
    got = xm(lambda c: nx.vjp(lambda v: torch.sin(v) * 2, X)[1](c)[0])
    torch.testing.assert_close(got, torch.cos(X) * 2 * C)
    got = xm(lambda c: nx.vjp(lambda v: v * nx.lax.axis_index('i'), X)[1](c)[0])
    torch.testing.assert_close(got, torch.tensor([[0., 0., 0.], [3., 4., 5.]]))
    # jacrev maps over its own basis axis
    jac = nx.xmap(lambda c: nx.jacrev(lambda v: nx.lax.psum(v, 'i'))(X), in_axes=['i', ...],
                  out_axes=[...])(C)
    torch.testing.assert_close(jac, 2 * torch.eye(3))
