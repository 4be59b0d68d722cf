"""NamedTensor in the torch ecosystem (issue 15 item 1, issue 16's numpy operators):
DataLoader collation, torch.save / torch.load(weights_only=True), deepcopy, state dicts,
numpy conversion and operators, the ``torch_dynamo_backends`` entry point."""
from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import named_axes as nx

ROOT = Path(__file__).resolve().parent.parent


def _same(a, b):
    assert isinstance(b, nx.NamedTensor) and a.named_shape == b.named_shape
    names = list(a.named_shape) + [...]
    torch.testing.assert_close(nx.positional(a, names), nx.positional(b, names))


class _Named(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        x = nx.named(torch.arange(12.).reshape(3, 4) + i, "seq ...")
        return {"x": x, "y": i}


# -- DataLoader ------------------------------------------------------------------------

def test_dataloader_collate_stacks_along_a_new_positional_dim():
    batch = next(iter(DataLoader(_Named(), batch_size=4, collate_fn=nx.collate)))
    x = batch["x"]
    assert x.shape == (4, 4) and x.named_shape == {"seq": 3}
    assert torch.equal(batch["y"], torch.arange(4))
    want = torch.stack([torch.arange(12.).reshape(3, 4) + i for i in range(4)], 1)
    torch.testing.assert_close(nx.positional(x, "seq ..."), want)


def test_dataloader_with_a_worker_process():
    batches = list(DataLoader(_Named(), batch_size=3, num_workers=1, collate_fn=nx.collate))
    assert [b["x"].named_shape for b in batches] == [{"seq": 3}] * 2
    torch.testing.assert_close(nx.positional(batches[1]["x"], "seq ...")[0, 0],
                               torch.arange(4.) + 3)


def test_default_collate_is_left_as_torch_has_it():
    import subprocess
    import sys

    code = ("from torch.utils.data._utils import collate as c; before = dict(c.default_collate_fn_map)"
            "; import named_axes; assert dict(c.default_collate_fn_map) == before")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors"):
        next(iter(DataLoader(_Named(), batch_size=2)))   # a clear error: pass nx.collate


def test_collate_is_exported_and_works_on_nested_structures():
    ex = [(nx.named(torch.ones(2, 5), "b ..."), torch.zeros(3))] * 3
    x, z = nx.collate(ex)
    assert x.shape == (3, 5) and x.named_shape == {"b": 2} and z.shape == (3, 3)
    assert nx.collate is nx._interop.collate
    loader = DataLoader([ex[0][0]] * 4, batch_size=2, collate_fn=nx.collate)
    assert next(iter(loader)).shape == (2, 5)


def test_collate_walks_containers_as_default_collate_does():
    """Every container default_collate walks (dict, list, tuple, namedtuple, nested) comes
    back as default_collate returns it, with the NamedTensors stacked in their places."""
    from collections import OrderedDict, namedtuple
    from torch.utils.data import default_collate

    Pair = namedtuple("Pair", "x y")
    examples = [{"a": (nx.named(torch.full((2, 5), float(i)), "b ..."), i),
                 "b": [torch.full((3,), i), nx.named(torch.ones(4, 2) * i, "c ...")],
                 "c": Pair(nx.named(torch.ones(2) * i, "d"), 2.0 * i),
                 "d": OrderedDict(k=nx.named(torch.ones(2, 2) * i, "b ..."), s="s")}
                for i in range(3)]
    got = nx.collate(examples)

    def positional(v):   # the named axes first, as plain dims
        if isinstance(v, nx.NamedTensor):
            return v.align_to(*v.named_shape, ...)
        if isinstance(v, dict):
            return type(v)((k, positional(u)) for k, u in v.items())
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return type(v)(*map(positional, v))
        if isinstance(v, (list, tuple)):
            return type(v)(map(positional, v))
        return v
    plain = default_collate([positional(e) for e in examples])

    def check(g, p):
        assert type(g) is type(p) or (isinstance(g, nx.NamedTensor) and type(p) is torch.Tensor)
        if isinstance(g, nx.NamedTensor):
            torch.testing.assert_close(g.align_to(*g.named_shape, ...).movedim(
                len(g.named_shape), 0), p)
        elif isinstance(g, dict):
            assert list(g) == list(p)
            for k in g:
                check(g[k], p[k])
        elif isinstance(g, (list, tuple)):
            assert len(g) == len(p)
            for a, b in zip(g, p):
                check(a, b)
        else:
            assert g == p if not isinstance(g, torch.Tensor) else torch.equal(g, p)
    check(got, plain)
    assert got["a"][0].named_shape == {"b": 2} and got["a"][0].shape == (3, 5)
    assert isinstance(got["c"], Pair) and isinstance(got["d"], OrderedDict)
    with pytest.raises(RuntimeError, match="equal size"):
        nx.collate([[nx.named(torch.ones(2), "d")], [nx.named(torch.ones(2), "d"), 1]])


def test_collate_refuses_mismatched_named_sizes():
    with pytest.raises(nx.AxisSizeError, match="'b'"):
        nx.collate([nx.named(torch.ones(2, 5), "b ..."), nx.named(torch.ones(3, 5), "b ...")])


# -- torch.save / torch.load / deepcopy / pickle ---------------------------------------------

def test_torch_save_and_load_with_weights_only():
    x = nx.named(torch.randn(2, 3, 4), {1: "seq"})
    buf = io.BytesIO()
    torch.save({"x": x, "w": torch.ones(2)}, buf)
    buf.seek(0)
    out = torch.load(buf, weights_only=True)
    _same(x, out["x"])
    assert torch.equal(out["w"], torch.ones(2))


def test_torch_load_default_in_a_fresh_process(tmp_path):
    """torch.load's default (weights_only=True) refuses unknown globals; named_axes
    registers its rebuild function when imported."""
    path = tmp_path / "x.pt"
    torch.save(nx.named(torch.arange(6.).reshape(2, 3), "b ..."), path)
    code = ("import torch, named_axes as nx; x = torch.load(r'%s'); "
            "print(type(x).__name__, x.named_shape, x.shape)" % path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "NamedTensor {'b': 2} torch.Size([3])"


def test_deepcopy_copy_and_pickle():
    import pickle

    t = torch.randn(2, 3, requires_grad=True)
    x = nx.named(t, "b ...")
    d = copy.deepcopy(x)
    _same(x, d)
    assert d.requires_grad and d._data.data_ptr() != x._data.data_ptr()
    c = copy.copy(x)
    assert c._data is x._data and c.named_shape == x.named_shape
    p = pickle.loads(pickle.dumps(x.detach()))
    _same(x.detach(), p)
    # containers with shared values keep the sharing
    pair = copy.deepcopy([x, x])
    assert pair[0] is pair[1]


def test_named_buffers_in_state_dict():
    """torch 2.13's register_buffer takes any object with __torch_function__: a NamedTensor
    buffer moves with .to(), lands in state_dict, saves, loads with weights_only=True and
    load_state_dict copies into it (named sizes checked)."""
    class M(torch.nn.Module):
        def __init__(self, fill=0.0):
            super().__init__()
            self.register_buffer("table", nx.named(torch.full((3, 4), fill), "heads ..."))

        def forward(self, x):
            return x + self.table

    m = M(fill=2.0).to(torch.float64)
    assert m.table.dtype == torch.float64 and m.table.named_shape == {"heads": 3}
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = M().double()
    m2.load_state_dict(torch.load(buf, weights_only=True))
    _same(m.table, m2.table)
    assert m2(torch.ones(4, dtype=torch.float64)).named_shape == {"heads": 3}
    bad = {"table": nx.named(torch.zeros(5, 4, dtype=torch.float64), "heads ...")}
    with pytest.raises(RuntimeError, match="table"):
        m2.load_state_dict(bad)


def test_parameters_stay_positional():
    """nn.Parameter needs a torch.Tensor (its isinstance check demands one): keep the
    positional weight as the parameter and name it in forward."""
    with pytest.raises((TypeError, AttributeError)):
        torch.nn.Parameter(nx.named(torch.zeros(3, 4), "heads ..."))

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3, 4))

        def forward(self, x):
            return x * nx.named(self.w, "heads ...")

    out = M()(torch.ones(4))
    out.sum(("heads", 0)).backward()


