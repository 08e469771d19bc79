"""Kernels the compiled executor specializes once the shapes are known.

Each computes the same NumPy operations in the same order as the table kernel it replaces
(`adc_runtime.kernels`), so results are bit-identical; what changes is the Python work
around them, done once at code generation instead of on every call:

* ``sum_to``: the summed axes (and blocks, `kernels.reduce.sum_to_plan`) are worked
  out from the shapes once;
* ``cross_entropy`` on integer class labels along the last axis, when the function also
  takes ``softmax`` of the same logits (the adjoint of cross-entropy does): one pass
  computes the shifted logits, their exponentials and sums once and gives both results
  (the softmax kernel's ``e / sum(e)`` and the log-softmax ``s - log(sum(e))``);
* ``one_hot``: the class range is made once;
* ``mean`` and ``sum_to`` of floats: NumPy's own reduction (``add.reduce``) and division
  by the count, without the argument handling of ``numpy.mean``/``numpy.sum`` around them;
* ``transpose``: the array's own method with the permutation fixed;
* ``where(mask, a, 0.0)`` (relu's adjoint): the bits of `a` and of an all-ones or zero
  integer mask made from `mask`, two integer passes instead of a select (a multiply by
  the mask would turn ``-x * 0`` into -0.0 and ``inf * 0`` into NaN);
* ``sub(a, one_hot(labels))`` (cross-entropy's adjoint): `a` copied, less one at each
  label, instead of a one-hot array and a subtraction: ``a - 0.0`` is ``a``;
* ``sum`` of floats: ``add.reduce``, which ``numpy.sum`` calls, called directly, with or
  without a planned buffer (5.4 us against 1.7 us for a small array into its buffer);
* ``stack``: each operand copied into its slice of the result (``numpy.stack`` with
  ``out=`` takes 9 us for four scalars, the copies 0.4 us);
* ``relu``: ``maximum`` with a zero of the operand's dtype made once (the table kernel's
  Python ``0`` is converted to that same zero on every call).
"""
from __future__ import annotations

import numpy

from .kernels.reduce import sum_to_plan


def sum_to(in_shape: tuple, shape: tuple, dtype=numpy.float32):
    """``sum_to(x, shape)`` for inputs of `in_shape` and `dtype`: the table kernel's sum
    (`sum_to_plan`), its axes and blocks fixed."""
    return sum_to_plan(numpy, in_shape, shape, numpy.dtype(dtype))


def mean(in_shape: tuple, axis, keepdims: bool):
    """``mean(x, axis, keepdims)`` of a float32/float64 `x` of `in_shape`, as
    ``numpy.mean`` computes it (its sum, then a division by the count as an ``intp``), or
    None when nothing is averaged (NumPy warns of an empty mean)."""
    rank = len(in_shape)
    if rank == 0 or axis is None:
        axis = None
        items = tuple(range(rank))
    else:
        axis = tuple(a % rank for a in axis) if isinstance(axis, (list, tuple)) else axis % rank
        items = axis if isinstance(axis, tuple) else (axis,)
    count = 1
    for a in items:
        count *= in_shape[a]
    if count == 0:
        return None
    n = numpy.intp(count)
    add, divide, ndarray = numpy.add.reduce, numpy.true_divide, numpy.ndarray

    def run(x):
        r = add(x, axis=axis, keepdims=keepdims)
        if isinstance(r, ndarray):
            return divide(r, n, out=r, casting="unsafe")
        return r.dtype.type(r / n)
    return run


def transpose(perm):
    perm = None if perm is None else tuple(perm)
    return lambda x: x.transpose(perm)


