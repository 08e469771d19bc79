"""The kernel table: one function per IR op name, ``fn(xp, *operands, **attrs)``.

`xp` is the array module (numpy or cupy), so one table serves both backends. Attributes
arrive with symbolic dimensions already resolved to integers. A kernel returns an array (or
a tuple of arrays for a multi-result op) of the dtype the IR declares.

`OUT_KERNELS` holds, for the ops that are one ufunc or one BLAS call, a second form
``fn(xp, *operands, out, **attrs)`` that writes into a given array: the executor uses it for
values that have a planned buffer (`adc_runtime.buffers`). Both forms run the same loop, so
they give the same bits.
"""
from __future__ import annotations

from typing import Callable

KERNELS: dict[str, Callable] = {}


OUT_KERNELS: dict[str, Callable] = {}


def _registrar(table: dict, what: str):
    def register(*names: str):
        def deco(fn):
            for n in names:
                if n in table:
                    raise ValueError(f"{what} {n!r} is already registered")
                table[n] = fn
            return fn
        return deco
    return register


kernel = _registrar(KERNELS, "kernel")            # kernel("exp")(fn): fn is exp's kernel
out_kernel = _registrar(OUT_KERNELS, "out kernel")  # the same op writing into `out`


DTYPES = {"f16": "float16", "f32": "float32", "f64": "float64",
          "i32": "int32", "i64": "int64", "bool": "bool"}

from . import create, elementwise, reduce, linalg, shape, nn  # noqa: E402,F401  (registration)
