"""nx.vjp inside xmap with a cotangent carrying a named axis its output lacks.

JAX 0.4.30 takes such a cotangent per instance: an output lacking an axis the
computation met (a psum's) gets the sum of the instances' cotangents (psum transposes
to psum); one the computation never met is pulled back once per instance.  named_axes
refused both with ``the value has named axis 'b' that the primal/output lacks`` --
even where nx.grad's own broadcast of a differentiated input put the axis there.

Expected values measured with jax==0.4.30 (``.venv-jax``), e.g.::

    xmap(lambda x, w: vjp(lambda w: psum(jnp.sin(x * w), 'b'), w)[1](x)[0],
         (['b', ...], [...]), ['b', ...])
"""
import torch

import named_axes as nx
from named_axes import lax

X = torch.tensor([[1., 2., 3.], [4., 5., 6.]]) * 0.1
W = torch.tensor([1., 2., 3.])


def _run(body, out_axes=['b', ...]):
    return nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=out_axes)(X, W)


def test_cotangent_of_a_psum_is_summed():
    out = _run(lambda x, w: nx.vjp(lambda w: lax.psum(torch.sin(x * w), 'b'), w)[1](x)[0])
    want = torch.tensor([[0.04975, 0.128949, 0.167835], [0.184212, 0.189106, -0.122689]])
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


def test_output_without_the_axis_is_pulled_back_per_instance():
    out = _run(lambda x, w: nx.vjp(lambda w: torch.sin(w) * 2, w)[1](x)[0])
    want = torch.tensor([[0.10806, -0.166459, -0.593996], [0.432242, -0.416147, -1.187991]])
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


def test_reduce_axes_sums_the_per_instance_pullbacks():
    # JAX: psum(vjp(lambda w: jnp.sin(w) * 2, w)[1](x)[0], 'b')
    out = _run(lambda x, w: nx.vjp(lambda w: torch.sin(w) * 2, w, reduce_axes=('b',))[1](x)[0],
               [...])
    torch.testing.assert_close(out, torch.tensor([0.540302, -0.582606, -1.781986]),
                               rtol=1e-4, atol=1e-5)


def test_grad_of_a_pullback_of_a_psum():
    # the cotangent w is broadcast along 'b' by the outer grad
    out = _run(lambda x, w: nx.grad(lambda w: nx.vjp(
        lambda w: lax.psum(torch.sin(x * w), 'b'), w)[1](w)[0].sum())(w))
    want = torch.tensor([[0.465928, 0.392056, -0.372835], [0.343311, -0.387108, -2.053349]])
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
