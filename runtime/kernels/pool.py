"""Kernels of pooling and its adjoints: one vectorized step per kernel tap (a window's
elements are the same tap of every window, a strided slice), never a loop over windows.

Max pooling picks the first maximal element of each window in row-major order, as PyTorch
(a NaN counts as the maximum and propagates; its derivative goes to the window's last NaN,
as PyTorch's). Padding reads as -inf; a window whose
elements are all -inf picks its first element of `x`, not the padding (PyTorch's kernel
does the same).
"""
from __future__ import annotations

import itertools

from .table import kernel
from .conv import inner, padded, per_axis, tap_slices, window_view


def geometry(x, kernel, stride, padding):
    """kernel, stride, (before, after) padding, and the number of windows per axis of `x`."""
    k = per_axis(kernel, 2)
    s = k if stride is None else per_axis(stride, 2)
    pads = [(p, p) for p in per_axis(padding, 2)]
    count = tuple((h + 2 * p - kk) // ss + 1
                  for h, (p, _), kk, ss in zip(x.shape[2:], pads, k, s))
    return k, s, pads, count


def taps(k):
    return itertools.product(range(k[0]), range(k[1]))


@kernel("max_pool2d")
def max_pool2d(xp, x, kernel, stride=None, padding=0):
    k, s, pads, count = geometry(x, kernel, stride, padding)
    xpad = padded(xp, x, pads, fill=-xp.inf)
    out = None
    for tap in taps(k):
        v = xpad[tap_slices(tap, s, (1, 1), count)]
        out = v.copy() if out is None else xp.maximum(out, v, out=out)
    return out


def pick(xp, x, k, s, pads, count):
    """The tap (row-major, ``i * kW + j``) of the first maximal element of each window.

    One pass per tap keeps the best value so far and its tap: a tap wins only if strictly
    greater, so ties keep the earlier tap; the padding, -inf, never wins, and a window of
    -inf keeps its first tap inside `x`. A NaN always wins (so the last NaN of a window is
    picked), as in PyTorch's kernel."""
    xpad = padded(xp, x, pads, fill=-xp.inf)
    idx = xp.zeros(x.shape[:2] + count, dtype=xp.int64)
    if any(p for p, _ in pads):
        inside = padded(xp, xp.ones((1, 1) + x.shape[2:], dtype=bool), pads, fill=False)
        first = xp.argmax(window_view(xp, inside, k, s, (1, 1), count)
                          .reshape(count + (-1,)), axis=-1)
        idx[...] = first
    best = xp.full(idx.shape, -xp.inf, dtype=x.dtype)
    nan = bool(xp.isnan(x).any())
    for t, tap in enumerate(taps(k)):
        v = xpad[tap_slices(tap, s, (1, 1), count)]
        wins = v > best
        if nan:
            wins |= xp.isnan(v)
        xp.copyto(best, v, where=wins)
        xp.copyto(idx, t, where=wins)
    return idx


@kernel("max_pool2d_grad")
def max_pool2d_grad(xp, x, g, kernel, stride=None, padding=0):
    k, s, pads, count = geometry(x, kernel, stride, padding)
    idx = pick(xp, x, k, s, pads, count)
    out = xp.zeros(x.shape[:2] + tuple(h + lo + hi for h, (lo, hi) in zip(x.shape[2:], pads)),
                   dtype=g.dtype)
    for t, tap in enumerate(taps(k)):
        out[tap_slices(tap, s, (1, 1), count)] += xp.where(idx == t, g, 0)
    return out[inner(x.shape[2:], pads)] if any(p for p, _ in pads) else out


@kernel("max_pool2d_select")
def max_pool2d_select(xp, x, t, kernel, stride=None, padding=0):
    k, s, pads, count = geometry(x, kernel, stride, padding)
    idx = pick(xp, x, k, s, pads, count)
    flat = window_view(xp, padded(xp, t, pads), k, s, (1, 1), count)
    flat = flat.reshape(t.shape[:2] + count + (-1,))
    return xp.take_along_axis(flat, idx[..., None], axis=-1)[..., 0]


@kernel("avg_pool2d")
def avg_pool2d(xp, x, kernel, stride=None, padding=0):
    k, s, pads, count = geometry(x, kernel, stride, padding)
    xpad = padded(xp, x, pads)
    out = None
    for tap in taps(k):
        v = xpad[tap_slices(tap, s, (1, 1), count)]
        out = v.copy() if out is None else xp.add(out, v, out=out)
    return xp.divide(out, k[0] * k[1], out=out)


@kernel("avg_pool2d_grad")
def avg_pool2d_grad(xp, g, kernel, shape, stride=None, padding=0):
    k, s, pads, _ = geometry(g, kernel, stride, padding)
    count = g.shape[2:]
    out = xp.zeros(g.shape[:2] + tuple(h + lo + hi for h, (lo, hi) in zip(shape, pads)),
                   dtype=g.dtype)
    share = g / (k[0] * k[1])
    for tap in taps(k):
        out[tap_slices(tap, s, (1, 1), count)] += share
    return out[inner(shape, pads)] if any(p for p, _ in pads) else out
