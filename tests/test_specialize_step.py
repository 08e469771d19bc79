"""The compiled executor's kernels for the ops a training step repeats (``sum``,
``stack``, ``relu``) against the table kernels, bit for bit, on edge shapes and edge values
(empty, 0-d, size-1 axes, -0.0, inf, NaN); the same ops in compiled programs against the
interpreter; and `CompiledStep`'s reuse of the arrays it returned, which must never write
into an array it did not make."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import specialize
from adc_runtime.kernels import KERNELS, OUT_KERNELS
from test_compiled import assert_bits_equal, both, grad_module

SHAPES = [(), (0,), (1,), (5,), (3, 1), (1, 4), (2, 0, 3), (2, 3, 4)]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf, 0 * inf: by design
EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.5]


def data(shape, dtype, seed=0):
    x = np.asarray((np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype))
    flat = x.reshape(-1)
    flat[:len(EDGES)] = np.array(EDGES, dtype)[:flat.size]
    return x


def same_bits(want, got):
    want, got = np.asarray(want), np.asarray(got)
    assert want.dtype == got.dtype and want.shape == got.shape
    assert want.tobytes() == got.tobytes()


def axes_of(shape):
    rank = len(shape)
    out = [None]
    if rank:
        out += [0, -1, list(range(rank))]
    if rank >= 2:
        out += [1, [0, rank - 1]]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sum_matches_the_table_kernel_with_and_without_a_buffer(shape, dtype):
    for seed in (0, 1):
        x = data(shape, dtype, seed)
        if seed:
            x = np.asarray(np.abs(x))   # finite sums as well as NaN ones
            x[np.isnan(x) | np.isinf(x)] = 2.0
        for axis in axes_of(shape):
            for keepdims in (False, True):
                run = specialize.reduce_sum(len(shape), axis, keepdims)
                want = np.asarray(KERNELS["sum"](np, x, axis=axis, keepdims=keepdims))
                same_bits(want, np.asarray(run(x)))
                out = np.full(want.shape, 7.0, dtype)
                OUT_KERNELS["sum"](np, x, axis=axis, keepdims=keepdims, out=out)
                mine = np.full(want.shape, 7.0, dtype)
                assert run(x, out=mine) is mine
                same_bits(out, mine)
                same_bits(want, mine)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("count", [1, 3])
def test_stack_matches_the_table_kernel_on_every_axis(shape, dtype, count):
    xs = [data(shape, np.float64, seed).astype(dtype) if dtype is not np.int64
          else np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) + seed
          for seed in range(count)]
    for axis in range(-len(shape) - 1, len(shape) + 1):
        want = KERNELS["stack"](np, *xs, axis=axis)
        run = specialize.stack(count, len(shape), axis, want.shape, np.dtype(dtype))
        same_bits(want, run(*xs))
        out = np.full(want.shape, 9, dtype)
        assert run(*xs, out=out) is out
        same_bits(want, out)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_relu_matches_the_table_kernel(shape, dtype):
    x = data(shape, dtype)
    run = specialize.relu(np.dtype(dtype))
    same_bits(np.asarray(KERNELS["relu"](np, x)), np.asarray(run(x)))
    want = OUT_KERNELS["relu"](np, x, out=np.empty_like(x))
    out = np.full(shape, np.nan, dtype)
    assert run(x, out=out) is out
    same_bits(want, out)


PROGRAM = """
def f(x: f32[N, M], y: f32[M], param w: f32[M]) -> (f32, f32[N], f32[1, M], f32[3], f32[N, 2, M]) {
    h = relu(x * w)
    a = sum(h * h)
    b = sum(h, axis=1)
    c = sum(h, axis=0, keepdims=true)
    s = stack(a, sum(y * w), sum(w), axis=0)
    t = stack(h, relu(x), axis=1)
    return a + sum(s * s), b, c, s, t
}
"""


@pytest.mark.parametrize("n, m", [(4, 3), (1, 1), (0, 3), (3, 0)])
def test_compiled_sums_stacks_and_relus_are_the_interpreters_bits(n, m):
    """Forward and reverse mode, planned buffers and new arrays, edge sizes and values."""
    module = adc.parse_tdsl(PROGRAM)
    x = data((n, m), np.float32)
    y = data((m,), np.float32, 1)
    w = data((m,), np.float32, 2)
    inputs = {"x": x, "y": y, "w": w}
    with np.errstate(all="ignore"):
        want, got = both(module, "f", inputs, calls=3)
        assert_bits_equal(want, got)
        if n and m:
            used = kernels_used(module, "f", inputs, {"N": n, "M": m})
            assert {"reduce_sum", "stack", "relu"} <= used
    reverse = grad_module(adc.parse_tdsl(PROGRAM.replace(
        "-> (f32, f32[N], f32[1, M], f32[3], f32[N, 2, M])", "-> f32").replace(
        "return a + sum(s * s), b, c, s, t", "return a + sum(s * s) + sum(b) + sum(c) + sum(t)")),
        "f", ["w"])
    with np.errstate(all="ignore"):
        want, got = both(reverse, "f_grad", inputs, calls=3)
    assert_bits_equal(want, got)


def kernels_used(module, name, inputs, dims):
    """The `specialize` kernels the compiled function's namespace holds."""
    from adc_runtime.compiled import CompiledExecutor
    ex = CompiledExecutor(module, np, dims)
    fn = module[name]
    ex.call(fn, [inputs[a.name] for a in fn.args])
    return {getattr(v, "__qualname__", "").split(".")[0]
            for v in ex._programs[id(fn)].__globals__.values()
            if getattr(v, "__module__", None) == specialize.__name__}


