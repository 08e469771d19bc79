"""What a Python expression translates to.

A run-time value is a `Tensor`: the TDSL syntax tree that computes it. Everything known
when the function is compiled stays a Python object: numbers, ``bool``, ``None``, strings,
dtypes, shapes, modules, functions, and tuples, lists and dicts of any of these (which may
hold `Tensor`s too: a dict of parameters is a dict of `Tensor`s).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..tdsl import ast

# NumPy dtypes and their TDSL names
TDSL_DTYPE = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
              np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
              np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool"}
NUMPY_DTYPE = {v: k for k, v in TDSL_DTYPE.items()}


@dataclass(eq=False)
class Tensor:
    """A run-time value: the TDSL expression `expr` computes it."""

    expr: object


def is_number(v) -> bool:
    """A compile-time number (Python or NumPy scalar; not bool)."""
    return isinstance(v, numbers.Number) and not isinstance(v, (bool, np.bool_)) \
        and not isinstance(v, complex)


def plain_number(v):
    """A NumPy scalar as the Python number it holds."""
    if isinstance(v, np.generic):
        return v.item()
    return v


def has_tensor(v) -> bool:
    """Whether `v` is or holds a run-time value."""
    if isinstance(v, Tensor):
        return True
    if isinstance(v, (tuple, list)):
        return any(has_tensor(x) for x in v)
    if isinstance(v, dict):
        return any(has_tensor(x) for x in v.values())
    return False


def as_dtype(v):
    """`v` (``np.float32``, ``"float32"``, ``np.dtype(...)``, ``float``...) as a NumPy dtype
    that TDSL has, else None."""
    if v is float:
        v = np.float64
    elif v is int:
        v = np.int64
    elif v is bool:
        v = np.bool_
    try:
        d = np.dtype(v)
    except TypeError:
        return None
    return d if d in TDSL_DTYPE else None


def dtype_name(span: ast.Span, dtype) -> ast.Name:
    """The TDSL spelling of a dtype option (``dtype=f64``)."""
    return ast.Name(TDSL_DTYPE[dtype], span)


def describe(v) -> str:
    """How a compile-time object is named in messages."""
    if isinstance(v, Tensor):
        return "an array"
    if v is None:
        return "None"
    if isinstance(v, bool):
        return f"the bool {v}"
    if is_number(v):
        return f"the number {plain_number(v)!r}"
    if isinstance(v, str):
        return f"the string {v!r}"
    if isinstance(v, tuple):
        return "a tuple"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a dict"
    name = getattr(v, "__name__", None)
    kind = type(v).__name__
    return f"{kind} '{name}'" if name else f"a Python object of type {kind}"
