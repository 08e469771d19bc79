"""Kernels of the collectives (`adc_runtime.collectives` holds the communicators)."""
from . import kernel
from ..collectives import current


@kernel("allreduce_start", fresh=True)
def allreduce_start(xp, *xs, bucket=0):
    buf = xp.concatenate([xp.ravel(x) for x in xs]) if len(xs) > 1 else \
        xp.array(xp.ravel(xs[0]), copy=True)
    current().start(buf)
    return buf


@kernel("allreduce_wait")
def allreduce_wait(xp, buf, bucket=0):
    comm = current()
    comm.wait(buf)
    if comm.size > 1:
        buf /= comm.size  # in place: the started buffer has no other reader
    return buf
