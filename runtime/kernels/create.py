"""Kernels of constructors."""
from . import DTYPES, kernel


@kernel("const")
def const(xp, value, dtype):
    return xp.asarray(value, dtype=DTYPES[dtype])


@kernel("zeros")
def zeros(xp, shape, dtype):
    return xp.zeros(tuple(shape), dtype=DTYPES[dtype])


@kernel("ones")
def ones(xp, shape, dtype):
    return xp.ones(tuple(shape), dtype=DTYPES[dtype])
