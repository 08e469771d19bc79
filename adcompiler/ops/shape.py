"""Shape ops: reshape, broadcast_to, expand_dims, squeeze, transpose-free moves, concat,
stack, indexing."""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..ir.types import broadcast_shapes, dim_div, num_elements
from .registry import Option, register


def _reshape(types, attrs):
    t, shape = types[0], list(attrs["shape"])
    if shape.count(-1) > 1:
        raise ShapeError("reshape allows at most one -1")
    if -1 in shape:
        known = num_elements([d for d in shape if d != -1])
        rest = dim_div(num_elements(t.shape), known)
        if rest is None:
            raise ShapeError(f"cannot reshape {t} to {shape}")
        shape[shape.index(-1)] = rest
    if num_elements(shape) != num_elements(t.shape):
        raise ShapeError(f"cannot reshape {t} to [{', '.join(map(str, shape))}]")
    return t.with_shape(shape)


register("reshape", _reshape, options=(Option("shape", "shape"),), traits=("linear",),
         vjp=lambda b, op, ct: [b.emit("reshape", ct[0], shape=op.operands[0].type.shape)])


def _broadcast_to(types, attrs):
    shape = tuple(attrs["shape"])
    if broadcast_shapes(types[0].shape, shape) != shape:
        raise ShapeError(f"cannot broadcast {types[0]} to [{', '.join(map(str, shape))}]")
    return types[0].with_shape(shape)


register("broadcast_to", _broadcast_to, options=(Option("shape", "shape"),), traits=("linear",),
         vjp=lambda b, op, ct: [ct[0]])  # the driver's unbroadcast sums back to the operand