def test_compiled_gradient_through_sum_stack_relu_matches_central_differences():
    src = ("def f(x: f64[4, 3], param w: f64[3]) -> f64 {\n"
           "    h = relu(x * w)\n"
           "    s = stack(sum(h * h), sum(h, axis=0) @ w, axis=0)\n"
           "    return sum(s * s) + sum(stack(h, x, axis=1))\n}\n")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3))
    w = rng.standard_normal(3)
    f = adc.value_and_grad(adc.parse_tdsl(src), "f", wrt=["w"])
    value, (g,) = f(x=x, w=w)
    eps = 1e-6
    for i in range(3):
        d = np.zeros(3)
        d[i] = eps
        fd = (float(f(x=x, w=w + d)[0]) - float(f(x=x, w=w - d)[0])) / (2 * eps)
        assert abs(fd - g[i]) <= 1e-6 * max(1.0, abs(fd))


MLP = "samples/mlp.tdsl"


def mlp_data(seed=0):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.normal(size=(4, 8)).astype(np.float32),
              "b1": (rng.normal(size=8) * 0.1).astype(np.float32),
              "W2": rng.normal(size=(8, 3)).astype(np.float32),
              "b2": np.zeros(3, np.float32)}
    batch = {"x": rng.normal(size=(16, 4)).astype(np.float32),
             "labels": rng.integers(0, 3, 16)}
    return params, batch


def interpreted(step, params, state, batch):
    """One step run by the interpreter on copies of its inputs: the compiled step's
    reference."""
    from adc_runtime.executor import Runner
    inputs = {k: np.array(v) for k, v in {**params, **state, **batch}.items()}
    got, _ = Runner(step.module, step.fn_name)(inputs)
    return dict(zip(step.outputs, got))


def checked_step(step, p, s, batch):
    want = interpreted(step, p, s, batch)
    p, s, m = step(p, s, batch)
    for k, v in {**p, **s, **m}.items():
        assert np.asarray(v).tobytes() == np.asarray(want[k]).tobytes(), k
    return p, s, m


