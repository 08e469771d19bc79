"""Row passes of log-softmax and cross-entropy (integer labels), forward and adjoint.

The same operations as the table kernels (`adc_runtime.kernels.nn`), the compiled
executor's shared cross-entropy and softmax (`specialize.cross_entropy_softmax`) and the
adjoints' ops as the VJP rules write them (`adcompiler.ops.nn`), in the same order, so the
results have the same bits (`row_passes` says how: NumPy's pairwise sums, constants of the
array's dtype, NumPy's own ``exp`` and ``log`` between the loops):

* log-softmax: ``s = x - max(x)`` (`row_passes.shift_rows`), ``exp(s)``, the row sums,
  their ``log``, ``s - log``;
* cross-entropy with its softmax: the shift, the labels' shifted logits picked, ``exp`` in
  place, each row divided by its sum (kept for the ``log``), ``-(picked - log(sum))``;
* log-softmax's adjoint ``ct - exp(y) * sum(ct)``: ``exp(y)``, then one loop per row;
* cross-entropy's adjoint ``ct[..., None] * (p - one_hot(labels))``: one loop, the
  one-hot array given as flat label indices (`specialize.label_indices`, how the compiled
  executor holds it) or as the array itself.
"""
from __future__ import annotations

import numpy

from . import row_passes
from .row_passes import _row_sum, full, rows_of


def normalize_rows_totals(e, totals, zero):
    """``e /= sum(e, axis=-1, keepdims=True)`` in place, each row's sum kept in `totals`."""
    rows, n = e.shape
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, e.dtype)
    for i in range(rows):
        s = _row_sum(e[i], n, zero, stack, vals)
        totals[i] = s
        for j in range(n):
            e[i, j] = e[i, j] / s


def log_softmax_adjoint_rows(ct, e, out, zero):
    """``ct - e * sum(ct, axis=-1, keepdims=True)``, `e` = ``exp(y)``; `out` may be `ct`
    or `e` (a row is read before it is written)."""
    rows, n = ct.shape
    stack, vals = numpy.empty(192, numpy.int64), numpy.empty(64, ct.dtype)
    for i in range(rows):
        s = _row_sum(ct[i], n, zero, stack, vals)
        for j in range(n):
            out[i, j] = ct[i, j] - e[i, j] * s


def ce_adjoint_flat(ct, p, flat, out, one):
    """``ct[i] * (p[i] - one_hot)`` with the ones at the flat indices `flat` (row * n +
    label): ``p - 0`` is `p`, so only the label's element subtracts."""
    rows, n = p.shape
    for i in range(rows):
        c = ct[i]
        lab = flat[i] - i * n
        v = p[i, lab]   # read before the row is written: `out` may be `p`
        for j in range(n):
            out[i, j] = c * p[i, j]
        out[i, lab] = c * (v - one)


def ce_adjoint_onehot(ct, p, oh, out):
    """``ct[i] * (p[i] - oh[i])`` with the one-hot array itself."""
    rows, n = p.shape
    for i in range(rows):
        c = ct[i]
        for j in range(n):
            out[i, j] = c * (p[i, j] - oh[i, j])


row_passes.register(globals(), (normalize_rows_totals, log_softmax_adjoint_rows,
                                ce_adjoint_flat, ce_adjoint_onehot))


def shifter(shape, dtype):
    """``run(x, out) -> (out, out as (rows, n))`` with ``out = x - max(x, axis=-1,
    keepdims=True)`` (a new array where `out` is None), or None where a row pass declines:
    rows of no element, an operand that is not C-contiguous."""
    rows, n = rows_of(shape)
    shift, out_for = row_passes.get("shift_rows"), row_passes.out_for

    def run(x, out):
        out = out_for(shape, dtype, (x,), out) if n else None
        if out is None:
            return None
        o2 = out.reshape(rows, n)
        shift(x.reshape(rows, n), o2)
        return out, o2
    return run


