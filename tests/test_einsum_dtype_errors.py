"""A named einsum that torch's einsum cannot contract (operands of mixed dtypes, or bool
operands, in a matrix product) raises a NamedAxisError naming the dtypes, not torch's raw
RuntimeError; what torch's einsum computes (an elementwise product of mixed dtypes) still runs."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

SPEC = 'n{b,k},{k,m}->n{b,m}'


def _run(x, w, fn=nx.einsum):
    return nx.xmap(lambda x, w: fn(SPEC, x, w), in_axes=(['b', 'k', ...], ['k', 'm', ...]),
                   out_axes=['b', 'm', ...])(x, w)


@pytest.mark.parametrize("fn", [nx.einsum, torch.einsum])
@pytest.mark.parametrize("dts", [(torch.int32, torch.float32), (torch.bool, torch.bool)])
def test_uncontractable_dtypes_raise(fn, dts):
    x, w = torch.ones(2, 3, 4, dtype=dts[0]), torch.ones(3, 5, dtype=dts[1])
    with pytest.raises(nx.NamedAxisError, match=str(dts[0])) as e:
        _run(x, w, fn)
    assert isinstance(e.value, TypeError)


def test_same_dtype_and_elementwise_still_run():
    x, w = torch.arange(24, dtype=torch.int32).reshape(2, 3, 4), torch.ones(3, 5, dtype=torch.int32)
    assert _run(x, w).tolist() == torch.einsum('bkn,km->bmn', x, w).tolist()
    a = nx.named(torch.arange(3, dtype=torch.int32), 'i ...')
    b = nx.named(torch.full((3,), 0.5), 'i ...')
    out = nx.einsum('{i},{i}->{i}', a, b)          # torch's einsum promotes this one
    assert nx.positional(out, 'i ...').tolist() == [0.0, 0.5, 1.0]
