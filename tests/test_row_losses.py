"""Row passes of log-softmax, cross-entropy, the exact GELU and rmsnorm's forward pass
(`adc_runtime.row_losses`, `row_gelu`, `row_norms`): the bits of the table kernels and of
the adjoints' ops one by one (rmsnorm's forward pass: within its documented bound), for
size-1, long and empty rows, NaNs and infinities; programs' results unchanged with them;
their gradients against central differences in float64."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import row_fusion, row_gelu, row_losses, row_norms, row_passes, specialize
from adc_runtime.kernels import KERNELS
from test_row_passes import bits, sample

pytest.importorskip("numba")
pytest.importorskip("scipy")

SHAPES = [(5, 128), (3, 7), (4, 1), (0, 9), (2, 3, 300), (1, 1031)]
DTYPES = [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_kernels_match_table(shape, dtype):
    rng = np.random.default_rng(shape[-1] + len(shape))
    x, dt = sample(shape, dtype, rng), np.dtype(dtype)
    got = row_gelu.gelu_erf_runner(shape, dt)(x, None)[0]
    assert bits(got) == bits(KERNELS["gelu"](np, x, approximate="none"))
    rows, n = int(np.prod(shape[:-1])), shape[-1]
    if n == 0:
        return
    got = row_losses.log_softmax_runner(shape, dt)(x, None)[0]
    assert bits(got) == bits(KERNELS["log_softmax"](np, x, axis=-1))
    labels = rng.integers(0, n, shape[:-1])
    table = specialize.cross_entropy_softmax(shape[:-1], n)
    ce, p = row_losses.cross_entropy_softmax(shape[:-1], n, dt, table)(x, labels)
    want_ce, want_p = table(x, labels)
    assert bits(ce) == bits(want_ce) and bits(p) == bits(want_p)
    assert bits(ce) == bits(KERNELS["cross_entropy"](np, x, labels, axis=-1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_adjoint_kernels_match_their_ops(shape, dtype):
    rng = np.random.default_rng(shape[-1])
    rows, n = int(np.prod(shape[:-1])), shape[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, ct = sample(shape, dtype, rng), sample(shape, dtype, rng, specials=False)
        c = {k: dtype(v) for k, v in dict(half=0.5, one=1.0, r2=np.sqrt(0.5),
                                          mhalf=-0.5, c=1 / np.sqrt(2 * np.pi)).items()}
        from scipy.special import erf
        deriv = (c["half"] * (c["one"] + erf(x * c["r2"]))
                 + x * (c["c"] * np.exp(c["mhalf"] * np.square(x))))
        t, u, out = (np.empty(x.size, dtype) for _ in range(3))
        row_passes.get("gelu_erf_grad_inner")(x.reshape(-1), t, u, c["r2"], c["mhalf"])
        erf(t, out=t)
        np.exp(u, out=u)
        row_passes.get("gelu_erf_grad_outer")(x.reshape(-1), t, u, ct.reshape(-1), out,
                                              c["half"], c["one"], c["c"])
        assert bits(out) == bits(ct * deriv)
        y = KERNELS["log_softmax"](np, x, axis=-1) if n else x
        out = np.empty_like(x)
        row_passes.get("log_softmax_adjoint_rows")(
            ct.reshape(rows, n), np.exp(y).reshape(rows, n), out.reshape(rows, n), dtype(0))
        assert bits(out) == bits(ct - np.exp(y) * np.add.reduce(ct, axis=-1, keepdims=True))
        if n == 0:
            return
        p = KERNELS["softmax"](np, x, axis=-1)
        labels = rng.integers(0, n, shape[:-1])
        cte = sample(shape[:-1] + (1,), dtype, rng, specials=False)
        onehot = KERNELS["one_hot"](np, labels, n, dtype="f32" if dtype is np.float32 else "f64")
        want = cte * (p - onehot)
        flat = specialize.label_indices("i64", shape[:-1], n)(labels)
        for oh, name in ((flat, "ce_adjoint_flat"), (onehot, "ce_adjoint_onehot")):
            out = np.empty_like(x)
            k = row_passes.get(name)
            extra = (dtype(1),) if name.endswith("flat") else ()
            k(cte.reshape(rows), p.reshape(rows, n), oh if oh.ndim == 1 else oh.reshape(rows, n),
              out.reshape(rows, n), *extra)
            assert bits(out) == bits(want), name


def bound_check(got, want, n, dtype):
    """rmsnorm's documented bound (`row_norms`): |d| <= (n + 16) u |want| (+ the smallest
    subnormal), NaNs where the table's are."""
    u = np.finfo(dtype).eps / 2
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    g, w = got[ok].astype(np.float64), want[ok].astype(np.float64)
    assert np.array_equal(np.isinf(g), np.isinf(w))
    fin = np.isfinite(w)
    tol = (n + 16) * u * np.abs(w[fin]) + np.finfo(dtype).smallest_subnormal
    assert (np.abs(g[fin] - w[fin]) <= tol).all(), np.abs(g[fin] - w[fin]).max()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("eps", [1e-6, 0.0])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 128), (3, 7), (4, 1), (0, 9), (2, 3, 300), (6, 1031)])
