"""torch.compile of an xmap placing one axis on a torch.distributed mesh and another on a
SerialLoop: runs, and equals the vectorized run (values and gradients).  Dynamo handed
such a call to nx.jit, whose trace refused the SerialLoop with advice to "call the xmap
eagerly or under torch.compile" -- said to a call made under torch.compile.  The loop's
engine runs outside dynamo's graph (as eagerly) instead.  One gloo rank, in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import os, numpy as np, torch, torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
    dist.init_process_group("gloo", rank=0, world_size=1)
    import named_axes as nx

    def body(x, w):
        return nx.lax.psum((torch.tanh(x * w)).sum(), ("i", "j"))

    spec = dict(in_axes=(["i", "j", ...], [...]), out_axes=[...])
    ref = nx.xmap(body, **spec)
    f = nx.xmap(body, **spec, axis_resources={"i": "x", "j": nx.SerialLoop(2)})
    x = torch.linspace(-1, 1, 24).reshape(2, 4, 3)
    w = torch.linspace(0, 1, 3, requires_grad=True)
    want = ref(x, w)
    (gw,) = torch.autograd.grad(want * 2, w)
    with nx.Mesh(np.array(nx.devices()[:1]), ("x",)):
        got = torch.compile(lambda a, b: f(a, b) * 2)(x, w)
        (g,) = torch.autograd.grad(got, w)
    torch.testing.assert_close(got, want * 2)
    torch.testing.assert_close(g, gw)
    dist.destroy_process_group()
    print("OK")
""")


def test_torch_compile_of_a_mesh_and_serial_loop_call_equals_vectorized(tmp_path):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PORT": str(29000 + os.getpid() % 1000)}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "OK" in run.stdout, run.stderr[-3000:]
