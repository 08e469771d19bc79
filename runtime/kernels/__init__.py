"""The kernel table: one function per IR op name, ``fn(xp, *operands, **attrs)``.

`xp` is the array module (numpy or cupy), so one table serves both backends. Attributes
arrive with symbolic dimensions already resolved to integers. A kernel returns an array (or
a tuple of arrays for a multi-result op) of the dtype the IR declares.
"""
from __future__ import annotations

from typing import Callable

KERNELS: dict[str, Callable] = {}


def kernel(*names: str):
    """Register `fn` as the kernel of each op in `names`."""
    def deco(fn):
        for n in names:
            if n in KERNELS:
                raise ValueError(f"kernel {n!r} is already registered")
            KERNELS[n] = fn
        return fn
    return deco


DTYPES = {"f16": "float16", "f32": "float32", "f64": "float64",
          "i32": "int32", "i64": "int64", "bool": "bool"}

from . import create, elementwise, reduce, linalg, shape, nn  # noqa: E402,F401  (registration)
