"""f-string formatting of named values: one number, so named axes make it ambiguous."""
import pytest
import torch

import named_axes as nx


def _inside(f):
    got = {}

    def body(x):
        got["r"] = f(x)
        return x

    nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...])(torch.arange(6.).reshape(2, 3))
    return got["r"]


def test_a_format_spec_on_a_named_value_is_ambiguous():
    with pytest.raises(nx.AxisTypeError, match=r"format spec '.2f'.*\{'i': 2\}.*ambiguous"):
        _inside(lambda x: f"{x.sum():.2f}")


def test_an_empty_format_spec_is_the_repr():
    assert _inside(lambda x: f"{x.sum()}") == _inside(lambda x: str(x.sum()))


def test_a_value_without_named_axes_formats_as_torch_does():
    assert _inside(lambda x: f"{nx.lax.psum(x.sum(), 'i'):.1f}") == "15.0"
    with pytest.raises(TypeError, match="unsupported format string"):   # torch's, dim > 0
        _inside(lambda x: f"{nx.lax.psum(x, 'i'):.1f}")
