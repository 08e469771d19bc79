"""Reductions (`sum mean max min logsumexp var`) and `sum_to`, the unbroadcast op.

Each reduction takes ``axis`` (None: all axes; an int or a list of ints, negative allowed)
and ``keepdims``. Conventions: ``max``/``min`` split the cotangent equally among the
elements tied for the extremum; ``var`` is the population variance (divides by N), or with
``correction=c`` divides by ``N - c`` (PyTorch's `correction`; 1 is the unbiased variance),
which needs static sizes of the reduced axes and ``N - c > 0``.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..emit.c import Reduce
from ..ir.types import TensorType, normalize_axis, num_elements
from .create import dim_scalar
from .batching import reduce_rule
from .patterns import P, Pattern, bound, re_emit, same_type
from .registry import Option, register

AXIS_OPTIONS = (Option("axis", "axes", None), Option("keepdims", "bool", False))


def reduced_axes(rank: int, axis) -> tuple[int, ...]:
    """The normalized, sorted axes that `axis` (None, int or sequence) reduces."""
    if axis is None:
        return tuple(range(rank))
    if isinstance(axis, int):
        axis = (axis,)
    axes = [normalize_axis(a, rank) for a in axis]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"axis {list(axis)} names an axis twice")
    return tuple(sorted(axes)) if rank else ()


def reduce_type(t: TensorType, axis, keepdims: bool) -> TensorType:
    axes = reduced_axes(t.rank, axis)
    if keepdims:
        return t.with_shape(1 if k in axes else d for k, d in enumerate(t.shape))
    return t.with_shape(d for k, d in enumerate(t.shape) if k not in axes)


def _reduce(name, kind):
    """Type rule: `kind` is "numeric" (no bool), "float" or "any"."""
    def infer(types, attrs):
        t = types[0]
        if kind == "float" and not t.is_float:
            raise ShapeError(f"{name} expects a float tensor, got {t}")
        if kind == "numeric" and t.dtype == "bool":
            raise ShapeError(f"{name} expects a numeric tensor, got {t}")
        try:
            return reduce_type(t, attrs["axis"], attrs["keepdims"])
        except ShapeError as e:
            raise ShapeError(f"{name}: {e.message}") from None
    return infer


def _var_type(types, attrs):
    out = _reduce("var", "float")(types, attrs)
    c = attrs["correction"]
    if c:
        x = types[0]
        dims = [x.shape[k] for k in reduced_axes(x.rank, attrs["axis"])]
        if not all(isinstance(d, int) for d in dims):
            raise ShapeError(f"var: correction={c} needs static sizes of the reduced axes, "
                             f"got {x} over axis {attrs['axis']}")
        n = num_elements(dims)
        if n - c <= 0:
            raise ShapeError(f"var: correction={c} leaves no degrees of freedom: {n} "
                             f"element{'s' if n != 1 else ''} reduced in {x}")
    return out


def _sum_type(types, attrs):
    # summing a bool mask counts its true elements
    t = _reduce("sum", "any")(types, attrs)
    return t.with_dtype("i64") if t.dtype == "bool" else t


# ---- rule helpers --------------------------------------------------------------------

def keep_dims(b, v, op):
    """`v` (shaped like the reduction's result) reshaped to the keepdims form."""
    if op.attrs["keepdims"]:
        return v
    x = op.operands[0]
    return b.emit("reshape", v, shape=reduce_type(x.type, op.attrs["axis"], True).shape)


def expand_back(b, ct, op):
    """Broadcast a reduction's cotangent `ct` back to the shape of the op's operand."""
    return b.emit("broadcast_to", keep_dims(b, ct, op), shape=op.operands[0].type.shape)


def count(b, op):
    """The number of elements each output of reduction `op` reduces, as a scalar of the
    operand's dtype: a literal, or ``dim_value`` of the product when a dimension is
    symbolic."""
    x = op.operands[0]
    dims = [x.type.shape[k] for k in reduced_axes(x.type.rank, op.attrs["axis"])]
    return dim_scalar(b, num_elements(dims), x.type.dtype)


def _mean_vjp(b, op, ct):
    return [b.emit("div", expand_back(b, ct[0], op), count(b, op))]


def _extremum_vjp(b, op, ct):
    # each element equal to the extremum gets ct / (number of such elements)
    x = op.operands[0]
    one, zero = b.const(1.0, x.type.dtype), b.const(0.0, x.type.dtype)
    hit = b.emit("where", b.emit("eq", x, keep_dims(b, op.result, op)), one, zero)
    ties = b.emit("sum", hit, axis=op.attrs["axis"], keepdims=True)
    return [b.emit("mul", b.emit("div", hit, ties), keep_dims(b, ct[0], op))]


def _logsumexp_vjp(b, op, ct):
    x = op.operands[0]
    p = b.emit("exp", b.emit("sub", x, keep_dims(b, op.result, op)))
    return [b.emit("mul", p, keep_dims(b, ct[0], op))]


def _var_scale(b, op):
    """2 / (N - correction): the derivative of var is that times x - mean(x)."""
    x, c = op.operands[0], op.attrs["correction"]
    if c:   # the type rule asked for static sizes
        n = num_elements([x.type.shape[k] for k in reduced_axes(x.type.rank, op.attrs["axis"])])
        return b.const(2.0 / (n - c), x.type.dtype)
    return b.emit("div", b.const(2.0, x.type.dtype), count(b, op))


def _var_vjp(b, op, ct):
    x = op.operands[0]
    centered = b.emit("sub", x, b.emit("mean", x, axis=op.attrs["axis"], keepdims=True))
    return [b.emit("mul", b.emit("mul", centered, _var_scale(b, op)), keep_dims(b, ct[0], op))]


def _reduce_like(b, op, v):
    return b.emit("sum", v, axis=op.attrs["axis"], keepdims=op.attrs["keepdims"])


def _weighted_jvp(weight):
    """JVP ``sum(weight(b, op) * t)`` over the op's axes, for a float operand."""
    def jvp(b, op, tangents):
        if tangents[0] is None or not op.operands[0].type.is_float:
            return [None]
        return [_reduce_like(b, op, b.emit("mul", weight(b, op), tangents[0]))]
    return jvp


def _extremum_weight(b, op):
    # the mean of the tangent over the elements tied for the extremum
    x = op.operands[0]
    one, zero = b.const(1.0, x.type.dtype), b.const(0.0, x.type.dtype)
    hit = b.emit("where", b.emit("eq", x, keep_dims(b, op.result, op)), one, zero)
    return b.emit("div", hit, b.emit("sum", hit, axis=op.attrs["axis"], keepdims=True))


def _softmax_weight(b, op):
    return b.emit("exp", b.emit("sub", op.operands[0], keep_dims(b, op.result, op)))


def _var_weight(b, op):
    x = op.operands[0]
    centered = b.emit("sub", x, b.emit("mean", x, axis=op.attrs["axis"], keepdims=True))
    return b.emit("mul", centered, _var_scale(b, op))


def _no_axes(name):
    """The canonicalization of a reduction over nothing: its operand."""
    return (Pattern(P(name, "x"), same_type, f"{name} over no (or size-1 kept) axes -> x"),)


def _float_only(rule):
    """Skip the rule for integer operands, which get no cotangent."""
    return lambda b, op, ct: rule(b, op, ct) if op.operands[0].type.is_float else [None]


# `sum`, `mean` and `sum_to` are linear: the forward driver applies them to the tangent. The
# others weight the tangent by the same local derivative their VJP spreads the cotangent
# with, then reduce like the op itself. FLOPs: one per operand element, unless said.
register("sum", _sum_type, options=AXIS_OPTIONS, traits=("reduction", "linear"),
         vjp=_float_only(lambda b, op, ct: [expand_back(b, ct[0], op)]), flops=1,
         cuda_reduce=Reduce("sum"), batch=reduce_rule, rewrites=_no_axes("sum"), fresh=True)
register("mean", _reduce("mean", "float"), options=AXIS_OPTIONS,
         traits=("reduction", "linear"), vjp=_mean_vjp, flops=1,
         cuda_reduce=Reduce("sum", mean=True), batch=reduce_rule, rewrites=_no_axes("mean"),
         fresh=True)
register("max", _reduce("max", "numeric"), options=AXIS_OPTIONS, traits=("reduction",),
         vjp=_float_only(_extremum_vjp), jvp=_weighted_jvp(_extremum_weight), flops=1,
         cuda_reduce=Reduce("max"), batch=reduce_rule, rewrites=_no_axes("max"), fresh=True)
register("min", _reduce("min", "numeric"), options=AXIS_OPTIONS, traits=("reduction",),
         vjp=_float_only(_extremum_vjp), jvp=_weighted_jvp(_extremum_weight), flops=1,
         cuda_reduce=Reduce("min"), batch=reduce_rule, rewrites=_no_axes("min"), fresh=True)
register("logsumexp", _reduce("logsumexp", "float"), options=AXIS_OPTIONS,
         traits=("reduction",), vjp=_logsumexp_vjp, jvp=_weighted_jvp(_softmax_weight),
         flops=4, batch=reduce_rule, fresh=True)
register("var", _var_type, options=AXIS_OPTIONS + (Option("correction", "float", 0),),
         traits=("reduction",), vjp=_var_vjp, jvp=_weighted_jvp(_var_weight), flops=3,
         batch=reduce_rule, fresh=True)


def _sum_to(types, attrs):
    return types[0].with_shape(attrs["shape"])


def _sum_to_batch(b, op, args, batched, n):
    # the axes an example has beyond the target are summed first, so that the batch axis
    # is not taken for one of them
    x, shape = args[0], tuple(op.attrs["shape"])
    extra = x.type.rank - 1 - len(shape)
    if extra > 0:
        x = b.emit("sum", x, axis=list(range(1, extra + 1)))
    return [b.emit("sum_to", x, shape=(n,) + shape)]


# sum_to(x, shape): sum `x` down to `shape` by NumPy broadcasting rules (the inverse of
# broadcast_to); the reverse driver uses it to unbroadcast cotangents.
register("sum_to", _sum_to, options=(Option("shape", "shape"),), traits=("reduction", "linear"),
         vjp=lambda b, op, ct: [b.emit("broadcast_to", ct[0], shape=op.operands[0].type.shape)],
         flops=1, cuda_reduce=Reduce("sum", to_shape=True), batch=_sum_to_batch,
         rewrites=(Pattern(P("sum_to", "x"), bound("x"), "sum_to the same shape -> x"),
                   Pattern(P("sum_to", P("sum_to", "x")), re_emit,
                           "sum_to(sum_to(x)) -> sum_to(x)")), fresh=True)
