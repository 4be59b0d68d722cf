"""A gradient's named shape is a function of the program, never of the data (issue 30
item 5; docs/guide.md §4).  JAX 0.4.30's xmap, run on the programs below:

    body = lambda w, c: jax.grad(lambda w: jax.lax.psum((w * c).sum(), 'j'))(w)
    xmap(body, in_axes=[[...], ['j', ...]], out_axes=['j', ...])(ones(3), c)   # 4 * c
    xmap(body, in_axes=[[...], ['j', ...]], out_axes=[...])(ones(3), c)
        # ValueError: vmap has mapped output (axis_name=j) but out_axes is None
        # for c = ones((4, 3)) and for c = randn(4, 3) alike

``VERDICTS`` is JAX's answer for more losses of ``w`` (replicated) and ``c`` (``{'j': 4}``):
"per_instance" where ``out_axes=[...]`` is refused (the gradient carries ``j``),
"replicated" where it is accepted, the same for ``c = ones`` and ``c = randn`` (JAX
0.4.30, jax.grad inside xmap, script in the commit that added this table).
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes import lax


def _body(w, c):
    return nx.grad(lambda w: nx.lax.psum((w * c).sum(), "j"))(w)


DATA = {"ones": lambda: torch.ones(4, 3), "random": lambda: torch.randn(4, 3)}


@pytest.mark.parametrize("data", sorted(DATA))
def test_per_instance_gradient_values_match_jax(data):
    c = DATA[data]()
    f = nx.xmap(_body, in_axes=[[...], ["j", ...]], out_axes=["j", ...])
    torch.testing.assert_close(f(torch.ones(3), c), 4 * c)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "nx.jit"])
@pytest.mark.parametrize("data", sorted(DATA))
def test_gradient_keeps_the_axis_whatever_the_data(data, jit):
    f = nx.xmap(_body, in_axes=[[...], ["j", ...]], out_axes=[...])
    f = nx.jit(f) if jit else f
    with pytest.raises(nx.AxisSpecError, match="named axis 'j'"):
        f(torch.ones(3), DATA[data]())


_P = [(i, (i + 1) % 4) for i in range(4)]
LOSSES = {
    "product": lambda w, c: lax.psum((w * c).sum(), "j"),
    "sum": lambda w, c: lax.psum((w + c).sum(), "j"),
    "square_of_sum": lambda w, c: lax.psum(((w + c) ** 2).sum(), "j"),
    "sum_over_constant": lambda w, c: lax.psum(((w + c) / 2.).sum(), "j"),
    "product_of_sums": lambda w, c: lax.psum(torch.sin(w).sum() * c.sum(), "j"),
    "per_instance_loss": lambda w, c: (w * c).sum(),
    "per_instance_sum": lambda w, c: (w + c).sum(),
    "psum_then_product": lambda w, c: (lax.psum(w * c, "j") * c).sum(),
    "pmean_of_replicated": lambda w, c: lax.pmean(torch.tanh(w).sum(), "j"),
    "all_gather": lambda w, c: lax.all_gather(w, "j").sum(),
    "ppermute_of_sum": lambda w, c: lax.psum(lax.ppermute(w + c, "j", _P).sum(), "j"),
    "axis_index": lambda w, c: lax.psum((w * lax.axis_index("j")).sum(), "j"),
    "where": lambda w, c: lax.psum(torch.where(c > 0, w, 2 * w).sum(), "j"),
    "max_with": lambda w, c: lax.psum(torch.maximum(w, c).sum(), "j"),
    "dot": lambda w, c: lax.psum(c @ w, "j"),
    "exp_of_sum": lambda w, c: lax.psum(torch.exp(w + c).sum(), "j"),
}
VERDICTS = {
    "product": "per_instance", "sum": "replicated", "square_of_sum": "per_instance",
    "sum_over_constant": "replicated", "product_of_sums": "per_instance",
    "per_instance_loss": "per_instance", "per_instance_sum": "replicated",
    "psum_then_product": "per_instance", "pmean_of_replicated": "replicated",
    "all_gather": "per_instance", "ppermute_of_sum": "replicated",
    "axis_index": "per_instance", "where": "per_instance", "max_with": "per_instance",
    "dot": "per_instance", "exp_of_sum": "per_instance",
}


def _verdict(loss, c, jit: bool) -> str:
    body = lambda w, c: nx.grad(lambda w: loss(w, c))(w)   # noqa: E731
    f = nx.xmap(body, in_axes=[[...], ["j", ...]], out_axes=[...])
    try:
        (nx.jit(f) if jit else f)(torch.ones(3), c)
    except nx.AxisSpecError as e:
        assert "named axis 'j'" in str(e)
        return "per_instance"
    return "replicated"


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "nx.jit"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_named_shape_follows_jax_on_any_data(name, jit):
    verdicts = {data: _verdict(LOSSES[name], make(), jit) for data, make in DATA.items()}
    assert verdicts == {"ones": VERDICTS[name], "random": VERDICTS[name]}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_values_do_not_depend_on_the_named_shape(name):
    """Placing 'j' in out_axes gives every instance JAX's gradient either way; where
    JAX's is replicated, every instance holds that one value."""
    c = torch.randn(4, 3)
    body = lambda w, c: nx.grad(lambda w: LOSSES[name](w, c))(w)   # noqa: E731
    per = nx.xmap(body, in_axes=[[...], ["j", ...]], out_axes=["j", ...])(torch.ones(3), c)
    assert per.shape == (4, 3)
    if VERDICTS[name] == "replicated":
        one = nx.xmap(body, in_axes=[[...], ["j", ...]], out_axes=[...])(torch.ones(3), c)
        torch.testing.assert_close(per, one.expand(4, 3))


