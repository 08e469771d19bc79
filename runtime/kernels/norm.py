"""Kernels of batchnorm and rmsnorm, vectorized over all rows at once.

gamma and beta are vectors laid along the channel (batchnorm) or normalized (rmsnorm) axis.
The per-channel factor ``gamma / sqrt(var + eps)`` is formed on the small statistics array,
so the full-size work is one centring, one square, one scaling and one shift. rmsnorm sums
the squares of a row in one pass; where a sum overflows (or, with eps 0, underflows) it
divides the rows by their largest magnitude first, as `adcompiler.ops.norm.rms_parts` does.
"""
import contextlib
import math

from .table import kernel


def _along(xp, p, ndim, axis):
    if axis == ndim - 1:
        return p
    return xp.reshape(p, [p.shape[0] if k == axis else 1 for k in range(ndim)])


@kernel("batchnorm")
def batchnorm(xp, x, gamma, beta, axis=1, eps=1e-5):
    axis = axis % x.ndim
    axes = tuple(k for k in range(x.ndim) if k != axis)
    if math.prod(x.shape[k] for k in axes) == 0:   # the type rule refuses static ones
        raise ValueError(f"batchnorm of an array of shape {tuple(x.shape)} over every axis "
                         f"but {axis}: no elements to take the statistics of")
    xc = x - xp.mean(x, axis=axes, keepdims=True)
    sq = xc * xc
    var = xp.mean(sq, axis=axes, keepdims=True)
    scale = _along(xp, gamma, x.ndim, axis) / xp.sqrt(var + eps)
    y = xp.multiply(xc, scale, out=xc)
    return xp.add(y, _along(xp, beta, x.ndim, axis), out=y)


@kernel("rmsnorm")
def rmsnorm(xp, x, gamma, axis=-1, eps=1e-6):
    axis = axis % x.ndim
    n = x.shape[axis]
    if n == 0:
        raise ValueError(f"rmsnorm over axis {axis} of an array of shape {tuple(x.shape)}: "
                         f"the axis has no elements")
    with _quiet(xp):   # an overflow or underflow here is caught below
        if axis == x.ndim - 1:   # the sum of squares in one pass, without a squared copy
            ms = xp.einsum("...i,...i->...", x, x)[..., None] / n
        else:
            ms = xp.mean(x * x, axis=axis, keepdims=True)
    tiny = xp.finfo(x.dtype).tiny
    if xp.isfinite(ms).all() and (eps > 0 or bool((ms >= tiny).all())):
        r = 1 / xp.sqrt(ms + eps)
    else:   # a square overflowed (or, with eps 0, underflowed): the rows scaled first
        r = _scaled_rstd(xp, x, axis, eps)
    y = xp.multiply(x, r)
    return xp.multiply(y, _along(xp, gamma, x.ndim, axis), out=y)


def _quiet(xp):
    return xp.errstate(over="ignore", under="ignore") if xp.__name__ == "numpy" \
        else contextlib.nullcontext()


def _scaled_rstd(xp, x, axis, eps):
    """1/sqrt(mean(x*x) + eps) from u = x/s, s = max|x| where above 1 (above 0 for eps 0):
    (1/s) / sqrt(mean(u*u) + eps/s^2)."""
    big = xp.maximum(xp.max(x, axis=axis, keepdims=True), -xp.min(x, axis=axis, keepdims=True))
    inv = 1 / xp.where(big > (1 if eps > 0 else 0), big, 1).astype(x.dtype, copy=False)
    u = x * inv
    ms = xp.mean(xp.multiply(u, u, out=u), axis=axis, keepdims=True)
    if eps > 0:   # then s >= 1 and inv * inv cannot overflow
        ms += eps * (inv * inv)
    return inv / xp.sqrt(ms)
