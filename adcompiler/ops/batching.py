"""Batching rules: an op applied to a batch of examples (the ``batch`` pass, `adc.vmap`).

A batched value carries the examples on a new leading axis of size `n` (a dimension: an int
or a symbol); an unbatched value is shared by every example. A rule receives the new
operands with a flag per operand and returns results batched on axis 0. The rules of the
op families are declared with each op (``register(..., batch=...)``); this module holds
what they share: axis arithmetic and the rules that fit whole families (elementwise ops
broadcast, reductions shift their axes, ops that act on trailing axes run as they are).
"""
from __future__ import annotations

from ..diagnostics import AdcError


def rank(v, batched: bool) -> int:
    """The rank of one example of `v`."""
    return v.type.rank - (1 if batched else 0)


def shift_axis(axis: int) -> int:
    """An axis of one example as an axis of the batch: counted from the end it is the same."""
    return axis + 1 if axis >= 0 else axis


def shift_axes(axis, r: int):
    """A reduction's ``axis`` option (None, an int or a list) for a batch of rank-`r`
    examples: None (every axis of an example) becomes axes 1..r."""
    if axis is None:
        return list(range(1, r + 1))
    if isinstance(axis, int):
        return shift_axis(axis)
    return [shift_axis(a) for a in axis]


def expand_to(b, v, r: int):
    """Batched `v` with size-1 axes inserted after the batch axis until an example has
    rank `r` (what NumPy broadcasting does for an example, kept behind the batch axis)."""
    while v.type.rank - 1 < r:
        v = b.emit("expand_dims", v, axis=1)
    return v


def materialize(b, v, n):
    """Unbatched `v` repeated for each of `n` examples."""
    return b.emit("broadcast_to", v, shape=(n,) + tuple(v.type.shape))


def all_batched(b, args, batched, n) -> list:
    return [a if f else materialize(b, a, n) for a, f in zip(args, batched)]


def unsupported(op, why: str):
    raise AdcError(f"batch: {op.name} {why}", op.loc)


# ---- rules shared by families -----------------------------------------------------------

def broadcast_rule(b, op, args, batched, n):
    """Elementwise ops: batched operands get size-1 axes behind the batch axis so that an
    example broadcasts with the shared operands as it did alone."""
    r = max(rank(a, f) for a, f in zip(args, batched))
    args = [expand_to(b, a, r) if f else a for a, f in zip(args, batched)]
    return _emit(b, op, args, dict(op.attrs))


def leading_rule(b, op, args, batched, n):
    """Ops that act on whole arrays the same at any leading axis (``zeros_like``,
    ``one_hot``): run as they are."""
    return _emit(b, op, args, dict(op.attrs))


def reduce_rule(b, op, args, batched, n):
    """Reductions over ``axis`` (None: all of an example's axes)."""
    attrs = dict(op.attrs)
    attrs["axis"] = shift_axes(attrs.get("axis"), rank(args[0], True))
    return _emit(b, op, all_batched(b, args, batched, n), attrs)


def axis_rule(b, op, args, batched, n):
    """Ops with one int ``axis`` option counted in an example (softmax, concat, stack,
    expand_dims, split): every operand batched, the axis shifted past the batch axis."""
    attrs = dict(op.attrs)
    attrs["axis"] = shift_axis(attrs["axis"])
    return _emit(b, op, all_batched(b, args, batched, n), attrs)


def _emit(b, op, args, attrs) -> list:
    new = b.create(op.name, list(args), attrs)
    return list(new.results)
