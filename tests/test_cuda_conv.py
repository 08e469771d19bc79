"""Convolutions on the CUDA path: im2col (a strided view of the padded input, one copy) and
one batched GEMM per convolution and per adjoint (`adc_runtime.kernels.conv` on the device's
array module), run by generated step code on the host stand-in of CuPy (CuPy's array API
over NumPy, the generated kernels' exact source built by g++): the benchmark CNN's gradient
(benchmarks/models/cnn.tdsl: conv, bias, ReLU, max pool) equals NumPy's run of the same
program within float32 rounding, each convolution one library op. Skipped without g++."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuda_host import GXX, HostKernels, host_cupy

if GXX is None:
    pytest.skip("g++ is not installed: the kernels cannot be built for the host",
                allow_module_level=True)

from adcompiler.cli.compile import compile_program  # noqa: E402
from adcompiler.emit.cuda import ensure_fused, kernel_specs  # noqa: E402
from adc_runtime import cuda as backend, cuda_step  # noqa: E402
from adc_runtime.executor import run_function  # noqa: E402
from cuda_raw_host import with_raw_modules  # noqa: E402

CNN = Path(__file__).resolve().parent.parent / "benchmarks" / "models" / "cnn.tdsl"


def test_cnn_gradient_by_im2col_on_the_cuda_path(request, tmp_path):
    c = getattr(request.config, "cache", None)   # None under -p no:cacheprovider
    cache = c.mkdir("cuda-host") if c is not None else tmp_path
    comp = compile_program(str(CNN), "reverse", bind={"B": 2})
    rng = np.random.default_rng(0)
    fn = comp.module[comp.run_name]
    data = {a.name: (rng.standard_normal(tuple(a.type.shape)) * 0.2).astype(np.float32)
            for a in fn.args}
    want = run_function(comp.module, comp.run_name, dict(data))[0]
    fused = ensure_fused(comp.module, rows=True)
    launches: list = []
    cp = with_raw_modules(host_cupy(HostKernels(cache), launches), cache, launches)
    backend._KERNELS.clear()
    got, stats = cuda_step.run_function(fused, comp.run_name, dict(data), kernel_specs(fused),
                                        cupy=cp)
    names = [op.name for op in fused[comp.run_name].body.ops]
    assert names.count("conv2d") == 2 and names.count("conv_weight_grad") == 2
    assert stats["launches"]["library"] >= 5    # each convolution and adjoint one library op
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-5,
                                   atol=1e-6 * max(1.0, float(np.max(np.abs(w)))))
