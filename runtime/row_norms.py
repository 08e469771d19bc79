"""Row passes of rmsnorm's forward pass, and batchnorm's forward pass and adjoint as one
pass per channel.

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

batchnorm (and `batchnorm_running` in training) gives the table kernels' bits: x viewed as
``(N, C, P)`` (the axes before the channel, the channel, those after), NumPy's mean over
every axis but the channel adds, for each channel, the pairwise sums of its ``N`` runs of
``P`` contiguous elements in order to +0.0 and divides the total by the count in float64
(with one channel, the axes merge into one run of ``N * P``);
the loop does the same, then the centred squares' sum the same way, and writes ``(x -
mean) * (gamma / sqrt(var + eps)) + beta``, three reads of a channel and one write where
the table kernel makes eight passes over the array (`batchnorm_running`'s statistics
twelve). The adjoint (the VJP rule's ops, `row_patterns.BATCHNORM`) recomputes the mean and
variance the same way, then sums ``ct * xhat`` and ``ct`` per channel and writes dx.
"""
from __future__ import annotations

import math

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


def _channel_moments(x, c, t, zero, count, stack, vals):
    """``(mean, sum of the centred squares, their mean)`` of channel `c` of `x` viewed as
    ``(N, C, P)``: each sum NumPy's over the channel's runs, each mean its division by
    the count in float64 rounded to the dtype (through ``vals[63]``); `t`: P scratch."""
    nn, _, pp = x.shape
    s = zero
    for n in range(nn):
        s = s + (zero + _pairwise(x[n, c], pp, stack, vals, False))
    vals[63] = numpy.float64(s) / count
    m = vals[63]
    q = zero
    for n in range(nn):
        for j in range(pp):
            d = x[n, c, j] - m
            t[j] = d * d
        q = q + (zero + _pairwise(t, pp, stack, vals, False))
    vals[63] = numpy.float64(q) / count
    return m, q, vals[63]


def batchnorm_channels(x, gamma, beta, out, sums, eps, zero, count):
    """batchnorm of `x` viewed as ``(N, C, P)`` over N and P: ``mean``, ``var`` the mean
    of the centred squares, ``out = (x - mean) * (gamma / sqrt(var + eps)) + beta``;
    ``sums[0]`` the means, ``sums[1]`` the sums of the centred squares (P >= 1, N >= 1)."""
    nn, cc, pp = x.shape
    t = numpy.empty(pp, x.dtype)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, x.dtype)
    for c in range(cc):
        m, q, var = _channel_moments(x, c, t, zero, count, stack, vals)
        scale = gamma[c] / numpy.sqrt(var + eps)
        b = beta[c]
        for n in range(nn):
            for j in range(pp):
                out[n, c, j] = (x[n, c, j] - m) * scale + b
        sums[0, c] = m
        sums[1, c] = q


def batchnorm_adjoint_channels(x, ct, gamma, dx, sums, eps, zero, one, count, nf):
    """batchnorm's adjoint as its VJP rule writes it (`adcompiler.ops.norm`), `x` and the
    cotangent `ct` viewed as ``(N, C, P)``: ``xhat = (x - mean) * rstd``, ``rstd = 1 /
    sqrt(mean((x - mean)^2) + eps)``, ``dg = sum(ct * xhat)``, ``db = sum(ct)``, ``per =
    gamma / nf``, ``dx = ((ct * gamma - per * db) - xhat * (per * dg)) * rstd``; ``sums[0]``
    gets dg and ``sums[1]`` db (P >= 1, N >= 1)."""
    nn, cc, pp = x.shape
    t = numpy.empty(pp, x.dtype)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, x.dtype)
    for c in range(cc):
        m, _, var = _channel_moments(x, c, t, zero, count, stack, vals)
        rstd = one / numpy.sqrt(var + eps)
        a = zero
        b = zero
        for n in range(nn):
            for j in range(pp):
                t[j] = ct[n, c, j] * ((x[n, c, j] - m) * rstd)
            a = a + (zero + _pairwise(t, pp, stack, vals, False))
            b = b + (zero + _pairwise(ct[n, c], pp, stack, vals, False))
        g = gamma[c]
        per = g / nf
        shift = per * b
        slope = per * a
        for n in range(nn):
            for j in range(pp):
                h = (x[n, c, j] - m) * rstd
                dx[n, c, j] = ((ct[n, c, j] * g - shift) - h * slope) * rstd
        sums[0, c] = a
        sums[1, c] = b


