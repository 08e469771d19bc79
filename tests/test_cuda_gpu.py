"""CuPy against NumPy: every sample and every registry op (forward and adjoint programs,
fused as for the GPU) within tolerances derived from the ops' error bounds. Needs CuPy and a
CUDA GPU:

    python -m pytest -m cuda tests/test_cuda_gpu.py -q

Without them the GPU tests skip; the tests of the tolerance rule and
`test_op_programs_cover_the_registry` run anywhere.

The tolerance rule (`error_budget`). The GPU and NumPy may both be right and still differ:
CUDA's libm functions have error bounds of a few ulps (CUDA C Programming Guide, appendix
"Mathematical Functions": expf, sinf, cosf, tanhf, erff 2 ulps, logf, log1pf, expm1f 1,
powf 4; sqrt and division correctly rounded, as CuPy compiles without fast math), glibc's
are about one ulp, NVRTC contracts ``a * b + c`` into one FMA (one rounding fewer), and a
GPU sums in another order than NumPy's pairwise summation (a sum of n terms is off by at
most about n * eps * sum|terms|). So the reference run on NumPy counts, for every op it
executes (loop bodies once per trip), an error in ulps: ``FUNCTION_ULPS`` (CUDA's bound plus
glibc's) for a libm function, 1 for a rounded arithmetic op, 0 for the exact ones (``EXACT``:
selections, comparisons, shape ops, casts), 4 for any other float op (the composite ops:
each is a few of the former), plus the number of terms each output element sums (a
reduction's reduced length, a matrix product's contraction length). With B the program's
total and eps the machine epsilon of the result's dtype, a float output must satisfy
``|gpu - numpy| <= B * eps * (|numpy| + M)``, M the larger of the output's and the inputs'
largest magnitudes: the relative part bounds each well-conditioned element, the absolute
part an element near zero among larger ones (a gradient entry, a sum of terms of both
signs). It is a first-order bound on the program as a whole, applied to each output; it
does not cover an output that cancels intermediates much larger than itself and the inputs
(none of the tested programs has one). Integer and boolean outputs must match exactly;
selections (max, min, comparisons) of values computed with rounding differ by the bound of
what they select.
"""
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
from adc_runtime.executor import Executor, run_function
from gradcheck import one_op_module
import test_ops_conv
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
    cases += [case[:3] for case in test_ops_conv.CASES + test_ops_conv.ADJOINTS]
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

NORMS = """\
def f(x: f32[2, 3, 4], g: f32[3], b: f32[3], q: f32[2, 3, 4], s: f32[4]) -> f32 {
    n = batchnorm(x, g, b) + expand_dims(cast(argmax(x, axis=1), f32), 1)
    r = rmsnorm(x, s) + expand_dims(cast(argmin(x, axis=1), f32), 1)
    a = attention(q, x, x, causal=true)
    return sum(n * r) + mean(cumsum(a, axis=1)) + mean(cast(max_pool2d_indices(x, 2), f32))
}
"""