def cross_entropy_softmax(labels_shape: tuple, classes: int):
    """``(cross_entropy(z, labels), softmax(z))`` along the last axis of `z`, with integer
    labels of `labels_shape`: the kernels' operations, shared. The labels pick their shifted
    logits before the exponentials overwrite them, and the log of each row's total is
    subtracted from the picked element only (the same subtraction, on the one element the
    table kernel keeps)."""
    rows = 1
    for d in labels_shape:
        rows *= d
    index = numpy.arange(rows)
    maximum, add, exp, log = numpy.maximum.reduce, numpy.add.reduce, numpy.exp, numpy.log
    subtract, divide, negative = numpy.subtract, numpy.divide, numpy.negative

    def run(z, labels):
        s = subtract(z, maximum(z, axis=-1, keepdims=True))
        picked = s.reshape(rows, classes)[index, labels.reshape(rows)]
        exp(s, out=s)
        total = add(s, axis=-1, keepdims=True)
        subtract(picked, log(total).reshape(rows), out=picked)
        ce = negative(picked, out=picked).reshape(labels_shape)
        return ce, divide(s, total, out=s)
    return run


def one_hot(n: int, dtype):
    classes = numpy.arange(n)
    return lambda idx: (numpy.expand_dims(idx, -1) == classes).astype(dtype)


def where_zero(dtype):
    """``where(mask, a, 0.0)`` for `a` and the result of float `dtype`, `mask` of their
    shape: `a`'s bits where `mask` holds, +0.0 (all bits clear) elsewhere."""
    ints = numpy.dtype(f"i{dtype.itemsize}")
    int8, empty = numpy.int8, numpy.empty
    negative, bitwise_and = numpy.negative, numpy.bitwise_and

    def run(mask, a):
        ones = negative(mask.view(int8), out=empty(a.shape, ints))  # True -> -1: all bits
        return bitwise_and(a.view(ints), ones, out=ones).view(dtype)
    return run


def label_indices(dtype: str, labels_shape: tuple, classes: int):
    """Labels (``i32``/``i64``) of `labels_shape` as flat indices into the
    ``(rows, classes)`` array `subtract_one_hot` writes. Labels outside ``[0, classes)``
    (negative ones read as huge unsigned ones) raise IndexError: ``one_hot`` gives a row of
    zeros there, and the interpreter runs the call."""
    rows = 1
    for d in labels_shape:
        rows *= d
    unsigned = numpy.dtype("u4" if dtype == "i32" else "u8")
    base = numpy.arange(rows, dtype="u8") * numpy.uint64(classes)
    add = numpy.add

    def run(labels):
        u = labels.reshape(-1).view(unsigned)
        if rows and u.max() >= classes:
            raise IndexError("a label outside the classes")
        return add(base, u, dtype="u8")
    return run


def subtract_one_hot(shape: tuple):
    """``a - one_hot(labels)`` for `a` of `shape` (classes last), the labels given as
    `label_indices`: `a` copied (into `out` when given), one subtracted at each label."""
    copyto, empty = numpy.copyto, numpy.empty

    def run(a, flat, out=None):
        r = empty(shape, a.dtype) if out is None else out
        if not r.flags.c_contiguous:  # its reshape would be a copy
            raise ValueError("a buffer that does not reshape in place")
        copyto(r, a)
        r.reshape(-1)[flat] -= 1
        return r
    return run


def reduce_sum(rank: int, axis, keepdims: bool):
    """``sum(x, axis, keepdims)`` of a float32/float64 `x` of `rank` (into `out` when
    given): ``numpy.sum``'s own call of ``add.reduce``."""
    if rank == 0:
        axis = None
    elif isinstance(axis, (list, tuple)):
        axis = tuple(axis)
    add = numpy.add.reduce

    def run(x, out=None):
        return add(x, axis=axis, keepdims=keepdims, out=out)
    return run


def stack(count: int, rank: int, axis: int, shape: tuple, dtype):
    """``stack(*xs, axis)`` of `count` arrays of `rank` into a new array of `shape` and
    `dtype`, or into `out`: each operand copied into its slice."""
    axis %= rank + 1
    slots = [(slice(None),) * axis + (j,) for j in range(count)]
    empty = numpy.empty

    def run(*xs, out=None):
        if out is None:
            out = empty(shape, dtype)
        for slot, x in zip(slots, xs):
            out[slot] = x
        return out
    return run


def relu(dtype):
    """``relu(x)`` of float `dtype` (into `out` when given): the table kernel's
    ``maximum(x, 0)`` with the zero made once."""
    zero, maximum = numpy.zeros((), dtype), numpy.maximum
    return lambda x, out=None: maximum(x, zero, out=out)
