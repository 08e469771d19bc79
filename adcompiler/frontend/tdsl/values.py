"""What a TDSL expression lowers to: an IR `Value`, a weakly typed literal, or several results.

A number literal stays a `Weak` Python number until it meets a tensor, whose dtype it then
takes (``x * 2`` keeps x's dtype); arithmetic between literals folds at compile time. A
literal that meets no tensor becomes f32 (float literal) or i64 (int literal).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...ir.types import FLOAT_DTYPES, INT_DTYPES
from .ast import Span


@dataclass
class Weak:
    """A literal number not yet given a dtype."""

    value: int | float
    span: Span


@dataclass
class Multi:
    """The results of a call to a function with several results (only `a, b = f(...)`)."""

    values: list
    callee: str
    span: Span


MAX_INT_BITS = 256


def default_dtype(value) -> str:
    return "f32" if isinstance(value, float) else "i64"


def literal_dtype(value, other: str | None) -> str:
    """The dtype a literal takes when it meets a tensor of dtype `other` (None: no tensor).

    An int literal takes any numeric dtype; a float literal takes a float dtype and is f32
    next to integer or bool tensors (whose arithmetic then promotes to f32).
    """
    if isinstance(value, float):
        return other if other in FLOAT_DTYPES else "f32"
    return other if other in FLOAT_DTYPES + INT_DTYPES else "i64"


def checked_value(value, dtype: str, err) -> int | float:
    """`value` converted to `dtype`'s Python kind; `err(msg)` builds the error to raise."""
    if dtype in FLOAT_DTYPES:
        try:
            v = float(value)
        except OverflowError:
            raise err(f"the literal {value} is out of range for {dtype}") from None
        if math.isfinite(v) and abs(v) > float(np.finfo(dtype.replace("f", "float")).max):
            raise err(f"the literal {value} is out of range for {dtype}")
        return v
    if dtype in INT_DTYPES:
        info = np.iinfo("int32" if dtype == "i32" else "int64")
        if isinstance(value, float):
            raise err(f"the float literal {value} cannot be {dtype}")
        if not info.min <= value <= info.max:
            raise err(f"the literal {value} is out of range for {dtype}")
        return int(value)
    raise err(f"a number literal cannot be {dtype}")


def fold(op: str, a, b, err):
    """``a OP b`` for two literals (Python semantics: ``/`` is true division)."""
    try:
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        elif op == "/":
            r = a / b
        elif op == "**":
            if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 \
                    and b * math.log2(abs(a)) > MAX_INT_BITS:
                raise err("the constant is too large")
            r = a ** b
            if isinstance(r, complex):
                raise err("a negative number to a fractional power is not a real number")
        else:
            raise AssertionError(op)
    except ZeroDivisionError:
        raise err("division by zero in a constant expression") from None
    except OverflowError:
        raise err("the constant is too large") from None
    if isinstance(r, int) and r.bit_length() > MAX_INT_BITS:
        raise err("the constant is too large")
    if isinstance(r, float) and not math.isfinite(r):
        raise err("the constant is too large")
    return r
