"""pad(x, [b0, a0, b1, a1, ...], value=0.0): `b_k` elements of `value` before axis `k` of
`x` and `a_k` after it, one pair per axis, in axis order.

Affine, not linear: its tangent is the tangent padded with zeros, and its adjoint the slice
of the cotangent where `x` lies.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..ir.types import dim_add
from .registry import Option, register
from .windows import _is_int, _text


def pairs(widths, rank: int) -> list[tuple[int, int]]:
    """The (before, after) widths of each axis, checked against the rank."""
    if (not isinstance(widths, (list, tuple)) or not all(map(_is_int, widths))
            or len(widths) != 2 * rank):
        raise ShapeError(f"pad: widths must be a list of {2 * rank} ints (before and after "
                         f"each of the {rank} axes), got {_text(widths)}")
    if any(w < 0 for w in widths):
        raise ShapeError(f"pad: widths must not be negative, got {_text(widths)}")
    return [(widths[2 * k], widths[2 * k + 1]) for k in range(rank)]


def _pad_type(types, attrs):
    (x,) = types
    value = attrs["value"]
    if not x.is_float and value != int(value):
        raise ShapeError(f"pad: the value {value} does not fit {x}")
    if x.dtype == "bool" and value not in (0, 1):
        raise ShapeError(f"pad: the value {value} does not fit {x}")
    return x.with_shape(tuple(dim_add(d, lo, hi) if lo or hi else d
                              for d, (lo, hi) in zip(x.shape, pairs(attrs["widths"], x.rank))))


def _pad_vjp(b, op, cts):
    x = op.operands[0]
    if not x.type.is_float:
        return [None]
    idx = tuple((lo, -hi if hi else None, None) for lo, hi in pairs(op.attrs["widths"],
                                                                    x.type.rank))
    if not any(lo or hi for lo, hi, _ in idx):
        return [cts[0]]
    return [b.emit("index", cts[0], idx=idx)]


def _pad_jvp(b, op, tangents):
    t = tangents[0]
    if t is None or not op.operands[0].type.is_float:
        return [None]
    return [b.emit("pad", t, widths=op.attrs["widths"], value=0.0)]


def _pad_batch(b, op, args, batched, n):
    return [b.emit("pad", args[0], widths=(0, 0) + tuple(op.attrs["widths"]),
                   value=op.attrs["value"])]


register("pad", _pad_type, options=(Option("widths", "ints"), Option("value", "float", 0.0)),
         vjp=_pad_vjp, jvp=_pad_jvp, flops=0, batch=_pad_batch, fresh=True,
         doc="value around each axis: widths [b0, a0, b1, a1, ...], one pair per axis")
