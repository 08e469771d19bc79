"""The row kernels of ``adc_runtime.cuda_rows``: compiled by NVRTC for compute 9.0 and 7.5
(skipped without CuPy's NVRTC), and their exact source run on the host (tests/
cuda_raw_host.py: every thread a fiber, shuffles and barriers as on a GPU; skipped without
g++) against NumPy: the forward kernels against the runtime's NumPy kernels, the adjoints
against the formulas of the ops' VJP rules evaluated in float64. Sums add in another order
than NumPy's, so results agree within the bound the module states (a few ulps times the
tree's depth and the elements per thread), never bitwise except where the module promises it
(cross_entropy's probabilities are softmax's bits). Also the CUDA executor on the
transformer samples with the row kernels in place of CuPy's multi-pass ones."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from adc_runtime import cuda_rows as rows
from adc_runtime.kernels import KERNELS
from cuda_host import GXX

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
EPS = {np.float32: 2.0 ** -23, np.float64: 2.0 ** -52}
# rows x n: one element per thread and fewer, several per thread, odd lengths, length 1
SHAPES = [(3, 1), (2, 7), (4, 33), (2, 130), (1, 1030), (2, 3, 40)]


# ---- NVRTC -----------------------------------------------------------------------------

@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["90", "75"])
def test_row_kernels_compile_with_nvrtc(arch, monkeypatch):
    from cuda_raw_host import nvrtc_for
    compiler = nvrtc_for(arch, monkeypatch)
    for ctype, _ in rows.ROW_DTYPES.values():
        for label in rows.LABEL_CTYPES.values():
            src = rows.source(ctype, label)
            binary, _ = compiler.compile_using_nvrtc(src, options=("--std=c++14",),
                                                     arch=arch)
            binary = binary if isinstance(binary, bytes) else binary.encode()
            for name in rows.SIGNATURES:  # every kernel in the module's symbols
                assert name.encode() + b"\0" in binary, name


# ---- on the host -----------------------------------------------------------------------

if GXX is None:
    pytest.skip("g++ is not installed: the row kernels cannot be built for the host",
                allow_module_level=True)

from cuda_raw_host import kernel_signatures, stand_in_fixture  # noqa: E402


cp = stand_in_fixture()


def test_signatures_are_the_sources():
    """The host launchers read the source's signatures; the module's table says the same."""
    found = kernel_signatures(rows.source("float"))
    assert set(found) == set(rows.SIGNATURES)
    for name, params in rows.SIGNATURES.items():
        got = [t.replace(" *", "*").replace("const T*", "const T*") for t in found[name]]
        assert got == list(params), name


def _data(shape, dtype, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _bound(dtype, n):
    t = rows.threads(n)
    return (np.log2(t) + -(-n // t) + 8) * EPS[dtype]


def close(got, want, dtype, n, scale=None):
    """Within the module's bound: relative to each value, or to the row's scale where a
    result is a difference of like terms (`scale`)."""
    tol = _bound(dtype, n)
    want = np.asarray(want, np.float64)
    err = np.abs(got.astype(np.float64) - want)
    limit = tol * (np.abs(want) + (0.0 if scale is None else scale)) + 1e-300
    assert got.shape == want.shape and np.all(err <= limit), \
        f"largest error {np.max(err / limit, initial=0):.3g} times the bound"


def test_threads_are_powers_of_two_from_a_warp_to_a_block():
    assert [rows.threads(n) for n in (1, 32, 128, 129, 4096, 10 ** 6)] == \
        [32, 32, 32, 64, 1024, 1024]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_log_softmax_and_cross_entropy(cp, dtype, shape):
    x = _data(shape, dtype)
    n = shape[-1]
    close(rows.softmax(cp, x), KERNELS["softmax"](np, x), dtype, n)
    close(rows.log_softmax(cp, x), KERNELS["log_softmax"](np, x), dtype, n, scale=1.0)
    labels = np.random.default_rng(1).integers(0, n, shape[:-1])
    for ldt in (np.int32, np.int64):
        probs = np.empty_like(x)
        loss = rows.cross_entropy(cp, x, labels.astype(ldt), probs=probs)
        close(loss, KERNELS["cross_entropy"](np, x, labels), dtype, n, scale=1.0)
        np.testing.assert_array_equal(probs, rows.softmax(cp, x))  # the same bits


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_adjoints(cp, dtype, shape):
    x, g = _data(shape, dtype), _data(shape, dtype, seed=2, scale=1.0)
    y = KERNELS["softmax"](np, x)
    y64, g64 = y.astype(np.float64), g.astype(np.float64)
    want = y64 * (g64 - np.sum(g64 * y64, axis=-1, keepdims=True))
    scale = np.abs(y64) * (np.abs(g64) + np.sum(np.abs(g64 * y64), -1, keepdims=True))
    close(rows.softmax_grad(cp, y, g), want, dtype, shape[-1], scale)
    ls = KERNELS["log_softmax"](np, x)
    want = g64 - np.exp(ls.astype(np.float64)) * np.sum(g64, axis=-1, keepdims=True)
    scale = np.abs(g64) + np.exp(ls) * np.sum(np.abs(g64), -1, keepdims=True)
    close(rows.log_softmax_grad(cp, ls, g), want, dtype, shape[-1], scale)
    labels = np.random.default_rng(3).integers(0, shape[-1], shape[:-1])
    ct = _data(shape[:-1], dtype, seed=4, scale=1.0)
    onehot = labels[..., None] == np.arange(shape[-1])
    want = ct[..., None].astype(np.float64) * (KERNELS["softmax"](np, x.astype(np.float64))
                                               - onehot)
    close(rows.cross_entropy_grad(cp, x, labels, ct), want, dtype, shape[-1],
          np.abs(ct[..., None]).astype(np.float64))


def _layernorm64(x, gamma, beta, eps):
    x = x.astype(np.float64)
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    return xc * rstd * gamma + beta, xc * rstd, rstd


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layernorm_and_rmsnorm_forward_and_adjoint(cp, dtype, shape):
    n, eps = shape[-1], 1e-5
    x = _data(shape, dtype) + dtype(0.5)
    gamma, beta = _data(n, dtype, seed=5, scale=1.0), _data(n, dtype, seed=6, scale=1.0)
    ct = _data(shape, dtype, seed=7, scale=1.0)
    y64, xhat, rstd = _layernorm64(x, gamma, beta, eps)
    scale = np.abs(xhat * gamma) + np.abs(beta)
    close(rows.layernorm(cp, x, gamma, beta, eps), y64, dtype, n, scale)
    close(rows.layernorm(cp, x, gamma, beta, eps),
          KERNELS["layernorm"](np, x, gamma, beta, eps=eps), dtype, n, scale)
    g = ct.astype(np.float64) * gamma
    want = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    scale = rstd * (np.abs(g) + np.abs(g).mean(-1, keepdims=True)
                    + np.abs(xhat) * np.abs(g * xhat).mean(-1, keepdims=True))
    close(rows.layernorm_grad(cp, x, gamma, ct, eps), want, dtype, n, scale)
    # rmsnorm: x / sqrt(mean(x^2) + eps) * gamma and its adjoint
    x64 = x.astype(np.float64)
    r = 1 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
    close(rows.rmsnorm(cp, x, gamma, eps), x64 * r * gamma, dtype, n)
    mgx = (g * x64).mean(-1, keepdims=True)
    want = r * (g - x64 * r * r * mgx)
    scale = r * (np.abs(g) + np.abs(x64) * r * r * np.abs(g * x64).mean(-1, keepdims=True))
    close(rows.rmsnorm_grad(cp, x, gamma, ct, eps), want, dtype, n, scale)


def test_rmsnorm_adjoint_is_its_derivative(cp):
    """Central differences of sum(ct * rmsnorm(x)) in float64."""
    rng = np.random.default_rng(8)
    x, gamma, ct = rng.standard_normal((2, 9)), rng.standard_normal(9), rng.standard_normal((2, 9))
    f = lambda x: float(np.sum(ct * rows.rmsnorm(cp, x, gamma, 1e-6)))  # noqa: E731
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = 1e-6
        num[i] = (f(x + d) - f(x - d)) / 2e-6
    np.testing.assert_allclose(rows.rmsnorm_grad(cp, x, gamma, ct, 1e-6), num, rtol=1e-6,
                               atol=1e-8)


def test_nan_and_large_values(cp):
    x = np.array([[1.0, np.nan, 2.0, 0.5], [1000.0, -1000.0, 999.0, 0.0]], np.float32)
    y = rows.softmax(cp, x)
    assert np.isnan(y[0]).all()           # the max propagates NaN, as numpy.max
    np.testing.assert_allclose(y[1], KERNELS["softmax"](np, x[1:])[0], rtol=1e-6)
    assert np.isfinite(rows.log_softmax(cp, x[1:])).all()
    loss = rows.cross_entropy(cp, x[1:], np.array([7]))  # a label out of range: NaN, no read
    assert np.isnan(loss).all()


def test_empty_rows_launch_nothing(cp):
    before = len(cp.launches)
    assert rows.softmax(cp, np.zeros((0, 5), np.float32)).shape == (0, 5)
    assert rows.layernorm(cp, np.zeros((3, 0), np.float32), np.zeros(0, np.float32),
                          np.zeros(0, np.float32), 1e-5).shape == (3, 0)
    assert len(cp.launches) == before


def test_applies_only_along_a_contiguous_last_axis():
    x = np.zeros((3, 4), np.float32)
    assert rows.applies(x, -1) and rows.applies(x, 1)
    assert not rows.applies(x, 0) and not rows.applies(x.T, -1)
    assert not rows.applies(x.astype(np.float16), -1)
    assert not rows.applies(np.zeros((), np.float32), -1)


# ---- in the CUDA executor ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["attention", "transformer_stack"])
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_cuda_executor_runs_the_row_kernels(cp, name, mode):
    from adcompiler.cli.compile import compile_program
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime import cuda as backend
    from adc_runtime.executor import run_function
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), mode)
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    fused = ensure_fused(comp.module)
    want, _ = run_function(comp.module, comp.run_name, data)
    backend._KERNELS.clear()
    del cp.launches[:]
    got, _ = backend.run_function(fused, comp.run_name, data, kernel_specs(fused), cupy=cp)
    names = {n for n, kind in cp.launches if kind == "raw"}
    assert names & {"adc_row_softmax", "adc_row_layernorm", "adc_row_cross_entropy"}
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_kernels_on_the_gpu(dtype):
    """The same kernels on a CUDA device, against NumPy within the module's bound."""
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA GPU")
    except Exception as e:
        pytest.skip(f"no usable CUDA GPU ({e})")
    for shape in SHAPES + [(64, 50257)]:
        x = _data(shape, dtype)
        n = shape[-1]
        dx = cupy.asarray(x)
        close(cupy.asnumpy(rows.softmax(cupy, dx)), KERNELS["softmax"](np, x), dtype, n)
        labels = np.random.default_rng(1).integers(0, n, shape[:-1])
        close(cupy.asnumpy(rows.cross_entropy(cupy, dx, cupy.asarray(labels))),
              KERNELS["cross_entropy"](np, x, labels), dtype, n, scale=1.0)
        gamma, beta = _data(n, dtype, 5, 1.0), _data(n, dtype, 6, 1.0)
        y64, xhat, _ = _layernorm64(x, gamma, beta, 1e-5)
        close(cupy.asnumpy(rows.layernorm(cupy, dx, cupy.asarray(gamma), cupy.asarray(beta),
                                          1e-5)), y64, dtype, n,
              np.abs(xhat * gamma) + np.abs(beta))
