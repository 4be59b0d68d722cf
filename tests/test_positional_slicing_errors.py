"""nx.positional's and named slicing's errors name what the user wrote (each failed before
its fix)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def test_positional_of_an_axis_the_value_lacks_names_positional_not_out_axes():
    x = nx.named(torch.zeros(2, 3), 'a ...')
    with pytest.raises(nx.AxisSpecError, match=r"^positional\(\): axes=\['a', 'b', Ellipsis\] "
                                               r"places axis 'b', which the value does not have "
                                               r"\(its named axes: 'a'\)") as e:
        nx.positional(x, ['a', 'b', ...])
    assert "out_axes" not in str(e.value)


def test_positional_leaving_an_axis_unplaced_names_its_axes_argument():
    with pytest.raises(nx.AxisSpecError, match=r"that axes=\['a'\] does not place") as e:
        nx.positional(nx.named(torch.zeros(2, 3), 'a b'), ['a'])
    assert "out_axes" not in str(e.value)


def test_xmap_out_axes_keeps_its_wording():
    f = nx.xmap(lambda x: x, in_axes=['i', ...], out_axes=[...])
    with pytest.raises(nx.AxisSpecError, match=r"the output has named axis 'i' .* out_axes "
                                               r"\[Ellipsis\] does not place; add it to out_axes"):
        f(torch.zeros(5, 2))


@pytest.mark.parametrize("step", [-1, 0])
def test_named_slice_with_a_non_positive_step_names_the_axis(step):
    # torch's raw "ValueError: step must be greater than zero" named no axis
    x = nx.named(torch.arange(6.).reshape(2, 3), 'b ...')
    with pytest.raises(nx.AxisSpecError, match=rf"axis 'b' takes slices with a positive step, "
                                               rf"as torch's indexing, got step {step}"):
        x[{'b': slice(None, None, step)}]
    with pytest.raises(nx.AxisSpecError, match=r"^NamedTensor\[\{\.\.\.\}\] = \.\.\.: axis 'b'"):
        x[{'b': slice(None, None, step)}] = 1.0
    assert isinstance(pytest.raises(ValueError, x.__getitem__, {'b': slice(0, 2, step)}).value,
                      nx.NamedAxisError)
