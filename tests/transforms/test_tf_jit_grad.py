"""nx.jit on inputs that require grad: compiled forward + backward, training steps."""
import os
import subprocess
import sys

import pytest
import torch

import named_axes as nx

IN_AXES = ({}, {}, ["b", ...])


def named_loss(w1, w2, x):
    h = torch.tanh(x @ w1)
    return nx.lax.pmean(((h @ w2) ** 2).sum(), "b")


def plain_loss(w1, w2, x):
    return ((torch.tanh(x @ w1) @ w2) ** 2).sum(-1).mean()


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(4, 6, generator=g), torch.randn(6, 3, generator=g),
            torch.randn(5, 4, generator=g))


def test_forward_backward_compiled_reaches_param_grad():
    w1, w2, x = data()
    p1, p2 = torch.nn.Parameter(w1.clone()), torch.nn.Parameter(w2.clone())
    f = nx.jit(nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...]))
    ref = torch.func.grad(plain_loss, argnums=(0, 1))(w1, w2, x)
    for step in range(3):
        p1.grad = p2.grad = None
        out = f(p1, p2, x)
        assert "CompiledFunction" in type(out.grad_fn).__name__   # AOT autograd's node
        out.backward()
        torch.testing.assert_close(out.detach(), plain_loss(w1, w2, x))
        torch.testing.assert_close(p1.grad, ref[0])
        torch.testing.assert_close(p2.grad, ref[1])
    assert f.stats() == {"compiled": 3, "inline": 0, "fast_lane": 2, "programs": 1,
                         "store_loaded": 0, "store_saved": 0}


def test_closed_over_module_parameters_get_grads():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    f = nx.jit(nx.xmap(lambda v: lin(v).tanh().sum(), in_axes=["b", ...], out_axes=["b", ...]))
    f(x).sum().backward()
    got = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    lin(x).tanh().sum().backward()
    for g, p in zip(got, lin.parameters()):
        torch.testing.assert_close(g, p.grad)
    f(x).sum().backward()
    assert f.cache_size() == 1 and f.stats()["inline"] == 0


def test_value_and_grad_with_parameters_compiles_once_and_returns_values():
    w1, w2, x = data(1)
    p1, p2 = torch.nn.Parameter(w1.clone()), torch.nn.Parameter(w2.clone())
    step = nx.jit(nx.value_and_grad(nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...]),
                                    argnums=(0, 1)))
    ref_v = plain_loss(w1, w2, x)
    ref_g = torch.func.grad(plain_loss, argnums=(0, 1))(w1, w2, x)
    for _ in range(3):
        v, (g1, g2) = step(p1, p2, x)
        torch.testing.assert_close(v, ref_v)
        torch.testing.assert_close(g1, ref_g[0])
        torch.testing.assert_close(g2, ref_g[1])
        # the step computes its own gradients: its results are values, which a
        # backward cannot go through (where eager ones would be differentiable)
        with pytest.raises(nx.AxisTypeError, match="values"):
            torch.autograd.grad(v + g1.sum(), p1)
    assert step.stats() == {"compiled": 3, "inline": 0, "fast_lane": 2, "programs": 1,
                            "store_loaded": 0, "store_saved": 0}
    assert p1.grad is None
    v, (g1, g2) = step(w1, w2, x)   # plain tensors: the same program
    torch.testing.assert_close(g1, ref_g[0])
    with torch.no_grad():
        step(p1, p2, x)
    # plain tensors, then grad off: each a new signature (a new key, the same program)
    assert step.stats() == {"compiled": 5, "inline": 0, "fast_lane": 2, "programs": 1,
                            "store_loaded": 0, "store_saved": 0}


def test_under_another_transform_runs_inline():
    w1, w2, x = data(2)
    f = nx.jit(lambda a, b, c: plain_loss(a, b, c))
    g = torch.func.grad(f)(w1, w2, x)
    torch.testing.assert_close(g, torch.func.grad(plain_loss)(w1, w2, x))
    assert f.stats()["inline"] == 1 and f.cache_size() == 0


def _adam_init(params):
    return [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]


def _train_step(loss, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
    """A functional Adam step: new parameters and state from the old."""
    vg = nx.value_and_grad(loss, argnums=(0, 1))

    def step(w1, w2, m, v, t, x):
        value, grads = vg(w1, w2, x)
        t = t + 1
        new_p, new_m, new_v = [], [], []
        for p, g, mi, vi in zip((w1, w2), grads, m, v):
            mi = b1 * mi + (1 - b1) * g
            vi = b2 * vi + (1 - b2) * g * g
            mhat = mi / (1 - b1 ** t)
            vhat = vi / (1 - b2 ** t)
            new_p.append(p - lr * mhat / (vhat.sqrt() + eps))
            new_m.append(mi)
            new_v.append(vi)
        return value, new_p, new_m, new_v, t
    return step


def test_training_step_functional_adam_compiles_once():
    w1, w2, x = data(3)
    loss = nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...])
    eager_step = _train_step(loss)
    jit_step = nx.jit(eager_step)
    state_e = [w1, w2, *_adam_init((w1, w2)), torch.tensor(0.)]
    state_j = [torch.nn.Parameter(w1.clone()), torch.nn.Parameter(w2.clone()),
               *_adam_init((w1, w2)), torch.tensor(0.)]
    for _ in range(4):
        ve, pe, me, vve, te = eager_step(*state_e, x)
        vj, pj, mj, vvj, tj = jit_step(*state_j, x)
        torch.testing.assert_close(vj, ve)
        for a, b in zip(pj + mj + vvj, pe + me + vve):
            torch.testing.assert_close(a, b)
        state_e = [*pe, me, vve, te]
        state_j = [*pj, mj, vvj, tj]
    # the first call takes nn.Parameters, later ones the plain tensors it returned: the
    # step computes its own gradients, so one program serves both
    assert jit_step.cache_size() == 1 and jit_step.stats()["inline"] == 0


