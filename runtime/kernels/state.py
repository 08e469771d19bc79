"""Kernels of the ops that replace state: `batchnorm_running` (`adcompiler.ops.state`)."""
import math

from .norm import _along, batchnorm
from .table import kernel


@kernel("batchnorm_running")
def batchnorm_running(xp, x, gamma, beta, running_mean, running_var, axis=1, eps=1e-5,
                      momentum=0.1, training=False):
    axis = axis % x.ndim
    if not training:   # y from the running statistics; they come back unchanged
        scale = gamma / xp.sqrt(running_var + x.dtype.type(eps))
        shift = beta - running_mean * scale
        y = x * _along(xp, scale, x.ndim, axis) + _along(xp, shift, x.ndim, axis)
        return y, xp.array(running_mean, copy=True), xp.array(running_var, copy=True)
    axes = tuple(k for k in range(x.ndim) if k != axis)
    n = math.prod(x.shape[k] for k in axes)
    y = batchnorm(xp, x, gamma, beta, axis, eps)
    mean = xp.mean(x, axis=axes)
    xc = x - _along(xp, mean, x.ndim, axis)
    unbiased = xp.sum(xc * xc, axis=axes) / x.dtype.type(n - 1) if n > 1 else \
        xp.full(mean.shape, xp.nan, dtype=x.dtype)
    m = x.dtype.type(momentum)
    keep = x.dtype.type(1) - m
    return y, keep * running_mean + m * mean, keep * running_var + m * unbiased
