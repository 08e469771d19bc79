"""Row passes: softmax, layernorm, GELU and their adjoints as one loop over each row (numba).

The table kernels (`adc_runtime.kernels`) make one NumPy call per operation: softmax is a
maximum, a subtraction, an exponential, a sum and a division, each a pass over the whole
array. The loops here make the same IEEE operations in the same order, row by row while the
row is in the cache, so the results have the same bits:

* sums are NumPy's: ``add.reduce`` along a contiguous axis adds its elements pairwise
  (blocks of up to 128 summed with eight accumulators, larger ones split in halves at a
  multiple of 8) and adds the total to a +0.0 start; `_pairwise` is that algorithm, and
  `row_sum` adds the start;
* a mean is that sum divided by the count as NumPy's ``mean`` divides it, in float64 and
  rounded to the array's dtype (stored into an array of that dtype);
* constants arrive as scalars of the array's dtype (a float literal in a numba loop would
  be float64 and widen the arithmetic), and numba compiles without fast-math, so no
  multiply and add contract into an FMA;
* transcendental functions (``exp``, ``tanh``) stay NumPy's own calls between two passes:
  numba's ``exp`` is the C library's, which differs from NumPy's SIMD one in the last bit.

The loops read whole rows before writing them, so an output may be its input's own buffer.
They take C-contiguous arrays viewed as ``(rows, n)`` (`adc_runtime.row_fusion` checks and
falls back to the table kernel otherwise) and are compiled once per dtype and rank on first
use; numba caches the machine code beside this file (``cache=True``: these are fixed
functions of this package, not generated text).
"""
from __future__ import annotations

import importlib.util
import os

import numpy

_numba = None
_jitted: dict = {}
ROWS_AFTER_S = 10.0   # seconds of a compiled executor's calls after which it uses row passes


def policy() -> str:
    """When the compiled executor uses row passes: ``"off"`` without numba or with
    ``ADC_FUSE=0``; ``"now"`` with ``ADC_FUSE=1``; else ``"later"``, once an executor's
    calls have taken `ROWS_AFTER_S` seconds (numba's import and the loading of its cached
    loops take about 0.7 s, their first compilation several seconds: a short run never pays
    them). Whether numba is installed is looked up without importing it."""
    flag = os.environ.get("ADC_FUSE")
    if flag == "0" or _numba is False:
        return "off"
    if _numba is None and importlib.util.find_spec("numba") is None:
        return "off"
    return "now" if flag == "1" else "later"


def enabled() -> bool:
    """Whether row passes can run: numba imports and ``ADC_FUSE`` is not ``0``."""
    global _numba
    if os.environ.get("ADC_FUSE", "1") == "0":
        return False
    if _numba is None:
        try:
            import numba
            _numba = numba
        except ImportError:
            _numba = False
    return bool(_numba)


def _leaf(a, lo, n, sq):
    """NumPy's sum of a block ``a[lo:lo + n]``, 1 <= n <= 128 (of its squares, each rounded
    to the dtype as ``a * a`` is, when `sq`): in order below 8 elements, else eight
    accumulators over the multiple of 8, combined pairwise, then the rest. `sq` is a
    constant at every call site, so LLVM keeps one of the two loops."""
    if n < 8:
        res = a[lo] * a[lo] if sq else a[lo]
        for i in range(1, n):
            v = a[lo + i]
            res += v * v if sq else v
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    if sq:
        r0, r1, r2, r3 = r0 * r0, r1 * r1, r2 * r2, r3 * r3
        r4, r5, r6, r7 = r4 * r4, r5 * r5, r6 * r6, r7 * r7
    i = 8
    m = n - n % 8
    while i < m:
        j = lo + i
        v0, v1, v2, v3 = a[j], a[j + 1], a[j + 2], a[j + 3]
        v4, v5, v6, v7 = a[j + 4], a[j + 5], a[j + 6], a[j + 7]
        if sq:
            v0, v1, v2, v3 = v0 * v0, v1 * v1, v2 * v2, v3 * v3
            v4, v5, v6, v7 = v4 * v4, v5 * v5, v6 * v6, v7 * v7
        r0 += v0
        r1 += v1
        r2 += v2
        r3 += v3
        r4 += v4
        r5 += v5
        r6 += v6
        r7 += v7
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        v = a[lo + i]
        res += v * v if sq else v
        i += 1
    return res


