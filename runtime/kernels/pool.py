"""Kernels of pooling and its adjoints: one vectorized step per kernel tap (a window's
elements are the same tap of every window, a strided slice), never a loop over windows.

Max pooling picks the first maximal element of each window in row-major order, as PyTorch
(a NaN counts as the maximum and propagates; its derivative goes to the window's last NaN,
as PyTorch's). Padding, and the part of a ``ceil_mode`` window past it, read as -inf; a
window whose elements are all -inf picks its first element of `x`, not the padding
(PyTorch's kernel does the same). An input of one image ``[C, H, W]`` is pooled as a batch
of one.
"""
from __future__ import annotations

import functools
import itertools

from . import loops
from .table import kernel
from .conv import inner, padded, per_axis, tap_slices, window_view


def pooled_size(size, k, s, p, d, ceil):
    """As `adcompiler.ops.pool.pooled_size` (PyTorch's ``pooling_output_shape``)."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def geometry(spatial, kernel, stride, padding, dilation=1, ceil_mode=False):
    """kernel, stride, dilation, (before, after) padding and the number of windows per
    axis; the after padding also covers a ``ceil_mode`` window that reaches past it."""
    k = per_axis(kernel, 2)
    s = k if stride is None else per_axis(stride, 2)
    p, d = per_axis(padding, 2), per_axis(dilation, 2)
    count = tuple(pooled_size(*a, ceil_mode) for a in zip(spatial, k, s, p, d))
    pads = [(pp, max(pp, (c - 1) * ss + dd * (kk - 1) + 1 - h - pp))
            for h, kk, ss, pp, dd, c in zip(spatial, k, s, p, d, count)]
    return k, s, d, pads, count


def taps(k):
    return itertools.product(range(k[0]), range(k[1]))


def planes(fn):
    """`fn` on a batch of images; an image ``[C, H, W]`` (every array operand) is a batch
    of one."""
    @functools.wraps(fn)
    def run(xp, *args, **options):
        if args[0].ndim != 3:
            return fn(xp, *args, **options)
        return fn(xp, *(a[None] for a in args), **options)[0]
    return run


@kernel("max_pool2d")
@planes
def max_pool2d(xp, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    k, s, d, pads, count = geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    xpad = padded(xp, x, pads, fill=-xp.inf)
    out = None
    for tap in taps(k):
        v = xpad[tap_slices(tap, s, d, count)]
        out = v.copy() if out is None else xp.maximum(out, v, out=out)
    return out


def pick(xp, x, k, s, d, pads, count):
    """The tap (row-major, ``i * kW + j``) of the first maximal element of each window.

    One pass per tap keeps the best value so far and its tap: a tap wins only if strictly
    greater, so ties keep the earlier tap; the padding, -inf, never wins, and a window of
    -inf keeps its first tap inside `x`. A NaN always wins (so the last NaN of a window is
    picked), as in PyTorch's kernel."""
    xpad = padded(xp, x, pads, fill=-xp.inf)
    idx = xp.zeros(x.shape[:2] + count, dtype=xp.int64)
    if any(lo or hi for lo, hi in pads):
        inside = padded(xp, xp.ones((1, 1) + x.shape[2:], dtype=bool), pads, fill=False)
        first = xp.argmax(window_view(xp, inside, k, s, d, count)
                          .reshape(count + (-1,)), axis=-1)
        idx[...] = first
    best = xp.full(idx.shape, -xp.inf, dtype=x.dtype)
    nan = bool(xp.isnan(x).any())
    for t, tap in enumerate(taps(k)):
        v = xpad[tap_slices(tap, s, d, count)]
        wins = v > best
        if nan:
            wins |= xp.isnan(v)
        xp.copyto(best, v, where=wins)
        xp.copyto(idx, t, where=wins)
    return idx


