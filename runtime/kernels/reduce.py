"""Kernels of reductions."""
import functools

from .table import kernel, out_kernel


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
def var(xp, x, axis=None, keepdims=False, correction=0):
    # population (ddof 0) unless corrected: the sum of squares over N - correction
    return xp.var(x, axis=_axis(x, axis), keepdims=keepdims, ddof=correction)


@kernel("logsumexp")
def logsumexp(xp, x, axis=None, keepdims=False):
    # subtract the max so exp never overflows; an all -inf (or inf) slice uses shift 0
    axis = _axis(x, axis)
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else xp.squeeze(out, axis=axis)


# `sum_to` adds its leading rows in blocks when there are many short ones: NumPy's sum over
# a leading axis runs one inner loop per row (1024 rows of 64 floats: 20 us), the blocked
# sum a few long ones (9 us); rows of 256 floats or more gain nothing, fewer than 128 rows
# lose the second call. Both executors call `sum_to_plan`, so they add in the same order.
BLOCK_ELEMENTS = 4096
BLOCK_MIN_ROWS = 128
BLOCK_MAX_COLS = 128


@functools.lru_cache(maxsize=512)
def sum_to_plan(xp, in_shape: tuple, shape: tuple, dtype):
    """``run(x)``: ``sum_to(x, shape)`` for `x` of `in_shape` and `dtype`, the axes (and the
    blocks) worked out once.

    When only leading axes are summed (axes of size 1 aside: ``R`` rows of ``C`` elements
    each, whether the target has those axes or not), the floats are on NumPy,
    ``R >= BLOCK_MIN_ROWS``, ``2 <= C <= BLOCK_MAX_COLS`` (one column NumPy sums pairwise,
    in one loop) and some ``m >= 4`` (a power of two) divides ``R`` with
    ``m*C <= BLOCK_ELEMENTS`` and ``m*m <= R``, row ``a*m + b`` is added into block row ``b``
    first (rows of ``m*C`` elements, one inner loop each) and the ``m`` block rows then, both
    in row order: the result does not depend on the strides, and zeros, inf and NaN come out
    as NumPy's sum gives them. Otherwise NumPy's sum over the axes."""
    shape = tuple(shape)
    lead = len(in_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, d in enumerate(shape) if d == 1 and in_shape[lead + k] != 1)
    if not axes:  # a copy when nothing is summed (a symbolic dim bound to 1): always new
        return lambda x: x.copy().reshape(shape)
    rows = cols = 1
    for j, d in enumerate(in_shape):
        if j in axes:
            rows *= d
        else:
            cols *= d
    # the summed axes come first but for axes of size 1: `x` is (rows, cols) in C order
    leading = all(j > axes[-1] for j, d in enumerate(in_shape) if d != 1 and j not in axes)
    m = 1
    if (leading and xp.__name__ == "numpy" and 1 < cols <= BLOCK_MAX_COLS
            and rows >= BLOCK_MIN_ROWS and str(dtype) in ("float32", "float64")):
        while rows % (2 * m) == 0 and 2 * m * cols <= BLOCK_ELEMENTS and 4 * m * m <= rows:
            m *= 2
    if m < 4:
        total = xp.add.reduce if xp.__name__ == "numpy" else xp.sum  # what numpy.sum calls
        return lambda x: total(x, axis=axes, keepdims=True).reshape(shape)
    add, blocks = xp.add.reduce, (rows // m, m * cols)

    def run(x):
        return add(add(x.reshape(blocks), axis=0).reshape(m, cols), axis=0).reshape(shape)
    return run


@kernel("sum_to")
def sum_to(xp, x, shape):
    """Sum `x` down to `shape` (the inverse of broadcasting), as `sum_to_plan` adds."""
    return sum_to_plan(xp, x.shape, tuple(shape), x.dtype)(x)