def test_step_reusing_its_arrays_gives_the_interpreters_bits_and_copies_what_it_must():
    params, batch = mlp_data()
    step = adc.train_step(MLP, adc.optim.adam(1e-2), clip=1.0)
    state = step.init(params)
    kept = {k: v.copy() for k, v in params.items()}
    p, s, m = checked_step(step, params, state, batch)           # copies the caller's
    assert all(np.array_equal(params[k], kept[k]) for k in params)
    p, s, m = checked_step(step, p, s, batch)                     # its own: in place
    ids = {k: id(v) for k, v in {**p, **s}.items()}
    p, s, m = checked_step(step, p, s, batch)
    assert {k: id(v) for k, v in {**p, **s}.items()} == ids
    # a returned array made read-only is copied, not written
    p["W1"].flags.writeable = False
    frozen, before = p["W1"], p["W1"].copy()
    p, s, m = checked_step(step, p, s, batch)
    assert id(p["W1"]) != ids["W1"] and np.array_equal(frozen, before)
    # one array given for two inputs: one of them gets a copy
    p, s, m = checked_step(step, dict(p, b1=s["exp_avg_b1"]), s, batch)
    assert len({id(v) for v in {**p, **s}.values()}) == len(p) + len(s)
    # an array of the caller's in a slot the step's own held last time: copied
    mine = p["b2"]
    theirs = p["b2"].copy()
    p, s, m = checked_step(step, dict(p, b2=theirs), s, batch)
    assert p["b2"] is not theirs and p["b2"] is not mine
    p, s, m = checked_step(step, p, s, batch)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 3, 4), (4, 5)), ((0, 3, 4), (4, 5)), ((2, 3, 0), (0, 5)), ((1, 1, 4), (4, 1)),
    ((2, 1, 3, 4), (4, 2)), ((2, 3, 4), (4, 0))], ids=str)
def test_stacked_times_one_matrix_is_one_product_with_the_stacked_values(a_shape, b_shape):
    from adc_runtime.kernels.linalg import matmul_rows
    rng = np.random.default_rng(1)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = matmul_rows(np, a, b)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    out = np.full(want.shape, np.nan, np.float32)
    assert matmul_rows(np, a, b, out) is out
    same_bits(got, out)
    # a stack that is a view (no reshape without a copy) and a strided buffer: NumPy's own
    strided = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, 0, 1)), 0, 1)
    same_bits(np.matmul(strided, b), matmul_rows(np, strided, b))
    wide = np.full(want.shape[:-1] + (2 * want.shape[-1],), np.nan, np.float32)
    view = wide[..., ::2]
    assert matmul_rows(np, a, b, view) is view
    same_bits(np.matmul(a, b), view)


STACKED = """
def f(x: f64[B, T, D], param W: f64[D, E], param V: f64[E, D]) -> f64 {
    h = tanh(x @ W)
    y = h[:, 1:, :] @ V + x[:, 1:, :] @ (W @ V)   # a stack that is a strided view
    return sum(y * y)
}
"""


def test_compiled_stacked_products_are_the_interpreters_and_their_gradient_is_right():
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal((2, 3, 4)), "W": rng.standard_normal((4, 5)) * 0.5,
              "V": rng.standard_normal((5, 4)) * 0.5}
    module = adc.parse_tdsl(STACKED)
    want, got = both(module, "f", inputs)
    assert_bits_equal(want, got)
    from adc_runtime.compiled import CompiledExecutor
    from adc_runtime.kernels.linalg import matmul_rows
    ex = CompiledExecutor(module, np, {"B": 2, "T": 3, "D": 4, "E": 5})
    ex.call(module["f"], [inputs[a.name] for a in module["f"].args])
    assert sum(getattr(v, "func", None) is matmul_rows
               for v in ex._programs[id(module["f"])].__globals__.values()) == 3
    reverse = grad_module(adc.parse_tdsl(STACKED), "f", ["W", "V"])
    want, got = both(reverse, "f_grad", inputs)
    assert_bits_equal(want, got)
    f = adc.value_and_grad(module, "f", wrt=["W"])
    _, (g,) = f(**inputs)
    eps = 1e-6
    for i, j in ((0, 0), (3, 4), (2, 1)):
        d = np.zeros((4, 5))
        d[i, j] = eps
        plus = float(f(**{**inputs, "W": inputs["W"] + d})[0])
        minus = float(f(**{**inputs, "W": inputs["W"] - d})[0])
        assert abs((plus - minus) / (2 * eps) - g[i, j]) <= 1e-6 * max(1.0, abs(g[i, j]))
