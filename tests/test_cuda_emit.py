"""The CUDA emitter: golden kernel sources (elementwise and reduction kernels), every
elementwise op has a formula, the emitted module is valid Python, and (where nvcc is
installed) the kernels compile as CUDA C++, reductions and every cast included."""
from __future__ import annotations

import ast
import dataclasses
import shutil
import subprocess
import textwrap

import pytest

from adcompiler import cli
from adcompiler.emit.cuda import PREAMBLE, emit_cuda, ensure_fused, kernel_specs, literal
from adcompiler.frontend import compile_source
from adcompiler.ops import registry
from adcompiler.passes.fuse import Fuse

DTYPES = ("f16", "f32", "f64", "i32", "i64", "bool")

SIGMOID = "def f(x: f32[4], b: f32[4]) -> f32[4] {\n    return sigmoid(x * 2.0 + b)\n}\n"
SIGMOID_KERNEL = """\
# @f at t.tdsl:2:22: mul, add, sigmoid
adc_f_0 = cupy.ElementwiseKernel(
    'float32 x0, float32 x1',
    'float32 y0',
    r'''
    const float t0 = 2.0f;
    const float t1 = x0 * t0;
    const float t2 = t1 + x1;
    const float t3 = expf(-fabsf(t2));
    const float t4 = t2 >= 0.0f ? 1.0f / (1.0f + t3) : t3 / (1.0f + t3);
    y0 = t4;
''',
    'adc_f_0', preamble=PREAMBLE)
"""

WHERE = ("def g(x: f64[B, 3], y: f64[3]) -> f64[B, 3] {\n"
         "    return where(x > y, maximum(x, 0.5) ** 2.0, gelu(y))\n}\n")
WHERE_KERNEL = """\
# @g at t.tdsl:2:20: gt, maximum, pow, gelu, where
adc_g_0 = cupy.ElementwiseKernel(
    'float64 x0, float64 x1',
    'float64 y0',
    r'''
    const double t0 = 0.5;
    const double t1 = 2.0;
    const bool t2 = x0 > x1;
    const double t3 = adc_max(x0, t0);
    const double t4 = pow(t3, t1);
    const double t5 = 0.5 * x1 * (1.0 + erf(x1 * 0.7071067811865476));
    const double t6 = t2 ? t4 : t5;
    y0 = t6;
''',
    'adc_g_0', preamble=PREAMBLE)
"""

SUMSQ = ("def r(x: f32[B, 4], y: f32[4]) -> f32[B] {\n"
         "    return mean(square(x - y), axis=-1)\n}\n")
SUMSQ_KERNEL = """\
# @r at t.tdsl:2:26: sub, square, mean
# launch: axis=(1,), keepdims=False
adc_r_0_mean = cupy.ReductionKernel(
    'float32 x0, float32 x1',
    'float32 y0',
    'adc_map(x0, x1)',
    'a + b',
    'y0 = (float)(a / (float)(_in_ind.size() / _out_ind.size()))',
    '0',
    'adc_r_0_mean', reduce_type='float',
    preamble=PREAMBLE + r'''
__device__ __forceinline__ float adc_map(const float x0, const float x1) {
    const float t0 = x0 - x1;
    const float t1 = t0 * t0;
    return t1;
}
''')
"""

MAXH = ("def m(x: f16[3, 4], k: i32[3, 4]) -> (f16[1, 4], i32) {\n"
        "    return max(exp(x) * 2.0, axis=0, keepdims=true), min(k * 3)\n}\n")
