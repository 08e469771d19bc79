"""Reductions (`sum mean max min logsumexp var`) and `sum_to`, the unbroadcast op."""
from __future__ import annotations

from ..ir.types import TensorType, normalize_axis
from .registry import Option, register

AXIS_OPTIONS = (Option("axis", "axes", None), Option("keepdims", "bool", False))


def reduced_axes(rank: int, axis) -> tuple[int, ...]:
    """The normalized, sorted axes that `axis` (None, int or sequence) reduces."""
    if axis is None:
        return tuple(range(rank))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted({normalize_axis(a, rank) for a in axis}))


def reduce_type(t: TensorType, axis, keepdims: bool) -> TensorType:
    axes = reduced_axes(t.rank, axis)
    if keepdims:
        return t.with_shape(1 if k in axes else d for k, d in enumerate(t.shape))
    return t.with_shape(d for k, d in enumerate(t.shape) if k not in axes)


def _reduce(types, attrs):
    return reduce_type(types[0], attrs["axis"], attrs["keepdims"])


def expand_back(b, ct, op):
    """Broadcast a reduction's cotangent `ct` back to the shape of the op's operand."""
    x = op.operands[0]
    if not op.attrs["keepdims"]:
        ct = b.emit("reshape", ct, shape=reduce_type(x.type, op.attrs["axis"], True).shape)
    return b.emit("broadcast_to", ct, shape=x.type.shape)


register("sum", _reduce, options=AXIS_OPTIONS, traits=("reduction", "linear"),
         vjp=lambda b, op, ct: [expand_back(b, ct[0], op)])


def _sum_to(types, attrs):
    return types[0].with_shape(attrs["shape"])


# sum_to(x, shape): sum `x` down to `shape` by NumPy broadcasting rules (the inverse of
# broadcast_to); the reverse driver uses it to unbroadcast cotangents.
register("sum_to", _sum_to, options=(Option("shape", "shape"),), traits=("reduction", "linear"),
         vjp=lambda b, op, ct: [b.emit("broadcast_to", ct[0], shape=op.operands[0].type.shape)])