def _pairwise(a, n, stack, vals, sq):
    """NumPy's pairwise sum of ``a[:n]`` (n >= 1) without its +0.0 start: blocks of more
    than 128 are split at ``n // 2`` less its remainder by 8, left half first. A loop over an
    explicit stack (`stack`: int64 of 3 * 64 entries, `vals`: 64 of `a`'s dtype), since
    numba's cache does not hold recursive functions."""
    top = 0
    stack[0], stack[1], stack[2] = 0, n, 0    # (start, length, left half done) per node
    while True:
        lo, m = stack[3 * top], stack[3 * top + 1]
        if m > 128:
            h = m // 2
            h -= h % 8
            top += 1
            stack[3 * top], stack[3 * top + 1], stack[3 * top + 2] = lo, h, 0
            continue
        v = _leaf(a, lo, m, sq)
        while True:   # `v`: the sum of node `top`, handed to its parent
            if top == 0:
                return v
            top -= 1
            if stack[3 * top + 2] == 0:   # the left half: keep it, then the right half
                vals[top] = v
                stack[3 * top + 2] = 1
                h = stack[3 * top + 1] // 2
                h -= h % 8
                top += 1
                stack[3 * top] = stack[3 * (top - 1)] + h
                stack[3 * top + 1] = stack[3 * (top - 1) + 1] - h
                stack[3 * top + 2] = 0
                break
            v = vals[top] + v


def _row_sum(a, n, zero, stack, vals):
    """``add.reduce`` of ``a[:n]``: the pairwise sum added to +0.0 (`zero`)."""
    if n == 0:
        return zero
    return zero + _pairwise(a, n, stack, vals, False)


def _mean(a, n, zero, stack, vals):
    """NumPy's mean of ``a[:n]`` (n >= 1): its sum over the count in float64, rounded to
    `a`'s dtype through ``vals[63]`` (beyond any depth of the pairwise stack)."""
    vals[63] = numpy.float64(_row_sum(a, n, zero, stack, vals)) / n
    return vals[63]


def _row_max(x, i, n):
    """``maximum.reduce`` of row `i` (n >= 1): a NaN anywhere gives NaN."""
    m = x[i, 0]
    for j in range(1, n):
        v = x[i, j]
        if v > m or v != v:
            m = v
            if v != v:
                break
    return m


def _lanes_max(x, i, n):
    """The maximum of row `i` (n >= 1) over eight lanes, NaNs passed over (each lane keeps
    the larger of two ordered values, a form that vectorizes); ties of +0.0 and -0.0 may
    keep either zero, which no softmax result tells apart (``exp(-0.0) == exp(0.0)``)."""
    if n < 8:
        m = x[i, 0]
        for j in range(1, n):
            v = x[i, j]
            m = v if v > m else m
        return m
    m0, m1, m2, m3 = x[i, 0], x[i, 1], x[i, 2], x[i, 3]
    m4, m5, m6, m7 = x[i, 4], x[i, 5], x[i, 6], x[i, 7]
    j = 8
    end = n - n % 8
    while j < end:
        v = x[i, j]
        m0 = v if v > m0 else m0
        v = x[i, j + 1]
        m1 = v if v > m1 else m1
        v = x[i, j + 2]
        m2 = v if v > m2 else m2
        v = x[i, j + 3]
        m3 = v if v > m3 else m3
        v = x[i, j + 4]
        m4 = v if v > m4 else m4
        v = x[i, j + 5]
        m5 = v if v > m5 else m5
        v = x[i, j + 6]
        m6 = v if v > m6 else m6
        v = x[i, j + 7]
        m7 = v if v > m7 else m7
        j += 8
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    m = m4 if m4 > m0 else m0
    while j < n:
        v = x[i, j]
        m = v if v > m else m
        j += 1
    return m


def shift_rows(x, out):
    """``out = x - max(x, axis=-1, keepdims=True)`` (the first step of softmax). The fast
    maximum passes NaNs over; a row whose result holds a NaN (from a NaN or an infinity) is
    done again with NumPy's maximum, which a NaN makes NaN."""
    rows, n = x.shape
    if n == 0:
        return
    for i in range(rows):
        m = _lanes_max(x, i, n)
        bad = 0
        for j in range(n):
            d = x[i, j] - m
            out[i, j] = d
            bad += d != d
        if bad:
            m = _row_max(x, i, n)
            for j in range(n):
                out[i, j] = x[i, j] - m


def normalize_rows(e, zero):
    """``e /= sum(e, axis=-1, keepdims=True)`` (softmax's last step), in place: one array,
    so that the division loop vectorizes."""
    rows, n = e.shape
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, e.dtype)
    for i in range(rows):
        s = _row_sum(e[i], n, zero, stack, vals)
        for j in range(n):
            e[i, j] = e[i, j] / s


def row_sums(e, out, zero):
    """``out[i] = sum(e[i])``."""
    rows, n = e.shape
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, e.dtype)
    for i in range(rows):
        out[i] = _row_sum(e[i], n, zero, stack, vals)


