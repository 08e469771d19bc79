"""Gathering by integer indices: take (with its adjoint `take_grad`, a scatter-add) and
one_hot. Their index operands carry no derivative; `index_bound` tells `adc run` the range
of the indices an input feeds."""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..ir.types import TensorType, dim_mul, normalize_axis
from .batching import leading_rule, rank, unsupported
from .registry import Option, register
from . import roles


def _int(t: TensorType, what: str) -> None:
    if t.dtype not in ("i32", "i64"):
        raise ShapeError(f"{what} must be an integer tensor, got {t}")


def _take(types, attrs):
    table, idx = types
    _int(idx, "take: idx")
    if table.rank == 0:
        raise ShapeError("take needs a table of rank >= 1")
    axis = normalize_axis(attrs["axis"], table.rank)
    return table.with_shape(table.shape[:axis] + idx.shape + table.shape[axis + 1:])


def _take_vjp(b, op, cts):
    table, idx = op.operands
    axis = normalize_axis(op.attrs["axis"], table.type.rank)
    return [b.emit("take_grad", cts[0], idx, axis=axis, shape=table.type.shape), None]


def _per_example_rows(b, idx, rows, n):
    """`idx` (batched) offset by ``k * rows`` for example k: rows of the flattened batch."""
    offset = b.emit("mul", b.emit("arange", n=n, dtype=idx.type.dtype),
                    b.const(rows, idx.type.dtype) if isinstance(rows, int) else
                    b.emit("dim_value", n=rows, dtype=idx.type.dtype))
    offset = b.emit("reshape", offset, shape=(n,) + (1,) * (idx.type.rank - 1))
    return b.emit("add", idx, offset)


def _take_batch(b, op, args, batched, n):
    """Shared indices gather from each example's table (the axis shifts); per-example
    indices into a shared table gather once, the examples landing where the index axes go;
    both batched gather rows of the flattened batch of tables (axis 0)."""
    (table, idx), axis = args, op.attrs["axis"]
    if not batched[1]:
        return [b.emit("take", table, idx, axis=normalize_axis(axis, rank(table, True)) + 1)]
    axis = normalize_axis(axis, rank(table, batched[0]))
    if not batched[0]:
        out = b.emit("take", table, idx, axis=axis)
        if axis == 0:
            return [out]
        perm = [axis] + [k for k in range(out.type.rank) if k != axis]
        return [b.emit("transpose", out, perm=perm)]
    if axis != 0:
        unsupported(op, "along an axis other than 0 with per-example tables and indices")
    rows = table.type.shape[1]
    flat = b.emit("reshape", table, shape=(dim_mul(n, rows),) + tuple(table.type.shape[2:]))
    return [b.emit("take", flat, _per_example_rows(b, idx, rows, n), axis=0)]


register("take", _take, operands=("table", "idx"), options=(Option("axis", "int", 0),),
         traits=("linear",), vjp=_take_vjp, doc="gather along axis", flops=0,
         param_role=roles.table,
         batch=_take_batch,
         index_bound=lambda op, size: (op.operands[1], size(op.operands[0],
                                                            op.attrs.get("axis", 0)), False),
         fresh=True)


def _take_grad(types, attrs):
    ct, idx = types
    table = ct.with_shape(attrs["shape"])
    want = _take([table, idx], attrs)
    if want != ct:
        raise ShapeError(f"take_grad: cotangent {ct} does not match take's result {want}")
    return table


def _take_grad_vjp(b, op, cts):
    return [b.emit("take", cts[0], op.operands[1], axis=op.attrs["axis"]), None]


# take_grad(ct, idx; axis, shape): zeros of `shape` into which `ct` is scatter-added at the
# positions `idx` along `axis` (repeated indices accumulate); take's adjoint.
def _take_grad_batch(b, op, args, batched, n):
    """As `take`'s rule, scattering instead of gathering: per-example indices scatter into
    rows of the flattened batch, reshaped back."""
    (ct, idx), shape = args, tuple(op.attrs["shape"])
    axis = normalize_axis(op.attrs["axis"], len(shape))
    if not batched[1]:
        return [b.emit("take_grad", ct, idx, axis=axis + 1, shape=(n,) + shape)]
    if axis != 0:
        unsupported(op, "along an axis other than 0 with per-example indices")
    if not batched[0]:
        ct = b.emit("broadcast_to", ct, shape=(n,) + tuple(ct.type.shape))
    rows = shape[0]
    flat = b.emit("take_grad", ct, _per_example_rows(b, idx, rows, n), axis=0,
                  shape=(dim_mul(n, rows),) + shape[1:])
    return [b.emit("reshape", flat, shape=(n,) + shape)]


register("take_grad", _take_grad, operands=("ct", "idx"),
         options=(Option("axis", "int", 0), Option("shape", "shape")), traits=("linear",),
         vjp=_take_grad_vjp, flops=0, batch=_take_grad_batch, fresh=True)


def _one_hot(types, attrs):
    _int(types[0], "one_hot: idx")
    n = attrs["n"]
    if isinstance(n, bool) or not isinstance(n, (int, str)):
        raise ShapeError(f"one_hot needs a class count n, got {n!r}")
    return TensorType(attrs["dtype"], types[0].shape + (n,))


register("one_hot", _one_hot, operands=("idx",),
         options=(Option("n", "dim"), Option("dtype", "dtype", "f32")), traits=("no_grad",),
         doc="idx[..., None] == arange(n); an index outside [0, n) gives a zero row", flops=0,
         batch=leading_rule,
         index_bound=lambda op, size: (op.operands[0], size(op.attrs["n"]), False), fresh=True)