def test_reduce_axes_gradient_carries_only_its_parameters_axes():
    """The tutorial network, per example, gradient of w2 summed over 'batch': JAX gives
    it w2's named shape {'hidden', 'classes'} (issue 30: it carried 'inputs' too)."""
    def example_loss(w1, w2, image, label):
        hidden = torch.relu(lax.pdot(image, w1, "inputs"))
        logits = lax.pdot(hidden, w2, "hidden")
        predictions = logits - nx.logsumexp(logits, "classes")
        targets = nx.one_hot(label, lax.psum(1, "classes"), dim="classes")
        return -lax.psum(targets * predictions, "classes")

    def body(w1, w2, images, labels):
        return nx.grad(example_loss, argnums=1, reduce_axes=("batch",))(w1, w2, images, labels)

    in_axes = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...],
               ["batch", ...]]
    w1, w2 = torch.randn(16, 12, dtype=torch.float64), torch.randn(12, 4, dtype=torch.float64)
    images, labels = torch.randn(8, 16, dtype=torch.float64), torch.randint(0, 4, (8,))
    for data in (images, torch.ones_like(images)):
        g = nx.xmap(body, in_axes=in_axes, out_axes=["hidden", "classes", ...])(
            w1, w2, data, labels)
        w2_ = w2.clone().requires_grad_()
        logp = torch.log_softmax(torch.relu(data @ w1) @ w2_, dim=1)
        (-logp[torch.arange(8), labels].sum()).backward()
        # JAX 0.4.30 (jax.grad has no reduce_axes there: psum of the per-example
        # gradients over 'batch', logsumexp spelled log(psum(exp))): 4 times the
        # positional gradient -- the loss lacks 'classes', whose psum transposes to psum
        torch.testing.assert_close(g, 4 * w2_.grad)


@pytest.mark.parametrize("name", ["sum", "product"])
@pytest.mark.parametrize("data", sorted(DATA))
def test_vjp_pullback_named_shape_follows_jax(name, data):
    """JAX 0.4.30: ``vjp(lambda w: loss(w, c), w)[1](1.)`` is replicated for the sum,
    per instance for the product, on any data."""
    body = lambda w, c: nx.vjp(lambda w: LOSSES[name](w, c), w)[1](torch.ones(()))[0]   # noqa
    f = nx.xmap(body, in_axes=[[...], ["j", ...]], out_axes=[...])
    if VERDICTS[name] == "per_instance":
        with pytest.raises(nx.AxisSpecError, match="named axis 'j'"):
            f(torch.ones(3), DATA[data]())
    else:
        torch.testing.assert_close(f(torch.ones(3), DATA[data]()),
                                   4 * torch.ones(3) if name == "sum" else None)


def test_custom_rules_and_checkpoint_keep_jax_named_shapes():
    """Inside a derivative, custom_vjp's bwd (a psum) and nx.checkpoint are followed:
    GPT-J's f_psum drops 'shard' from a replicated input's gradient, as in JAX."""
    @nx.custom_vjp
    def f_psum(x):
        return x
    f_psum.defvjp(lambda x: (x, None), lambda _, g: (lax.psum(g, "shard"),))

    def body(e, w):
        loss = nx.checkpoint(lambda e: (torch.tanh(f_psum(e) * w) ** 2).sum())
        return nx.grad(lambda e: loss(e))(e)

    f = nx.xmap(body, in_axes=([...], ["shard", ...]), out_axes=[...])
    e, w = torch.randn(4), torch.randn(2, 4)
    ref = e.clone().requires_grad_()
    (torch.tanh(ref * w) ** 2).sum().backward()
    torch.testing.assert_close(f(e, w), ref.grad)


def test_an_axis_indexed_or_run_along_stays_in_the_gradient():
    """Selecting index 0 along 'j' is not a sum over 'j': the gradient is one per
    instance (the seed counts the loss once per instance of 'j', psum's convention)."""
    x = nx.named(torch.arange(3.), "j")
    g = nx.grad(lambda x: x[{"j": 0}].sum())(x)
    assert g.named_shape == {"j": 3}
    torch.testing.assert_close(g._data, torch.tensor([3., 0., 0.]))
    g = nx.grad(lambda x: nx.sum(x, "j"))(x)   # a sum: one value, replicated
    assert g.named_shape == {}
    g = nx.grad(lambda x: nx.sum(x[{"j": slice(0, 2)}], "j"))(x)   # a slice along 'j'
    assert g.named_shape == {"j": 3}
    torch.testing.assert_close(g._data, torch.tensor([3., 3., 0.]))
    g = nx.grad(lambda x: nx.sum(x.cumsum("j"), "j"))(x)   # a cumsum mixes instances
    assert g.named_shape == {"j": 3}
    torch.testing.assert_close(g._data, 3 * torch.tensor([3., 2., 1.]))
