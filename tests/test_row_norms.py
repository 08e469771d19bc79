"""batchnorm as one pass per channel (`adc_runtime.row_norms`), forward and adjoint: the
bits of the table kernels of batchnorm and of `batchnorm_running` in training (its new
running statistics too), along any channel axis, for one-element channels, one channel,
NaNs and infinities; programs' values, gradients and new statistics unchanged with it
(the adjoint's bits are the VJP rule's ops'); gradients against central differences in
float64."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import row_fusion, row_norms
from adc_runtime.kernels import KERNELS
from test_row_passes import bits, sample

pytest.importorskip("numba")

CASES = [((16, 8, 5, 5), 1), ((4, 3, 129), 1), ((16, 8), 1), ((7, 5, 1), 1), ((2, 3, 6), -1),
         ((2, 3, 6), 0), ((1, 1), 1), ((5, 1, 2, 2), 1), ((6,), 0), ((0, 3, 4), 1),
         ((64, 1, 8, 8), 1), ((5, 1, 3, 3), 1)]   # one channel: NumPy sums one run


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape,axis", CASES)
def test_kernels_match_table(shape, axis, dtype):
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = sample(shape, dtype, rng) + dtype(1)
    c = shape[axis]
    g, b, m0, v0 = (rng.standard_normal(c).astype(dtype) for _ in range(4))
    dt = np.dtype(dtype)
    plain = row_norms.batchnorm_runner(shape, dt, axis, 1e-5)
    running = row_norms.batchnorm_runner(shape, dt, axis, 1e-5, (0.1,))
    if x.size == 0:
        assert plain(x, g, b, None) is None and running(x, g, b, m0, v0, None, None, None) is None
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert bits(plain(x, g, b, None)[0]) == bits(
            KERNELS["batchnorm"](np, x, g, b, axis=axis, eps=1e-5))
        want = KERNELS["batchnorm_running"](np, x, g, b, m0, v0, axis=axis, eps=1e-5,
                                            momentum=0.1, training=True)
        bufs = [np.empty_like(x), m0, v0]   # the new statistics over the old (donated)
        got = running(x, g, b, m0.copy(), v0.copy(), *bufs)
    assert [bits(a) for a in got] == [bits(a) for a in want]


SRC = """
def f(x: f32[B, C, H, W], g: f32[C], b: f32[C], g2: f32[C], c: f32[B, C, H, W],
      state m: f32[C] = 0, state v: f32[C] = 1) -> f32 {
    y, m, v = batchnorm_running(x, g, b, m, v)
    return mean(y * x) + mean(batchnorm(x * x, g2, b) * c)
}
"""


def run(monkeypatch, fuse, shape, dtype="f32"):
    monkeypatch.setenv("ADC_FUSE", "1" if fuse else "0")
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    B, C, H, W = shape
    npd = "float32" if dtype == "f32" else "float64"
    rng = np.random.default_rng(1)
    args = dict(x=rng.standard_normal(shape).astype(npd), g=rng.standard_normal(C).astype(npd),
                b=rng.standard_normal(C).astype(npd), g2=rng.standard_normal(C).astype(npd),
                c=rng.standard_normal(shape).astype(npd),
                m=rng.standard_normal(C).astype(npd), v=rng.uniform(1, 2, C).astype(npd))
    vg = adc.value_and_grad(SRC.replace("f32", dtype), "f", wrt=["x", "g", "b", "g2"],
                            dims=dict(B=B, C=C, H=H, W=W), has_aux=True)
    (value, aux), grads = vg(**args)
    return [value, *aux, *grads], vg, args


@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (1, 2, 1, 3), (2, 1, 1, 1), (5, 1, 3, 3)])
def test_programs_unchanged(monkeypatch, shape):
    ref, _, _ = run(monkeypatch, False, shape)
    got, vg, _ = run(monkeypatch, True, shape)
    assert [bits(a) for a in got] == [bits(a) for a in ref]
    from adc_runtime.compiled import CompiledExecutor
    m = vg.module
    fn = m[[n for n in m.functions if n.endswith("_grad")][0]]
    ex = CompiledExecutor(m, np, dict(zip("BCHW", shape)))
    ex._allocate_arena(fn)
    # both forward ops, and both adjoints (batchnorm's rule serves batchnorm_running's)
    assert ex.compile_function(fn).source.count(" is not None:") == 4


def test_gradients_against_central_differences(monkeypatch):
    got, _, args = run(monkeypatch, True, (3, 2, 2, 2), "f64")
    f = adc.value_and_grad(SRC.replace("f32", "f64"), "f", wrt=["x"], has_aux=True,
                           dims=dict(B=3, C=2, H=2, W=2))
    for k, name in ((3, "x"), (4, "g"), (5, "b"), (6, "g2")):
        a = args[name]
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            for s in (1, -1):
                d = dict(args, **{name: a.copy()})
                d[name][idx] += s * 1e-6
                num[idx] += s * float(f(**d)[0][0])
        np.testing.assert_allclose(got[k], num / 2e-6, rtol=1e-6, atol=1e-8)


def test_shared_gamma_and_cotangent(monkeypatch):
    """Two batchnorms of one gamma whose cotangents are equal share ops of their adjoints
    (common subexpressions): the adjoints run op by op, the same bits."""
    src = """
def f(x: f32[B, C, H, W], g: f32[C], b: f32[C]) -> f32 {
    return mean(batchnorm(x, g, b) * x) + mean(batchnorm(x * x, g, b) * x)
}
"""
    rng = np.random.default_rng(5)
    args = dict(x=rng.standard_normal((4, 3, 5, 5)).astype(np.float32),
                g=rng.standard_normal(3).astype(np.float32),
                b=rng.standard_normal(3).astype(np.float32))
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    got = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("ADC_FUSE", flag)
        vg = adc.value_and_grad(src, "f", wrt=["x", "g", "b"], dims=dict(B=4, C=3, H=5, W=5))
        value, grads = vg(**args)
        got[flag] = [bits(a) for a in (value, *grads)]
    assert got["0"] == got["1"]


def test_adjoint_without_beta_gradient(monkeypatch):
    """Only dx and dgamma read after the adjoint (beta not differentiated): one call still
    writes them, dbeta staying inside."""
    src = """
def f(x: f32[B, C, H, W], g: f32[C], b: f32[C], c: f32[B, C, H, W]) -> f32 {
    return mean(batchnorm(x, g, b) * c)
}
"""
    rng = np.random.default_rng(6)
    args = {k: rng.standard_normal(s).astype(np.float32)
            for k, s in (("x", (4, 3, 5, 5)), ("g", 3), ("b", 3), ("c", (4, 3, 5, 5)))}
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    got = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("ADC_FUSE", flag)
        vg = adc.value_and_grad(src, "f", wrt=["x", "g"], dims=dict(B=4, C=3, H=5, W=5))
        value, grads = vg(**args)
        got[flag] = [bits(a) for a in (value, *grads)]
    assert got["0"] == got["1"]
    from adc_runtime.compiled import CompiledExecutor
    m = vg.module
    fn = m[[n for n in m.functions if n.endswith("_grad")][0]]
    ex = CompiledExecutor(m, np, dict(B=4, C=3, H=5, W=5))
    ex._allocate_arena(fn)
    assert ex.compile_function(fn).source.count(" is not None:") == 2
