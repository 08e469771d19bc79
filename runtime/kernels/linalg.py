"""Kernels of linear-algebra ops."""
from . import kernel, out_kernel


@kernel("matmul")
def matmul(xp, a, b):
    return xp.matmul(a, b)


@out_kernel("matmul")
def matmul_out(xp, a, b, out):
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
        return xp.einsum(spec, *operands, optimize=True)
    return xp.einsum(spec, *operands)