row_passes.register(globals(), (rmsnorm_rows, batchnorm_channels, batchnorm_adjoint_channels),
                    (_channel_moments,))


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


def _channels(shape, axis: int) -> tuple:
    """`shape` as ``(N, C, P)`` around the channel `axis`, as NumPy's reductions see it: one
    channel makes the whole array one run of ``N * P`` (its axes merge), summed pairwise."""
    nn, cc, pp = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    return (1, 1, nn * pp) if cc == 1 else (nn, cc, pp)


def batchnorm_runner(shape, dtype, axis: int, eps: float, running=None):
    """batchnorm over every axis of `shape` but `axis`, 1-D gamma and beta, one pass per
    channel; ``running=(momentum,)``: `batchnorm_running` in training, whose new running
    mean and variance are the kernel's formulas on the pass's per-channel sums."""
    axis %= len(shape)
    nn, cc, pp = _channels(shape, axis)
    k = row_passes.get("batchnorm_channels")
    t = dtype.type
    count = nn * pp
    consts = (t(eps), t(0), numpy.float64(count))
    out_for, empty = row_passes.out_for, numpy.empty
    add, multiply, full = numpy.add, numpy.multiply, numpy.full
    if running is not None:
        m = t(running[0])
        keep = t(1) - m

    def run(x, gamma, beta, *rest):
        if running is None:
            out = rest[0]
        else:
            mean0, var0, out, new_mean, new_var = rest
        out = out_for(shape, dtype, (x, gamma, beta), out) if count else None
        if out is None:
            return None
        sums = empty((2, cc), dtype)
        k(x.reshape(nn, cc, pp), gamma, beta, out.reshape(nn, cc, pp), sums, *consts)
        if running is None:
            return (out,)
        unbiased = sums[1] / t(count - 1) if count > 1 else full(cc, numpy.nan, dtype)
        stats = (add(keep * mean0, m * sums[0], out=new_mean),
                 add(keep * var0, m * unbiased, out=new_var))
        return (out, *stats)
    return run


def batchnorm_adjoint(m, shape, np_dtype, dtype, resolve):
    """The runner of batchnorm's adjoint matched by `row_patterns` (``x``, ``ct``,
    ``gamma``; the group writes dx, dg and db, all read after it). Two batchnorms of one
    gamma share its reshape and ``gamma / N``: then the ops run one by one."""
    x, ct, gamma = m.env["x"], m.env["ct"], m.env["gamma"]
    axis, rank = m.const["channel:"]
    if axis is None or rank != len(shape) or not all(
            v.type.dtype == dtype and tuple(resolve(v.type.shape)) == s
            for v, s in ((x, shape), (ct, shape), (gamma, (shape[axis],)))):
        return None
    nn, cc, pp = _channels(shape, axis)
    n = m.env["const:n"][()]
    if nn * pp == 0 or n != np_dtype.type(nn * pp):
        return None
    k = row_passes.get("batchnorm_adjoint_channels")
    t = np_dtype.type
    consts = (m.env["const:eps"][()], t(0), t(1), numpy.float64(nn * pp), n)
    out_for, empty = row_passes.out_for, numpy.empty

    def run(x_, ct_, gamma_, dx, dg, db):
        dx = out_for(shape, np_dtype, (x_, ct_, gamma_), dx)
        if dx is None:
            return None
        sums = empty((2, cc), np_dtype)
        k(x_.reshape(nn, cc, pp), ct_.reshape(nn, cc, pp), gamma_, dx.reshape(nn, cc, pp),
          sums, *consts)
        if dg is None:
            dg = sums[0].copy()
        else:
            dg[...] = sums[0]
        if db is None:
            db = sums[1].copy()
        else:
            db[...] = sums[1]
        return dx, dg, db
    run.all_outputs = True
    return [x, ct, gamma], (m.env["dg"], m.env["db"]), run
