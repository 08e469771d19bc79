"""Kernels of constructors."""
from .table import DTYPES, kernel, out_kernel


@kernel("const")
def const(xp, value, dtype):
    return xp.asarray(value, dtype=DTYPES[dtype])


@kernel("zeros")
def zeros(xp, shape, dtype):
    return xp.zeros(tuple(shape), dtype=DTYPES[dtype])


@kernel("ones")
def ones(xp, shape, dtype):
    return xp.ones(tuple(shape), dtype=DTYPES[dtype])


@kernel("full")
def full(xp, shape, value, dtype):
    return xp.full(tuple(shape), value, dtype=DTYPES[dtype])


@kernel("zeros_like")
def zeros_like(xp, x):
    return xp.zeros_like(x)


@kernel("ones_like")
def ones_like(xp, x):
    return xp.ones_like(x)


@kernel("arange")
def arange(xp, n, dtype="i64"):
    return xp.arange(n, dtype=DTYPES[dtype])


@kernel("dim_value")
def dim_value(xp, n, dtype="f32"):
    return xp.asarray(n, dtype=DTYPES[dtype])


# ---- the same constructors filling a planned buffer ---------------------------------------

@out_kernel("zeros", "zeros_like", rule="any")
def zeros_out(xp, *like, out, **attrs):
    out.fill(0)
    return out


@out_kernel("ones", "ones_like", rule="any")
def ones_out(xp, *like, out, **attrs):
    out.fill(1)
    return out


@out_kernel("full", rule="any")
def full_out(xp, out, shape, value, dtype):
    out.fill(value)
    return out
