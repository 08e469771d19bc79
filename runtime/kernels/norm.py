"""Kernels of batchnorm and rmsnorm, vectorized over all rows at once.

gamma and beta are vectors laid along the channel (batchnorm) or normalized (rmsnorm) axis.
The per-channel factor ``gamma / sqrt(var + eps)`` is formed on the small statistics array,
so the full-size work is one centring, one square, one scaling and one shift. rmsnorm
divides a row by its largest magnitude when that is above 1 (see
`adcompiler.ops.norm.rms_parts`): the mean of squares cannot overflow.
"""
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
    if x.shape[axis] == 0:
        raise ValueError(f"rmsnorm over axis {axis} of an array of shape {tuple(x.shape)}: "
                         f"the axis has no elements")
    big = xp.maximum(xp.max(x, axis=axis, keepdims=True), -xp.min(x, axis=axis, keepdims=True))
    inv = 1 / xp.where(big > (1 if eps > 0 else 0), big, 1).astype(x.dtype, copy=False)
    u = x * inv
    ms = xp.mean(xp.multiply(u, u, out=u), axis=axis, keepdims=True)
    r = inv / xp.sqrt(ms + eps * (inv * inv))
    y = xp.multiply(x, r, out=u)
    return xp.multiply(y, _along(xp, gamma, x.ndim, axis), out=y)
