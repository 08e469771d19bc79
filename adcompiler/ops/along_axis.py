"""Ops along one axis: `argmax` and `argmin` (the index of the extremum, no derivative) and
`cumsum` (the running sum, linear).

A 0-d tensor is taken as a single element along axis 0 (or -1), as PyTorch does: its
argmax is 0 and its cumsum is itself. `cumsum`'s ``reverse`` option sums from the end of the
axis; the adjoint of a forward running sum is the reverse one and vice versa, so the
derivative program stays two ops of the same kind however often it is differentiated.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..ir.types import TensorType, normalize_axis
from .batching import shift_axis
from .registry import Option, register

AXIS = Option("axis", "int", -1)


def along(t: TensorType, axis: int, name: str) -> int | None:
    """`axis` normalized for `t`; None for a 0-d `t` (where only 0 and -1 are accepted)."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ShapeError(f"{name}: axis must be an int, got {axis!r}")
    if t.rank == 0:
        if axis not in (0, -1):
            raise ShapeError(f"{name}: axis {axis} is out of range for a 0-d tensor "
                             f"(0 or -1 allowed)")
        return None
    try:
        return normalize_axis(axis, t.rank)
    except ShapeError as e:
        raise ShapeError(f"{name}: {e.message}") from None


def _scalar_batch(b, op, args, batched, n, finish):
    """The op on a batch with its (one) operand batched on axis 0; a 0-d example gets a
    length-1 axis to run along, which `finish` takes off again."""
    (x,) = args   # the one operand: batched, since a rule runs only then
    attrs = dict(op.attrs)
    if x.type.rank == 1:   # 0-d examples
        out = b.create(op.name, [b.emit("expand_dims", x, axis=1)], {**attrs, "axis": 1})
        return [finish(b, out.results[0])]
    attrs["axis"] = shift_axis(attrs["axis"])
    return list(b.create(op.name, [x], attrs).results)


# ---- argmax / argmin --------------------------------------------------------------------

def _arg_extremum(name: str):
    def infer(types, attrs):
        (t,) = types
        axis = along(t, attrs["axis"], name)
        if axis is None:
            return TensorType("i64", ())
        if t.shape[axis] == 0:
            raise ShapeError(f"{name} of an empty axis: axis {axis} of {t} has no elements")
        return TensorType("i64", t.shape[:axis] + t.shape[axis + 1:])
    return infer


def _arg_batch(b, op, args, batched, n):
    return _scalar_batch(b, op, args, batched, n, lambda b, v: v)


for _name, _what in (("argmax", "largest"), ("argmin", "smallest")):
    register(_name, _arg_extremum(_name), options=(AXIS,), traits=("no_grad",),
             doc=f"i64 index of the {_what} element along axis, first one on ties (NaN "
                 f"counts as {_what}, as NumPy and PyTorch)",
             flops=1, batch=_arg_batch, fresh=True)


# ---- cumsum -----------------------------------------------------------------------------

def _cumsum_type(types, attrs):
    (t,) = types
    along(t, attrs["axis"], "cumsum")
    return t.with_dtype("i64") if t.dtype == "bool" else t   # a bool mask counts, as sum


def _cumsum_vjp(b, op, cts):
    if not op.operands[0].type.is_float:
        return [None]
    return [b.emit("cumsum", cts[0], axis=op.attrs["axis"], reverse=not op.attrs["reverse"])]


def _cumsum_batch(b, op, args, batched, n):
    return _scalar_batch(b, op, args, batched, n,
                         lambda b, v: b.emit("squeeze", v, axis=1))


register("cumsum", _cumsum_type, options=(Option("axis", "int"), Option("reverse", "bool",
                                                                        False)),
         traits=("linear",), vjp=_cumsum_vjp,
         doc="running sum along axis (from its end with reverse=true); bool counts to i64",
         flops=1, batch=_cumsum_batch, fresh=True)
