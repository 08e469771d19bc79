"""The CUDA emitter: golden kernel sources, every elementwise op has a formula, the emitted
module is valid Python, and (where nvcc is installed) the kernels compile as CUDA C++."""
from __future__ import annotations

import ast
import shutil
import subprocess
import textwrap

import pytest

from adcompiler import cli
from adcompiler.emit.cuda import (HANDLED, PREAMBLE, emit_cuda, ensure_fused, kernel_specs,
                                  literal)
from adcompiler.frontend import compile_source
from adcompiler.ops import registry

SIGMOID = "def f(x: f32[4], b: f32[4]) -> f32[4] {\n    return sigmoid(x * 2.0 + b)\n}\n"
SIGMOID_KERNEL = """\
# @f at t.tdsl:2:22: mul, add, sigmoid
adc_f_0 = cupy.ElementwiseKernel(
    'float32 in0, float32 in1',
    'float32 out0',
    r'''
    const float t0 = 2.0f;
    const float t1 = in0 * t0;
    const float t2 = t1 + in1;
    const float t3 = expf(-fabsf(t2));
    const float t4 = t2 >= 0.0f ? 1.0f / (1.0f + t3) : t3 / (1.0f + t3);
    out0 = t4;
''',
    'adc_f_0', preamble=PREAMBLE)
"""

WHERE = ("def g(x: f64[B, 3], y: f64[3]) -> f64[B, 3] {\n"
         "    return where(x > y, maximum(x, 0.5) ** 2.0, gelu(y))\n}\n")
WHERE_KERNEL = """\
# @g at t.tdsl:2:20: gt, maximum, pow, gelu, where
adc_g_0 = cupy.ElementwiseKernel(
    'float64 in0, float64 in1',
    'float64 out0',
    r'''
    const double t0 = 0.5;
    const double t1 = 2.0;
    const bool t2 = in0 > in1;
    const double t3 = adc_max(in0, t0);
    const double t4 = pow(t3, t1);
    const double t5 = 0.5 * in1 * (1.0 + tanh(0.7978845608028654 * (in1 + 0.044715 * in1 * in1 * in1)));
    const double t6 = t2 ? t4 : t5;
    out0 = t6;
''',
    'adc_g_0', preamble=PREAMBLE)
"""

MIXED = ("def h(x: f16[4], k: i32[4]) -> (f16[4], bool[4]) {\n"
         "    s = softplus(x) - exp(x)\n    return s, s >= k\n}\n")


def specs(src):
    return list(kernel_specs(ensure_fused(compile_source(src, "t.tdsl"))).values())


@pytest.mark.parametrize("src, want", [(SIGMOID, SIGMOID_KERNEL), (WHERE, WHERE_KERNEL)])
def test_golden_kernels(src, want):
    (spec,) = specs(src)
    assert spec.python() == want


def test_float16_computes_in_float_and_rounds_each_op():
    (spec,) = specs(MIXED)
    assert spec.in_params == "float16 in0, int32 in1"
    assert spec.out_params == "float16 out0, bool out1"
    assert "const float16 t1 = (float16)(expf((float)in0));" in spec.operation
    assert "const bool t3 = (float)t2 >= (float)in1;" in spec.operation


def test_literals_are_rounded_to_their_dtype():
    assert literal(0.1, "f32") == "0.10000000149011612f"
    assert literal(0.1, "f64") == "0.1"
    assert literal(3, "i64") == "3LL"
    assert literal(float("-inf"), "f32") == "(-__int_as_float(0x7f800000))"


def test_every_elementwise_op_has_a_formula():
    ew = {n for n, d in registry.REGISTRY.items() if d.has("elementwise")}
    assert ew <= HANDLED


def test_cli_emit_cuda(capsys, tmp_path):
    path = tmp_path / "t.tdsl"
    path.write_text(SIGMOID)
    assert cli.main(["compile", str(path), "--emit", "cuda"]) == 0
    out = capsys.readouterr().out
    ast.parse(out)  # the output is a Python module that builds the kernels
    assert "adc_f_grad_0 = cupy.ElementwiseKernel(" in out
    assert out.count("cupy.ElementwiseKernel(") == len(specs(SIGMOID)) + 1  # f and f_grad


# ---- CUDA C++ check with nvcc ---------------------------------------------------------

ALL_OPS = """\
def f(x: f32[3, 4], y: f32[4], k: i64[4]) -> (f32[3, 4], bool[3, 4], i64[4]) {
    a = neg(exp(x)) + log(square(x) + 1.0) + log1p(square(y)) + expm1(x) + sqrt(square(x))
    b = rsqrt(square(y) + 1.0) * abs(x) + sign(x) + sin(x) * cos(y) + tanh(x) + sigmoid(y)
    c = relu(x) + gelu(y) + softplus(x) + square(x) + reciprocal(square(y) + 1.0) + round(x)
    d = floor(x) + ceil(y) + leaky_relu(x, slope=0.1) + clip(x, -0.5, 0.5) - y / (x * x + 1.0)
    e = (square(x) + 1.0) ** y + maximum(x, y) - minimum(x, y) + bce(sigmoid(x), sigmoid(y))
    s = a + b + c + d + e + bce_with_logits(x, sigmoid(y)) + where(x < y, x, y)
    m = (s <= 0.0) == (x >= y)
    return s, m != (x > 1.0), maximum(k, 2) * 3 - round(k) + ceil(-k)
}
"""


def cuda_check_source(spec) -> str:
    """The kernel as a __global__ function close to what CuPy generates."""
    params = []
    for kind, text in (("in", spec.in_params), ("out", spec.out_params)):
        for p in text.split(", "):
            t, name = p.split()
            ctype = {"float16": "float16", "float32": "float", "float64": "double",
                     "int32": "int", "int64": "long long", "bool": "bool"}[t]
            params.append((kind, ctype, name))
    args = ", ".join(f"const {c}* _p_{n}" if k == "in" else f"{c}* _p_{n}"
                     for k, c, n in params)
    loads = "\n".join(f"    const {c} {n} = _p_{n}[i];" for k, c, n in params if k == "in")
    outs = "\n".join(f"    {c} &{n} = _p_{n}[i];" for k, c, n in params if k == "out")
    return (f'extern "C" __global__ void {spec.name}({args}) {{\n'
            f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n{loads}\n{outs}\n"
            f"{textwrap.indent(spec.operation, '    ')}\n}}\n")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_kernels_compile_with_nvcc(tmp_path):
    from adcompiler.passes.pipeline import run_pipeline
    m = compile_source(ALL_OPS, "t.tdsl")
    grad = run_pipeline(m, "inline,canonicalize,cse,dce,reverse{wrt=x,y fn=f},cse,dce,fuse")
    kernels = list(kernel_specs(grad).values()) + specs(MIXED)  # f, f_grad; h in float16
    names = {o.name for spec_op in kernel_specs(grad) for o in spec_op.regions[0].ops}
    assert {"gelu", "bce", "bce_with_logits", "pow", "clip", "where"} <= names
    src = "#include <cuda_fp16.h>\ntypedef __half float16;\n" + PREAMBLE + "\n".join(
        cuda_check_source(s) for s in kernels)
    cu = tmp_path / "kernels.cu"
    cu.write_text(src)
    proc = subprocess.run(["nvcc", "--ptx", "-arch=sm_80", "-o", str(tmp_path / "k.ptx"),
                           str(cu)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + "\n" + src
