"""The CuPy backend's plumbing, checked on the CPU with the CuPy stand-in of cupy_standin.py
(CuPy's kernel classes and argument checks; the fused op's region computed with NumPy). It
checks what the backend passes to a kernel (inputs, captures, then preallocated outputs of
the declared shapes and dtypes; for a reduction the axes and keepdims), that kernels are
built once per source, the peak-memory hook, and the one-line error of ``adc run --device
cuda`` without CuPy. The real kernels run in test_cuda_gpu.py (``pytest -m cuda``)."""
from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli
from adcompiler.cli.compile import compile_program
from adcompiler.emit.cuda import ensure_fused, kernel_specs
from adcompiler.frontend import compile_source
from adcompiler.passes.pipeline import run_pipeline
from adc_runtime import cuda as backend
from adc_runtime.executor import run_function
from cupy_standin import MemoryHook, fake_cupy, get_memory_hooks  # noqa: F401 (fake_cupy: imported from here by other tests)

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.mark.parametrize("name", ["mlp", "attention", "rnn", "transformer_stack", "deep_mlp",
                                  "autograd_intro"])
def test_backend_runs_fused_kernels_like_numpy(name):
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), "reverse")
    module = ensure_fused(comp.module)
    specs = kernel_specs(module)
    calls: list = []
    cp = fake_cupy({s.name: op for op, s in specs.items()}, calls)
    backend._KERNELS.clear()
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    want, _ = run_function(comp.module, comp.run_name, data)
    for _ in range(2):
        got, stats = backend.run_function(module, comp.run_name, data, specs, cupy=cp)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    built = [n for kind, n, *_ in calls if kind == "build"]
    launched = {n for kind, n, *_ in calls if kind == "launch"}
    assert len(built) == len(set(built))           # built once, reused by the second run
    assert launched and launched <= set(built)
    assert stats["peak_bytes_measured"] == 0       # the stand-in hook sees no allocations
    assert stats["peak_bytes"] == run_function(module, comp.run_name, data)[1]["peak_bytes"]


REDUCE = """\
def f(x: f32[B, 3, 4], b: f32[4], k: i32[B, 4]) -> f32 {
    y = tanh(x * 2.0 + b)
    m = max(x * exp(b), axis=[0, -1], keepdims=true)
    n = min(exp(x) - 1.0, axis=1)
    c = sum(k * 2, axis=0)
    return sum(m) + mean(n * n) + sum(cast(c, f32)) + mean(x * y)
}
"""


def test_reduction_kernels_get_axes_keepdims_and_outputs():
    m = compile_source(REDUCE, "t.tdsl")
    grad = run_pipeline(m, "reverse{wrt=b fn=f},cse,dce,fuse")
    specs = kernel_specs(grad)
    by_name = {s.name: op for op, s in specs.items()}
    calls: list = []
    cp = fake_cupy(by_name, calls)
    backend._KERNELS.clear()
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32),
            "k": rng.integers(-5, 5, (2, 4)).astype(np.int32)}
    for fn in ("f", "f_grad"):
        want, _ = run_function(grad, fn, data)
        got, _ = backend.run_function(grad, fn, data, specs, cupy=cp)
        for a, w in zip(got, want):
            assert a.dtype == w.dtype and a.shape == w.shape
            np.testing.assert_array_equal(a, w)
    launches = {(specs_by(specs, n).where.split(": ")[1], axis, keepdims)
                for kind, n, *rest in calls if kind == "launch" and rest
                for axis, keepdims in [rest]}
    assert ("exp, mul, max", (0, 2), True) in launches
    assert ("exp, sub, min", (1,), False) in launches
    assert ("mul, sum", (0,), False) in launches
    assert ("mul, add, tanh, mul, mean", (0, 1, 2), False) in launches
    # the adjoint of `+ b` sums a [B, 3, 4] cotangent down to [4]: sum_to over axes 0, 1
    assert any(m.endswith("sum_to") and axis == (0, 1) and keep for m, axis, keep in launches)


def specs_by(specs, name):
    return next(s for s in specs.values() if s.name == name)


def _hook_events(hook, events):
    for kind, ptr, size in events:
        if kind == "malloc":
            hook.malloc_postprocess(device_id=0, size=size, mem_size=size, mem_ptr=ptr,
                                    pmem_id=0)
        else:
            hook.free_postprocess(device_id=0, mem_size=size, mem_ptr=ptr, pmem_id=0)


def test_peak_hook_tracks_the_high_water_mark():
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(MemoryHook=MemoryHook))
    hook = backend.peak_memory_hook(cp)
    _hook_events(hook, [("malloc", 0x1000, 512), ("malloc", 0x2000, 1024),
                        ("free", 0x1000, 512), ("malloc", 0x1000, 512)])
    assert (hook.used, hook.peak) == (1536, 1536)
    _hook_events(hook, [("malloc", 0x3000, 512)])
    assert (hook.used, hook.peak) == (2048, 2048)


def test_peak_hook_counts_only_its_own_successful_allocations():
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(MemoryHook=MemoryHook))
    hook = backend.peak_memory_hook(cp)
    # CuPy reports a failed allocation with mem_ptr=0; a block from before the hook opened
    # (a reused runner's arena) is freed while it is open
    _hook_events(hook, [("malloc", 0, 1 << 30), ("malloc", 0x1000, 256),
                        ("free", 0x9000, 4096), ("free", 0x1000, 256)])
    assert (hook.used, hook.peak) == (0, 256)


def test_two_peak_hooks_can_be_open_at_once():
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(MemoryHook=MemoryHook))
    with backend.peak_memory_hook(cp) as outer, backend.peak_memory_hook(cp) as inner:
        assert outer.name != inner.name
    assert not get_memory_hooks()


def test_two_peak_hooks_open_at_once_in_cupy():
    cupy = pytest.importorskip("cupy")
    with backend.peak_memory_hook(cupy) as outer, backend.peak_memory_hook(cupy) as inner:
        hooks = cupy.cuda.memory_hook.get_memory_hooks()
        assert hooks[outer.name] is outer and hooks[inner.name] is inner


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_run_on_cuda_without_cupy_is_a_one_line_error(capsys):
    assert cli.main(["run", str(SAMPLES / "mlp.tdsl"), "--device", "cuda"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device cuda needs CuPy" in err
    with pytest.raises(Exception, match="needs CuPy and a CUDA GPU"):
        backend.load_cupy()
