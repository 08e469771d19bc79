"""bench_train.py --gpu's adc runner on the host stand-in of CuPy (tests/cuda_raw_host.py:
CuPy's array API over NumPy, the generated kernels' exact source built by g++): the
training step runs through ``adc.train_step(device="cuda")`` on device arrays, its losses
those of the CPU step within float32 rounding, and its memory figure is taken by the
pool's hook rather than NumPy's tracing. Skipped without g++."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_host import GXX

if GXX is None:
    pytest.skip("g++ is not installed: the kernels cannot be built for the host",
                allow_module_level=True)

from cuda_raw_host import raw_stand_in  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_adc_training_step_on_the_cuda_path(request, tmp_path, monkeypatch):
    from adcompiler.api import program as api
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("bench_train", BENCH / "bench_train.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_train", bench)
    spec.loader.exec_module(bench)
    c = getattr(request.config, "cache", None)   # None under -p no:cacheprovider
    cache = c.mkdir("cuda-host") if c is not None else tmp_path
    cp = raw_stand_in(cache)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(api, "_array_module", lambda device: cp if device == "cuda" else np)
    sizes = bench.SIZES["small"]["mlp"]
    clock = bench.Clock(1, 1, 1)
    gpu = bench.run_adc("mlp", sizes, clock, gpu=True)
    cpu = bench.run_adc("mlp", sizes, clock)
    assert len(gpu.losses) == len(cpu.losses) == 3    # warm-up, timed, memory step
    np.testing.assert_allclose(gpu.losses, cpu.losses, rtol=1e-5)
    assert gpu.alloc_mib is not None and cp.launches   # the pool hook: no NumPy tracing
