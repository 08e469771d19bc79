"""The one rule for an input's data against its declared dtype, and the one wording of a
wrong shape or of two sizes for one dimension, shared by the library's callables (`Runner`,
`bind_dims`) and the ``adc`` command's input files.

Typed data (NumPy or CuPy arrays, ``.npz`` files) must be of the declared kind: float data
for a float input (converted to the declared width), integers for an integer input (any
width, when the values fit), bools for a bool input. Untyped numbers (Python scalars and
lists, JSON) have no dtype to check, so numbers are accepted for float inputs and whole
numbers for integer inputs.
"""
from __future__ import annotations

from typing import Any

from .errors import RunError


def convert_input(name: str, value: Any, dtype: str, type_text: str, xp, typed=None):
    """`value` as an array of the declared `dtype` (``"f32"``, ``"i64"``, ...), or a
    `RunError` naming input `name` of type `type_text`. `typed` says whether `value` had a
    dtype of its own (default: whether it is an array)."""
    from .kernels import DTYPES
    if typed is None:
        typed = hasattr(value, "dtype") and hasattr(value, "shape")
    declared = xp.dtype(DTYPES[dtype])
    arr = xp.asarray(value)
    kind = arr.dtype.kind
    if arr.dtype.name == "bfloat16":  # ml_dtypes' bf16: widened exactly, then as any float
        arr, kind = arr.astype("float32"), "f"
    if declared.kind == "f":
        if kind == "f" or (kind in "iu" and not typed):
            return arr.astype(declared, copy=False)
    elif declared.kind in "iu":
        if kind == "f" and not typed:
            if not bool(xp.all(xp.mod(arr, 1) == 0)):
                raise RunError(f"input '{name}' is declared {type_text} but holds "
                               "non-integer numbers")
            kind = "i"  # JSON and Python write 2.0 for some integers
        if kind in "iu":
            out = arr.astype(declared, copy=False)
            if out.dtype != arr.dtype and not bool(xp.array_equal(out, arr)):
                raise RunError(f"input '{name}' does not fit in {dtype}")
            return out
    elif declared.kind == "b" and kind == "b":
        return arr
    raise RunError(f"input '{name}' is declared {type_text} but the data is {arr.dtype}")


def shape_error(name: str, type_text: str, shape, expected=None) -> RunError:
    """Input `name`, declared `type_text`, came with `shape`; `expected` is the declared shape
    with its symbols bound, when that says more than `type_text`."""
    extra = "" if expected is None else f" (expected {tuple(expected)})"
    return RunError(f"input '{name}' is declared {type_text} but has shape "
                    f"{tuple(int(n) for n in shape)}{extra}")


def dim_conflict(dim: str, size: int, origin: str, other: int, other_origin: str) -> RunError:
    """Symbolic dimension `dim` got `size` from `origin` (e.g. ``input 'x'``) and a different
    size `other` from `other_origin`."""
    return RunError(f"dimension '{dim}' is {size} from {origin} but {other} from {other_origin}")
