"""Constructors: scalar constants, zeros/ones/full, *_like, arange; and `dim_value`, the
run-time value of a (possibly symbolic) dimension, for derivative rules that divide by a size."""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..emit.c import COMPUTE, literal
from ..ir.types import TensorType
from .batching import leading_rule
from .registry import Option, register

CTOR = ("constructor",)


def _filled(types, attrs):
    return TensorType(attrs["dtype"], tuple(attrs["shape"]))


# const: a scalar literal (`value`) of `dtype`; the frontend gives a literal the dtype of the
# tensor it meets.
register("const", lambda types, attrs: TensorType(attrs["dtype"], ()), operands=(),
         options=(Option("value", "number"), Option("dtype", "dtype", "f32")),
         traits=CTOR + ("literal",), flops=0, splat=lambda op: op.attrs["value"],
         cuda=lambda w, op: w.let(op.result.type.dtype,
                                  literal(op.attrs["value"], op.result.type.dtype),
                                  COMPUTE[op.result.type.dtype]), fresh=True)
register("zeros", _filled, operands=(),
         options=(Option("shape", "shape"), Option("dtype", "dtype", "f32")), traits=CTOR, flops=0,
         splat=lambda op: 0, fresh=True)
register("ones", _filled, operands=(),
         options=(Option("shape", "shape"), Option("dtype", "dtype", "f32")), traits=CTOR, flops=0,
         splat=lambda op: 1, fresh=True)
register("full", _filled, operands=(),
         options=(Option("shape", "shape"), Option("value", "number"),
                  Option("dtype", "dtype", "f32")), traits=CTOR, flops=0,
         splat=lambda op: op.attrs["value"], fresh=True)

# zeros_like/ones_like read only their operand's type: the derivative is zero.
register("zeros_like", lambda types, attrs: types[0], traits=("no_grad",), flops=0,
         batch=leading_rule, splat=lambda op: 0, fresh=True)
register("ones_like", lambda types, attrs: types[0], traits=("no_grad",), flops=0,
         batch=leading_rule, splat=lambda op: 1, fresh=True)


def _arange(types, attrs):
    n = attrs["n"]
    if isinstance(n, bool) or not isinstance(n, (int, str)) or (isinstance(n, int) and n < 0):
        raise ShapeError(f"arange needs a dimension (a size >= 0), got {n!r}")
    return TensorType(attrs["dtype"], (n,))


register("arange", _arange, operands=(),
         options=(Option("n", "dim"), Option("dtype", "dtype", "i64")), traits=CTOR, flops=0,
         fresh=True)


def _dim_value(types, attrs):
    n = attrs["n"]
    if isinstance(n, bool) or not isinstance(n, (int, str)):
        raise ShapeError(f"dim_value needs a dimension, got {n!r}")
    return TensorType(attrs["dtype"], ())


# dim_value(; n, dtype): the scalar value of the dimension `n` (e.g. "B*T") at run time.
register("dim_value", _dim_value, operands=(),
         options=(Option("n", "dim"), Option("dtype", "dtype", "f32")), traits=CTOR, flops=0,
         fresh=True)


def dim_scalar(b, n, dtype: str):
    """A scalar Value holding the size `n`: a literal when static, else `dim_value`."""
    if isinstance(n, int):
        return b.const(float(n) if dtype.startswith("f") else n, dtype)
    return b.emit("dim_value", n=n, dtype=dtype)