def log_softmax_runner(shape, dtype):
    """log-softmax along the last axis (rows of at least one element)."""
    rows, n = rows_of(shape)
    shifted, sums = shifter(shape, dtype), row_passes.get("row_sums")
    zero, exp, log, subtract, empty = dtype.type(0), numpy.exp, numpy.log, numpy.subtract, \
        numpy.empty

    def run(x, out):
        done = shifted(x, out)
        if done is None:
            return None
        out, o2 = done
        totals = empty((rows, 1), dtype)
        sums(exp(o2), totals.reshape(rows), zero)
        subtract(o2, log(totals, out=totals), out=o2)
        return (out,)
    return run


def cross_entropy_softmax(labels_shape: tuple, classes: int, dtype, table):
    """``(cross_entropy(z, labels), softmax(z))`` as `specialize.cross_entropy_softmax`
    computes them (`table`, which runs where this declines: operands that are not
    C-contiguous, no rows or no classes)."""
    rows = 1
    for d in labels_shape:
        rows *= d
    index = numpy.arange(rows)
    shift, norm = row_passes.get("shift_rows"), row_passes.get("normalize_rows_totals")
    zero, exp, log, empty = dtype.type(0), numpy.exp, numpy.log, numpy.empty
    subtract, negative = numpy.subtract, numpy.negative

    def run(z, labels):
        if rows == 0 or classes == 0 or not z.flags.c_contiguous or z.dtype != dtype:
            return table(z, labels)
        s = empty(z.shape, dtype)
        s2 = s.reshape(rows, classes)
        shift(z.reshape(rows, classes), s2)
        picked = s2[index, labels.reshape(rows)]
        exp(s, out=s)
        totals = empty(rows, dtype)
        norm(s2, totals, zero)
        subtract(picked, log(totals, out=totals), out=picked)
        return negative(picked, out=picked).reshape(labels_shape), s
    return run


def log_softmax_adjoint(m, shape, np_dtype, dtype, resolve):
    """The runner of log-softmax's adjoint matched by `row_patterns` (``ct``, ``y``)."""
    ct, y = m.env["ct"], m.env["y"]
    if not (full(ct, shape, dtype, resolve) and full(y, shape, dtype, resolve)):
        return None
    rows, n = rows_of(shape)
    k, zero, exp = row_passes.get("log_softmax_adjoint_rows"), np_dtype.type(0), numpy.exp
    out_for = row_passes.out_for

    def run(ct_, y_, out, _unused):
        out = out_for(shape, np_dtype, (ct_, y_), out) if n else None
        if out is None:
            return None
        e = exp(y_.reshape(rows, n))
        k(ct_.reshape(rows, n), e, out.reshape(rows, n), zero)
        return (out,)
    return [ct, y], (), run


def cross_entropy_adjoint(m, shape, np_dtype, dtype, resolve):
    """The runner of cross-entropy's adjoint matched by `row_patterns`: ``cte`` (the
    cotangent with a last axis of 1), ``p`` (the softmax) and ``oh`` (the one-hot labels
    made by a ``one_hot`` op, held as flat indices or as the array)."""
    cte, p, oh = m.env["cte"], m.env["p"], m.env["oh"]
    rows, n = rows_of(shape)
    op = oh.defining_op
    cte_shape = shape[:-1] + (1,)
    if not (full(p, shape, dtype, resolve) and op is not None and op.name == "one_hot"
            and full(oh, shape, dtype, resolve) and full(cte, cte_shape, dtype, resolve)) \
            or n == 0:
        return None
    flat_k, oh_k = row_passes.get("ce_adjoint_flat"), row_passes.get("ce_adjoint_onehot")
    one, contiguous, out_for = np_dtype.type(1), numpy.ascontiguousarray, row_passes.out_for

    def run(cte_, p_, oh_, out, _unused):
        out = out_for(shape, np_dtype, (p_,), out) if cte_.shape == cte_shape else None
        if out is None:
            return None
        c = contiguous(cte_).reshape(rows)
        if oh_.dtype.kind == "u" and oh_.shape == (rows,):
            flat_k(c, p_.reshape(rows, n), oh_, out.reshape(rows, n), one)
        elif oh_.dtype == np_dtype and oh_.shape == shape and oh_.flags.c_contiguous:
            oh_k(c, p_.reshape(rows, n), oh_.reshape(rows, n), out.reshape(rows, n))
        else:
            return None
        return (out,)
    return [cte, p, oh], (), run
