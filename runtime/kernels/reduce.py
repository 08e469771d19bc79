"""Kernels of reductions."""
from . import kernel, out_kernel


def _axis(x, axis):
    """`axis` as the array module takes it; a 0-d array has nothing to reduce over."""
    if x.ndim == 0:
        return None
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def _reduction(name: str):
    """``xp.<name>`` over `axis`; with `out`, written into it (the in-place form).

    CuPy 14's ``max``/``min`` hand `out` to its CUB reduction in the place of `dtype`
    (``cub_reduction(x, op, axis, out, dtype, keepdims)`` against the signature
    ``(arr, op, axis, dtype, out, keepdims)``), which fails or misreads `out` when CUB is
    on: there the result is computed apart and copied into `out`."""
    swapped = name in ("max", "min")

    def run(xp, x, axis=None, keepdims=False, out=None):
        if out is not None and swapped and xp.__name__ != "numpy":
            xp.copyto(out, getattr(xp, name)(x, axis=_axis(x, axis), keepdims=keepdims))
            return out
        return getattr(xp, name)(x, axis=_axis(x, axis), keepdims=keepdims, out=out)
    return run


for _op in ("sum", "mean", "max", "min"):
    kernel(_op)(_reduction(_op))
    out_kernel(_op, rule="float")(_reduction(_op))


@kernel("var")
def var(xp, x, axis=None, keepdims=False):
    return xp.var(x, axis=_axis(x, axis), keepdims=keepdims)  # population: ddof = 0


@kernel("logsumexp")
def logsumexp(xp, x, axis=None, keepdims=False):
    # subtract the max so exp never overflows; an all -inf (or inf) slice uses shift 0
    axis = _axis(x, axis)
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else xp.squeeze(out, axis=axis)


@kernel("sum_to")
def sum_to(xp, x, shape):
    """Sum `x` down to `shape` (the inverse of broadcasting)."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, d in enumerate(shape) if d == 1 and x.shape[lead + k] != 1)
    # a copy when nothing is summed (a symbolic dim bound to 1): the result is always new
    out = xp.sum(x, axis=axes, keepdims=True) if axes else x.copy()
    return out.reshape(shape)