RANDOM = """\
def f(x: f32[2, 3, 4], g: f32[3], b: f32[3], m: f32[3], v: f32[3]) -> f32 {
    y, m, v = batchnorm_running(dropout(x, 0.3), g, b, m, v)
    s = sum(y * (uniform([4]) + normal([4]) + bernoulli(0.5, [4])))
    for i in range(2) { s = s + sum(uniform([4])) }
    return s + sum(m) + sum(v)
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
    m = Reverse(wrt=("x", "g", "b", "q", "s"), fn="f")(compile_source(NORMS, "norms.tdsl"))
    inputs = {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32),
              "g": RNG.standard_normal(3).astype(np.float32),
              "b": RNG.standard_normal(3).astype(np.float32),
              "q": RNG.standard_normal((2, 3, 4)).astype(np.float32),
              "s": RNG.standard_normal(4).astype(np.float32)}
    out.append(("norms", m, "f_grad", inputs))
    m = Reverse(wrt=("x", "y"), fn="f")(compile_source(COLLECTIVE, "collective.tdsl"))
    inputs = {"x": RNG.standard_normal((2, 3)).astype(np.float32),
              "y": RNG.standard_normal(4).astype(np.float32)}
    out.append(("collective", m, "f_grad", inputs))
    m = Reverse(wrt=("x", "g", "b"), fn="f")(compile_source(RANDOM, "random.tdsl"))
    inputs = {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32),
              "g": RNG.standard_normal(3).astype(np.float32),
              "b": RNG.standard_normal(3).astype(np.float32),
              "m": RNG.standard_normal(3).astype(np.float32),
              "v": RNG.random(3).astype(np.float32) + 0.5,
              "rng_key": np.array([5, 6], dtype=np.int64)}
    out.append(("random", m, "f_grad", inputs))
    return out


def test_op_programs_cover_the_registry():
    seen = {op.name for _, m, name, _ in programs() for op in m[name].walk()}
    for _, m, name, inputs in programs()[:3]:
        run_function(m, name, inputs)  # the tables build runnable programs
    assert set(registry.REGISTRY) - seen == set()


# ---- the tolerance rule (see the module docstring) --------------------------------------

# CUDA's single-precision bound plus glibc's (about one ulp), in ulps
FUNCTION_ULPS = {"exp": 3, "expm1": 2, "log": 2, "log1p": 2, "sin": 3, "cos": 3, "tanh": 3,
                 "erf": 3, "pow": 5, "rsqrt": 3, "sqrt": 1}
ARITHMETIC = {"add", "sub", "mul", "div", "square", "reciprocal", "neg", "leaky_relu", "sum",
              "sum_to", "mean", "matmul", "einsum"}
EXACT = {"abs", "relu", "sign", "round", "floor", "ceil", "max", "min", "maximum", "minimum",
         "clip", "where", "lt", "le", "gt", "ge", "eq", "ne", "cast", "const", "full", "zeros",
         "ones", "zeros_like", "ones_like", "arange", "one_hot", "stop_gradient", "dim_value",
         "broadcast_to", "expand_dims", "reshape", "squeeze", "transpose", "index", "take",
         "concat", "stack", "split", "allreduce_start", "allreduce_wait", "yield", "return"}


def op_ulps(op, args, outs) -> float:
    """The ulps by which one execution of `op` may differ between the GPU and NumPy."""
    floats = [o for o in outs if getattr(o, "dtype", np.dtype(int)).kind == "f"]
    if not floats or op.name in EXACT:
        return 0
    ulps = FUNCTION_ULPS.get(op.name, 1 if op.name in ARITHMETIC else 4)
    sizes = [np.size(a) for a in args if np.ndim(a) > 0]
    out = max(np.size(o) for o in floats) or 1
    if op.name in ("matmul", "einsum") and len(sizes) == 2:
        ulps += int(np.sqrt(sizes[0] * sizes[1] / out))  # the contraction length
    elif sizes and max(sizes) > out:
        ulps += max(sizes) // out                         # the terms each element sums
    return ulps


class _Budget(Executor):
    """The NumPy executor, adding up `op_ulps` of each op it runs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ulps = 0.0

    def run_op(self, op, env):
        args = [env[v] for v in op.operands]
        outs = super().run_op(op, env)
        if op.name not in ("for", "fused", "call"):  # their ops are counted one by one
            self.ulps += op_ulps(op, args, outs)
        return outs


def magnitude(*arrays) -> float:
    """The largest finite magnitude among the float `arrays`."""
    out = 0.0
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "f" and a.size:
            finite = np.abs(a[np.isfinite(a)])
            out = max(out, float(finite.max()) if finite.size else 0.0)
    return out


def error_budget(module, name, inputs, dims=None):
    """(NumPy's outputs, ulps B, the inputs' magnitude) of one reference run (module
    docstring)."""
    seen: list = []

    def executor(*args, **kwargs):
        seen.append(_Budget(*args, **kwargs))
        return seen[-1]
    with np.errstate(all="ignore"):
        want, _ = run_function(module, name, inputs, dims=dims, executor=executor)
    return want, sum(e.ulps for e in seen), magnitude(*inputs.values())


