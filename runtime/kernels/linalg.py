"""Kernels of linear-algebra ops."""
import functools
import math
import string

import numpy

from .table import kernel, out_kernel


@kernel("matmul")
def matmul(xp, a, b):
    return matmul_rows(xp, a, b)


@out_kernel("matmul")
def matmul_out(xp, a, b, out):
    return matmul_rows(xp, a, b, out)


def matmul_rows(xp, a, b, out=None):
    """``a @ b``; a stack of matrices times one matrix (``(B, T, K) @ (K, N)``) as one
    ``(B*T, K) @ (K, N)`` product when `a` (and `out`) reshape without a copy: one BLAS
    call instead of one per matrix of the stack, 3% of the transformer block's gradient."""
    if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous and (
            out is None or out.flags.c_contiguous):
        rows = math.prod(a.shape[:-1])
        shape = a.shape[:-1] + b.shape[-1:]
        r = xp.matmul(a.reshape(rows, a.shape[-1]), b,
                      out=None if out is None else out.reshape(rows, b.shape[-1]))
        return r.reshape(shape) if out is None else out
    return xp.matmul(a, b, out=out)


@kernel("transpose")
def transpose(xp, x, perm=None):
    return xp.transpose(x, None if perm is None else tuple(perm))


# an einsum of two or more operands computes a new array; of one (``ij->ji``) it may be a view
@kernel("einsum")
def einsum(xp, *operands, spec):
    spec = spec.replace(" ", "")  # the type rule allows spaces
    # NumPy's default path loops in C without BLAS; optimize=True contracts pairwise through
    # tensordot. CuPy's einsum already contracts through its own tensordot path.
    if xp.__name__ == "numpy" and len(operands) > 1:
        if len(operands) == 2:
            a, b = operands
            run = einsum_matmul(spec, a.shape, b.shape, a.dtype, b.dtype)
            if run is not None:
                return run(a, b)
        return xp.einsum(spec, *operands, optimize=True)
    return xp.einsum(spec, *operands)


LETTERS = frozenset(string.ascii_letters + ",")


@functools.lru_cache(maxsize=1024)
def einsum_matmul(spec: str, shape_a: tuple, shape_b: tuple, dtype_a, dtype_b):
    """``einsum(spec, a, b)`` as one batched matrix product, or None where it is not one.

    The letters of both operands and the output are the batch (``B``), those of both
    operands only are contracted (``K``, at least one), those of one operand and the output
    are that side's free letters (``M`` and ``N``, possibly none). Each operand is
    transposed and reshaped to ``(B, M, K)`` and ``(B, K, N)``, multiplied by
    ``numpy.matmul`` (BLAS, where ``numpy.einsum(optimize=True)`` adds tensordot's Python
    work and copies), and the product reshaped and transposed back. The operand whose
    free letters come first in the output goes on the left, so that an output in batch,
    left, right order is the product itself. Only for two float32 or two float64 operands
    (NumPy's matmul of other types does not call BLAS) and specs without a repeated letter
    in a term or a letter summed by one operand alone. The same function serves both
    executors (the compiled one calls it once per set of shapes), so both give the same
    bits.
    """
    if dtype_a != dtype_b or dtype_a not in (numpy.float32, numpy.float64):
        return None
    lhs, _, out = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2 or not set(lhs + out) <= LETTERS:
        return None
    ta, tb = terms
    if (len(set(ta)) != len(ta) or len(set(tb)) != len(tb) or len(set(out)) != len(out)
            or len(ta) != len(shape_a) or len(tb) != len(shape_b)):
        return None
    size: dict = {}
    for term, shape in ((ta, shape_a), (tb, shape_b)):
        for c, d in zip(term, shape):
            if size.setdefault(c, d) != d:
                return None  # numpy.einsum reports the mismatch
    contracted = [c for c in ta if c in tb and c not in out]
    if not contracted or any(c not in out and c not in tb for c in ta) \
            or any(c not in out and c not in ta for c in tb) \
            or any(c not in ta and c not in tb for c in out):
        return None
    batch = [c for c in out if c in ta and c in tb]
    free_a = [c for c in out if c in ta and c not in tb]
    free_b = [c for c in out if c in tb and c not in ta]
    swap = batch + free_a + free_b != list(out) and batch + free_b + free_a == list(out)
    left, right, free_l, free_r = (tb, ta, free_b, free_a) if swap else (ta, tb, free_a, free_b)
    order = batch + free_l + free_r
    perm_l = tuple(left.index(c) for c in batch + free_l + contracted)
    perm_r = tuple(right.index(c) for c in batch + contracted + free_r)
    dims = [math.prod(size[c] for c in group) for group in (batch, free_l, contracted, free_r)]
    n_batch, m, k, n = dims
    shape_l, shape_r = (n_batch, m, k), (n_batch, k, n)
    product = tuple(size[c] for c in order)
    perm_out = tuple(order.index(c) for c in out)
    if perm_out == tuple(range(len(out))):
        perm_out = None
    matmul = numpy.matmul

    def run(a, b):
        x, y = (b, a) if swap else (a, b)
        z = matmul(x.transpose(perm_l).reshape(shape_l), y.transpose(perm_r).reshape(shape_r))
        z = z.reshape(product)
        return z if perm_out is None else z.transpose(perm_out)
    return run
