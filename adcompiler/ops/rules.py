"""Helpers shared by the derivative rules of the op families (and the AD passes): symbolic
zeros are ``None``, so a sum of tangents or cotangents skips them."""
from __future__ import annotations


def scalar(b, value, like):
    """A scalar constant of `like`'s dtype (an int for an integer dtype)."""
    dtype = like.type.dtype
    return b.const(value if like.type.is_float else int(value), dtype)


def float_tangent(v, t):
    """`t`, or None for an operand that carries no derivative (integers, bools)."""
    return t if v.type.is_float else None


def add_all(b, parts):
    """The sum of the non-None `parts`, or None (a symbolic zero) if there is none."""
    out = None
    for p in parts:
        if p is not None:
            out = p if out is None else b.emit("add", out, p)
    return out