MAXH_KERNELS = """\
# @m at t.tdsl:2:16: exp, mul, max
# launch: axis=(0,), keepdims=True
adc_m_0 = cupy.ReductionKernel(
    'float16 x0',
    'float16 y0',
    'adc_map(x0)',
    'adc_max(a, b)',
    'y0 = (float16)(a)',
    '(-__int_as_float(0x7f800000))',
    'adc_m_0', reduce_type='float',
    preamble=PREAMBLE + r'''
__device__ __forceinline__ float16 adc_map(const float16 x0) {
    const float16 t0 = (float16)(2.0f);
    const float16 t1 = (float16)(expf((float)x0));
    const float16 t2 = (float16)((float)t1 * (float)t0);
    return t2;
}
''')

# @m at t.tdsl:2:60: mul, min
# launch: axis=(0, 1), keepdims=False
adc_m_1 = cupy.ReductionKernel(
    'int32 x0',
    'int32 y0',
    'adc_map(x0)',
    'adc_min(a, b)',
    'y0 = a',
    '2147483647',
    'adc_m_1', reduce_type='int',
    preamble=PREAMBLE + r'''
__device__ __forceinline__ int adc_map(const int x0) {
    const int t0 = 3;
    const int t1 = x0 * t0;
    return t1;
}
''')
"""

MIXED = ("def h(x: f16[4], k: i32[4]) -> (f16[4], bool[4]) {\n"
         "    s = softplus(x) - exp(x)\n    return s, s >= k\n}\n")


def specs(src):
    return list(kernel_specs(ensure_fused(compile_source(src, "t.tdsl"))).values())


@pytest.mark.parametrize("src, want", [(SIGMOID, SIGMOID_KERNEL), (WHERE, WHERE_KERNEL),
                                       (SUMSQ, SUMSQ_KERNEL), (MAXH, MAXH_KERNELS)])
def test_golden_kernels(src, want):
    assert "\n".join(s.python() for s in specs(src)) == want


def test_reduction_specs_carry_kind_axes_and_sum_to_shapes():
    (mean,) = specs(SUMSQ)
    assert (mean.kind, mean.axis, mean.keepdims, mean.to_shape) == ("reduction", (1,), False,
                                                                    None)
    assert [s.kind for s in specs(SIGMOID)] == ["elementwise"]
    # the adjoint of a broadcast add sums the cotangent back with sum_to, in one kernel
    m = compile_source("def g(x: f32[3, 4], b: f32[4]) -> f32 {\n"
                       "    return sum(tanh(x + b))\n}\n", "t.tdsl")
    from adcompiler.passes.pipeline import run_pipeline
    grad = run_pipeline(m, "reverse{wrt=b fn=g},cse,dce,fuse")
    red = [s for s in kernel_specs(grad).values() if s.kind == "reduction"]
    assert any(s.to_shape == (4,) and s.in_shape == (3, 4) for s in red), red


def test_cast_and_stop_gradient_formulas():
    src = ("def c(x: f64[4], y: f32[4]) -> (f16[4], i32[4], bool[4], f32[4]) {\n"
           "    return cast(x * 2.0, f16), cast(y * 2.0, i32), cast(y - 1.0, bool), "
           "stop_gradient(y) + 1.0\n}\n")
    ops = "\n".join(s.operation for s in specs(src))
    assert "const float16 t2 = (float16)(t1);" in ops       # one rounding from double
    assert "const int t2 = (int)(t1);" in ops               # truncation toward zero
    assert "const bool t2 = t1 != 0.0f;" in ops             # NaN != 0 is true, as NumPy
    assert "const float t1 = x0;\nconst float t2 = t1 + t0;" in ops


def test_float16_computes_in_float_and_rounds_each_op():
    (spec,) = specs(MIXED)
    assert spec.in_params == "float16 x0, int32 x1"
    assert spec.out_params == "float16 y0, bool y1"
    assert "const float16 t1 = (float16)(expf((float)x0));" in spec.operation
    assert "const bool t3 = (double)t2 >= (double)x1;" in spec.operation  # as NumPy


