"""First-hour probes: what a new user tries in their first hour either matches its
reference — a plain loop over the named-axis indices — or raises a NamedAxisError.
Never a raw torch error, never a silently wrong answer (issue 11, "Never silent").

Each probe is ``(body, inputs[, reference])``: ``body`` runs under ``nx.xmap`` with ``'b'``
on dim 0 of every input, and on each row of the inputs for the reference loop (collectives,
which a loop cannot run, give their reference).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import named_axes as nx
from named_axes import lax

G = torch.Generator().manual_seed(0)
X = torch.randn(4, 5, generator=G)
POS = X.abs() + 0.1
INT = torch.randint(-3, 4, (4, 5), generator=G)
EQUAL_COUNT = torch.tensor([[1., 0., 2.], [0., 3., 4.], [5., 6., 0.], [7., 0., 8.]])
W = torch.randn(5, generator=G)

PROBES = {
    # dynamic shapes: equal lengths per instance are exact, unequal ones refuse
    "where_one_arg_equal_counts": (lambda x: torch.where(x)[0], (EQUAL_COUNT,)),
    "where_one_arg_unequal_counts": (lambda x: torch.where(x > 0)[0], (X,)),
    "nonzero": (lambda x: x.nonzero(), (X,)),
    "masked_select": (lambda x: x[x > 0], (X,)),
    "unique": (lambda x: torch.unique(x), (INT,)),
    "nonzero_static": (lambda x: torch.nonzero_static(x > 0, size=5), (X,)),
    # closures and gradients: per instance
    "grad_through_a_closure": (lambda x: nx.grad(lambda w: (x * w).sin().sum())(W), (X,)),
    "torch_func_grad_through_a_closure": (
        lambda x: torch.func.grad(lambda w: (x * w).sin().sum())(W), (X,)),
    "value_and_grad_value": (
        lambda x: nx.value_and_grad(lambda w: (x * w).pow(2).sum())(W)[0], (X,)),
    # integer dtypes
    "integer_sum": (lambda x: x.sum(), (INT,)),
    "integer_mean_is_refused_or_float": (lambda x: x.float().mean(), (INT,)),
    "integer_pmean_is_a_float_mean": (lambda x: lax.pmean(x, "b") + 0 * x, (INT,),
                                      INT.float().mean(0).expand(4, 5)),
    "integer_psum": (lambda x: lax.psum(x, "b") + 0 * x, (INT,), INT.sum(0).expand(4, 5)),
    "integer_division": (lambda x: x // 2 + x % 3, (INT,)),
    # empty axis tuples: identity
    "psum_over_nothing": (lambda x: lax.psum(x, ()), (X,)),
    "pmax_over_nothing": (lambda x: lax.pmax(x, ()), (X,)),
    "nx_sum_over_nothing": (lambda x: nx.sum(x, ()), (X,)),
    # positional habits inside a named program
    "shape_is_positional": (lambda x: torch.full((2,), float(x.shape[0])) + 0 * x[:2], (X,)),
    "len_is_positional": (lambda x: x[: len(x) - 1], (X,)),
    "view_minus_one": (lambda x: x.view(-1, 1).squeeze(1), (X,)),
    "index_and_slice": (lambda x: x[1:4:2] * x[0], (X,)),
    "argmax_positional": (lambda x: x.argmax(), (X,)),
    "softmax_last_dim": (lambda x: x.softmax(-1), (X,)),
    "matmul_with_a_weight": (lambda x: x @ torch.ones(5, 2), (X,)),
    "cat_with_a_plain_tensor": (lambda x: torch.cat([x, torch.zeros(2)]), (X,)),
    "stack_two_named": (lambda x: torch.stack([x, x * 2]), (X,)),
    "type_conversion": (lambda x: x.to(torch.int64) + x.long(), (X,)),
    "inplace_on_a_copy": (lambda x: _inplace(x), (X,)),
    "log_of_positive": (lambda x: torch.log(x).clamp(min=-1), (POS,)),
    "einsum_positional": (lambda x: torch.einsum("i,i->", x, x), (X,)),
    "sort_values": (lambda x: torch.sort(x).values, (X,)),
    "topk": (lambda x: x.topk(2).values, (X,)),
    "cumsum": (lambda x: x.cumsum(0), (X,)),
    "reshape_to_the_positional_size": (lambda x: x.reshape(5, 1), (X,)),
    # conversions that cannot know which instance: refuse
    "float_of_a_named_value": (lambda x: torch.tensor(float(x.sum())), (X,)),
    "item_of_a_named_value": (lambda x: torch.tensor(x.sum().item()), (X,)),
    "python_if_on_a_named_value": (lambda x: x if bool(x.sum() > 0) else -x, (X,)),
    "numpy_of_a_named_value": (lambda x: torch.from_numpy(x.numpy()), (X,)),
    "numpy_operand": (lambda x: x + np.ones(5, dtype=np.float32), (X,)),
    # shape mistakes: ShapeError, in the user's shapes
    "reshape_wrong_size": (lambda x: x.reshape(4, 5), (X,)),
    "matmul_wrong_size": (lambda x: x @ torch.ones(4, 2), (X,)),
}


def _inplace(x):
    y = x.clone()
    y += 1
    y.mul_(2)
    return y


def _reference(body, inputs):
    rows = [body(*[t[i] for t in inputs]) for i in range(inputs[0].shape[0])]
    return torch.stack(rows)


def _reference_or_error(body, inputs):
    try:
        return _reference(body, inputs), None
    except Exception as e:   # noqa: BLE001 - a per-row failure is the reference's answer
        return None, e


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_matches_the_loop_or_raises_a_named_axis_error(name):
    body, inputs, *given = PROBES[name]
    spec = dict(in_axes=(["b", ...],) * len(inputs), out_axes=["b", ...])
    try:
        got = nx.xmap(body, **spec)(*inputs)
    except nx.NamedAxisError:
        return   # refused with one of ours: fine (the message is the errors tests' job)
    except Exception as e:   # noqa: BLE001
        pytest.fail(f"{name}: raised {type(e).__name__}, not a NamedAxisError: {e}")
    ref, err = (given[0], None) if given else _reference_or_error(body, inputs)
    if err is not None:
        pytest.fail(f"{name}: xmap returned a value where the loop reference fails "
                    f"({type(err).__name__}: {err})")
    if not isinstance(got, torch.Tensor):
        got = torch.as_tensor(got)
    assert got.shape == ref.shape, (name, got.shape, ref.shape)
    torch.testing.assert_close(got.to(ref.dtype), ref, msg=name)


# Some probes have one right answer: pin that it is the one we give.
@pytest.mark.parametrize("name, outcome", [
    ("where_one_arg_equal_counts", "value"),
    ("where_one_arg_unequal_counts", "ShapeError"),
    ("masked_select", "ShapeError"),
    ("grad_through_a_closure", "value"),
    # torch.func is torch's own unless nx.enable_torch_func() was called: it refuses
    ("torch_func_grad_through_a_closure", "AxisTypeError"),
    ("integer_pmean_is_a_float_mean", "value"),
    ("psum_over_nothing", "value"),
    ("nx_sum_over_nothing", "value"),
    ("float_of_a_named_value", "AxisTypeError"),
    ("python_if_on_a_named_value", "AxisTypeError"),
    ("numpy_operand", "value"),
    ("reshape_wrong_size", "ShapeError"),
    ("matmul_wrong_size", "ShapeError"),
])
def test_probe_outcome(name, outcome):
    body, inputs, *_ = PROBES[name]
    spec = dict(in_axes=(["b", ...],) * len(inputs), out_axes=["b", ...])
    if outcome == "value":
        nx.xmap(body, **spec)(*inputs)
    else:
        with pytest.raises(getattr(nx, outcome)):
            nx.xmap(body, **spec)(*inputs)


def test_an_axis_made_inside_and_not_placed_is_refused():
    f = nx.xmap(lambda y: nx.one_hot(y, 3, dim="classes"), in_axes=["b", ...],
                out_axes=["b", ...])
    with pytest.raises(nx.NamedAxisError, match="classes"):
        f(torch.tensor([0, 2, 1]))


def test_a_closed_over_named_value_escaping_is_refused():
    outer = nx.named(torch.ones(3), "k")
    f = nx.xmap(lambda y: y * outer, in_axes=["b", ...], out_axes=["b", ...])
    with pytest.raises(nx.NamedAxisError, match="'k'"):
        f(torch.ones(2))