def softmax_adjoint_rows(dy, y, out, zero):
    """``y * (dy - sum(dy * y, axis=-1, keepdims=True))``: softmax's adjoint."""
    rows, n = y.shape
    prod = numpy.empty(n, y.dtype)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, y.dtype)
    for i in range(rows):
        for j in range(n):
            prod[j] = dy[i, j] * y[i, j]
        s = _row_sum(prod, n, zero, stack, vals)
        for j in range(n):
            out[i, j] = y[i, j] * (dy[i, j] - s)


def layernorm_rows(x, gamma, beta, out, eps, zero):
    """The layernorm table kernel along the last axis, a 1-D gamma and beta: ``xc = x -
    mean(x)``, ``var = mean(xc * xc)``, ``xc / sqrt(var + eps) * gamma + beta``."""
    rows, n = x.shape
    sq = numpy.empty(n, x.dtype)
    xc = numpy.empty(n, x.dtype)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, x.dtype)
    for i in range(rows):
        m = _mean(x[i], n, zero, stack, vals)
        for j in range(n):
            c = x[i, j] - m
            xc[j] = c
            sq[j] = c * c
        r = numpy.sqrt(_mean(sq, n, zero, stack, vals) + eps)
        for j in range(n):
            out[i, j] = xc[j] / r * gamma[j] + beta[j]


def layernorm_adjoint_rows(x, ct, gamma, gx, xhat_out, eps, zero, one, keep_xhat):
    """Layernorm's adjoint as its VJP rule writes it (`adcompiler.ops.nn`): ``xc = x -
    mean(x)``, ``rstd = 1 / sqrt(mean(xc * xc) + eps)``, ``xhat = xc * rstd``, ``g = ct *
    gamma``, ``gx = rstd * ((g - mean(g)) - xhat * mean(g * xhat))``; `xhat` is also written
    to `xhat_out` when `keep_xhat`."""
    rows, n = x.shape
    t = numpy.empty(n, x.dtype)
    xh = numpy.empty(n, x.dtype)
    g = numpy.empty(n, x.dtype)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, x.dtype)
    for i in range(rows):
        m = _mean(x[i], n, zero, stack, vals)
        for j in range(n):
            c = x[i, j] - m
            xh[j] = c
            t[j] = c * c
        rstd = one / numpy.sqrt(_mean(t, n, zero, stack, vals) + eps)
        for j in range(n):
            h = xh[j] * rstd
            xh[j] = h
            gj = ct[i, j] * gamma[j]
            g[j] = gj
            t[j] = gj * h
        a = _mean(t, n, zero, stack, vals)
        b = _mean(g, n, zero, stack, vals)
        for j in range(n):
            gx[i, j] = rstd * ((g[j] - b) - xh[j] * a)
        if keep_xhat:
            for j in range(n):
                xhat_out[i, j] = xh[j]


def rmsnorm_adjoint_rows(x, ct, gamma, gx, xhat_out, thr, one, eps, zero, keep_xhat):
    """rmsnorm's adjoint as its VJP rule writes it (`adcompiler.ops.norm`, eps > 0): ``s =
    max|x|`` (NaN if a NaN), ``inv = 1 / (s if s > thr else 1)``, ``u = x * inv``, ``k =
    1 / sqrt(mean(u * u) + eps * (inv * inv))``, ``xhat = u * k``, ``g = ct * gamma``,
    ``gx = (k * inv) * (g - xhat * mean(g * xhat))``; `xhat` also to `xhat_out` when
    `keep_xhat`."""
    rows, n = x.shape
    t = numpy.empty(n, x.dtype)
    xh = numpy.empty(n, x.dtype)
    g = numpy.empty(n, x.dtype)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, x.dtype)
    for i in range(rows):
        m = zero
        for j in range(n):   # once a NaN, every comparison is false: it stays
            a = abs(x[i, j])
            if a > m or a != a:
                m = a
        sv = m if m > thr else one
        inv = one / sv
        for j in range(n):
            u = x[i, j] * inv
            xh[j] = u
            t[j] = u * u
        k = one / numpy.sqrt(_mean(t, n, zero, stack, vals) + eps * (inv * inv))
        for j in range(n):
            h = xh[j] * k
            xh[j] = h
            gj = ct[i, j] * gamma[j]
            g[j] = gj
            t[j] = gj * h
        a = _mean(t, n, zero, stack, vals)
        rinv = k * inv
        for j in range(n):
            gx[i, j] = rinv * (g[j] - xh[j] * a)
        if keep_xhat:
            for j in range(n):
                xhat_out[i, j] = xh[j]


def gelu_tanh_inner(x, out, a, k):
    """``k * (x + a * x * x * x)``, the tanh argument of the tanh GELU (flat arrays)."""
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = k * (v + ((a * v) * v) * v)


