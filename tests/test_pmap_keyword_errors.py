"""pmap's errors name what the caller wrote.  A keyword argument was called 'argument
1['y']' (pmap's internal packing of the keywords as a trailing positional dict), and its
size and rank errors came from the inner xmap, spelled 'xmap(fun, in_axes=({0: 'i'},
{'y': {0: 'i'}}), ..., axis_resources={'i': <pmap mesh axis 3>})'; the refusal of a
Python number said 'in_axes=0 maps ...', though in_axes never covers keyword arguments
(JAX maps them over their leading axis).  JAX 0.4.30 refuses each of these with a
ValueError naming the argument ('axis 0 of argument y of type float32[3]')."""
import pytest
import torch

import named_axes as nx

X = torch.arange(6.).reshape(2, 3)
F = nx.pmap(lambda x, y=None: x + y, 'i', in_axes=(0,))


def test_keyword_size_mismatch_names_the_keyword():
    with pytest.raises(nx.AxisSizeError) as e:
        F(X, y=torch.ones(3))
    msg = str(e.value)
    assert "keyword argument 'y'" in msg and "argument 1" not in msg and "xmap" not in msg
    assert "2 (argument 0, dim 0) vs 3 (keyword argument 'y', dim 0)" in msg


def test_keyword_without_axes_names_the_keyword_and_its_leading_axis():
    with pytest.raises(nx.AxisTypeError, match=r"keyword argument 'y' over its leading axis"
                                               r".* a float, which has no axes"):
        F(X, y=1.0)
    with pytest.raises(nx.AxisSpecError, match=r"keyword argument 'y' over its leading axis"
                                               r".* 0-d"):
        F(X, y=torch.tensor(1.))
    with pytest.raises(nx.AxisSizeError, match=r"keyword argument 'y'\['a'\], dim 0"):
        nx.pmap(lambda x, y: x + y['a'])(X, y={'a': torch.ones(3, 3)})


def test_inner_xmap_errors_are_spelled_as_pmap():
    with pytest.raises(nx.AxisSpecError, match=r"^pmap\(<lambda>, axis_name='i', in_axes=0, "
                                               r"out_axes=5\)\(<inputs>\)"):
        nx.pmap(lambda x: x, 'i', out_axes=5)(X)
