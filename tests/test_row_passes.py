"""Row passes (`adc_runtime.row_passes`, `row_fusion`, `row_patterns`): softmax, layernorm,
the tanh GELU and their adjoints as one loop per row give the bits of the table kernels
and of the adjoint's ops run one by one (``ADC_FUSE=0``), for f32 and f64, size-1 and long
rows, empty batches, NaNs and infinities; operands that are not C-contiguous run the ops
one by one; and a program's results and gradients do not change with them."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import row_fusion, row_passes
from adc_runtime.kernels import KERNELS
from adc_runtime.specialize import mean

pytest.importorskip("numba")

SHAPES = [(5, 128), (3, 7), (4, 1), (0, 9), (2, 3, 300), (1, 1031), (6, 64)]
# f64 compiles every loop a second time (numba caches it, but a fresh checkout has no
# cache): the slow runs take it
DTYPES = [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)]


def bits(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def sample(shape, dtype, rng, specials=True):
    x = (rng.standard_normal(shape) * 5).astype(dtype)
    if specials and x.size > 20:
        f = x.reshape(-1)
        f[3], f[11], f[17], f[5], f[6] = np.nan, np.inf, -np.inf, 0.0, -0.0
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_kernels_match_table(shape, dtype):
    rng = np.random.default_rng(len(shape) * 31 + shape[-1])
    x = sample(shape, dtype, rng)
    dt = np.dtype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if shape[-1]:
            got = row_fusion.softmax_runner(shape, dt)(x, None)[0]
            assert bits(got) == bits(KERNELS["softmax"](np, x, axis=-1))
            g, b = (rng.standard_normal(shape[-1]).astype(dtype) for _ in range(2))
            out = np.empty_like(x)
            row_fusion.layernorm_runner(shape, dt, 1e-5)(x, g, b, out)
            assert bits(out) == bits(KERNELS["layernorm"](np, x, g, b, axis=-1, eps=1e-5))
        got = row_fusion.gelu_tanh_runner(shape, dt)(x, None)[0]
        assert bits(got) == bits(KERNELS["gelu"](np, x, approximate="tanh"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_adjoint_kernels_match_their_ops(shape, dtype):
    """The loops against the VJP rules' ops as NumPy runs them (`specialize.mean` is the
    compiled executor's mean)."""
    rng = np.random.default_rng(shape[-1])
    rows, n = int(np.prod(shape[:-1])), shape[-1]
    z = dtype(0)
    y, dy = sample(shape, dtype, rng), sample(shape, dtype, rng, specials=False)
    out = np.empty_like(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row_passes.get("softmax_adjoint_rows")(dy.reshape(rows, n), y.reshape(rows, n),
                                               out.reshape(rows, n), z)
        assert bits(out) == bits(y * (dy - np.add.reduce(dy * y, axis=-1, keepdims=True)))
        if n:
            x, ct = sample(shape, dtype, rng), sample(shape, dtype, rng)
            gamma = rng.standard_normal(n).astype(dtype)
            mn = mean(shape, len(shape) - 1, True)
            xc = x - mn(x)
            rstd = 1 / np.sqrt(mn(xc * xc) + dtype(1e-5))
            xhat = xc * rstd
            g = ct * gamma
            want = rstd * ((g - mn(g)) - xhat * mn(g * xhat))
            gx, kept = np.empty_like(x), np.empty_like(x)
            row_passes.get("layernorm_adjoint_rows")(
                x.reshape(rows, n), ct.reshape(rows, n), gamma, gx.reshape(rows, n),
                kept.reshape(rows, n), dtype(1e-5), z, dtype(1), True)
            assert bits(gx) == bits(want) and bits(kept) == bits(xhat)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_sum_is_numpys_pairwise_sum(dtype):
    rng = np.random.default_rng(3)
    for n in list(range(0, 140)) + [255, 256, 257, 1000, 1031, 4096, 12345]:
        x = (rng.standard_normal((2, n)) * 10 ** rng.uniform(-3, 3, (2, n))).astype(dtype)
        out = np.empty(2, dtype)
        row_passes.get("row_sums")(x, out, dtype(0))
        assert bits(out) == bits(np.add.reduce(x, axis=-1)), (dtype, n)


BLOCK = """
def f(x: f32[B, T, D], g: f32[D], b: f32[D], w: f32[D, D]) -> f32 {
    p = softmax(x @ w * 0.5, axis=-1)
    a = layernorm(x + p, g, b)
    h = gelu(a @ w, approximate="tanh")
    return mean(h * layernorm(h, g, b))
}
"""


def run_block(monkeypatch, fuse: bool, dtype="f32", shape=(2, 3, 8)):
    monkeypatch.setenv("ADC_FUSE", "1" if fuse else "0")
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    B, T, D = shape
    rng = np.random.default_rng(7)
    npd = "float32" if dtype == "f32" else "float64"
    args = dict(x=rng.standard_normal(shape).astype(npd), g=rng.standard_normal(D).astype(npd),
                b=rng.standard_normal(D).astype(npd),
                w=(rng.standard_normal((D, D)) / 3).astype(npd))
    src = BLOCK if dtype == "f32" else BLOCK.replace("f32", "f64")
    vg = adc.value_and_grad(src, "f", wrt=["x", "g", "b", "w"], dims=dict(B=B, T=T, D=D))
    fwd = adc.function(src, "f", dims=dict(B=B, T=T, D=D))
    return [vg(**args)[0], *vg(**args)[1], fwd(**args)], vg


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value")
@pytest.mark.parametrize("dtype", ["f32", pytest.param("f64", marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape", [(2, 3, 8), (1, 1, 1), (0, 3, 4), (2, 1, 130)])
def test_programs_unchanged(monkeypatch, dtype, shape):
    ref, _ = run_block(monkeypatch, False, dtype, shape)
    got, vg = run_block(monkeypatch, True, dtype, shape)
    assert [bits(a) for a in got] == [bits(a) for a in ref]


def test_groups_are_formed(monkeypatch):
    """Forward softmax, two layernorms and the GELU, their adjoints (the GELU's and both
    layernorms', softmax's): eight groups in the gradient program."""
    monkeypatch.setenv("ADC_FUSE", "1")
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    from adc_runtime.compiled import CompiledExecutor
    m = adc.value_and_grad(BLOCK, "f", wrt=["x", "g", "b", "w"], dims=dict(B=2, T=3, D=8)).module
    ex = CompiledExecutor(m, np, dict(B=2, T=3, D=8))
    fn = m[[n for n in m.functions if n.endswith("_grad")][0]]
    ex._allocate_arena(fn)
    src = ex.compile_function(fn).source
    assert src.count(" is not None:") == 8


def test_not_contiguous_runs_the_ops(monkeypatch):
    """softmax of a transposed operand: the pass declines, the table kernel runs."""
    monkeypatch.setenv("ADC_FUSE", "1")
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    src = "def f(x: f32[N, M]) -> f32[M, N] { return softmax(transpose(x), axis=-1) }"
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    got = adc.function(src, "f")(x=x)
    assert bits(got) == bits(KERNELS["softmax"](np, np.ascontiguousarray(x.T), axis=-1))
    assert row_fusion.softmax_runner((6, 5), np.dtype("float32"))(x.T, None) is None


def test_row_passes_after_the_calls_took_long_enough(monkeypatch):
    """By default (``ADC_FUSE`` unset) an executor runs the table kernels until its calls
    have taken `ROWS_AFTER_S`, then makes its programs again with row passes: the same
    bits before and after."""
    monkeypatch.delenv("ADC_FUSE", raising=False)
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(row_passes, "ROWS_AFTER_S", 0.0)
    from adc_runtime.compiled import CompiledExecutor
    m = adc.parse_tdsl(BLOCK)
    x = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)
    g, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    w = np.eye(8, dtype=np.float32)
    ex = CompiledExecutor(m, np, dict(B=2, T=3, D=8))
    assert ex.rows == "later"
    first = ex.call(m["f"], [x, g, b, w])   # on the table kernels; then the switch
    assert ex.rows == "now" and not ex._programs
    second = ex.call(m["f"], [x, g, b, w])
    assert ex._programs[id(m["f"])].source.count(" is not None:") == 4
    assert bits(first[0]) == bits(second[0])


# the cotangent `c` does not depend on rmsnorm's forward pass, whose row pass is within a
# rounding bound of the table kernel (`tests/test_row_losses.py`), not its bits
RMS = """
def f(x: f32[B, D], g: f32[D], c: f32[B, D]) -> f32 {
    return mean(rmsnorm(x, g) * c)
}
"""


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value")
@pytest.mark.parametrize("shape", [(4, 8), (3, 300), (1, 1), (0, 5), (5, 130)])
def test_rmsnorm_adjoint(monkeypatch, shape):
    """rmsnorm's adjoint (eps > 0) as one loop per row: the bits of its ops, rows of every
    magnitude (where a square would overflow, the VJP rule scales the row) and a NaN."""
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    rng = np.random.default_rng(shape[1])
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-30, 30, (shape[0], 1)))
    x = x.astype(np.float32)
    if x.size > 10:
        x.reshape(-1)[3] = np.nan
    g = rng.standard_normal(shape[1]).astype(np.float32)
    c = rng.standard_normal(shape).astype(np.float32)
    got = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("ADC_FUSE", flag)
        vg = adc.value_and_grad(RMS, "f", wrt=["x", "g"], dims=dict(B=shape[0], D=shape[1]))
        with np.errstate(all="ignore"):
            got[flag] = [bits(a) for a in vg(x=x, g=g, c=c)[1]]
    assert got["1"] == got["0"]


def test_rmsnorm_group_is_formed(monkeypatch):
    monkeypatch.setenv("ADC_FUSE", "1")
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    from adc_runtime.compiled import CompiledExecutor
    m = adc.value_and_grad(RMS, "f", wrt=["x", "g"], dims=dict(B=2, D=8)).module
    fn = m[[n for n in m.functions if n.endswith("_grad")][0]]
    ex = CompiledExecutor(m, np, dict(B=2, D=8))
    ex._allocate_arena(fn)
    assert ex.compile_function(fn).source.count(" is not None:") == 2   # and the forward
