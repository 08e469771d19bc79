"""The adjoints of softmax, layernorm and rmsnorm in reverse programs as one row kernel each
(``adc_runtime.cuda_row_groups``) in generated step code, on the host stand-in (the exact
CUDA source built by g++, every thread a fiber): fusion leaves their ops out of groups on
the CUDA path, the step code finds them again and launches ``adc_row_*_grad`` (with the
normalized x that the gamma gradients read), and the gradients agree with NumPy's run of
the unfused program (float64 to 1e-10, float32 within rounding). Where a group declines, its
ops run one by one. rmsnorm's kernels scale rows whose squares overflow, as the table
kernel and the VJP rule do. Skipped without g++."""
from __future__ import annotations

import numpy as np
import pytest

from cuda_host import GXX, HostKernels, host_cupy

if GXX is None:
    pytest.skip("g++ is not installed: the kernels cannot be built for the host",
                allow_module_level=True)

from adcompiler.cli.compile import compile_program  # noqa: E402
from adcompiler.emit.cuda import ensure_fused, kernel_specs  # noqa: E402
from adc_runtime import cuda as backend, cuda_row_groups, cuda_rows, cuda_step  # noqa: E402
from adc_runtime.executor import run_function  # noqa: E402
from adc_runtime.kernels import KERNELS  # noqa: E402
from cuda_raw_host import with_raw_modules  # noqa: E402
from cuda_cases import compiled, inputs  # noqa: E402

GRADS = {"adc_row_softmax_grad", "adc_row_layernorm_grad", "adc_row_rmsnorm_grad"}


@pytest.fixture(scope="module")
def cache(request, tmp_path_factory):
    c = getattr(request.config, "cache", None)
    return c.mkdir("cuda-host") if c is not None else tmp_path_factory.mktemp("h")


def stand_in(cache):
    launches: list = []
    cp = with_raw_modules(host_cupy(HostKernels(cache), launches), cache, launches)
    cp.launches = launches
    backend._KERNELS.clear()
    return cp


def run_step(cp, comp, data):
    fused = ensure_fused(comp.module, rows=True)
    run = cuda_step.runner(fused, comp.run_name, kernel_specs(fused), cupy=cp)
    got, _ = run(dict(data))
    return got, next(iter(run._executors.values()))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_reverse_program_runs_each_adjoint_as_one_row_kernel(cache, tmp_path, dtype):
    comp = compiled(tmp_path, dtype)
    data = inputs(dtype)
    want = run_function(comp.module, comp.run_name, dict(data))[0]
    cp = stand_in(cache)
    got, ex = run_step(cp, comp, data)
    names = [n for n, _ in cp.launches]
    assert GRADS <= set(names) and all(names.count(g) == 1 for g in GRADS)
    assert ex.launches["adc"] == len(cp.launches)
    rtol = 1e-10 if dtype == "f64" else 2e-5
    for g, w in zip(got, want):
        scale = np.max(np.abs(w))
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=rtol, atol=rtol * scale)


def test_fusion_leaves_the_adjoints_out_of_groups_only_when_asked(tmp_path):
    comp = compiled(tmp_path, "f32")
    fn = comp.module.functions[comp.run_name]
    members = cuda_row_groups.structural_members(fn.body)
    assert {op.name for op in members} >= {"mean", "sum", "max", "rsqrt", "mul", "sub"}
    kept = ensure_fused(comp.module, rows=True).functions[comp.run_name]
    plain = ensure_fused(comp.module).functions[comp.run_name]
    top = lambda f: [op.name for op in f.body.ops]  # noqa: E731
    # the two norms' adjoints each keep their rsqrt and sub; fusion takes them otherwise
    assert top(kept).count("rsqrt") == 2 and top(kept).count("sub") >= 3
    assert "rsqrt" not in top(plain) and "sub" not in top(plain)


def test_a_declining_group_runs_its_ops(cache, tmp_path, monkeypatch):
    comp = compiled(tmp_path, "f64")
    data = inputs("f64")
    want = run_function(comp.module, comp.run_name, dict(data))[0]
    monkeypatch.setattr(cuda_row_groups, "_runner",
                        lambda *a: (lambda *args: None))
    cp = stand_in(cache)
    got, ex = run_step(cp, comp, data)
    assert not GRADS & {n for n, _ in cp.launches}
    assert ex.launches["adc"] + ex.launches["library"] > 0
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-12)


def test_an_output_buffer_that_overlaps_an_operand_is_replaced():
    cp = np
    a = np.zeros((4, 8), np.float32)
    other = np.zeros((4, 8), np.float32)
    assert cuda_row_groups._fresh(cp, a, a, [a]) is a            # that very array
    assert cuda_row_groups._fresh(cp, a, other, [a]) is other    # apart
    shifted = a.reshape(-1)[8:].reshape(3, 8)
    out = cuda_row_groups._fresh(cp, shifted, shifted, [a])        # a part of an operand
    assert out is not shifted and out.shape == (3, 8)
    assert cuda_row_groups._fresh(cp, a, None, [a]) is not a