def test_rmsnorm_forward_within_bound(shape, dtype, eps):
    """Rows of every magnitude (squares that overflow or underflow: the scaled rows), a
    NaN, infinities and a row of zeros."""
    rng = np.random.default_rng(shape[-1] * 3 + int(eps == 0))
    big = 300 if dtype is np.float64 else 40
    scale = 10.0 ** rng.uniform(-big, big, shape[:-1] + (1,))
    x = (rng.standard_normal(shape) * scale).astype(dtype)
    g = rng.standard_normal(shape[-1]).astype(dtype)
    f = x.reshape(-1, shape[-1])
    if f.shape[0] > 3 and shape[-1] > 2:
        f[0, 1], f[1, 2], f[2] = np.nan, np.inf, 0.0
    got = row_norms.rmsnorm_runner(shape, np.dtype(dtype), eps)(x, g, None)
    if shape[-1] == 0:
        assert got is None
        return
    bound_check(got[0], KERNELS["rmsnorm"](np, x, g, axis=-1, eps=eps), shape[-1], dtype)
    # a finite array with every row within range: the table kernel's unscaled path
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    bound_check(row_norms.rmsnorm_runner(shape, np.dtype(dtype), eps)(x, g, None)[0],
                KERNELS["rmsnorm"](np, x, g, axis=-1, eps=eps), shape[-1], dtype)


PROGRAM = """
def f(x: f32[B, D], y: i64[B], w: f32[D, D]) -> f32 {
    h = gelu(x @ w)
    return mean(cross_entropy(h, y)) + mean(log_softmax(h * 0.5, axis=-1) * x)
}
"""
RMS = """
def f(x: f32[B, D], y: i64[B], w: f32[D, D], g: f32[D]) -> f32 {
    h = gelu(rmsnorm(x, g) @ w)
    return mean(cross_entropy(h, y)) + mean(log_softmax(h, axis=-1) * x)
}
"""


def run(monkeypatch, src, fuse, shape, dtype="f32", seed=0):
    monkeypatch.setenv("ADC_FUSE", "1" if fuse else "0")
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    B, D = shape
    npd = "float32" if dtype == "f32" else "float64"
    rng = np.random.default_rng(seed)
    args = dict(x=rng.standard_normal(shape).astype(npd), y=rng.integers(0, D, B),
                w=(rng.standard_normal((D, D)) / 2).astype(npd))
    wrt = ["x", "w"]
    if "g: f32" in src:
        args["g"], wrt = (1 + rng.standard_normal(D) / 4).astype(npd), ["x", "w", "g"]
    src = src.replace("f32", dtype)
    vg = adc.value_and_grad(src, "f", wrt=wrt, dims=dict(B=B, D=D))
    fwd = adc.function(src, "f", dims=dict(B=B, D=D))
    value, grads = vg(**args)
    return [value, *grads, fwd(**args)], vg, args


def groups(vg, dims) -> int:
    from adc_runtime.compiled import CompiledExecutor
    m = vg.module
    fn = m[[n for n in m.functions if n.endswith("_grad")][0]]
    ex = CompiledExecutor(m, np, dims)
    ex._allocate_arena(fn)
    return ex.compile_function(fn).source.count(" is not None:")


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value")
@pytest.mark.parametrize("shape", [(6, 9), (1, 1), (0, 4), (3, 130)])
def test_programs_unchanged(monkeypatch, shape):
    ref, _, _ = run(monkeypatch, PROGRAM, False, shape)
    got, vg, _ = run(monkeypatch, PROGRAM, True, shape)
    assert [bits(a) for a in got] == [bits(a) for a in ref]
    # forward: GELU, log-softmax; adjoints: log-softmax's, cross-entropy's, the GELU's
    assert groups(vg, dict(B=shape[0], D=shape[1])) == 5


def test_rmsnorm_program_within_rounding(monkeypatch):
    ref, _, _ = run(monkeypatch, RMS, False, (6, 9))
    got, vg, _ = run(monkeypatch, RMS, True, (6, 9))
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    assert groups(vg, dict(B=6, D=9)) == 7   # and rmsnorm's forward pass and adjoint


def test_gradients_against_central_differences(monkeypatch):
    """float64, every row pass on (their loops compiled for f64: a few seconds once)."""
    got, vg, args = run(monkeypatch, RMS, True, (3, 5), "f64", seed=4)
    f = adc.function(RMS.replace("f32", "f64"), "f", dims=dict(B=3, D=5))
    for k, name in ((1, "x"), (2, "w"), (3, "g")):
        a = args[name]
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            d = dict(args)
            for s in (1, -1):
                d[name] = a.copy()
                d[name][idx] += s * 1e-6
                num[idx] += s * float(f(**d))
        np.testing.assert_allclose(got[k], num / 2e-6, rtol=1e-6, atol=1e-8)