def test_training_step_in_place_sgd_on_parameters():
    w1, w2, x = data(4)
    p = [torch.nn.Parameter(w1.clone()), torch.nn.Parameter(w2.clone())]
    vg = nx.value_and_grad(nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...]),
                           argnums=(0, 1))

    def sgd_step(w1, w2, x):
        value, grads = vg(w1, w2, x)
        with torch.no_grad():
            for q, g in zip((w1, w2), grads):
                q.sub_(0.1 * g)
        return value

    step = nx.jit(sgd_step)
    ref = [w1.clone(), w2.clone()]
    for _ in range(3):
        v = step(*p, x)
        rv, rg = vg(*ref, x)
        ref = [r - 0.1 * g for r, g in zip(ref, rg)]
        torch.testing.assert_close(v, rv)
        for a, b in zip(p, ref):
            torch.testing.assert_close(a.detach(), b)
    assert step.cache_size() == 1 and step.stats()["compiled"] == 3


def test_empty_tuple_result():
    f = nx.jit(lambda x: ())
    assert f(torch.ones(2)) == ()
    g = nx.jit(lambda x: (x + 1, ()))
    out = g(torch.ones(2))
    assert out[1] == () and torch.equal(out[0], torch.full((2,), 2.))


def test_module_trains_under_jit_and_torch_compile_without_recompiling():
    out = _run(
        "import torch, named_axes as nx\n"
        "from torch._dynamo.testing import CompileCounter\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        g = torch.Generator().manual_seed(0)\n"
        "        self.w1 = torch.nn.Parameter(torch.randn(4, 6, generator=g))\n"
        "        self.w2 = torch.nn.Parameter(torch.randn(6, 3, generator=g))\n"
        "        self.f = nx.xmap(lambda x, a, b: nx.lax.pmean(((x @ a).tanh() @ b).pow(2).sum(), 'b'),\n"
        "                         in_axes=(['b', ...], {}, {}), out_axes=[...])\n"
        "    def forward(self, x):\n"
        "        return self.f(x, self.w1, self.w2)\n"
        "x = torch.randn(5, 4)\n"
        "def train(call, m):\n"
        "    opt = torch.optim.Adam(m.parameters(), lr=1e-2)\n"
        "    out = []\n"
        "    for _ in range(3):\n"
        "        opt.zero_grad(); l = call(x); l.backward(); opt.step(); out.append(l.item())\n"
        "    return out\n"
        "r = M(); ref = train(r, r)\n"
        "cnt = CompileCounter()\n"
        "m = M(); c = torch.compile(m, backend=cnt)\n"
        "got = [train(c, m)[0]]\n"   # named ops run first under dynamo: no eager op before
        "frames = cnt.frame_count\n"
        "got += train(c, m)\n"
        "print(cnt.frame_count == frames)\n"
        "m = M(); j = nx.jit(m)\n"
        "got_j = train(j, m)\n"
        "print(j.cache_size(), j.stats()['inline'])\n"
        # Python floats compare at float64 tolerance; the losses are float32 (a compiled
        # graph may round differently in the last bit).
        "torch.testing.assert_close(got_j, ref, rtol=1e-5, atol=1e-6)\n"
        "torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-6)\n")
    assert out.split() == ["True", "1", "0"]


def _run(code: str, env: dict | None = None) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_import_is_lazy_and_the_matmul_fix_is_opt_in():
    out = _run(
        "import sys, torch, named_axes as nx\n"
        "print('torch._dynamo' in sys.modules, 'torch._inductor' in sys.modules)\n"
        "nx.enable_dynamo_matmul()\n"
        "f = nx.xmap(lambda x, w: (x @ w).sum(), in_axes=(['b', ...], {}), out_axes=['b', ...])\n"
        "x, w = torch.randn(3, 4), torch.randn(4, 2)\n"
        "c = torch.compile(f, fullgraph=True, backend='eager')\n"
        "torch.testing.assert_close(c(x, w), (x @ w).sum(-1))\n"
        "g = torch.compile(lambda a: (a * 2).sum(), backend='named_axes', fullgraph=True)\n"
        "print(float(g(torch.ones(3))))\n")
    assert out.split() == ["False", "False", "6.0"]


def test_second_process_reuses_inductors_cache(tmp_path):
    # nx.jit compiles a graph dynamo never saw: it must still key inductor's on-disk
    # FX-graph cache (shape env present, decomposition table hashable), so a user's
    # second run starts warm.
    code = (
        "import torch, named_axes as nx\n"
        "from torch._dynamo.utils import counters\n"
        "w = torch.nn.Parameter(torch.linspace(-1, 1, 12).reshape(4, 3))\n"
        "f = nx.jit(nx.xmap(lambda x, w: ((x @ w).tanh() ** 2).sum(), in_axes=(['b', ...], {}),\n"
        "                   out_axes=['b', ...]))\n"
        "x = torch.linspace(0, 1, 20).reshape(5, 4)\n"
        "f(x, w).sum().backward()\n"
        "c = counters['inductor']\n"
        "print(c['fxgraph_cache_hit'], c['fxgraph_cache_bypass'], float(w.grad.sum()))\n")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    first = _run(code, env).split()
    second = _run(code, env).split()
    assert first[1] == "0" and second[1] == "0", (first, second)   # never bypassed
    assert int(second[0]) >= 1 and second[2] == first[2], (first, second)
