"""Kernels of convolutions: each is one matrix product (BLAS on the CPU) over the windows.

The windows of a padded input are a strided view (``as_strided``: no copy), laid out as the
columns of one matrix (im2col: the one copy); a convolution multiplies the weight by it, the
weight's adjoint multiplies the output's cotangent by it, and the input's adjoint multiplies
the transposed weight by the cotangent and adds each kernel tap's columns back into place
(col2im: one vectorized add per tap). Groups are a batch axis of the product. `xp` is numpy
or cupy; both have ``as_strided`` and a batched ``matmul``.
"""
from __future__ import annotations

import itertools
import math

from . import loops
from .table import kernel


def per_axis(v, n: int) -> tuple[int, ...]:
    return (v,) * n if isinstance(v, int) else tuple(v)


def padding_pairs(padding, kernel, dilation) -> list[tuple[int, int]]:
    """(before, after) per spatial axis, as `adcompiler.ops.windows.padding_pairs` (which
    checks the options; here they are valid)."""
    n = len(kernel)
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, per_axis(dilation, n))]
        return [(t // 2, t - t // 2) for t in total]
    return [(p, p) for p in per_axis(padding, n)]


def padded(xp, x, pads, fill=0):
    """`x` with `fill` around its spatial axes (`x` itself when there is none)."""
    if not any(lo or hi for lo, hi in pads):
        return x
    shape = x.shape[:2] + tuple(s + lo + hi for s, (lo, hi) in zip(x.shape[2:], pads))
    out = xp.full(shape, fill, dtype=x.dtype)
    out[inner(x.shape[2:], pads)] = x
    return out


def inner(spatial, pads) -> tuple:
    """The index of the unpadded part of a padded array."""
    return (slice(None), slice(None)) + tuple(slice(lo, lo + s)
                                              for s, (lo, _) in zip(spatial, pads))


def window_view(xp, xpad, kernel, stride, dilation, count):
    """The view ``[N, C, *count, *kernel]`` of the first `count` windows of `xpad`."""
    n = len(kernel)
    st = xpad.strides
    strides = (st[:2] + tuple(st[2 + a] * stride[a] for a in range(n))
               + tuple(st[2 + a] * dilation[a] for a in range(n)))
    return xp.lib.stride_tricks.as_strided(xpad, xpad.shape[:2] + tuple(count) + tuple(kernel),
                                           strides)


def tap_slices(tap, stride, dilation, count) -> tuple:
    """The positions that kernel tap `tap` reads in each window, as slices of the padded
    input."""
    return (slice(None), slice(None)) + tuple(
        slice(t * d, t * d + s * (c - 1) + 1, s) for t, s, d, c in
        zip(tap, stride, dilation, count))


def _geometry(x, kernel, stride, padding, dilation):
    n = x.ndim - 2
    stride, dilation = per_axis(stride, n), per_axis(dilation, n)
    return stride, padding_pairs(padding, kernel, dilation), dilation


def _count(size, kernel, stride, dilation):
    return tuple((s - d * (k - 1) - 1) // st + 1
                 for s, k, st, d in zip(size, kernel, stride, dilation))


def _conv(xp, x, w, stride=1, padding=0, dilation=1, groups=1):
    """``[N, C, *S] * [O, C/groups, *K] -> [N, O, *S']``: the weight ``[groups, O/groups,
    C/groups*K]`` times the columns ``[N, groups, C/groups*K, S']``."""
    kernel = w.shape[2:]
    stride, pads, dilation = _geometry(x, kernel, stride, padding, dilation)
    full = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape[2:], pads))
    count = _count(full, kernel, stride, dilation)
    (batch, c), o = x.shape[:2], w.shape[0]
    cols = columns(xp, x, kernel, stride, pads, dilation, count, False)
    cols = cols.reshape(batch, groups, c // groups * math.prod(kernel), math.prod(count))
    out = xp.matmul(w.reshape(groups, o // groups, -1), cols)
    return out.reshape((batch, o) + count)


def columns(xp, x, kernel, stride, pads, dilation, count, by_channel):
    """im2col: the windows of `x` padded by `pads`, ``[N, C, *kernel, *count]``, or
    ``[C, *kernel, N, *count]`` when `by_channel` (a weight's adjoint), contiguous."""
    n, (batch, c) = len(kernel), x.shape[:2]
    if n <= 2 and loops.usable(xp, x):
        # one image plane at a time, the padding read as zeros (`loops`)
        shape = (c,) + tuple(kernel) + (batch,) + tuple(count) if by_channel \
            else (batch, c) + tuple(kernel) + tuple(count)
        out = xp.empty(shape, dtype=x.dtype)
        dest = out
        if n == 1:   # a conv1d's axis is the second of a 2-D one
            x = x[:, :, None]
            dest = out.reshape((c, 1, kernel[0], batch, 1, count[0]) if by_channel
                               else (batch, c, 1, kernel[0], 1, count[0]))
            stride, dilation, pads = (1,) + stride, (1,) + dilation, [(0, 0)] + list(pads)
        loops.get("im2col")(x, dest, by_channel, pads[0][0], pads[1][0], *stride, *dilation)
        return out
    view = window_view(xp, padded(xp, x, pads), kernel, stride, dilation, count)
    perm = (1,) + tuple(range(2 + n, 2 + 2 * n)) + (0,) + tuple(range(2, 2 + n)) \
        if by_channel else (0, 1) + tuple(range(2 + n, 2 + 2 * n)) + tuple(range(2, 2 + n))
    return xp.ascontiguousarray(view.transpose(perm))


def one_image(fn):
    """`fn(xp, x, w, ...)` also for one image `x` ``[C, *spatial]`` (rank one less than the
    weight's): a batch of one."""
    def run(xp, x, w, *args, **options):
        if x.ndim == w.ndim:
            return fn(xp, x, w, *args, **options)
        return fn(xp, x[None], w, *args, **options)[0]
    return run


kernel("conv1d", "conv2d")(one_image(_conv))


@kernel("conv_input_grad")
def conv_input_grad(xp, g, w, shape, stride=1, padding=0, dilation=1, groups=1):
    """The adjoint of `_conv`'s input of spatial size `shape`: the transposed weight times
    `g` (col2im's columns), each tap's columns added back at the positions it read."""
    kernel = w.shape[2:]
    stride, pads, dilation = _geometry(g, kernel, stride, padding, dilation)
    n, (batch, o), c = len(kernel), g.shape[:2], w.shape[1] * groups
    count = g.shape[2:]
    wt = w.reshape(groups, o // groups, -1).transpose(0, 2, 1)
    cols = xp.matmul(wt, g.reshape(batch, groups, o // groups, math.prod(count)))
    cols = cols.reshape((batch, c) + tuple(kernel) + tuple(count))
    full = tuple(s + lo + hi for s, (lo, hi) in zip(shape, pads))
    out = xp.zeros((batch, c) + full, dtype=g.dtype)
    if n <= 2 and loops.usable(xp, cols, out):
        # one image plane at a time (`loops`): a conv1d's axis is the second of a 2-D one
        one = (1,) * (2 - n)
        loops.get("col2im")(cols.reshape((batch, c) + one + kernel + one + count),
                            out.reshape((batch, c) + one + full),
                            *(one + stride), *(one + dilation))
    else:
        for tap in itertools.product(*map(range, kernel)):
            out[tap_slices(tap, stride, dilation, count)] += \
                cols[(slice(None), slice(None)) + tap]
    return out[inner(shape, pads)] if full != tuple(shape) else out


@kernel("conv_weight_grad")
def conv_weight_grad(xp, x, g, kernel, stride=1, padding=0, dilation=1, groups=1):
    """The adjoint of `_conv`'s weight: `g` ``[groups, O/groups, N*S']`` times the columns
    ``[groups, C/groups*K, N*S']`` transposed (computed as its transpose)."""
    kernel = tuple(kernel)
    stride, pads, dilation = _geometry(x, kernel, stride, padding, dilation)
    n, (batch, c), o = len(kernel), x.shape[:2], g.shape[1]
    count = g.shape[2:]
    cols = columns(xp, x, kernel, stride, pads, dilation, count, True)
    cols = cols.reshape(groups, c // groups * math.prod(kernel), -1)
    gm = g.transpose((1, 0) + tuple(range(2, 2 + n))).reshape(groups, o // groups, -1)
    # the transposed product (columns first) is the faster GEMM shape for OpenBLAS (about
    # 1.6x for conv2d's benchmark); its small result is transposed back
    wt = xp.matmul(cols, gm.transpose(0, 2, 1))
    return wt.transpose(0, 2, 1).reshape((o, c // groups) + kernel)


@kernel("conv_transpose2d")
@one_image
def conv_transpose2d(xp, x, w, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """`conv_input_grad` at the transposed convolution's output size."""
    kernel = w.shape[2:]
    stride, pads, dilation = _geometry(x, kernel, stride, padding, dilation)
    extra = per_axis(output_padding, 2)
    shape = tuple((h - 1) * s - 2 * lo + d * (k - 1) + a + 1 for h, s, (lo, _), d, k, a in
                  zip(x.shape[2:], stride, pads, dilation, kernel, extra))
    return conv_input_grad(xp, x, w, shape, stride, padding, dilation, groups)
