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

from .table import (DTYPES, ELEMENTWISE_OUT, KERNELS, OUT_KERNELS, OUT_RULES,  # noqa: F401
                    PLUGIN_OPS, kernel, out_kernel)
from . import create, elementwise, reduce, linalg, shape, nn, collective  # noqa: F401  (registration)
from . import along_axis, attention, norm  # noqa: F401  (registration)
from . import conv, pool  # noqa: F401  (registration)
from . import random, state  # noqa: F401  (registration)

# the kernels of the built-in ops; the executor checks what any other kernel (a plugin's)
# returns against the op's declared result types
BUILTIN = frozenset(KERNELS)
