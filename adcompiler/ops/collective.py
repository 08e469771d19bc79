"""Collectives: the all-reduce of data-parallel training, split in two so that the
communication of one bucket overlaps the computation that follows it.

    %b0 = allreduce_start(%grad_W3, %grad_b3) {bucket = 0} : f32[650]
    ...                                     # the rest of the backward pass runs
    %r0 = allreduce_wait(%b0) {bucket = 0} : f32[650]

``allreduce_start`` packs its operands, flattened, into one new buffer and starts a
non-blocking all-reduce of it across the processes of the current communicator
(`adc_runtime.collectives`); ``allreduce_wait`` waits for that all-reduce to finish and
returns the buffer holding the mean over processes (``split`` and ``reshape`` unpack it).
With one process both are copies. Both are ``impure``: DCE never removes them and CSE never
merges them, and no pass moves an op across another (passes keep the order of impure ops).

With ``lead = k`` the operands share their first k axes and only the rest is flattened
(the buffer is ``[*lead_axes, total]``): how `vmap` batches a start, since a sum over
processes is elementwise and the examples are more elements.

Mean over processes is linear, and its own adjoint: the cotangent of a wait's result is
all-reduced the same way; a start only moves data, so its cotangent is split back.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..ir.types import TensorType, dim_add, num_elements
from .batching import all_batched
from .registry import Option, register

COLLECTIVE = ("impure", "linear")


def _start(types, attrs):
    lead = attrs["lead"]
    if not types:
        raise ShapeError("allreduce_start needs at least one operand")
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1 or not types[0].is_float:
        raise ShapeError("allreduce_start needs operands of one float dtype, got "
                         + ", ".join(map(str, types)))
    if lead < 0 or any(t.rank < lead or t.shape[:lead] != types[0].shape[:lead] for t in types):
        raise ShapeError(f"allreduce_start with lead = {lead} needs operands sharing their "
                         f"first {lead} axes, got " + ", ".join(map(str, types)))
    total = dim_add(*(num_elements(t.shape[lead:]) for t in types))
    return TensorType(types[0].dtype, tuple(types[0].shape[:lead]) + (total,))


def _start_vjp(b, op, cts):
    if cts[0] is None:
        return [None] * len(op.operands)
    lead = op.attrs["lead"]
    sizes = [num_elements(v.type.shape[lead:]) for v in op.operands]
    parts = b.emit("split", cts[0], axis=lead, shape=sizes)
    parts = [parts] if len(op.operands) == 1 else parts
    return [b.emit("reshape", p, shape=v.type.shape) for p, v in zip(parts, op.operands)]


def _flat(b, x, lead: int):
    return b.emit("reshape", x, shape=tuple(x.type.shape[:lead])
                  + (num_elements(x.type.shape[lead:]),))


def _start_jvp(b, op, tangents):
    lead = op.attrs["lead"]
    parts = [t if t is not None else b.emit("zeros", shape=v.type.shape, dtype=v.type.dtype)
             for t, v in zip(tangents, op.operands)]
    flat = [_flat(b, p, lead) for p in parts]
    return [flat[0] if len(flat) == 1 else b.emit("concat", *flat, axis=lead)]


def _start_batch(b, op, args, batched, n):
    """Examples are more elements to sum over processes: one more shared leading axis."""
    return [b.emit("allreduce_start", *all_batched(b, args, batched, n), bucket=op.attrs["bucket"],
                   lead=op.attrs["lead"] + 1)]


def _wait(types, attrs):
    t = types[0]
    if t.rank < 1 or not t.is_float:
        raise ShapeError(f"allreduce_wait takes the float buffer of an allreduce_start, "
                         f"got {t}")
    return t


def _reduce_again(b, op, values):
    """The mean over processes of `values[0]`, as a start/wait pair of its own."""
    if values[0] is None:
        return [None]
    started = b.emit("allreduce_start", values[0], bucket=op.attrs["bucket"])
    return [b.emit("allreduce_wait", started, bucket=op.attrs["bucket"])]


BUCKET = Option("bucket", "int", 0)

# allreduce_start(*xs; bucket, lead): pack `xs` into one buffer, start its all-reduce
register("allreduce_start", _start, operands=("*xs",), options=(BUCKET, Option("lead", "int", 0)),
         traits=COLLECTIVE, vjp=_start_vjp, jvp=_start_jvp, flops=0, batch=_start_batch,
         fresh=True)
# allreduce_wait(buffer; bucket): the mean over processes of a started buffer
register("allreduce_wait", _wait, options=(BUCKET,), traits=COLLECTIVE,
         vjp=_reduce_again, jvp=_reduce_again, flops=1,
         batch=lambda b, op, args, batched, n: [b.emit("allreduce_wait", args[0],
                                                       bucket=op.attrs["bucket"])])