@kernel("max_pool2d_indices")
@planes
def max_pool2d_indices(xp, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    """The picked element's flat index ``h * W + w`` in its plane."""
    k, s, d, pads, count = geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    t = pick(xp, x, k, s, d, pads, count)
    rows = xp.arange(count[0])[:, None] * s[0] - pads[0][0] + (t // k[1]) * d[0]
    cols = xp.arange(count[1])[None, :] * s[1] - pads[1][0] + (t % k[1]) * d[1]
    return rows * x.shape[3] + cols


@kernel("max_pool2d_grad")
@planes
def max_pool2d_grad(xp, x, g, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    k, s, d, pads, count = geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    if loops.usable(xp, x, g):
        # the pick and the scatter, one image plane at a time (`loops`)
        out = xp.zeros(x.shape, dtype=g.dtype)
        if k == s == (2, 2) and d == (1, 1) and pads == [(0, 0), (0, 0)]:
            loops.get("pool_grad_2x2")(x, g, out)
            return out
        loops.get("pool_grad")(x, g, out, xp.empty(count, dtype=xp.int64), *k, *s, *d,
                               pads[0][0], pads[1][0])
        return out
    idx = pick(xp, x, k, s, d, pads, count)
    out = xp.zeros(x.shape[:2] + tuple(h + lo + hi for h, (lo, hi) in zip(x.shape[2:], pads)),
                   dtype=g.dtype)
    for t, tap in enumerate(taps(k)):
        out[tap_slices(tap, s, d, count)] += xp.where(idx == t, g, 0)
    return out[inner(x.shape[2:], pads)] if any(lo or hi for lo, hi in pads) else out


@kernel("max_pool2d_select")
@planes
def max_pool2d_select(xp, x, t, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    k, s, d, pads, count = geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    idx = pick(xp, x, k, s, d, pads, count)
    flat = window_view(xp, padded(xp, t, pads), k, s, d, count)
    flat = flat.reshape(t.shape[:2] + count + (-1,))
    return xp.take_along_axis(flat, idx[..., None], axis=-1)[..., 0]


def divisor(xp, spatial, k, s, pads, count, count_include_pad, divisor_override, dtype):
    """What each window's sum is divided by: `divisor_override`, or the window's elements
    in the input and padding (`count_include_pad`) or in the input alone; the part of a
    ``ceil_mode`` window past the padding never counts. One factor per axis."""
    if divisor_override is not None:
        return divisor_override
    sizes = []
    for h, kk, ss, (p, _), c in zip(spatial, k, s, pads, count):
        start = xp.arange(c) * ss - p
        end = xp.minimum(start + kk, h + p)
        if not count_include_pad:
            start, end = xp.maximum(start, 0), xp.minimum(end, h)
        sizes.append((end - start).astype(dtype))
    return sizes[0][:, None] * sizes[1][None, :]


@kernel("avg_pool2d")
@planes
def avg_pool2d(xp, x, kernel, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    k, s, _, pads, count = geometry(x.shape[2:], kernel, stride, padding, 1, ceil_mode)
    xpad = padded(xp, x, pads)
    out = None
    for tap in taps(k):
        v = xpad[tap_slices(tap, s, (1, 1), count)]
        out = v.copy() if out is None else xp.add(out, v, out=out)
    return xp.divide(out, divisor(xp, x.shape[2:], k, s, pads, count, count_include_pad,
                                  divisor_override, out.dtype), out=out)


@kernel("avg_pool2d_grad")
@planes
def avg_pool2d_grad(xp, g, kernel, shape, stride=None, padding=0, ceil_mode=False,
                    count_include_pad=True, divisor_override=None):
    k, s, _, pads, count = geometry(shape, kernel, stride, padding, 1, ceil_mode)
    out = xp.zeros(g.shape[:2] + tuple(h + lo + hi for h, (lo, hi) in zip(shape, pads)),
                   dtype=g.dtype)
    share = g / divisor(xp, shape, k, s, pads, count, count_include_pad, divisor_override,
                        g.dtype)
    for tap in taps(k):
        out[tap_slices(tap, s, (1, 1), count)] += share
    return out[inner(shape, pads)] if any(lo or hi for lo, hi in pads) else out
