"""A plugin op is first-class on every path: registered with a CUDA formula it is fused on the
CPU, emitted by ``--emit cuda`` and run by the CUDA backend (here with the NumPy stand-in
for CuPy); registered without one, fusion leaves it alone and the CUDA paths still work."""
from __future__ import annotations

import ast
import json

import numpy as np
import pytest

import adcompiler as adc
from adcompiler import cli
from adcompiler.emit.c import expr, lit, math_fn
from adcompiler.emit.cuda import emit_cuda, ensure_fused, kernel_specs
from adcompiler.frontend import compile_source
from adcompiler.memory.flops import function_flops
from adcompiler.passes.pipeline import run_pipeline
from adc_runtime import cuda as backend
from adc_runtime.buffers import returns_new
from adc_runtime.executor import run_function
from test_cuda_runtime import fake_cupy

SRC = """\
def f(x: f64[3, 4], b: f64[4]) -> f64 {
    return sum(smooth_abs(x * 2.0 + b, eps=0.01) * x)
}
"""
X = np.linspace(-1.5, 1.5, 12).reshape(3, 4)
B = np.array([0.25, -0.5, 0.0, 1.0])
PLUGIN = f"""\
import adcompiler as adc
from adcompiler.emit.c import expr, lit, math_fn
adc.register_op("smooth_abs", lambda types, attrs: types[0],
                kernel=lambda xp, x, eps: xp.sqrt(x * x + eps),
                vjp=lambda b, op, cts: [b.emit("mul", cts[0],
                                               b.emit("div", op.operands[0], op.result))],
                options=[adc.Option("eps", "float", 1e-6)], traits=["elementwise"],
                flops=3, fresh=True,
                cuda=expr(lambda w, ct, dt, op, a:
                          f"{{math_fn('sqrt', ct)}}({{a}} * {{a}} + {{lit(op.attrs['eps'], ct)}})"))
"""


def reference(x, b):
    return float(np.sum(np.sqrt((x * 2.0 + b) ** 2 + 0.01) * x))


def _register(cuda):
    adc.register_op("smooth_abs", lambda types, attrs: types[0],
                    kernel=lambda xp, x, eps: xp.sqrt(x * x + eps),
                    vjp=lambda b, op, cts: [b.emit("mul", cts[0],
                                                   b.emit("div", op.operands[0], op.result))],
                    options=[adc.Option("eps", "float", 1e-6)], traits=["elementwise"],
                    flops=3, fresh=True, cuda=cuda, replace=True)


@pytest.fixture
def smooth_abs():
    _register(expr(lambda w, ct, dt, op, a:
                   f"{math_fn('sqrt', ct)}({a} * {a} + {lit(op.attrs['eps'], ct)})"))
    yield
    adc.plugins.unregister_op("smooth_abs")


@pytest.fixture
def smooth_abs_without_formula():
    _register(None)
    yield
    adc.plugins.unregister_op("smooth_abs")


def _fused_members(module, fn):
    return [[o.name for o in op.regions[0].ops] for op in module[fn].walk() if op.name == "fused"]


def test_plugin_op_is_fused_and_runs_on_the_cpu(smooth_abs):
    m = compile_source(SRC, "t.tdsl")
    fused = run_pipeline(m, "fuse")
    groups = _fused_members(fused, "f")
    assert any("smooth_abs" in g for g in groups), groups
    (got,), _ = run_function(fused, "f", {"x": X, "b": B})
    np.testing.assert_allclose(got, reference(X, B), rtol=1e-12)


def test_plugin_op_facts_reach_flops_and_buffers(smooth_abs):
    m = compile_source(SRC, "t.tdsl")
    op = next(o for o in m["f"].walk() if o.name == "smooth_abs")
    plain = compile_source(SRC.replace("smooth_abs(x * 2.0 + b, eps=0.01)", "(x * 2.0 + b)"),
                           "t.tdsl")
    # 3 FLOPs per element of its [3, 4] operand, on top of the rest of the program
    assert function_flops(m["f"], {}) - function_flops(plain["f"], {}) == 3 * 12
    assert returns_new(op)


def test_plugin_op_gradient_through_fused_program(smooth_abs):
    m = run_pipeline(compile_source(SRC, "t.tdsl"), "reverse{wrt=x},fuse")
    assert any("smooth_abs" in g for g in _fused_members(m, "f_grad"))
    (value, dx), _ = run_function(m, "f_grad", {"x": X, "b": B})
    eps = 1e-6
    fd = np.zeros_like(X)
    for i in np.ndindex(X.shape):
        e = np.zeros_like(X)
        e[i] = eps
        fd[i] = (reference(X + e, B) - reference(X - e, B)) / (2 * eps)
    np.testing.assert_allclose(value, reference(X, B), rtol=1e-12)
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-9)


def test_plugin_op_emits_cuda(smooth_abs):
    src = emit_cuda(compile_source(SRC, "t.tdsl"))
    ast.parse(src)
    # the whole program is one reduction kernel whose map computes the plugin op in double
    assert "cupy.ReductionKernel(" in src and "const double t3 = sqrt(t2 * t2 + 0.01);" in src


def test_plugin_op_through_adc_emit_cuda(tmp_path, capsys):
    plugin = tmp_path / "smooth_abs_plugin.py"
    plugin.write_text(PLUGIN)
    prog = tmp_path / "t.tdsl"
    prog.write_text(SRC)
    try:
        assert cli.main(["compile", str(prog), "--plugin", str(plugin), "--emit", "cuda"]) == 0
    finally:
        adc.plugins.unregister_op("smooth_abs")
    out = capsys.readouterr().out
    ast.parse(out)
    assert "sqrt(" in out and "adc_f_grad_0" in out


def test_plugin_op_runs_on_the_cuda_backend_stand_in(smooth_abs):
    module = ensure_fused(run_pipeline(compile_source(SRC, "t.tdsl"), "reverse{wrt=x}"))
    specs = kernel_specs(module)
    assert any("smooth_abs" in s.where for s in specs.values())
    calls: list = []
    cp = fake_cupy({s.name: op for op, s in specs.items()}, calls)
    backend._KERNELS.clear()
    data = {"x": X, "b": B}
    want, _ = run_function(module, "f_grad", data)
    got, _ = backend.run_function(module, "f_grad", data, specs, cupy=cp)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert any(kind == "launch" for kind, *_ in calls)
    json.dumps([s.python() for s in specs.values()])  # the specs print as Python


def test_plugin_op_without_formula_is_left_unfused(smooth_abs_without_formula):
    m = compile_source(SRC, "t.tdsl")
    fused = run_pipeline(m, "fuse")
    assert all("smooth_abs" not in g for g in _fused_members(fused, "f"))
    (got,), _ = run_function(fused, "f", {"x": X, "b": B})
    np.testing.assert_allclose(got, reference(X, B), rtol=1e-12)
    specs = kernel_specs(ensure_fused(m))  # the ops around it are still fused
    assert specs and all("smooth_abs" not in s.where for s in specs.values())
    ast.parse(emit_cuda(m))
