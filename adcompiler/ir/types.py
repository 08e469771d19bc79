"""Tensor types with symbolic dimensions.

A dimension (`Dim`) is an ``int`` or a ``str``: a symbolic size such as ``"B"``, or a product
of symbols and integers in canonical form such as ``"2*B*T"`` (what ``reshape(x, [-1])``
produces from ``f32[B, T, 2]``). Symbols are bound to integers at run time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Union

from ..diagnostics import ShapeError

Dim = Union[int, str]

FLOAT_DTYPES = ("f16", "f32", "f64")
INT_DTYPES = ("i32", "i64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)
NUMPY_DTYPE = {"f16": "float16", "f32": "float32", "f64": "float64",
               "i32": "int32", "i64": "int64", "bool": "bool"}
DTYPE_OF_NUMPY = {v: k for k, v in NUMPY_DTYPE.items()}
DTYPE_BYTES = {"f16": 2, "f32": 4, "f64": 8, "i32": 4, "i64": 8, "bool": 1}


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class TensorType:
    """The type of an SSA value: an element dtype and a shape of `Dim`s (``()`` for scalars)."""

    dtype: str
    shape: tuple[Dim, ...] = ()

    def __post_init__(self):
        assert self.dtype in DTYPES, self.dtype
        object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: str) -> "TensorType":
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


# ---- dimension arithmetic -------------------------------------------------------------

def _factors(d: Dim) -> tuple[int, list[str]]:
    if isinstance(d, int):
        return d, []
    coeff, syms = 1, []
    for part in d.split("*"):
        if part.isdigit():
            coeff *= int(part)
        else:
            syms.append(part)
    return coeff, syms


def _make_dim(coeff: int, syms: list[str]) -> Dim:
    if not syms:
        return coeff
    syms = sorted(syms)
    return "*".join(([str(coeff)] if coeff != 1 else []) + syms)


def dim_mul(*dims: Dim) -> Dim:
    coeff, syms = 1, []
    for d in dims:
        c, s = _factors(d)
        coeff *= c
        syms += s
    return _make_dim(coeff, syms) if coeff != 0 else 0


def dim_div(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when it divides exactly and symbolically, else None."""
    ca, sa = _factors(a)
    cb, sb = _factors(b)
    if cb == 0 or ca % cb:
        return None
    rest = list(sa)
    for s in sb:
        if s not in rest:
            return None
        rest.remove(s)
    return _make_dim(ca // cb, rest)


def num_elements(shape) -> Dim:
    return dim_mul(*shape) if shape else 1


def resolve_dim(d: Dim, env: Mapping[str, int]) -> int:
    """The integer value of `d` given bindings of its symbols."""
    if isinstance(d, int):
        return d
    coeff, syms = _factors(d)
    return coeff * math.prod(env[s] for s in syms)


def resolve_shape(shape, env: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(resolve_dim(d, env) for d in shape)


def dim_symbols(d: Dim) -> list[str]:
    return _factors(d)[1]


# ---- broadcasting and dtype rules -----------------------------------------------------

def broadcast_shapes(*shapes) -> tuple[Dim, ...]:
    """NumPy broadcasting over `Dim`s; a symbolic size only matches itself or 1."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dim: Dim = 1
        for s in shapes:
            k = axis - (rank - len(s))
            if k < 0:
                continue
            d = s[k]
            if d == 1 or d == dim:
                continue
            if dim == 1:
                dim = d
            else:
                pretty = " and ".join("[" + ", ".join(map(str, s)) + "]" for s in shapes)
                raise ShapeError(f"shapes {pretty} cannot be broadcast together")
        out.append(dim)
    return tuple(out)


def join_dtypes(*dtypes: str) -> str:
    """The dtype of an arithmetic op's result; mixing float widths is an error."""
    floats = {d for d in dtypes if d in FLOAT_DTYPES}
    if len(floats) > 1:
        raise ShapeError(f"mixed float dtypes {' and '.join(sorted(floats))}; use cast")
    if floats:
        return floats.pop()
    for d in ("i64", "i32", "bool"):
        if d in dtypes:
            return d
    return dtypes[0]


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank


def nbytes(t: TensorType, env: Mapping[str, int]) -> int:
    return DTYPE_BYTES[t.dtype] * math.prod(resolve_shape(t.shape, env))
