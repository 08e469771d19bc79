"""C types, literals and formula builders for the CUDA formulas that ops declare.

An op's ``cuda`` slot is ``fn(w, op) -> str``: it appends what it needs to the kernel
writer `w` (`adcompiler.emit.cuda`) and returns the name of the local that holds its
result. Most ops compute one expression in their result's compute type; `expr` builds
such a formula from ``rule(w, ct, dtype, op, *operand expressions) -> expression``, with
the operands converted to the compute type `ct` (through float16 where an integer joins a
float16 result, as NumPy converts it). Arithmetic runs in the result's type, with float16
computed in float and rounded back once per op (see `adcompiler.emit.cuda`); math functions
are picked by type (``expf`` for float, ``exp`` for double).

A reduction that may close a fused group declares `Reduce` facts in its ``cuda_reduce``
slot instead. This module imports nothing from the compiler, so op families can use it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PARAM_TYPE = {"f16": "float16", "f32": "float32", "f64": "float64", "i32": "int32",
              "i64": "int64", "bool": "bool"}
STORAGE = {"f16": "float16", "f32": "float", "f64": "double", "i32": "int",
           "i64": "long long", "bool": "bool"}
COMPUTE = {**STORAGE, "f16": "float"}  # float16 arithmetic runs in float

# Kernel parameters are x0, x1, ... (inputs) and y0, y1, ... (outputs), and a reduction's map
# function is MAP. Not in0/out0: CuPy's CUB reduction path declares its own in0/out0 and
# their types only when the kernel's first parameters are named otherwise, and renames them
# by text in the map and post-map expressions (which therefore must not contain the names
# elsewhere: hence one map function name for every kernel, each compiled on its own).
IN, OUT, MAP = "x", "y", "adc_map"

_FLOAT_FNS = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "floor", "ceil",
              "rint", "fabs", "pow", "erf")


def math_fn(name: str, ctype: str) -> str:
    """``expf`` for float, ``exp`` for double."""
    assert name in _FLOAT_FNS, name
    return name + "f" if ctype == "float" else name


def literal(value, dtype: str) -> str:
    """A constant of `dtype` as C source, rounded to the dtype first (as NumPy does)."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in ("i32", "i64"):
        return f"{int(value)}{'LL' if dtype == 'i64' else ''}"
    x = float(np.asarray(value, dtype={"f16": np.float16, "f32": np.float32,
                                       "f64": np.float64}[dtype]))
    single = COMPUTE[dtype] == "float"
    if math.isnan(x):
        return "__int_as_float(0x7fc00000)" if single else "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(x):
        inf = "__int_as_float(0x7f800000)" if single else \
            "__longlong_as_double(0x7ff0000000000000LL)"
        return inf if x > 0 else f"(-{inf})"
    text = repr(x)  # the shortest decimal that reads back as x
    return f"{text}f" if single else text


def lit(value, ct: str) -> str:
    """A literal in the compute type `ct`."""
    return literal(value, {"float": "f32", "double": "f64", "int": "i32",
                           "long long": "i64", "bool": "bool"}[ct])


# ---- formula builders -----------------------------------------------------------------

def expr(rule):
    """The formula of an op computed as one expression in its result's compute type."""
    def formula(w, op):
        dtype = op.result.type.dtype
        ct = COMPUTE[dtype]
        args = [w.ref(v, ct, dtype) for v in op.operands]
        return w.let(dtype, rule(w, ct, dtype, op, *args), ct)
    return formula


def fn(name):
    """``name(x)`` with the math function of the compute type."""
    return expr(lambda w, ct, dt, op, a: f"{math_fn(name, ct)}({a})")


def fn2(name):
    return expr(lambda w, ct, dt, op, a, b: f"{math_fn(name, ct)}({a}, {b})")


def infix(symbol):
    """``a <symbol> b`` in the result's compute type."""
    return expr(lambda w, ct, dt, op, a, b: f"{a} {symbol} {b}")


# ---- reductions -----------------------------------------------------------------------

_INT_LIMITS = {"int": ("(-2147483647 - 1)", "2147483647"),
               "long long": ("(-9223372036854775807LL - 1LL)", "9223372036854775807LL")}


@dataclass(frozen=True)
class Reduce:
    """How a reduction closing a fused group runs as a ``cupy.ReductionKernel``.

    ``kind="sum"``: ``a + b`` from 0, accumulated in float for f16 and f32, double for f64
    and ``long long`` for integers and bools; `mean` divides by the count of reduced
    elements. ``kind="max"``/``"min"``: NaN-propagating ``adc_max``/``adc_min`` from
    -inf/+inf, or the integer type's extreme. `to_shape`: the reduced axes come from the
    op's ``shape`` option at run time (``sum_to``) rather than its ``axis``/``keepdims``."""

    kind: str
    mean: bool = False
    to_shape: bool = False

    def parts(self, src: str, res: str) -> tuple[str, str, str, str]:
        """(reduce_expr, identity, reduce_type, post_map_expr) for an operand of dtype `src`
        and a result of dtype `res`."""
        out = STORAGE[res]
        if self.kind == "sum":
            rt = {"f16": "float", "f32": "float", "f64": "double"}.get(src, "long long")
            expr_, identity = "a + b", "0"
        else:
            rt = COMPUTE[src]
            expr_ = f"adc_{self.kind}(a, b)"
            if rt in _INT_LIMITS:
                identity = _INT_LIMITS[rt][0 if self.kind == "max" else 1]
            else:
                identity = literal(float("-inf" if self.kind == "max" else "inf"),
                                   "f32" if rt == "float" else "f64")
        value = f"a / ({rt})(_in_ind.size() / _out_ind.size())" if self.mean else "a"
        value = value if out == rt and not self.mean else f"({out})({value})"
        return expr_, identity, rt, f"{OUT}0 = {value}"
