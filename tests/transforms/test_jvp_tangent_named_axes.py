"""nx.jvp / nx.linearize with a tangent carrying a named axis its primal lacks: per
instance, as JAX 0.4.30's jvp inside xmap (values measured there).  nx.jvp refused it
('the value has named axis 'i' that the primal/output lacks'); linearize mapped its
jvp_fn over the axis, so psum over it summed each instance's copies (a wrong answer, or
an unplaced-axis error) and axis_index raised torch's raw permute error."""
import torch

import named_axes as nx

X = torch.tensor([1., 2., 3.])
T = torch.arange(6.).reshape(2, 3)


def xm(f, out_axes):
    return nx.xmap(f, in_axes=['i', ...], out_axes=out_axes)(T)


def test_jvp_tangent_with_an_extra_axis():
    out, tan = xm(lambda t: nx.jvp(lambda v: torch.sin(v) * 2, (X,), (t,)),
                  ([...], ['i', ...]))
    torch.testing.assert_close(out, torch.sin(X) * 2)            # the primal lacks 'i'
    torch.testing.assert_close(tan, torch.cos(X) * 2 * T)
    out, tan = xm(lambda t: nx.jvp(lambda v, w: v * w, (X, X), (t, torch.ones(3))),
                  ([...], ['i', ...]))
    torch.testing.assert_close(tan, torch.tensor([[1., 4., 9.], [4., 10., 18.]]))


def test_jvp_collectives_over_the_tangents_axis():
    out, tan = xm(lambda t: nx.jvp(lambda v: nx.lax.psum(v, 'i'), (X,), (t,)), ([...], [...]))
    torch.testing.assert_close(out, 2 * X)                       # JAX: [2, 4, 6]
    torch.testing.assert_close(tan, torch.tensor([3., 5., 7.]))  # JAX: t0 + t1
    out, tan = xm(lambda t: nx.jvp(lambda v: v * nx.lax.axis_index('i'), (X,), (t,)),
                  (['i', ...], ['i', ...]))
    torch.testing.assert_close(out, torch.tensor([[0., 0., 0.], [1., 2., 3.]]))
    torch.testing.assert_close(tan, torch.tensor([[0., 0., 0.], [3., 4., 5.]]))


def test_linearize_collectives_over_the_tangents_axis():
    def lin(f):
        return lambda t: nx.linearize(f, X)[1](t)
    torch.testing.assert_close(xm(lin(lambda v: nx.lax.psum(v, 'i')), [...]),
                               torch.tensor([3., 5., 7.]))
    torch.testing.assert_close(xm(lin(lambda v: v * nx.lax.axis_index('i')), ['i', ...]),
                               torch.tensor([[0., 0., 0.], [3., 4., 5.]]))
    torch.testing.assert_close(xm(lin(torch.sin), ['i', ...]), torch.cos(X) * T)


def test_has_aux_keeps_the_primals_named_shape():
    out, tan, aux = xm(lambda t: nx.jvp(lambda v: (v * 3, v.sum()), (X,), (t,), has_aux=True),
                       ([...], ['i', ...], [...]))
    assert aux.item() == 6. and torch.equal(out, X * 3) and torch.equal(tan, T * 3)
