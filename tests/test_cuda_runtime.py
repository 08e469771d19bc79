"""The CuPy backend's plumbing, checked on the CPU with a stand-in for CuPy: NumPy arrays,
and an ElementwiseKernel that computes its fused op's region with NumPy. It checks what
the backend passes to a kernel (inputs, captures, then preallocated outputs of the declared
shapes and dtypes), that kernels are built once per source, the peak-memory hook, and the
one-line error of ``adc run --device cuda`` without CuPy. The real kernels run in
test_cuda_gpu.py (``pytest -m cuda``)."""
from __future__ import annotations

import importlib.util
import json
import types
from collections import ChainMap
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli
from adcompiler.cli_compile import compile_program
from adcompiler.emit.cuda import ensure_fused, kernel_specs
from adc_runtime import cuda as backend
from adc_runtime.executor import Executor, run_function

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


class FakeHook:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fake_cupy(fused_by_name: dict, calls: list):
    """NumPy dressed as CuPy; kernels run their fused op's region with NumPy."""

    class ElementwiseKernel:
        def __init__(self, in_params, out_params, operation, name, preamble=""):
            self.op, self.name = fused_by_name[name], name
            self.n_in = len(in_params.split(","))
            assert len(out_params.split(",")) == len(self.op.results)
            calls.append(("build", name))

        def __call__(self, *args):
            ins, outs = args[:self.n_in], args[self.n_in:]
            calls.append(("launch", self.name))
            body = self.op.regions[0]
            env = ChainMap(dict(zip(body.args, ins[:len(body.args)])))
            got = Executor(None, np).run_fused(self.op, env, list(ins[:len(body.args)]))
            for o, g in zip(outs, got):
                assert o.shape == g.shape and o.dtype == g.dtype
                o[...] = g

    cp = types.ModuleType("numpy")  # kernels take NumPy's paths for a module named numpy
    cp.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    cp.ElementwiseKernel = ElementwiseKernel
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cp.cuda = types.SimpleNamespace(MemoryHook=FakeHook, get_current_stream=lambda: stream)
    return cp


@pytest.mark.parametrize("name", ["mlp", "attention", "rnn", "transformer_stack"])
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
    built = [n for kind, n in calls if kind == "build"]
    launched = {n for kind, n in calls if kind == "launch"}
    assert len(built) == len(set(built))           # built once, reused by the second run
    assert launched and launched <= set(built)
    assert stats["peak_bytes_measured"] == 0       # the stand-in hook sees no allocations
    assert stats["peak_bytes"] == run_function(module, comp.run_name, data)[1]["peak_bytes"]


def test_peak_hook_tracks_the_high_water_mark():
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(MemoryHook=FakeHook))
    hook = backend.peak_memory_hook(cp)
    for size in (512, 1024):
        hook.malloc_postprocess(device_id=0, size=size, mem_size=size, mem_ptr=0, pmem_id=0)
    hook.free_postprocess(device_id=0, mem_size=512, mem_ptr=0, pmem_id=0)
    hook.malloc_postprocess(device_id=0, size=100, mem_size=512, mem_ptr=0, pmem_id=0)
    assert (hook.used, hook.peak) == (1536, 1536)
    hook.malloc_postprocess(device_id=0, size=100, mem_size=512, mem_ptr=0, pmem_id=0)
    assert hook.peak == 2048


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_run_on_cuda_without_cupy_is_a_one_line_error(capsys):
    assert cli.main(["run", str(SAMPLES / "mlp.tdsl"), "--device", "cuda"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device cuda needs CuPy" in err
    with pytest.raises(Exception, match="needs CuPy and a CUDA GPU"):
        backend.load_cupy()
