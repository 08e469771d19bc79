"""Kernels of linear-algebra ops."""
from . import kernel


@kernel("matmul")
def matmul(xp, a, b):
    return xp.matmul(a, b)


@kernel("transpose")
def transpose(xp, x, perm=None):
    return xp.transpose(x, None if perm is None else tuple(perm))


@kernel("einsum")
def einsum(xp, *operands, spec):
    return xp.einsum(spec, *operands)
