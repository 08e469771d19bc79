"""Compiled loops (numba) for the window copies and scatters of convolution and pooling.

im2col (the windows of an input as the columns of a matrix), col2im (adding each kernel
tap's columns back into the input's place) and max pooling's adjoint (the first maximal
element of each window gets the window's cotangent) are, in NumPy, strided passes whose
innermost runs are an image row (8 elements for an 8x8 image: the passes' overhead per
run dominates) or one pass over the whole batch per kernel tap; these loops copy the same
values, and make the same additions in the same order (tap by tap, so the sums have the
same bits), one image plane at a time, while the plane is in the cache.

They run under the gate of the row passes (`adc_runtime.row_passes`): with numba
installed and ``ADC_FUSE`` not ``0``, once numba is loaded in the process (the compiled
executor's row passes or fused runs load it; ``ADC_FUSE=1`` loads it at once); before that,
and without numba, the kernels run their NumPy form, so a short run never pays numba's
import. The loops are fixed functions of this package, cached beside this file.
"""
from __future__ import annotations

import sys

import numpy

from .. import row_passes

_jitted: dict = {}
_INF = float("inf")
_DTYPES = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))


def active() -> bool:
    """Whether the kernels use these loops now (module doc)."""
    policy = row_passes.policy()
    if policy == "off" or (policy == "later" and "numba" not in sys.modules):
        return False
    return row_passes.enabled()


def usable(xp, *arrays) -> bool:
    """Whether the loops run on `arrays` now: NumPy arrays of one native float32 or
    float64 dtype (numba compiles neither float16 nor a swapped byte order), and
    `active`."""
    dtype = arrays[0].dtype
    return (xp.__name__ == "numpy" and dtype in _DTYPES
            and all(a.dtype == dtype for a in arrays) and active())


def _im2col(x, cols, by_channel, ph, pw, sh, sw, dh, dw):
    """``cols[n, c, i, j, h, w] = x[n, c, h*sh - ph + i*dh, w*sw - pw + j*dw]``, zero
    where that lies outside x (the padding); `cols` laid out ``[c, i, j, n, h, w]`` when
    `by_channel`. Written in the order of `cols`'s memory either way."""
    batch, chans, height, width = x.shape
    if by_channel:
        kh, kw, ho, wo = cols.shape[1], cols.shape[2], cols.shape[4], cols.shape[5]
    else:
        kh, kw, ho, wo = cols.shape[2], cols.shape[3], cols.shape[4], cols.shape[5]
    for a in range(chans if by_channel else batch):
        for b in range(batch if by_channel else chans):
            n, c = (b, a) if by_channel else (a, b)
            for i in range(kh):
                for j in range(kw):
                    for h in range(ho):
                        r = h * sh - ph + i * dh
                        inside = 0 <= r < height
                        for w in range(wo):
                            q = w * sw - pw + j * dw
                            v = x[n, c, r, q] if inside and 0 <= q < width else x.dtype.type(0)
                            if by_channel:
                                cols[c, i, j, n, h, w] = v
                            else:
                                cols[n, c, i, j, h, w] = v


def _col2im(cols, out, sh, sw, dh, dw):
    """``out[n, c, h*sh + i*dh, w*sw + j*dw] += cols[n, c, i, j, h, w]``, tap by tap."""
    batch, chans, kh, kw, ho, wo = cols.shape
    for n in range(batch):
        for c in range(chans):
            for i in range(kh):
                for j in range(kw):
                    for h in range(ho):
                        r = h * sh + i * dh
                        for w in range(wo):
                            out[n, c, r, w * sw + j * dw] += cols[n, c, i, j, h, w]


def _pool_grad(x, g, out, pick, kh, kw, sh, sw, dh, dw, ph, pw):
    """Max pooling's adjoint into `out` (zeros, x's shape): each window's first maximal
    element inside x (a NaN always wins, so the last NaN; a window of -inf keeps its first
    element) gets the window's cotangent, added tap by tap. `pick`: scratch of g's plane."""
    batch, chans, height, width = x.shape
    ho, wo = g.shape[2], g.shape[3]
    for n in range(batch):
        for c in range(chans):
            for oh in range(ho):
                for ow in range(wo):
                    best = -_INF
                    t = -1
                    for i in range(kh):
                        r = oh * sh - ph + i * dh
                        if r < 0 or r >= height:
                            continue
                        for j in range(kw):
                            q = ow * sw - pw + j * dw
                            if q < 0 or q >= width:
                                continue
                            v = x[n, c, r, q]
                            if t < 0:
                                t = i * kw + j
                            if v > best or v != v:
                                best = v
                                t = i * kw + j
                    pick[oh, ow] = t
            for i in range(kh):
                for j in range(kw):
                    tap = i * kw + j
                    for oh in range(ho):
                        r = oh * sh - ph + i * dh
                        for ow in range(wo):
                            if pick[oh, ow] == tap:
                                out[n, c, r, ow * sw - pw + j * dw] += g[n, c, oh, ow]


def _pool_grad_2x2(x, g, out):
    """`_pool_grad` for kernel and stride 2, no padding, dilation 1 (the common pooling):
    windows apart and inside x, each picks among its four elements with constant bounds.
    ``0 + g`` as the general form adds it (so a -0.0 cotangent lands as +0.0)."""
    batch, chans = x.shape[0], x.shape[1]
    ho, wo = g.shape[2], g.shape[3]
    zero = x.dtype.type(0)
    for n in range(batch):
        for c in range(chans):
            for oh in range(ho):
                for ow in range(wo):
                    r, q = 2 * oh, 2 * ow
                    best, br, bq = x[n, c, r, q], r, q
                    for i in range(2):
                        for j in range(2):
                            v = x[n, c, r + i, q + j]
                            win = (v > best) | (v != v)
                            best = v if win else best
                            br = r + i if win else br
                            bq = q + j if win else bq
                    out[n, c, br, bq] = zero + g[n, c, oh, ow]


def get(name: str):
    """The compiled loop `name` (``im2col``, ``col2im``, ``pool_grad``,
    ``pool_grad_2x2``), compiled on first use."""
    if not _jitted:
        import numba
        for f in (_im2col, _col2im, _pool_grad, _pool_grad_2x2):
            _jitted[f.__name__[1:]] = numba.njit(cache=True, nogil=True,
                                                 error_model="numpy")(f)
    return _jitted[name]
