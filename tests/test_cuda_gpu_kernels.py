"""On a CUDA GPU (``pytest -m cuda``): the row adjoints and the fused attention kernel that
the host stand-in checks (test_cuda_row_groups.py, test_cuda_attention.py), now on the
device: a reverse program with softmax, layernorm and rmsnorm adjoints (and the same in a
loop body) by generated step code, and attention at a transformer's sizes, against NumPy
within the same bounds. Skipped without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from adc_runtime import cuda_attention as att
from cuda_cases import CASES, attention_inputs, attention_within_bound, compiled, inputs

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_row_adjoints_on_the_gpu(cupy, tmp_path, dtype):
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime import cuda_step
    from adc_runtime.executor import run_function
    comp = compiled(tmp_path, dtype)
    data = inputs(dtype, rows=64)
    want = run_function(comp.module, comp.run_name, dict(data))[0]
    fused = ensure_fused(comp.module, rows=True)
    run = cuda_step.runner(fused, comp.run_name, kernel_specs(fused), cupy=cupy)
    got, _ = run(dict(data))
    ex = next(iter(run._executors.values()))
    assert ex.launches["adc"] > 0
    rtol = 1e-10 if dtype == "f64" else 2e-5
    for g, w in zip(got, want):
        np.testing.assert_allclose(cupy.asnumpy(g).astype(np.float64), w, rtol=rtol,
                                   atol=rtol * np.max(np.abs(w)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES + [((2, 4), 512, 512, 64, 64, True),
                                          ((1, 2), 300, 700, 64, 128, False)], ids=str)
def test_fused_attention_on_the_gpu(cupy, dtype, case):
    q, k, v = attention_inputs(case, dtype)
    got = att.run(cupy, *map(cupy.asarray, (q, k, v)), case[-1])
    assert attention_within_bound(cupy.asnumpy(got), q, k, v, case[-1], ulps=2.0)