# ---- rmsnorm's kernels on rows whose squares overflow ---------------------------------

@pytest.fixture(scope="module")
def cp(cache):
    return stand_in(cache)


def _rms64(x, gamma, eps):
    x = x.astype(np.float64)
    s = np.max(np.abs(x), -1, keepdims=True)
    u = x / s
    r = 1 / (s * np.sqrt((u * u).mean(-1, keepdims=True) + eps / (s * s)))
    return x * r * gamma, x * r, r


@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_rmsnorm_forward_scales_rows_whose_squares_overflow(cp, eps):
    x = np.array([[1e20, -3e20, 2e19, 5e19], [1.0, 2.0, -0.5, 0.25],
                  [1e-30, -2e-30, 3e-31, 1e-30]], np.float32)
    gamma = np.array([1.0, 0.5, -2.0, 1.5], np.float32)
    got = cuda_rows.rmsnorm(cp, x, gamma, eps)
    table = KERNELS["rmsnorm"](np, x, gamma, eps=eps)
    want, _, _ = _rms64(x, gamma, eps)
    assert np.isfinite(got).all()
    rows = slice(None) if eps == 0 else slice(0, 2)   # eps swamps the tiny row's squares
    np.testing.assert_allclose(got[rows], want[rows], rtol=4e-6)
    np.testing.assert_allclose(got, table, rtol=4e-6, atol=1e-6)


def test_rmsnorm_adjoint_on_large_rows_and_its_normalized_x(cp):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 37)) * np.array([[1e20], [1.0], [3.0]])).astype(np.float32)
    gamma, ct = rng.standard_normal(37).astype(np.float32), \
        rng.standard_normal((3, 37)).astype(np.float32)
    xhat = np.empty_like(x)
    got = cuda_rows.rmsnorm_grad(cp, x, gamma, ct, 1e-5, xhat=xhat)
    _, h, r = _rms64(x, gamma, 1e-5)
    g = ct.astype(np.float64) * gamma
    want = r * (g - h * (g * h).mean(-1, keepdims=True))
    scale = r * (np.abs(g) + np.abs(h) * np.abs(g * h).mean(-1, keepdims=True))
    assert np.all(np.abs(got - want) <= 2e-5 * scale)
    np.testing.assert_allclose(xhat, h, rtol=2e-6, atol=1e-7)
    x64 = x.astype(np.float64)   # the same kernel in float64 against the same formula
    got64 = cuda_rows.rmsnorm_grad(cp, x64, gamma.astype(np.float64), ct.astype(np.float64),
                                   1e-5)
    np.testing.assert_allclose(got64, want, rtol=1e-11, atol=1e-13 * np.max(scale))


LOOP = """
def f(param x: f64[B, 24], param g: f64[L, 24], param b: f64[L, 24]) -> f64 {
    h = x
    for i in range(L) {
        h = h + softmax(layernorm(h, g[i], b[i]), axis=-1)
    }
    return sum(h * h)
}
"""


def test_adjoints_in_a_loop_body_run_as_row_kernels(cache, tmp_path):
    """A loop body runs through the interpreter, whose schedule takes each row adjoint as
    one step (its constants read from the function around the body)."""
    path = tmp_path / "loop.tdsl"
    path.write_text(LOOP)
    comp = compile_program(str(path), "reverse", bind={"L": 3})
    rng = np.random.default_rng(2)
    data = {"x": rng.standard_normal((4, 24)), "g": rng.standard_normal((3, 24)),
            "b": rng.standard_normal((3, 24))}
    want = run_function(comp.module, comp.run_name, dict(data))[0]
    cp = stand_in(cache)
    got, ex = run_step(cp, comp, data)
    names = [n for n, _ in cp.launches]
    assert names.count("adc_row_layernorm_grad") == 3 and names.count("adc_row_softmax_grad") == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12 * np.max(np.abs(w)))


def test_the_interpreter_runs_them_too(cache, tmp_path):
    """``adc run --device cuda``'s executor (the interpreter) takes each group of a function
    body as one step of its schedule."""
    comp = compiled(tmp_path, "f64")
    data = inputs("f64")
    want = run_function(comp.module, comp.run_name, dict(data))[0]
    cp = stand_in(cache)
    fused = ensure_fused(comp.module, rows=True)
    got, _ = backend.run_function(fused, comp.run_name, dict(data), kernel_specs(fused),
                                  cupy=cp)
    assert GRADS <= {n for n, _ in cp.launches}
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12 * np.max(np.abs(w)))