# -- numpy ----------------------------------------------------------------------------------

def test_numpy_conversion_only_without_named_axes():
    x = nx.named(torch.arange(6.).reshape(2, 3), "b ...")
    np.testing.assert_array_equal(np.asarray(x.sum("b")), np.array([3., 5., 7.]))
    np.testing.assert_array_equal(np.asarray(x[{"b": 0}], dtype=np.float64), [0., 1., 2.])
    with pytest.raises(nx.AxisTypeError, match=r"named axes \{'b': 2\} is ambiguous"):
        np.asarray(x)
    with pytest.raises(nx.NamedAxisError):
        x.numpy()


@pytest.mark.parametrize("expr", ["a + x", "x + a", "a * x", "x - a", "a - x", "a / x",
                                  "x ** a", "a > x", "np.add(a, x)", "np.maximum(x, a)"])
def test_numpy_arrays_act_as_tensors_in_operators(expr):
    x = nx.named(torch.arange(1., 7.).reshape(2, 3), "b ...")
    a = np.array([1., 2., 3.], dtype=np.float32)
    out = eval(expr)
    assert isinstance(out, nx.NamedTensor) and out.named_shape == {"b": 2}
    shim = type("np", (), {"add": staticmethod(torch.add), "maximum": staticmethod(torch.maximum)})
    want = eval(expr, {"x": nx.positional(x, "b ..."), "a": torch.from_numpy(a), "np": shim})
    torch.testing.assert_close(nx.positional(out, "b ..."), want)


