"""The kernel table: one function per IR op name, ``fn(xp, *operands, **attrs)``.

`xp` is the array module (numpy or cupy), so one table serves both backends. Attributes
arrive with symbolic dimensions already resolved to integers. A kernel returns an array (or
a tuple of arrays for a multi-result op) of the dtype the IR declares.

`OUT_KERNELS` holds, for the ops that are one ufunc, BLAS call, reduction, fill or scatter,
a second form ``fn(xp, *operands, out, **attrs)`` that writes into a given array: the
executor uses it for values that have a planned buffer (`adc_runtime.buffers`), for the
operand types `OUT_RULES` allows, where both forms run the same loop in the same type and
give the same bits:

* ``same``: the operands share one dtype, and the result has it (or is bool);
* ``float``: the same, and it is f32 or f64 (NumPy sums f16 in f32 and integers in i64
  unless given an output, and then its result could differ);
* ``first``: the result has the first operand's dtype (the others are indices);
* ``any``: no operands to match (constructors).
"""
from __future__ import annotations

from typing import Callable

KERNELS: dict[str, Callable] = {}
# ops registered by plugins: their kernels and CUDA formulas are user code, so a fused CUDA
# kernel that contains one and fails is the user's error, not adc's
PLUGIN_OPS: set[str] = set()


OUT_KERNELS: dict[str, Callable] = {}
OUT_RULES: dict[str, str] = {}
# the in-place forms that are one elementwise ufunc: each element is read before the same
# element of ``out`` is written, so ``out`` may be one of the operands
ELEMENTWISE_OUT: set[str] = set()


def kernel(*names: str):
    """Register `fn` as the kernel of each op in `names`. Whether it always returns a new
    array is said by the op's definition (``fresh``), which buffer planning reads from the
    IR op."""
    def deco(fn):
        for n in names:
            if n in KERNELS:
                raise ValueError(f"kernel {n!r} is already registered")
            KERNELS[n] = fn
        return fn
    return deco


def out_kernel(*names: str, rule: str = "same"):
    """Register `fn` as the in-place form of each op in `names`, for the operand types
    that `rule` allows (see the module doc)."""
    assert rule in ("same", "float", "first", "any"), rule

    def deco(fn):
        for n in names:
            if n in OUT_KERNELS:
                raise ValueError(f"in-place kernel {n!r} is already registered")
            OUT_KERNELS[n], OUT_RULES[n] = fn, rule
        return fn
    return deco


DTYPES = {"f16": "float16", "f32": "float32", "f64": "float64",
          "i32": "int32", "i64": "int64", "bool": "bool"}

from . import create, elementwise, reduce, linalg, shape, nn, collective  # noqa: E402,F401
from . import conv, pool  # noqa: E402,F401

# the kernels of the built-in ops; the executor checks what any other kernel (a plugin's)
# returns against the op's declared result types
BUILTIN = frozenset(KERNELS)
