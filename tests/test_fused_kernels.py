"""The kernels that fuse several NumPy passes into fewer (the in-place forms of gelu,
softmax and layernorm, the compiled executor's specialized reductions and its shared
cross-entropy/softmax) against the table kernels they replace: the same bits, on edge
shapes too (0-d, empty, size-1 axes); and a compiled gradient through all of them against
central differences."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import specialize
from adc_runtime.kernels import KERNELS, OUT_KERNELS

SHAPES = [(), (0,), (1,), (5,), (3, 1), (1, 4), (2, 0, 3), (2, 3, 4)]


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    if x.size > 2:   # values where the formulas meet their edges
        flat = x.reshape(-1)
        flat[0], flat[1] = 0.0, -0.0
    return x


def same_bits(want, got):
    want, got = np.asarray(want), np.asarray(got)
    assert want.dtype == got.dtype and want.shape == got.shape
    assert want.tobytes() == got.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_in_place_form_matches_the_table_kernel(shape, dtype, approximate):
    x = data(shape, dtype)
    out = np.full(shape, np.nan, dtype)
    got = OUT_KERNELS["gelu"](np, x, out=out, approximate=approximate)
    assert got is out
    same_bits(KERNELS["gelu"](np, x, approximate=approximate), out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axis", [((1,), -1), ((5,), 0), ((3, 1), -1), ((3, 1), 0),
                                         ((1, 4), 1), ((0, 3), -1), ((2, 3, 4), 1),
                                         ((2, 3, 4), -1)], ids=str)
def test_softmax_in_place_form_matches_the_table_kernel(shape, axis, dtype):
    x = data(shape, dtype)
    if x.size:
        x[(0,) * x.ndim] = 80.0   # exp would overflow without the shift
    out = np.empty(shape, dtype)
    same_bits(KERNELS["softmax"](np, x, axis=axis), OUT_KERNELS["softmax"](np, x, out=out, axis=axis))
    inplace = x.copy()   # the result may replace its operand
    same_bits(KERNELS["softmax"](np, x, axis=axis), OUT_KERNELS["softmax"](np, inplace, out=inplace, axis=axis))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axis", [((1,), -1), ((5,), 0), ((3, 1), -1), ((1, 4), -1),
                                         ((0, 3), -1), ((2, 3, 4), -1), ((2, 3, 4), 1)],
                         ids=str)
def test_layernorm_in_place_form_matches_the_table_kernel(shape, axis, dtype):
    x = data(shape, dtype)
    n = shape[axis]
    gamma, beta = data((n,), dtype, 1), data((n,), dtype, 2)
    want = KERNELS["layernorm"](np, x, gamma, beta, axis=axis, eps=1e-5)
    out = np.empty(shape, dtype)
    same_bits(want, OUT_KERNELS["layernorm"](np, x, gamma, beta, out=out, axis=axis, eps=1e-5))
    inplace = x.copy()
    same_bits(want, OUT_KERNELS["layernorm"](np, inplace, gamma, beta, out=inplace, axis=axis,
                                             eps=1e-5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axis, keepdims", [
    ((), None, False), ((1,), None, False), ((5,), 0, True), ((3, 1), 1, False),
    ((3, 1), [0, 1], True), ((2, 3, 4), -1, False), ((2, 3, 4), [0, 2], False),
    ((2, 3, 4), None, True), ((2, 0, 3), 0, False)], ids=str)
def test_specialized_mean_matches_the_table_kernel(shape, axis, keepdims, dtype):
    x = data(shape, dtype)
    run = specialize.mean(shape, axis, keepdims)
    assert run is not None
    same_bits(KERNELS["mean"](np, x, axis=axis, keepdims=keepdims), run(x))


def test_specialized_mean_leaves_an_empty_mean_to_the_table_kernel():
    assert specialize.mean((0, 3), 0, False) is None
    assert specialize.mean((2, 0), None, False) is None


SUM_TO = [((4, 3), (3,)), ((4, 3), (1, 3)), ((4, 3), (4, 1)), ((1, 3), (3,)),
          ((2, 1, 3), (1, 3)), ((0, 3), (3,)), ((), ()), ((3,), (3,)), ((16, 0), (0,)),
          # blocked: rows of m*C elements first (m = 8, 16, 32)
          ((128, 5), (5,)), ((256, 3), (1, 3)), ((16, 8, 2), (2,)), ((1024, 64), (64,)),
          ((8, 16, 3), (1, 1, 3)), ((192, 2), (2,)), ((384, 7), (7,)), ((1, 256, 8), (8,)),
          ((1, 256, 8), (1, 1, 8)), ((256, 1, 8), (1, 8)), ((128, 4, 1), (1, 4, 1)),
          # not blocked: too few rows, rows too long, no power-of-two block
          ((64, 3), (3,)), ((256, 256), (256,)), ((130, 4), (4,)), ((192, 1), (1,))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("in_shape, shape", SUM_TO, ids=str)
def test_specialized_sum_to_matches_the_table_kernel(in_shape, shape, dtype):
    x = data(in_shape, dtype)
    got = specialize.sum_to(in_shape, shape, dtype)(x)
    same_bits(KERNELS["sum_to"](np, x, shape=shape), got)
    assert not np.shares_memory(got, x)
    if x.ndim >= 2:  # a strided view of the same values adds in the same order
        strided = np.empty(in_shape[:-1] + (2 * in_shape[-1],), dtype)[..., ::2]
        strided[...] = x
        same_bits(got, KERNELS["sum_to"](np, strided, shape=shape))


def _sum_rows_in_order(x, rows, cols):
    """A Python loop adding rows as `sum_to_plan` documents, for a reference (rows of two
    or more elements: NumPy sums a single column pairwise)."""
    from adc_runtime.kernels.reduce import BLOCK_ELEMENTS, BLOCK_MAX_COLS, BLOCK_MIN_ROWS
    flat = x.reshape(rows, cols)
    m = 1
    while rows % (2 * m) == 0 and 2 * m * cols <= BLOCK_ELEMENTS and 4 * m * m <= rows:
        m *= 2
    if m < 4 or rows < BLOCK_MIN_ROWS or not 1 < cols <= BLOCK_MAX_COLS:
        m = 1
    block = [np.zeros(cols, x.dtype) for _ in range(m)]   # NumPy's sums start at +0.0
    for a in range(rows // m):
        for b in range(m):
            block[b] = block[b] + flat[a * m + b]
    total = np.zeros(cols, x.dtype)
    for b in range(m):
        total = total + block[b]
    return total


def _rows(in_shape, shape):
    """(rows, cols) of `x` when `sum_to` sums rows (its summed axes come first, but for
    axes of size 1), or None."""
    lead = len(in_shape) - len(shape)
    axes = list(range(lead)) + [lead + k for k, d in enumerate(shape)
                                if d == 1 and in_shape[lead + k] != 1]
    if not axes or any(j < axes[-1] for j, d in enumerate(in_shape) if d != 1 and j not in axes):
        return None
    return (int(np.prod([in_shape[j] for j in axes])),
            int(np.prod([d for j, d in enumerate(in_shape) if j not in axes])))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("in_shape, shape", [s for s in SUM_TO if _rows(*s)
                                             and _rows(*s)[1] > 1 and all(s[0])], ids=str)
def test_sum_to_adds_in_the_documented_order(in_shape, shape, dtype):
    x = data(in_shape, dtype)
    got = KERNELS["sum_to"](np, x, shape=shape)
    rows, cols = _rows(in_shape, shape)
    same_bits(_sum_rows_in_order(x, rows, cols).reshape(shape), got)
    want = x.astype(np.float64).reshape(rows, cols).sum(axis=0).reshape(shape)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_sum_to_on_signed_zeros_inf_and_nan(dtype):
    x = np.full((128, 4), -0.0, dtype)
    x[5, 1], x[127, 2] = np.inf, np.nan
    x[:, 3] = 1.0
    x[7, 3], x[9, 3] = np.inf, -np.inf
    got = KERNELS["sum_to"](np, x, shape=(4,))
    # all -0.0 sums to +0.0, as numpy.sum does (its reduction starts from the identity 0)
    assert got[0] == 0 and np.signbit(got[0]) == np.signbit(np.sum(x[:, 0]))
    assert got[1] == np.inf and np.isnan(got[2]) and np.isnan(got[3])
    same_bits(got, specialize.sum_to((128, 4), (4,), dtype)(x))


@pytest.mark.parametrize("labels_shape, classes", [((6,), 4), ((), 3), ((1,), 1), ((0,), 5),
                                                   ((2, 3), 4), ((2, 0), 3)], ids=str)
def test_shared_cross_entropy_and_softmax_match_the_table_kernels(labels_shape, classes):
    z = data(labels_shape + (classes,), np.float32)
    if z.size:
        z[(0,) * z.ndim] = 90.0
    labels = np.random.default_rng(3).integers(0, classes, labels_shape)
    ce, sm = specialize.cross_entropy_softmax(labels_shape, classes)(z, labels)
    same_bits(KERNELS["cross_entropy"](np, z, labels), ce)
    same_bits(KERNELS["softmax"](np, z), sm)


def test_shared_cross_entropy_rejects_labels_past_the_classes():
    run = specialize.cross_entropy_softmax((2,), 3)
    with pytest.raises(IndexError):
        run(np.zeros((2, 3), np.float32), np.array([0, 3]))


@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1]])
def test_specialized_transpose_matches_the_table_kernel(perm):
    x = data((2, 3, 4), np.float32)
    same_bits(KERNELS["transpose"](np, x, perm=perm), specialize.transpose(perm)(x))


BLOCK = """
def block(x: f64[B, D], labels: i64[B], param W: f64[D, D], param g: f64[D],
          param b: f64[D], param V: f64[D, C]) -> f64 {
    a = layernorm(gelu(x @ W, approximate="tanh") + gelu(x, approximate="none"), g, b)
    p = softmax(a, axis=-1)
    return mean(cross_entropy((a * p) @ V, labels)) + mean(p * p)
}
"""


def test_compiled_gradient_through_the_fused_kernels_matches_central_differences():
    rng = np.random.default_rng(7)
    B, D, C = 4, 5, 3
    inputs = {"x": rng.standard_normal((B, D)), "labels": rng.integers(0, C, B),
              "W": rng.standard_normal((D, D)) * 0.5, "g": 1 + 0.1 * rng.standard_normal(D),
              "b": 0.1 * rng.standard_normal(D), "V": rng.standard_normal((D, C))}
    params = ["W", "g", "b", "V"]
    vg = adc.value_and_grad(BLOCK, wrt=params)
    f = adc.function(BLOCK)
    loss, grads = vg(**inputs)
    assert float(loss) == pytest.approx(float(f(**inputs)), rel=1e-12)
    eps = 1e-6
    for name, g in zip(params, grads):
        want = np.zeros_like(inputs[name])
        for idx in np.ndindex(want.shape):
            plus, minus = dict(inputs), dict(inputs)
            plus[name], minus[name] = inputs[name].copy(), inputs[name].copy()
            plus[name][idx] += eps
            minus[name][idx] -= eps
            want[idx] = (float(f(**plus)) - float(f(**minus))) / (2 * eps)
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8, err_msg=name)


def test_compiled_gradient_through_the_fused_kernels_is_the_interpreters():
    from adc_runtime.executor import Runner
    src = BLOCK.replace("f64", "f32")
    rng = np.random.default_rng(8)
    B, D, C = 6, 8, 4
    inputs = {"x": rng.standard_normal((B, D)), "labels": rng.integers(0, C, B),
              "W": rng.standard_normal((D, D)), "g": rng.standard_normal(D),
              "b": rng.standard_normal(D), "V": rng.standard_normal((D, C))}
    inputs = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in inputs.items()}
    vg = adc.value_and_grad(src, wrt=["W", "g", "b", "V"])
    for _ in range(2):   # the second call reuses the arena
        loss, grads = vg(**inputs)
    want, _ = Runner(vg.module, vg.fn_name)(inputs)
    for a, b in zip(want, [loss, *grads]):
        same_bits(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_where_zero_is_the_select_bit_for_bit(shape, dtype):
    a = data(shape, dtype)
    if a.size > 4:   # what a multiply by the mask would get wrong: -x * 0, inf * 0, nan
        flat = a.reshape(-1)
        flat[2], flat[3], flat[4] = np.inf, np.nan, -np.inf
    mask = data(shape, dtype, 5) > 0
    zero = np.zeros((), dtype)
    same_bits(KERNELS["where"](np, mask, a, zero), specialize.where_zero(np.dtype(dtype))(mask, a))
    strided = np.repeat(a[..., None], 2, axis=-1)[..., 0]   # operands need not be contiguous
    same_bits(KERNELS["where"](np, mask, strided, zero),
              specialize.where_zero(np.dtype(dtype))(mask, strided))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 4), (1, 1), (0, 3), (3,), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("label_dtype", ["i32", "i64"])
def test_subtract_one_hot_matches_the_table_kernels(shape, dtype, label_dtype):
    a = data(shape, dtype)
    labels = np.random.default_rng(4).integers(0, shape[-1] or 1, shape[:-1]).astype(label_dtype.replace("i", "int"))
    want = KERNELS["sub"](np, a, KERNELS["one_hot"](np, labels, n=shape[-1], dtype=np.dtype(dtype).name[0] + str(8 * np.dtype(dtype).itemsize)))
    run = specialize.subtract_one_hot(shape)
    idx = specialize.label_indices(label_dtype, shape[:-1], shape[-1])(labels)
    same_bits(want, run(a, idx))
    out = np.full(shape, np.nan, dtype)
    assert run(a, idx, out) is out
    same_bits(want, out)


def test_subtract_one_hot_leaves_labels_outside_the_classes_to_the_interpreter():
    run = specialize.subtract_one_hot((2, 3))
    a = np.zeros((2, 3), np.float32)
    for dtype in ("i32", "i64"):
        for bad in ([0, 3], [-1, 0], [0, -2**31], [2**31 - 1, 0]):   # one_hot: a zero row
            labels = np.array(bad, dtype.replace("i", "int"))
            with pytest.raises(IndexError):
                run(a, specialize.label_indices(dtype, (2,), 3)(labels))
    with pytest.raises(ValueError):
        run(a, specialize.label_indices("i64", (2,), 3)(np.array([0, 1])),
            np.zeros((3, 2), np.float32).T)


RELU_CE = """
def f(x: f32[B, D], labels: i64[B], param W: f32[D, C]) -> f32 {
    return mean(cross_entropy(relu(x @ W), labels))
}
"""


def test_compiled_relu_and_cross_entropy_adjoints_fall_back_on_bad_labels():
    from adc_runtime.compiled import CompiledExecutor
    from adc_runtime.executor import Runner
    vg = adc.value_and_grad(RELU_CE, wrt="W")
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal((5, 3)).astype(np.float32), "labels": np.array([0, 1, 3, 2, 1]),
              "W": rng.standard_normal((3, 4)).astype(np.float32)}
    src = CompiledExecutor(vg.module, np, {"B": 5, "D": 3, "C": 4}).compile_function(
        vg.module[vg.fn_name]).source
    assert "one_hot" not in src and "where" not in src
    want, _ = Runner(vg.module, vg.fn_name)(inputs)
    got, _ = Runner(vg.module, vg.fn_name,
                    make_executor=lambda d: CompiledExecutor(vg.module, np, d))(inputs)
    for a, b in zip(want, got):
        same_bits(a, b)