def test_numpy_ufuncs_and_inplace_forms():
    x = nx.named(torch.arange(6.).reshape(2, 3), "b ...")
    torch.testing.assert_close(nx.positional(np.exp(x), "b ..."),
                               nx.positional(x, "b ...").exp())
    acc = np.zeros(3)
    acc += x.sum("b").numpy()            # no named axis left: a plain tensor
    np.testing.assert_array_equal(acc, [3., 5., 7.])
    with pytest.raises(nx.AxisTypeError, match=r"ndarray cannot hold"):
        acc += x
    acc = acc + x                        # the spelled-out form gives a NamedTensor
    assert isinstance(acc, nx.NamedTensor) and acc.named_shape == {"b": 2}


@pytest.mark.parametrize("call, form", [
    (lambda x: np.add.reduce(x), "add.reduce"),
    (lambda x: np.add(x, 1, where=True), "add with where="),
    (lambda x: np.spacing(x), "spacing"),
    (lambda x: np.divmod(x, 2), "divmod")])
def test_numpy_ufunc_forms_torch_lacks(call, form):
    """A ufunc method, keyword or name torch has no function for: our error naming it
    while named axes remain (numpy's own error printed the values); numpy's result on a
    NamedTensor with none left, as on a plain tensor."""
    x = nx.named(torch.arange(6.).reshape(2, 3), "b ...")
    with pytest.raises(nx.AxisTypeError, match=rf"numpy {form} on a NamedTensor with named "
                                                rf"axes \{{'b': 2\}}") as err:
        call(x)
    assert "3." not in str(err.value)
    plain = nx.NamedTensor._wrap(torch.tensor([3., 5., 7.]), ())   # no named axes
    assert np.add.reduce(plain).item() == 15.0
    assert np.spacing(plain).shape == (3,)


def test_inplace_operator_with_a_numpy_operand():
    x = nx.named(torch.arange(6.).reshape(2, 3), "b ...")
    y = x.clone()
    y += np.ones(3)                      # NamedTensor += ndarray: in place, stays named
    torch.testing.assert_close(nx.positional(y, "b ..."), nx.positional(x, "b ...") + 1)


# -- torch.compile(backend="named_axes") without importing named_axes -----------------------------

def _has_entry_point() -> bool:
    from importlib.metadata import entry_points

    return "named_axes" in entry_points(group="torch_dynamo_backends").names


def test_setup_cfg_declares_the_dynamo_backend_entry_point():
    text = (ROOT / "setup.cfg").read_text()
    assert "torch_dynamo_backends =" in text
    assert "named_axes = named_axes.transforms._backend:compile_named" in text


@pytest.mark.timeout(300)
def test_compile_backend_found_without_importing_named_axes():
    if not _has_entry_point():
        pytest.skip("the installed metadata predates the entry point: re-run `make` "
                    "(pip install -e .) to register it")
    code = ("import sys, torch\n"
            "f = torch.compile(lambda x: (x * 2).sum(), backend='named_axes')\n"
            "print(f(torch.ones(3)).item(), 'named_axes' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=280, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["6.0", "True"], out.stdout
