"""`Runner` (one function run again and again) and the library's callables built on it:
executors kept per binding of the symbolic dimensions, their arenas reused, and on
``device="cuda"`` the same fused kernels as ``adc run --device cuda`` (checked with the
CuPy stand-in of test_cuda_runtime)."""
from __future__ import annotations

import numpy as np

import adcompiler as adc
from adcompiler.api import program as api
from adcompiler.emit.cuda import ensure_fused, kernel_specs
from adc_runtime import cuda as backend
from adc_runtime.executor import Runner, run_function
from test_cuda_runtime import fake_cupy

SRC = """\
def f(param W: f32[4, 8], x: f32[B, 4]) -> f32 {
    h = tanh(x @ W) * 2.0 + 1.0
    return mean(h * h)
}
"""


def test_runner_keeps_one_executor_per_binding_and_reuses_its_arena():
    m = adc.parse_tdsl(SRC)
    run = Runner(m, "f")
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4, 8)).astype(np.float32)
    x3, x5 = (rng.standard_normal((b, 4)).astype(np.float32) for b in (3, 5))
    first, stats = run({"W": W, "x": x3})
    ex = run._executors[(("B", 3),)]
    arena = ex._arenas[id(m["f"])]
    again, stats2 = run({"W": W, "x": x3})
    assert run._executors[(("B", 3),)] is ex and ex._arenas[id(m["f"])] is arena
    assert stats2["peak_bytes"] == stats["peak_bytes"]      # counted afresh each call
    other, _ = run({"W": W, "x": x5})
    assert set(run._executors) == {(("B", 3),), (("B", 5),)}
    for got, x in ((first, x3), (again, x3), (other, x5)):
        want, _ = run_function(m, "f", {"W": W, "x": x}, plan_buffers=False)
        assert isinstance(got[0], np.ndarray) and np.array_equal(got[0], want[0])


def test_grad_callable_reuses_its_runner():
    g = adc.grad(SRC, wrt="W")
    rng = np.random.default_rng(1)
    W, x = rng.standard_normal((4, 8)), rng.standard_normal((3, 4))
    d1 = g(W=W, x=x)
    runner = g._runner
    d2 = g(W=W, x=x)
    assert g._runner is runner and len(runner._executors) == 1
    assert np.array_equal(d1, d2) and d1.shape == (4, 8)


def test_library_cuda_device_runs_fused_kernels(monkeypatch):
    m = adc.parse_tdsl(SRC)
    fused = ensure_fused(api.load(m))
    specs = kernel_specs(fused)
    calls: list = []
    cp = fake_cupy({s.name: op for op, s in specs.items()}, calls)
    monkeypatch.setattr(api, "_array_module", lambda device: cp if device == "cuda" else np)
    backend._KERNELS.clear()
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    W = np.linspace(1, -1, 32, dtype=np.float32).reshape(4, 8)
    got = adc.run(m, "f", W=W, x=x, device="cuda")
    want = adc.run(m, "f", W=W, x=x)
    assert np.array_equal(got[0], want[0])
    assert {c[0] for c in calls} == {"build", "launch"}    # the fused group ran as a kernel
