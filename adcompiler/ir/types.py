"""Tensor types with symbolic dimensions.

A dimension (`Dim`) is an ``int`` or a ``str``: a symbolic size such as ``"B"``, or an integer
polynomial in symbols in canonical form such as ``"2*B*T"`` (what ``reshape(x, [-1])``
produces from ``f32[B, T, 2]``) or ``"T-1"`` (the length of ``x[1:]`` on an axis of size T).
Symbols are bound to integers at run time.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache
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


class TensorType:
    """The type of an SSA value: an element dtype and a shape of `Dim`s (``()`` for scalars).

    Immutable and interned: equal types are one object, so that comparing and hashing them
    (which CSE and the verifier do for every op) are the identity's, done in C, and a
    program of a million ops holds a few distinct types instead of one per value."""

    # rank and is_float are stored, not properties: the passes read them for every op
    __slots__ = ("dtype", "shape", "rank", "is_float")
    _interned: dict[tuple, "TensorType"] = {}

    def __new__(cls, dtype: str, shape=()):
        key = (dtype, shape if type(shape) is tuple else tuple(shape))
        t = cls._interned.get(key)
        if t is None:
            assert dtype in DTYPES, dtype
            t = object.__new__(cls)
            # dims are kept as ints and strs: an integer of another type (numpy's) would
            # otherwise stay in the one shared object that equal shapes get
            dims = tuple(int(d) if not isinstance(d, (int, str)) and hasattr(d, "__index__")
                         else d for d in key[1])
            object.__setattr__(t, "dtype", dtype)
            object.__setattr__(t, "shape", dims)
            object.__setattr__(t, "rank", len(dims))
            object.__setattr__(t, "is_float", dtype in FLOAT_DTYPES)
            t = cls._interned.setdefault(key, t)
        return t

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field '{name}' of an immutable TensorType")

    def __delattr__(self, name):
        raise AttributeError(f"cannot delete field '{name}' of an immutable TensorType")

    def __reduce__(self):
        """Copied and pickled through the constructor, so that a copy is the interned type."""
        return TensorType, (self.dtype, self.shape)

    def __repr__(self) -> str:
        return f"TensorType(dtype={self.dtype!r}, shape={self.shape!r})"

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: str) -> "TensorType":
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


# ---- dimension arithmetic -------------------------------------------------------------
#
# A symbolic dim is an integer polynomial in its symbols, held as a map from monomials (the
# sorted tuple of their symbols, with repeats) to nonzero coefficients, and written in one
# canonical form so that equal dims are equal strings: terms by decreasing degree, then by
# symbols; the constant last (``2*B*T``, ``T-1``, ``3*B-3``, ``B*B+B``). A dim whose
# polynomial is a constant is an ``int``.

_TERM = re.compile(r"\s*([+-]?)\s*([^+-]+)")
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@lru_cache(maxsize=4096)
def _parse_poly(text: str) -> tuple[tuple[tuple[str, ...], int], ...]:
    terms: dict[tuple[str, ...], int] = {}
    pos = 0
    text = text.strip()
    if not text:
        raise ValueError("empty dimension")
    for m in _TERM.finditer(text):
        if m.start() != pos or (pos and not m.group(1)):
            raise ValueError(f"malformed dimension {text!r}")
        pos = m.end()
        coeff, syms = -1 if m.group(1) == "-" else 1, []
        for factor in m.group(2).split("*"):
            factor = factor.strip()
            if factor.isdigit():
                coeff *= int(factor)
            elif _SYMBOL.match(factor):
                syms.append(factor)
            else:
                raise ValueError(f"malformed dimension {text!r}")
        key = tuple(sorted(syms))
        terms[key] = terms.get(key, 0) + coeff
    if pos != len(text):
        raise ValueError(f"malformed dimension {text!r}")
    return tuple((k, c) for k, c in terms.items() if c)


def _poly(d: Dim) -> dict[tuple[str, ...], int]:
    if isinstance(d, bool) or not isinstance(d, (int, str)):
        raise TypeError(f"not a dimension: {d!r}")
    if isinstance(d, int):
        return {(): d} if d else {}
    return dict(_parse_poly(d))


def _order(term):
    syms, _ = term
    return (not syms, -len(syms), syms)


def _dim(poly: Mapping[tuple[str, ...], int]) -> Dim:
    terms = sorted(((k, c) for k, c in poly.items() if c), key=_order)
    if not terms:
        return 0
    if len(terms) == 1 and not terms[0][0]:
        return terms[0][1]
    out = []
    for syms, c in terms:
        body = "*".join(([str(abs(c))] if abs(c) != 1 or not syms else []) + list(syms))
        out.append(("-" if c < 0 else "+" if out else "") + body)
    return "".join(out)


def parse_dim(text: str) -> Dim:
    """A dimension written as text (``"4"``, ``"T - 1"``, ``"B*2"``) in canonical form;
    ValueError when it is not an integer polynomial in symbols."""
    return _dim(dict(_parse_poly(str(text))))


def canonical_dim(d: Dim) -> Dim:
    return _dim(_poly(d))


def dim_add(*dims: Dim) -> Dim:
    poly: dict[tuple[str, ...], int] = {}
    for d in dims:
        for k, c in _poly(d).items():
            poly[k] = poly.get(k, 0) + c
    return _dim(poly)


def dim_sub(a: Dim, b: Dim) -> Dim:
    return dim_add(a, dim_mul(-1, b))


def _mul2(p, q):
    out: dict[tuple[str, ...], int] = {}
    for ka, ca in p.items():
        for kb, cb in q.items():
            k = tuple(sorted(ka + kb))
            out[k] = out.get(k, 0) + ca * cb
    return {k: c for k, c in out.items() if c}


def dim_mul(*dims: Dim) -> Dim:
    poly: dict[tuple[str, ...], int] = {(): 1}
    for d in dims:
        poly = _mul2(poly, _poly(d))
    return _dim(poly)


def _divides(small: tuple[str, ...], big: tuple[str, ...]) -> tuple[str, ...] | None:
    """`big / small` as a monomial, or None when `small` does not divide `big`."""
    rest = list(big)
    for s in small:
        if s not in rest:
            return None
        rest.remove(s)
    return tuple(rest)


def dim_div(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when `b` divides `a` exactly as integer polynomials, else None.

    Multivariate division by one polynomial under a monomial order: when `b` divides `a`,
    the remainder is zero and every quotient coefficient is an integer, so any step that
    leaves a leading term undivisible (or a coefficient inexact) proves there is no quotient.
    """
    pa, pb = _poly(a), _poly(b)
    if not pb:
        return None
    lead_k, lead_c = min(pb.items(), key=_order)
    quotient: dict[tuple[str, ...], int] = {}
    rest = dict(pa)
    while rest:
        k, c = min(rest.items(), key=_order)
        m = _divides(lead_k, k)
        if m is None or c % lead_c:
            return None
        q = {m: c // lead_c}
        quotient[m] = quotient.get(m, 0) + q[m]
        for kk, cc in _mul2(q, pb).items():
            rest[kk] = rest.get(kk, 0) - cc
        rest = {kk: cc for kk, cc in rest.items() if cc}
    return _dim(quotient)


def num_elements(shape) -> Dim:
    return dim_mul(*shape) if shape else 1


def resolve_dim(d: Dim, env: Mapping[str, int]) -> int:
    """The integer value of `d` given bindings of its symbols; `UnboundDimError` (an
    `AdcError` and a KeyError) names a symbol that has no binding."""
    if isinstance(d, int):
        return d
    missing = [s for k, _ in _parse_poly(d) for s in k if s not in env]
    if missing:
        from adc_runtime.errors import UnboundDimError
        raise UnboundDimError(missing[0])
    return sum(c * math.prod(env[s] for s in k) for k, c in _parse_poly(d))


def resolve_shape(shape, env: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(resolve_dim(d, env) for d in shape)


def substitute_dim(d: Dim, env: Mapping[str, Dim]) -> Dim:
    """`d` with the symbols in `env` replaced by dims (``2*B*T``, B=3 -> ``6*T``)."""
    if isinstance(d, int):
        return d
    poly: dict[tuple[str, ...], int] = {}
    for k, c in _parse_poly(d):
        for kk, cc in _poly(dim_mul(c, *(env.get(s, s) for s in k))).items():
            poly[kk] = poly.get(kk, 0) + cc
    return _dim(poly)


def dim_symbols(d: Dim) -> list[str]:
    """The distinct symbols of `d`, sorted."""
    if isinstance(d, int):
        return []
    return sorted({s for k, _ in _parse_poly(d) for s in k})


def is_symbol(d: Dim) -> bool:
    """Whether `d` is one plain symbol (``T``), the only kind of dim an input shape binds."""
    return isinstance(d, str) and _SYMBOL.match(d) is not None


# ---- broadcasting and dtype rules -----------------------------------------------------

def broadcast_shapes(*shapes) -> tuple[Dim, ...]:
    """NumPy broadcasting over `Dim`s; a symbolic size only matches itself or 1."""
    if shapes and shapes.count(shapes[0]) == len(shapes):  # equal shapes, the common case
        return tuple(shapes[0])
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
    if dtypes.count(dtypes[0]) == len(dtypes):  # one dtype, the common case
        return dtypes[0]
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
