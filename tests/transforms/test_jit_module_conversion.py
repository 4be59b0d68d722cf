"""A module converted inside an nx.jit program (``lin.double()``, ``.float()``, ``.to()``)
is refused with our error, and the module is left as it was.  The trace used to run the
conversion on its fake tensors: the module's parameters became FakeTensor placeholders
for good (its later eager calls returned FakeTensors), and the compiled program never
converted anything."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

CONVERSIONS = {"double": lambda m: m.double(), "to": lambda m: m.to(torch.float64),
               "half": lambda m: m.half()}


@pytest.mark.parametrize("conv,named", [("double", False), ("to", True), ("half", False)])
def test_a_conversion_inside_the_program_is_refused(conv, named):
    lin = torch.nn.Linear(3, 2)
    weight = lin.weight.detach().clone()

    def step(x):
        CONVERSIONS[conv](lin)
        return lin(x.to(lin.weight.dtype))

    f = nx.xmap(step, in_axes=["b", ...], out_axes=["b", ...]) if named else step
    with pytest.raises(nx.NamedAxisError, match=r"jit\(.*\): the program converts a module.*"
                       r"Convert the module before calling the program"):
        nx.jit(f)(torch.ones(4, 3))
    assert type(lin.weight) is torch.nn.Parameter and torch.equal(lin.weight, weight)
    assert type(lin(torch.ones(1, 3))) is torch.Tensor


def test_a_conversion_before_the_call_is_seen():
    lin = torch.nn.Linear(3, 2)
    f = nx.jit(lambda x: lin(x))
    assert f(torch.ones(1, 3)).dtype == torch.float32
    lin.double()
    out = f(torch.ones(1, 3, dtype=torch.float64))
    assert out.dtype == torch.float64 and torch.allclose(out, lin(torch.ones(1, 3).double()))


def test_a_use_of_weights_under_no_grad_is_not_a_conversion():
    lin = torch.nn.Linear(3, 2)

    def step(x):
        with torch.no_grad():
            return x @ lin.weight.double().t()

    x = torch.ones(1, 3, dtype=torch.float64)
    assert torch.allclose(nx.jit(step)(x), step(x))
