"""CuPy against NumPy: every sample and every registry op (forward and adjoint programs,
fused as for the GPU) within floating-point tolerance. Needs CuPy and a CUDA GPU:

    python -m pytest -m cuda tests/test_cuda_gpu.py -q

Without them the GPU tests skip; `test_op_programs_cover_the_registry` runs anywhere."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli.compile import compile_program
from adcompiler.emit.cuda import ensure_fused, kernel_specs
from adcompiler.frontend import compile_source
from adcompiler.ops import registry
from adcompiler.passes.reverse import Reverse
from adc_runtime.executor import run_function
from gradcheck import one_op_module
import test_ops_nn
import test_ops_shape

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
NAMES = sorted(p.stem for p in SAMPLES.glob("*.tdsl"))
RNG = np.random.default_rng(7)


def _rand(*shape, lo=None, hi=None):
    if lo is None:
        return RNG.standard_normal(shape)
    return RNG.uniform(lo, hi, shape)


POS = dict(lo=0.5, hi=2.0)
UNIT = dict(lo=0.1, hi=0.9)
FLOAT_UNARY = ["neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "abs", "sign", "sin",
               "cos", "tanh", "sigmoid", "relu", "gelu", "softplus", "square", "reciprocal",
               "round", "floor", "ceil"]


def op_cases() -> list[tuple[str, list, dict]]:
    """(op, args, attrs) for one-op programs; weights and adjoints are added around them."""
    x, y = _rand(3, 4, **POS), _rand(4, **POS)
    cases = [(name, [x], {}) for name in FLOAT_UNARY]
    cases += [("leaky_relu", [_rand(3, 4)], {"slope": 0.2}),
              ("clip", [_rand(3, 4), np.float64(-0.5), _rand(4, lo=0.1, hi=1.0)], {})]
    for name in ("add", "sub", "mul", "div", "pow", "maximum", "minimum"):
        cases.append((name, [x, y], {}))
    for name in ("lt", "le", "gt", "ge", "eq", "ne"):
        cases.append((name, [x, y], {}))
    cases += [("where", [_rand(3, 4) > 0, x, y], {}),
              ("bce", [_rand(3, 4, **UNIT), _rand(4, **UNIT)], {}),
              ("bce_with_logits", [_rand(3, 4), _rand(3, 4, **UNIT)], {})]
    for name in ("sum", "mean", "max", "min", "var", "logsumexp"):
        cases += [(name, [_rand(3, 4)], {"axis": [1], "keepdims": False}),
                  (name, [_rand(3, 4)], {"axis": None, "keepdims": True})]
    a, b = _rand(3, 4), _rand(4, 5)
    cases += [("matmul", [a, b], {}), ("matmul", [_rand(2, 3, 4), b], {}),
              ("einsum", [a, b], {"spec": "ij,jk->ik"}), ("transpose", [a], {"perm": [1, 0]}),
              ("zeros_like", [a], {}), ("ones_like", [a], {})]
    cases += [(op, args, attrs) for op, args, attrs, _ in test_ops_shape.CASES]
    cases += [(op, args, attrs) for op, args, attrs, _ in test_ops_nn.CASES]
    return cases


# constructors, casts and the ops only adjoints use, in one TDSL program and its gradient
COLLECTIVE = """\
def f(x: f32[2, 3], y: f32[4]) -> f32 {
    b = allreduce_wait(allreduce_start(x * x, y))
    return sum(b * b)
}
"""
EXTRA = """\
def f(x: f32[B, 3], W: f32[3, 3], ids: i64[2]) -> f32 {
    h = x + zeros([3]) + ones([3]) * full([3], 2.0) + cast(arange(3), f32)
    t = take(W, ids) @ transpose(h)
    s = stack([h, tanh(h)], axis=0) + expand_dims(h, 0)
    c = concat([h, sigmoid(h)], axis=1)
    e = mse(h, tanh(h))
    return mean(t) + mean(s) + var(c) + sum(stop_gradient(h) * h) + mean(one_hot(ids, 3)) + e
}
"""


def programs():
    """(label, module, function name, inputs) of every GPU comparison but the samples."""
    out = []
    for k, (op, args, attrs) in enumerate(op_cases()):
        args = [np.asarray(a) for a in args]
        module = test_ops_shape.build(op, args, attrs)
        if all(t.is_float for t in module["f"].result_types):  # weighted sum, and its adjoint
            module = one_op_module(op, args, attrs)
        inputs = {f"a{j}": a for j, a in enumerate(args)}
        inputs.update({a.name: RNG.standard_normal([int(d) for d in a.type.shape])
                       for a in module["f"].args if a.name.startswith("w")})
        wrt = tuple(f"a{j}" for j, a in enumerate(args) if a.dtype.kind == "f")
        name = "f"
        if wrt and module["f"].result_types[0].is_float:
            module, name = Reverse(wrt=wrt, fn="f")(module), "f_grad"
        out.append((f"{k}-{op}", module, name, inputs))
    m = compile_source(EXTRA, "extra.tdsl")
    m = Reverse(wrt=("x", "W"), fn="f")(m)
    inputs = {"x": RNG.standard_normal((4, 3)).astype(np.float32),
              "W": RNG.standard_normal((3, 3)).astype(np.float32), "ids": np.array([2, 0])}
    out.append(("extra", m, "f_grad", inputs))
    m = Reverse(wrt=("x", "y"), fn="f")(compile_source(COLLECTIVE, "collective.tdsl"))
    inputs = {"x": RNG.standard_normal((2, 3)).astype(np.float32),
              "y": RNG.standard_normal(4).astype(np.float32)}
    out.append(("collective", m, "f_grad", inputs))
    return out


def test_op_programs_cover_the_registry():
    seen = {op.name for _, m, name, _ in programs() for op in m[name].walk()}
    for _, m, name, inputs in programs()[:3]:
        run_function(m, name, inputs)  # the tables build runnable programs
    assert set(registry.REGISTRY) - seen == set()


# ---- on the GPU ------------------------------------------------------------------------

def compare(cp, module, name, inputs, rtol, atol):
    from adc_runtime.cuda import run_function as run_gpu
    fused = ensure_fused(module)
    want, _ = run_function(module, name, inputs)
    got, stats = run_gpu(fused, name, inputs, kernel_specs(fused), cupy=cp)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = cp.asnumpy(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    assert stats["peak_bytes_measured"] > 0
    return stats


@pytest.mark.cuda
@pytest.mark.parametrize("name", NAMES)
def test_sample_on_gpu_matches_numpy(cupy, name):
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), "reverse")
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    compare(cupy, comp.module, comp.run_name, data, rtol=2e-4, atol=1e-5)


@pytest.mark.cuda
def test_every_op_on_gpu_matches_numpy(cupy):
    failures = []
    for label, module, name, inputs in programs():
        try:
            with np.errstate(all="ignore"):
                compare(cupy, module, name, inputs, rtol=1e-9, atol=1e-11)
        except AssertionError as e:
            failures.append(f"{label}: {str(e).splitlines()[0:3]}")
    assert not failures, "\n".join(failures)


# groups closed by reductions, per dtype; GPU sums run in another order than NumPy's
# pairwise sums, so sums and means match to rounding; max/min and integer sums exactly
REDUCTIONS = """\
def r(x: DT[B, 3, 64], b: DT[64], k: i32[B, 64]) -> (DT[B, 1, 64], DT[3], i32[64], i64,
                                                       DT[B, 64], DT, DT[64]) {
    hi = max(x * exp(b), axis=1, keepdims=true)
    lo = min(tanh(x) - b, axis=[0, 2])
    ks = sum(k * 3, axis=0)
    count = sum(x > b)
    ms = mean(square(x - b), axis=-2)
    s = sum(cast(k, DT) * 0.5 + stop_gradient(b))
    t = sum(tanh(x + b) * x, axis=[0, 1])
    return hi, lo, ks, count, ms, s, t
}
"""
GRAD = """\
def g(x: DT[B, 3, 64], b: DT[64]) -> DT {
    return sum(tanh(x + b) * x) + mean(square(x - b))
}
"""
TOLERANCE = {"f16": dict(rtol=1e-2, atol=1e-2), "f32": dict(rtol=1e-5, atol=1e-5),
             "f64": dict(rtol=1e-12, atol=1e-12)}
NP_DTYPE = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def reduction_modules(dtype):
    """The reductions program and the gradient of GRAD (its adjoint has sum_to groups)."""
    fwd = compile_source(REDUCTIONS.replace("DT", dtype), "reductions.tdsl")
    grad = Reverse(wrt=("b",), fn="g")(compile_source(GRAD.replace("DT", dtype), "g.tdsl"))
    return fwd, grad


def test_reduction_programs_form_reduction_kernels():
    for dtype in TOLERANCE:
        fwd, grad = reduction_modules(dtype)
        kinds = [s.kind for s in kernel_specs(ensure_fused(fwd)).values()]
        assert kinds.count("reduction") == 7, (dtype, kinds)
        closers = {s.where.rsplit(", ", 1)[-1] for s in kernel_specs(ensure_fused(grad)).values()
                   if s.kind == "reduction"}
        assert "sum_to" in closers, (dtype, closers)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", sorted(TOLERANCE))
def test_reduction_kernels_on_gpu_match_numpy(cupy, dtype):
    from adc_runtime.cuda import run_function as run_gpu
    fwd, grad = reduction_modules(dtype)
    x = RNG.standard_normal((5, 3, 64)).astype(NP_DTYPE[dtype])
    b = RNG.standard_normal(64).astype(NP_DTYPE[dtype])
    x_nan = x.copy()
    x_nan[1, 2, 3] = np.nan  # max and min propagate NaN, as NumPy does
    inputs = {"x": x_nan, "b": b, "k": RNG.integers(-100, 100, (5, 64)).astype(np.int32)}
    fused = ensure_fused(fwd)
    with np.errstate(invalid="ignore"):
        want, _ = run_function(fwd, "r", inputs)
    got, _ = run_gpu(fused, "r", inputs, kernel_specs(fused), cupy=cupy)
    for k, (g, w) in enumerate(zip(got, want)):
        g = cupy.asnumpy(g)
        assert g.dtype == w.dtype and g.shape == w.shape, k
        if k < 4:  # max, min and integer sums: exact
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, equal_nan=True, **TOLERANCE[dtype])
    compare(cupy, grad, "g_grad", {"x": x, "b": b}, **TOLERANCE[dtype])


@pytest.mark.cuda
def test_cli_run_on_cuda(cupy, capsys, tmp_path):
    from adcompiler import cli
    stats = tmp_path / "stats.json"
    args = ["run", str(SAMPLES / "deep_mlp.tdsl"), "--inputs", str(SAMPLES / "deep_mlp.json"),
            "--remat", "sqrt", "--stats-json", str(stats)]
    assert cli.main(args + ["--device", "cuda", "--out", str(tmp_path / "gpu.npz")]) == 0
    assert cli.main(args + ["--out", str(tmp_path / "cpu.npz")]) == 0
    with np.load(tmp_path / "gpu.npz") as g, np.load(tmp_path / "cpu.npz") as c:
        for k in c.files:
            np.testing.assert_allclose(g[k], c[k], rtol=2e-4, atol=1e-6)
    assert "peak device memory (measured)" in capsys.readouterr().out


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["mlp", "rnn", "deep_mlp", "transformer_stack"])
def test_planned_buffers_on_gpu(cupy, name):
    """The arena is allocated once and reused; the measured pool peak includes it; the
    first call's outputs survive the second call."""
    from adc_runtime.cuda import peak_memory_hook, runner
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), "reverse")
    fused = ensure_fused(comp.module)
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    run = runner(fused, comp.run_name, kernel_specs(fused), cupy)
    hook = peak_memory_hook(cupy)
    with hook:
        first, stats = run(data)
        cupy.cuda.get_current_stream().synchronize()
    kept = [cupy.asnumpy(a) for a in first]
    assert stats["arena_bytes"] > 0 and hook.peak >= stats["arena_bytes"]
    (ex,) = run._executors.values()
    arena = next(iter(ex._arenas.values()))
    doubled = {k: 2 * np.asarray(v) if np.asarray(v).dtype.kind == "f" else v
               for k, v in data.items()}
    run(doubled)
    assert next(iter(ex._arenas.values())) is arena
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(cupy.asnumpy(a), b)
    want, _ = run_function(comp.module, comp.run_name, data)
    for g, w in zip(kept, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=1e-5)


@pytest.mark.cuda
def test_library_grad_on_gpu(cupy):
    import adcompiler as adc
    data = json.loads((SAMPLES / "mlp.json").read_text())
    on_gpu = adc.value_and_grad(str(SAMPLES / "mlp.tdsl"), device="cuda")
    on_cpu = adc.value_and_grad(str(SAMPLES / "mlp.tdsl"))
    (v, gs), (w, hs) = on_gpu(**data), on_cpu(**data)
    np.testing.assert_allclose(cupy.asnumpy(v), w, rtol=2e-5)
    for g, h in zip(gs, hs):
        np.testing.assert_allclose(cupy.asnumpy(g), h, rtol=2e-4, atol=1e-6)
