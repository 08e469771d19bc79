"""The fused attention kernel (``adc_runtime.cuda_attention``): compiled by NVRTC for compute
9.0 and 7.5 (skipped without CuPy's NVRTC), and its exact source run on the host (tests/
cuda_raw_host.py: every thread a fiber, shuffles and barriers as on a GPU; skipped without
g++) against the table kernel: causal and not, fewer queries than keys, key and value
sizes above a warp, several shared-memory tiles of keys, batch axes, f32 and f64, within a
bound of a few ulps times the terms of each sum (the online softmax rounds differently from
a GEMM and a softmax, never bitwise). It declines what it does not cover, and the CUDA
step code runs it for the attention op of a program, forward and reverse."""
from __future__ import annotations

import numpy as np
import pytest

from adc_runtime import cuda_attention as att
from adc_runtime.kernels import KERNELS
from cuda_cases import CASES, attention_inputs, attention_within_bound
from cuda_host import GXX


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["90", "75"])
def test_attention_kernel_compiles_with_nvrtc(arch, monkeypatch):
    from cuda_raw_host import nvrtc_for
    compiler = nvrtc_for(arch, monkeypatch)
    for ctype in att.CTYPES.values():
        binary, _ = compiler.compile_using_nvrtc(att.source(ctype), options=("--std=c++14",),
                                                 arch=arch)
        binary = binary if isinstance(binary, bytes) else binary.encode()
        for name in att.SIGNATURES:
            assert name.encode() + b"\0" in binary, name


def test_tiles_fit_the_shared_memory():
    fits = lambda d, dv, size: att.shared_elements(d, dv) * size <= att.SHARED_BYTES  # noqa
    assert fits(64, 64, 4) and fits(128, 128, 4) and fits(64, 64, 8)
    assert not fits(256, 256, 4) and not fits(128, 128, 8)   # declined: the table kernel


# ---- on the host -----------------------------------------------------------------------

if GXX is None:
    pytest.skip("g++ is not installed: the kernel cannot be built for the host",
                allow_module_level=True)

from cuda_raw_host import kernel_signatures, stand_in_fixture  # noqa: E402


cp = stand_in_fixture()


def test_signatures_are_the_source():
    found = kernel_signatures(att.source("float"))
    assert {n: tuple(t.replace(" *", "*") for t in ts) for n, ts in found.items()} == \
        att.SIGNATURES


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_fused_attention_against_the_table_kernel(cp, dtype, case):
    q, k, v = attention_inputs(case, dtype)
    causal = case[-1]
    got = att.run(cp, q, k, v, causal)
    table = KERNELS["attention"](np, q, k, v, causal=causal)
    assert got.shape == table.shape and got.dtype == dtype
    assert attention_within_bound(got, q, k, v, causal)
    assert attention_within_bound(table, q, k, v, causal)


def test_a_nan_makes_its_row_nan(cp):
    q = np.ones((1, 3, 4), np.float32)
    k = np.ones((1, 5, 4), np.float32)
    k[0, 2, 1] = np.nan
    v = np.ones((1, 5, 2), np.float32)
    got = att.run(cp, q, k, v)
    assert np.isnan(got).all()
    causal = att.run(cp, q[:, :, :], k[:, :3], v[:, :3], True)   # rows 0, 1 never see key 2
    assert np.isnan(causal[0, 2]).all() and np.isfinite(causal[0, :2]).all()


def test_strided_operands_are_copied_into_row_order(cp):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 7, 6, 3)).astype(np.float32) for _ in range(3))
    views = [np.swapaxes(a, 1, 2) for a in (q, k, v)]      # [2, 6, 7, 3], not contiguous
    got = att.run(cp, *views, True)
    want = att.run(cp, *[np.ascontiguousarray(a) for a in views], True)
    np.testing.assert_array_equal(got, want)


def test_declines_what_it_does_not_cover(cp):
    q = np.zeros((2, 3, 4), np.float32)
    kv = np.zeros((2, 5, 4), np.float32)
    assert att.run(cp, q, kv[:1], kv[:1]) is None                 # broadcast batch axes
    assert att.run(cp, q.astype(np.float16), kv, kv) is None       # mixed or f16
    assert att.run(cp, q, kv, np.zeros((2, 5, 257), np.float32)) is None   # dv > 256
    big = np.zeros((1, 2, 256), np.float32)
    assert att.run(cp, big, big, big) is None                      # past the shared memory


def test_step_code_runs_the_fused_kernel_forward_and_reverse(cp, tmp_path):
    from adcompiler.cli.compile import compile_program
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime import cuda as backend, cuda_step
    from adc_runtime.executor import run_function
    src = tmp_path / "att.tdsl"
    src.write_text("def f(x: f32[B, 6, 8], param wq: f32[8, 8], param wk: f32[8, 8]) -> f32 {\n"
                   "    y = attention(x @ wq, x @ wk, x, causal=true)\n"
                   "    return sum(y * y)\n}\n")
    rng = np.random.default_rng(4)
    data = {"x": rng.standard_normal((2, 6, 8)).astype(np.float32),
            "wq": rng.standard_normal((8, 8)).astype(np.float32) * 0.4,
            "wk": rng.standard_normal((8, 8)).astype(np.float32) * 0.4}
    for mode in ("forward", "reverse"):
        comp = compile_program(str(src), mode)
        want = run_function(comp.module, comp.run_name, dict(data))[0]
        fused = ensure_fused(comp.module, rows=True)
        backend._KERNELS.clear()
        del cp.launches[:]
        got, stats = cuda_step.run_function(fused, comp.run_name, dict(data),
                                            kernel_specs(fused), cupy=cp)
        assert ("adc_attention_fwd", "raw") in cp.launches
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-5,
                                       atol=2e-6 * np.max(np.abs(w)))
    # without the fused kernel, attention runs the library's products and softmax
    del cp.launches[:]
    ex = cuda_step.CudaStepExecutor(fused, cp, {"B": 2}, kernel_specs(fused),
                                    fused_attention=False)
    fn = fused[comp.run_name]
    library = ex.call(fn, [data[a.name] for a in fn.args])
    assert ("adc_attention_fwd", "raw") not in cp.launches
    for g, w in zip(library, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-5,
                                   atol=2e-6 * np.max(np.abs(w)))