def test_comparisons_run_in_numpys_comparison_type():
    # NumPy compares f32 16777216 and i32 16777217 in float64 (unequal), not in float32
    import re

    import numpy as np
    npt = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32,
           "i64": np.int64, "bool": np.bool_}
    ctype = {"float16": "float", "float32": "float", "float64": "double", "int32": "int",
             "int64": "long long", "bool": "bool"}  # float16 compares exactly in float
    storage = {"f16": "float16", "f32": "float", "f64": "double", "i32": "int",
               "i64": "long long", "bool": "bool"}
    for a in DTYPES:
        for b in DTYPES:
            if a != b and a.startswith("f") and b.startswith("f"):
                continue  # mixed float widths need a cast
            src = f"def c(a: {a}[4], b: {b}[4]) -> bool[4] {{\n    return a >= b\n}}\n"
            (spec,) = kernel_specs(Fuse(min_ops=1)(compile_source(src, "c.tdsl"))).values()
            m = re.search(r"= (\(([a-z ]+)\))?x0 >= (\(([a-z ]+)\))?x1;", spec.operation)
            want = ctype[np.result_type(npt[a], npt[b]).name]
            assert (m.group(2) or storage[a], m.group(4) or storage[b]) == (want, want), \
                (a, b, spec.operation)


def test_sign_of_zero_is_positive_zero_and_of_nan_nan():
    # NumPy: sign(-0.0) is +0.0, sign(nan) is nan; `x == 0 ? 0 : x` keeps NaN, drops -0
    src = "def s(x: f32[4], d: f64[4]) -> (f32[4], f64[4]) {\n    return sign(x), sign(d)\n}\n"
    ops = "\n".join(s.operation for s in kernel_specs(Fuse(min_ops=1)(
        compile_source(src, "s.tdsl"))).values())
    assert "x0 > 0.0f ? 1.0f : (x0 < 0.0f ? -1.0f : (x0 == 0.0f ? 0.0f : x0))" in ops
    assert "x0 > 0.0 ? 1.0 : (x0 < 0.0 ? -1.0 : (x0 == 0.0 ? 0.0 : x0))" in ops


def test_literals_are_rounded_to_their_dtype():
    assert literal(0.1, "f32") == "0.10000000149011612f"
    assert literal(0.1, "f64") == "0.1"
    assert literal(3, "i64") == "3LL"
    assert literal(float("-inf"), "f32") == "(-__int_as_float(0x7f800000))"


def test_every_elementwise_op_has_a_formula():
    ew = {n for n, d in registry.REGISTRY.items() if d.has("elementwise")}
    assert {n for n in ew if registry.get(n).cuda is not None} == ew


def test_cli_emit_cuda(capsys, tmp_path):
    path = tmp_path / "t.tdsl"
    path.write_text(SIGMOID)
    assert cli.main(["compile", str(path), "--emit", "cuda"]) == 0
    out = capsys.readouterr().out
    ast.parse(out)  # the output is a Python module that builds the kernels
    assert "adc_f_grad_0 = cupy.ElementwiseKernel(" in out
    assert out.count("cupy.ElementwiseKernel(") == len(specs(SIGMOID)) + 1  # f and f_grad
    path.write_text(SUMSQ)
    assert cli.main(["compile", str(path), "--emit", "cuda", "--mode", "forward"]) == 0
    out = capsys.readouterr().out
    ast.parse(out)
    assert "adc_r_0_mean = cupy.ReductionKernel(" in out and "adc_map(x0, x1)" in out


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


CTYPES = {"float16": "float16", "float32": "float", "float64": "double", "int32": "int",
          "int64": "long long", "bool": "bool"}

REDUCTIONS = """\
def red(x: f32[3, 4], y: f32[4], h: f16[3, 4], d: f64[3, 4], k: i32[3, 4], n: i64[4]) -> (f32[3], f16[1, 4], f64, i32[3], i64, i64, f16[3], f32[4]) {
    a = sum(x * y, axis=1)
    b = mean(square(h - 1.0), axis=0, keepdims=true)
    c = max(exp(d) - 1.0)
    e = min(k * 2, axis=1)
    f = sum(x > y)
    g = max(n + 1)
    m = min(sigmoid(h), axis=1)
    return a, b, c, e, f, g, m, mean(cast(d, f32) * 2.0, axis=0)
}
"""


def cast_module():
    """Every cast the type rule allows (dtype to dtype), each its own fused group."""
    args = ", ".join(f"a_{s}: {s}[4]" for s in DTYPES)
    rets = [(f"cast(a_{s}, {d})", f"{d}[4]") for s in DTYPES for d in DTYPES]
    src = (f"def c({args}) -> ({', '.join(t for _, t in rets)}) {{\n"
           f"    return {', '.join(e for e, _ in rets)}\n}}\n")
    return Fuse(min_ops=1)(compile_source(src, "cast.tdsl"))


