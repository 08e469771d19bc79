"""What a compiled Python function is specialized on: per parameter, the structure of its
value (a pytree) and, per leaf, either the type of a run-time input or a value known at
compile time.

For a call from user code (`entry_leaf`): arrays, NumPy scalars and Python floats are
run-time inputs (a Python float takes the float dtype of the array arguments, f64 when they
have none or disagree, as NumPy lets a Python float follow the array it meets); Python
ints, bools, None and strings are compile-time values, so a new value compiles again. For a
call from a compiled function (`callee`), everything not run-time in the caller is
compile-time in the callee.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ...ir.types import TensorType
from . import pytree
from .values import TDSL_DTYPE


@dataclass(frozen=True)
class Leaf:
    """A run-time leaf (`type` set) or a compile-time one (`value`)."""

    type: TensorType | None = None
    value: object = None
    kind: object = None         # the compile-time value's Python type (1, 1.0, True differ)

    @property
    def runtime(self) -> bool:
        return self.type is not None


@dataclass(frozen=True)
class ParamSpec:
    name: str
    tree: pytree.TreeDef
    leaves: tuple            # of Leaf

    def key(self):
        return (self.name, self.tree, tuple(
            ("t", lf.type) if lf.runtime else ("s", lf.kind, _hashable(lf.value))
            for lf in self.leaves))


def _hashable(v):
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return v


class ArgumentError(TypeError):
    """An argument adc cannot take; `path` says where it lies in the argument."""


def entry_leaf(x, float_dtype: str) -> Leaf:
    if isinstance(x, (bool, np.bool_)) and not isinstance(x, np.ndarray):
        return Leaf(value=bool(x), kind=bool)
    if isinstance(x, numbers.Integral) and not isinstance(x, np.ndarray):
        return Leaf(value=int(x), kind=int)
    if x is None or isinstance(x, str):
        return Leaf(value=x, kind=type(x))
    if isinstance(x, float) and not isinstance(x, np.floating):
        return Leaf(TensorType(float_dtype, ()))
    if hasattr(x, "__array__") or isinstance(x, np.generic):
        a = x if hasattr(x, "dtype") and hasattr(x, "shape") else np.asarray(x)
        d = np.dtype(a.dtype)
        if d not in TDSL_DTYPE:
            raise ArgumentError(f"arrays of dtype {d} are not supported (f16, f32, f64, "
                                "i32, i64, bool)")
        return Leaf(TensorType(TDSL_DTYPE[d], tuple(int(n) for n in a.shape)))
    raise ArgumentError(f"{type(x).__name__} is not an array or a number (nor a dict, "
                        "list or tuple of them)")


def float_dtype_of(values) -> str:
    """The float dtype a Python float argument takes: that of the float arrays, if they
    agree, else f64."""
    found = set()
    for v in values:
        d = getattr(v, "dtype", None)
        if d is not None and getattr(v, "ndim", 0) >= 0 and np.dtype(d).kind == "f" \
                and np.dtype(d) in TDSL_DTYPE:
            found.add(TDSL_DTYPE[np.dtype(d)])
    return found.pop() if len(found) == 1 else "f64"


def entry_specs(bound: dict) -> tuple[list[ParamSpec], list]:
    """The `ParamSpec` of each bound parameter of a call from user code, and the run-time
    leaves' values in order."""
    flat = {name: pytree.flatten(v) for name, v in bound.items()}
    fdt = float_dtype_of(x for leaves, _ in flat.values() for x in leaves)
    specs, values = [], []
    for name, (leaves, tree) in flat.items():
        out = []
        for k, x in enumerate(leaves):
            try:
                lf = entry_leaf(x, fdt)
            except ArgumentError as e:
                path = pytree.leaf_paths(tree)[k]
                where = name + "".join(f"[{p!r}]" for p in path)
                raise ArgumentError(f"argument '{where}': {e}") from None
            out.append(lf)
            if lf.runtime:
                values.append(x)
        specs.append(ParamSpec(name, tree, tuple(out)))
    return specs, values
