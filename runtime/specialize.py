"""Kernels the compiled executor specializes once the shapes are known.

Each computes the same NumPy operations in the same order as the table kernel it replaces
(`adc_runtime.kernels`), so results are bit-identical; what changes is the Python work
around them, done once at code generation instead of on every call:

* ``sum_to``: the summed axes are worked out from the shapes once;
* ``cross_entropy`` on integer class labels along the last axis, when the function also
  takes ``softmax`` of the same logits (the adjoint of cross-entropy does): one pass
  computes the shifted logits, their exponentials and sums once and gives both results
  (the softmax kernel's ``e / sum(e)`` and the log-softmax ``s - log(sum(e))``);
* ``one_hot``: the class range is made once.
"""
from __future__ import annotations

import numpy


def sum_to(in_shape: tuple, shape: tuple):
    """``sum_to(x, shape)`` for inputs of `in_shape`: the same sum, axes fixed."""
    shape = tuple(shape)
    lead = len(in_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, d in enumerate(shape) if d == 1 and in_shape[lead + k] != 1)
    if not axes:
        return lambda x: x.copy().reshape(shape)
    return lambda x: numpy.sum(x, axis=axes, keepdims=True).reshape(shape)


def cross_entropy_softmax(rank: int):
    """``(cross_entropy(z, labels), softmax(z))`` along the last axis of a rank-`rank` `z`,
    with integer labels: the kernels' operations, shared."""
    def run(z, labels):
        s = z - numpy.max(z, axis=-1, keepdims=True)
        e = numpy.exp(s)
        total = numpy.sum(e, axis=-1, keepdims=True)
        ls = s - numpy.log(total)
        picked = numpy.take_along_axis(ls, numpy.expand_dims(labels, -1), axis=-1)
        return -numpy.squeeze(picked, axis=-1), e / total
    return run


def one_hot(n: int, dtype):
    classes = numpy.arange(n)
    return lambda idx: (numpy.expand_dims(idx, -1) == classes).astype(dtype)