def reduction_check_source(spec) -> str:
    """A reduction kernel as a __global__ function shaped like CuPy's (one thread per output;
    the same map, REDUCE, identity and POST_MAP expressions, `_type_reduce`, `_in_ind` and
    `_out_ind`)."""
    ins = [p.split() for p in spec.in_params.split(", ")]
    out_t, out_n = spec.out_params.split()
    args = ", ".join([f"const {CTYPES[t]}* _p_{n}" for t, n in ins]
                     + [f"{CTYPES[out_t]}* _p_{out_n}", "long long _n_in, long long _n_out"])
    loads = "\n".join(f"        const {CTYPES[t]} {n} = _p_{n}[_j];" for t, n in ins)
    return (f'extern "C" __global__ void {spec.name}({args}) {{\n'
            f"    typedef {spec.reduce_type} _type_reduce;\n"
            f"    struct Ind {{ long long n; __device__ long long size() const "
            f"{{ return n; }} }};\n"
            f"    const Ind _in_ind = {{_n_in}}, _out_ind = {{_n_out}};\n"
            f"    (void)_in_ind; (void)_out_ind;\n"
            f"    const long long _i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    const long long _per = _n_in / _n_out;\n"
            f"    _type_reduce _s = _type_reduce({spec.identity});\n"
            f"    for (long long _j = _i * _per; _j < (_i + 1) * _per; ++_j) {{\n{loads}\n"
            f"        _type_reduce _a = static_cast<_type_reduce>({spec.operation});\n"
            f"        {{ const _type_reduce a = _s, b = _a; _s = ({spec.reduce_expr}); }}\n"
            f"    }}\n"
            f"    {CTYPES[out_t]} &{out_n} = _p_{out_n}[_i];\n"
            f"    {{ const _type_reduce a = _s; ({spec.post_map_expr}); }}\n}}\n")


def cuda_check_source(spec) -> str:
    """The kernel as a __global__ function close to what CuPy generates."""
    if spec.kind == "reduction":
        return reduction_check_source(spec)
    params = []
    for kind, text in (("in", spec.in_params), ("out", spec.out_params)):
        for p in text.split(", "):
            t, name = p.split()
            ctype = CTYPES[t]
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
    casts = kernel_specs(cast_module())
    kernels = (list(kernel_specs(grad).values()) + specs(MIXED)  # f, f_grad; h in float16
               + specs(REDUCTIONS) + specs(SUMSQ) + specs(MAXH) + list(casts.values()))
    names = {o.name for spec_op in kernel_specs(grad) for o in spec_op.regions[0].ops}
    assert {"gelu", "bce", "bce_with_logits", "pow", "clip", "where", "sum_to"} <= names
    assert len(casts) == len(DTYPES) ** 2
    reductions = [s for s in kernels if s.kind == "reduction"]
    assert {s.reduce_type for s in reductions} >= {"float", "double", "int", "long long"}
    assert {s.identity for s in reductions} >= {"0", "(-__int_as_float(0x7f800000))",
                                                "2147483647"}
    # one source for every kernel: each map function gets its kernel's name
    kernels = [dataclasses.replace(s, operation=s.operation.replace("adc_map(", f"{s.name}_map("),
                                   preamble=s.preamble.replace("adc_map(", f"{s.name}_map("))
               for s in kernels]
    maps = "".join(s.preamble[len(PREAMBLE):] for s in kernels)
    src = "#include <cuda_fp16.h>\ntypedef __half float16;\n" + PREAMBLE + maps + "\n".join(
        cuda_check_source(s) for s in kernels)
    cu = tmp_path / "kernels.cu"
    cu.write_text(src)
    proc = subprocess.run(["nvcc", "--ptx", "-arch=sm_80", "-o", str(tmp_path / "k.ptx"),
                           str(cu)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + "\n" + src
