"""Elementwise ops: unary math, binary arithmetic, comparisons, `where`, `clip`.

Rules return cotangents in the broadcast result shape; the reverse driver unbroadcasts.
"""
from __future__ import annotations

from ..ir.types import TensorType, broadcast_shapes, join_dtypes
from ..diagnostics import ShapeError
from .registry import Option, register

EW = ("elementwise",)


def _same(types, attrs):
    return types[0]


def _float_unary(types, attrs):
    if not types[0].is_float:
        raise ShapeError(f"expects a float tensor, got {types[0]}")
    return types[0]


def _broadcast(types, attrs):
    return TensorType(join_dtypes(*(t.dtype for t in types)),
                      broadcast_shapes(*(t.shape for t in types)))


# ---- unary ---------------------------------------------------------------------------

register("neg", _same, traits=EW + ("linear",), vjp=lambda b, op, ct: [b.emit("neg", ct[0])])
register("exp", _float_unary, traits=EW,
         vjp=lambda b, op, ct: [b.emit("mul", ct[0], op.result)])

# ---- binary --------------------------------------------------------------------------

register("add", _broadcast, operands=("a", "b"), traits=EW + ("linear", "commutative"),
         vjp=lambda b, op, ct: [ct[0], ct[0]])
register("mul", _broadcast, operands=("a", "b"), traits=EW + ("commutative",),
         vjp=lambda b, op, ct: [b.emit("mul", ct[0], op.operands[1]),
                                b.emit("mul", ct[0], op.operands[0])])
