"""The kernel table and its registration decorators (see `adc_runtime.kernels`)."""
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