def gelu_tanh_outer(x, t, out, half, one):
    """``0.5 * x * (1 + t)``, with `t` the tanh (flat arrays)."""
    for i in range(x.shape[0]):
        out[i] = (half * x[i]) * (one + t[i])


def gelu_tanh_grad_inner(x, out, k, a, one):
    """``(k * x) * (1 + a * square(x))``: the tanh argument in the GELU rule's order."""
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = (k * v) * (one + a * (v * v))


def gelu_tanh_grad_outer(x, t, ct, out, k, a3, half, one):
    """``ct * (0.5 * ((1 + t) + (x * (1 - t*t)) * (k * (1 + 3a * x*x))))``: the GELU
    rule's derivative (`adcompiler.ops.elementwise`) times the cotangent."""
    for i in range(x.shape[0]):
        v = x[i]
        tt = t[i]
        du = k * (one + a3 * (v * v))
        right = (v * (one - tt * tt)) * du
        out[i] = ct[i] * (half * ((one + tt) + right))


def grad_norms(grads, out, zero):
    """A training step's gradient norms (`adcompiler.passes.train_step`): ``out[j] =
    sqrt(sum(g * g))`` of each flat gradient in the tuple `grads`, and ``out[-1]`` the
    norm of those norms, each sum NumPy's pairwise one over the rounded squares."""
    p = len(grads)
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, out.dtype)
    for j in range(p):
        g = grads[j]
        n = g.shape[0]
        out[j] = numpy.sqrt(zero + _pairwise(g, n, stack, vals, True)) if n else numpy.sqrt(zero)
    out[p] = numpy.sqrt(zero + _pairwise(out, p, stack, vals, True)) if p else numpy.sqrt(zero)


_FUNCTIONS = {f.__name__: f for f in (
    grad_norms, shift_rows, normalize_rows, row_sums, softmax_adjoint_rows, layernorm_rows,
    layernorm_adjoint_rows, rmsnorm_adjoint_rows, gelu_tanh_inner, gelu_tanh_outer,
    gelu_tanh_grad_inner, gelu_tanh_grad_outer)}
_HELPERS = (_leaf, _pairwise, _row_sum, _mean, _row_max, _lanes_max)


def out_for(shape, dtype, operands, out):
    """The output array of a row pass: `out`, or a new C-contiguous array where it is None;
    None (the pass declines) where an operand or `out` is not C-contiguous."""
    if out is not None and not out.flags.c_contiguous:
        return None
    for a in operands:
        if not a.flags.c_contiguous:
            return None
    return numpy.empty(shape, dtype) if out is None else out


_MODULES: list = []   # (namespace, functions) of other modules' loops (`register`)


def rows_of(shape) -> tuple[int, int]:
    """(rows, row length) of an array of `shape` whose rows are its last axis."""
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows, shape[-1]


def full(v, shape, dtype, resolve) -> bool:
    """Whether IR value `v` has `dtype` and, its dims resolved, `shape` (no broadcast)."""
    return v.type.dtype == dtype and tuple(resolve(v.type.shape)) == shape


def register(namespace: dict, functions, helpers=()) -> None:
    """Loops of another module (`row_losses`, `row_gelu`, `row_norms`) that call the
    helpers above or its own `helpers`: their module's `namespace` gets the compiled
    helpers, and `get` their compiled forms."""
    _MODULES.append((namespace, tuple(functions), tuple(helpers)))
    if _jitted:
        _compile_module(namespace, functions, helpers)


def _compile_module(namespace: dict, functions, helpers=()) -> None:
    for f in _HELPERS:
        if f.__name__ in namespace:
            namespace[f.__name__] = globals()[f.__name__]
    for f in helpers:
        namespace[f.__name__] = _numba.njit(cache=True, nogil=True, error_model="numpy",
                                            inline="always")(f)
    for f in functions:
        _jitted[f.__name__] = _numba.njit(cache=True, nogil=True, error_model="numpy")(f)


def _compile_all() -> None:
    """Every function numba-compiled (lazily, per signature), helpers first so that the
    kernels call their compiled forms."""
    g = globals()
    for f in _HELPERS:
        g[f.__name__] = _numba.njit(cache=True, nogil=True, error_model="numpy",
                                    inline="always")(f)
    for name, f in _FUNCTIONS.items():
        _jitted[name] = _numba.njit(cache=True, nogil=True, error_model="numpy")(f)
    for namespace, functions, helpers in _MODULES:
        _compile_module(namespace, functions, helpers)


def get(name: str):
    """The compiled loop `name` (module functions above, or registered); numba must be
    installed."""
    if not _jitted:
        if not _numba:
            import numba
            globals()["_numba"] = numba
        _compile_all()
    return _jitted[name]
