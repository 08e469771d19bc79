"""Row passes of rmsnorm's forward pass.

rmsnorm's table kernel (`adc_runtime.kernels.norm`) sums a row's squares with
``einsum``, whose order of additions depends on NumPy's SIMD loops and cannot be
reproduced here. The loop sums them in NumPy's pairwise order instead (`row_passes`), so
its results are not the table kernel's bits but lie within a rounding bound of them:

    |y - y_table| <= (n + 16) * u * |y_table|   (n: the row's length, u: 2^-24 for f32,
                                                 2^-53 for f64)

elementwise, for results that are normal numbers (the bound gains the smallest subnormal
where they are not). Both sums of the ``n`` rounded squares lie within ``gamma_n = n u /
(1 - n u)`` of the exact sum (the terms are not negative); the mean, the ``+ eps``, the
square root (which halves a relative error), the reciprocal and the two products add a few
roundings more to each. NaNs and infinities come out where the table kernel's do.

A row whose mean square overflows (or, with eps 0, underflows) is scaled by its largest
magnitude first, as `adcompiler.ops.norm.rms_parts` does; the table kernel scales every
row of the array then, this loop only that row (both within the bound).
"""
from __future__ import annotations

import numpy

from . import row_passes
from .row_passes import _mean, _pairwise


def rmsnorm_rows(x, gamma, out, eps, nf, zero, one, tiny, thr):
    """``x * (1 / sqrt(sum(x * x) / n + eps)) * gamma`` along rows of ``n >= 1``, `nf`
    the count in the dtype; rows whose mean square is not finite (or, with eps 0, below
    `tiny`) scaled: ``inv = 1 / max|x|`` (where above `thr`), ``r = inv / sqrt(mean((x *
    inv)^2) + eps * inv^2)``."""
    rows, n = x.shape
    t = numpy.empty(n, x.dtype)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, x.dtype)
    for i in range(rows):
        ms = (zero + _pairwise(x[i], n, stack, vals, True)) / nf
        if ms - ms == zero and (eps > zero or ms >= tiny):
            r = one / numpy.sqrt(ms + eps)
        else:
            big = zero
            for j in range(n):   # once a NaN, every comparison is false: it stays
                a = abs(x[i, j])
                if a > big or a != a:
                    big = a
            inv = one / (big if big > thr else one)
            for j in range(n):
                u = x[i, j] * inv
                t[j] = u * u
            ms = _mean(t, n, zero, stack, vals)
            if eps > zero:
                ms = ms + eps * (inv * inv)
            r = inv / numpy.sqrt(ms)
        for j in range(n):
            out[i, j] = (x[i, j] * r) * gamma[j]


row_passes.register(globals(), (rmsnorm_rows,))


def rmsnorm_runner(shape, dtype, eps: float):
    """rmsnorm along the last axis with a 1-D gamma, one pass per row (rows of at least
    one element: the table kernel refuses an empty axis)."""
    n = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    k = row_passes.get("rmsnorm_rows")
    t = dtype.type
    consts = (t(eps), t(n), t(0), t(1), numpy.finfo(dtype).tiny, t(1 if eps > 0 else 0))
    out_for = row_passes.out_for

    def run(x, gamma, out):
        out = out_for(shape, dtype, (x, gamma), out) if n else None
        if out is None:
            return None
        k(x.reshape(rows, n), gamma, out.reshape(rows, n), *consts)
        return (out,)
    return run