def assert_within_budget(got, want, ulps: float, scale: float, what="") -> None:
    """`got` equals `want` exactly for integers and booleans, else within the budget
    (`scale`: the inputs' magnitude)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol = max(ulps, 1) * float(np.finfo(want.dtype).eps)
    scale = max(scale, magnitude(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True,
                               err_msg=f"{what} (budget {ulps:g} ulps, magnitude {scale:g})")


def test_budget_counts_functions_sums_and_trips():
    m = compile_source("def f(x: f32[8, 16], w: f32[16, 4]) -> f32 {\n"
                       "    return sum(tanh(x) @ w)\n}\n", "b.tdsl")
    x, w = np.ones((8, 16), np.float32), np.full((16, 4), -3.0, np.float32)
    (want,), ulps, scale = error_budget(m, "f", {"x": x, "w": w})
    # tanh: 3; the product rounds (1) and sums 16 terms; the sum rounds and adds 32 terms
    assert ulps == 3 + (1 + 16) + (1 + 32) and scale == 3.0
    rnn = compile_program(str(SAMPLES / "rnn.tdsl"), "reverse")
    data = json.loads((SAMPLES / "rnn.json").read_text())
    _, loop_ulps, _ = error_budget(rnn.module, rnn.run_name, data)
    assert loop_ulps > 100  # every trip of the loops counts


def test_one_ulp_of_tanh_stays_within_the_budget():
    """A deep_mlp result off by one ulp of tanhf in every layer is within its budget; one
    off by 1% (a wrong formula) is not."""
    comp = compile_program(str(SAMPLES / "deep_mlp.tdsl"), "reverse")
    data = json.loads((SAMPLES / "deep_mlp.json").read_text())
    want, ulps, scale = error_budget(comp.module, comp.run_name, data)
    for w in want:
        w = np.asarray(w)
        if w.dtype.kind == "f":
            layers = 64
            nudged = w + layers * np.spacing(np.abs(w).astype(w.dtype))
            assert_within_budget(nudged, w, ulps, scale)
            with pytest.raises(AssertionError):
                assert_within_budget(w * (1 + 1e-2) + np.finfo(w.dtype).tiny, w, ulps, scale)


# ---- on the GPU ------------------------------------------------------------------------

def compare(cp, module, name, inputs):
    """Run `module` fused on the GPU and on NumPy; each output within the error budget."""
    from adc_runtime.cuda import run_function as run_gpu
    fused = ensure_fused(module)
    want, ulps, scale = error_budget(module, name, inputs)
    got, stats = run_gpu(fused, name, inputs, kernel_specs(fused), cupy=cp)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_within_budget(cp.asnumpy(g), w, ulps, scale, f"output {k}")
    assert stats["peak_bytes_measured"] > 0
    return stats


@pytest.mark.cuda
@pytest.mark.parametrize("name", NAMES)
def test_sample_on_gpu_matches_numpy(cupy, name):
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), "reverse")
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    compare(cupy, comp.module, comp.run_name, data)


@pytest.mark.cuda
def test_every_op_on_gpu_matches_numpy(cupy):
    failures = []
    for label, module, name, inputs in programs():
        try:
            with np.errstate(all="ignore"):
                compare(cupy, module, name, inputs)
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
FLOATS = ("f16", "f32", "f64")
NP_DTYPE = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def reduction_modules(dtype):
    """The reductions program and the gradient of GRAD (its adjoint has sum_to groups)."""
    fwd = compile_source(REDUCTIONS.replace("DT", dtype), "reductions.tdsl")
    grad = Reverse(wrt=("b",), fn="g")(compile_source(GRAD.replace("DT", dtype), "g.tdsl"))
    return fwd, grad


def test_reduction_programs_form_reduction_kernels():
    for dtype in FLOATS:
        fwd, grad = reduction_modules(dtype)
        kinds = [s.kind for s in kernel_specs(ensure_fused(fwd)).values()]
        assert kinds.count("reduction") == 7, (dtype, kinds)
        closers = {s.where.rsplit(", ", 1)[-1] for s in kernel_specs(ensure_fused(grad)).values()
                   if s.kind == "reduction"}
        assert "sum_to" in closers, (dtype, closers)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_reduction_kernels_on_gpu_match_numpy(cupy, dtype):
    from adc_runtime.cuda import run_function as run_gpu
    fwd, grad = reduction_modules(dtype)
    x = RNG.standard_normal((5, 3, 64)).astype(NP_DTYPE[dtype])
    b = RNG.standard_normal(64).astype(NP_DTYPE[dtype])
    x_nan = x.copy()
    x_nan[1, 2, 3] = np.nan  # max and min propagate NaN, as NumPy does
    inputs = {"x": x_nan, "b": b, "k": RNG.integers(-100, 100, (5, 64)).astype(np.int32)}
    fused = ensure_fused(fwd)
    want, ulps, scale = error_budget(fwd, "r", inputs)
    got, _ = run_gpu(fused, "r", inputs, kernel_specs(fused), cupy=cupy)
    for k, (g, w) in enumerate(zip(got, want)):
        # integer sums and the count exact; max(x * exp(b)) and min(tanh(x) - b) within the
        # bounds of exp and tanh, sums and means within their lengths' (module docstring)
        assert_within_budget(cupy.asnumpy(g), w, ulps, scale, f"output {k}")
    compare(cupy, grad, "g_grad", {"x": x, "b": b})


@pytest.mark.cuda
def test_cli_run_on_cuda(cupy, capsys, tmp_path):
    from adcompiler import cli
    stats = tmp_path / "stats.json"
    args = ["run", str(SAMPLES / "deep_mlp.tdsl"), "--inputs", str(SAMPLES / "deep_mlp.json"),
            "--remat", "sqrt", "--stats-json", str(stats)]
    assert cli.main(args + ["--device", "cuda", "--out", str(tmp_path / "gpu.npz")]) == 0
    assert cli.main(args + ["--out", str(tmp_path / "cpu.npz")]) == 0
    comp = compile_program(str(SAMPLES / "deep_mlp.tdsl"), "reverse")
    _, ulps, scale = error_budget(comp.module, comp.run_name,
                                  json.loads((SAMPLES / "deep_mlp.json").read_text()))
    with np.load(tmp_path / "gpu.npz") as g, np.load(tmp_path / "cpu.npz") as c:
        for k in c.files:
            assert_within_budget(g[k], c[k], ulps, scale, k)
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
    want, ulps, scale = error_budget(comp.module, comp.run_name, data)
    for g, w in zip(kept, want):
        assert_within_budget(g, w, ulps, scale)


@pytest.mark.cuda
def test_library_grad_on_gpu(cupy):
    import adcompiler as adc
    data = json.loads((SAMPLES / "mlp.json").read_text())
    on_gpu = adc.value_and_grad(str(SAMPLES / "mlp.tdsl"), device="cuda")
    on_cpu = adc.value_and_grad(str(SAMPLES / "mlp.tdsl"))
    (v, gs), (w, hs) = on_gpu(**data), on_cpu(**data)
    comp = compile_program(str(SAMPLES / "mlp.tdsl"), "reverse")
    _, ulps, scale = error_budget(comp.module, comp.run_name, data)
    for g, h in zip([v, *gs], [w, *hs]):
        assert_within_budget(cupy.asnumpy(g), h, ulps, scale)


@pytest.mark.cuda
@pytest.mark.parametrize("n, slots", [(600, 3), (1000, 2)])
def test_shared_parts_on_gpu(cupy, n, slots):
    """A long binomial plan emitted with shared parts (functions that borrow their
    arguments) runs on the GPU with the gradients of storing everything, bit for bit, and
    the executor's count of live bytes at the predicted peak."""
    from test_remat_programs import adjoint, mlp_inputs, residual_mlp
    from adcompiler.memory import predict_peak
    from adcompiler.remat.schedule import schedule
    from adc_runtime import cuda as backend
    m, data = adjoint(residual_mlp(n, 16, 32), ["x", "W", "b"]), mlp_inputs(n, 16, 32)

    def run(module):
        fused = ensure_fused(module)
        out, stats = backend.run_function(fused, "f_grad", data, kernel_specs(fused),
                                          cupy=cupy)
        return [cupy.asnumpy(o) for o in out], stats
    ref, _ = run(m)
    out = schedule(m, f"revolve:{slots}").module
    assert any(f.attrs.get("borrows_args") for f in out.functions.values())
    got, stats = run(out)
    assert all(np.array_equal(a, b) for a, b in zip(ref, got))
    assert stats["peak_bytes"] == predict_peak(out, "f_grad").peak_bytes
