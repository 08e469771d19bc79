"""Kernels of reductions."""
from . import kernel


def _axis(axis):
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


@kernel("sum")
def sum_(xp, x, axis=None, keepdims=False):
    return xp.sum(x, axis=_axis(axis), keepdims=keepdims)


@kernel("sum_to")
def sum_to(xp, x, shape):
    """Sum `x` down to `shape` (the inverse of broadcasting)."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, d in enumerate(shape) if d == 1 and x.shape[lead + k] != 1)
    out = xp.sum(x, axis=axes, keepdims=True) if axes else x
    return out.reshape(shape)
