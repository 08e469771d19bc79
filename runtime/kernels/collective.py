"""Kernels of the collectives (`adc_runtime.collectives` holds the communicators)."""
import math

from .table import kernel
from ..collectives import current


@kernel("allreduce_start")
def allreduce_start(xp, *xs, bucket=0, lead=0):
    # a new contiguous buffer (concatenate copies even one operand)
    buf = xp.concatenate([x.reshape(x.shape[:lead] + (math.prod(x.shape[lead:]),))
                          for x in xs], axis=lead)
    current().start(buf)
    return buf


@kernel("allreduce_wait")
def allreduce_wait(xp, buf, bucket=0):
    comm = current()
    comm.wait(buf)
    if comm.size > 1:
        buf /= comm.size  # in place: the started buffer has no other reader
    return buf
