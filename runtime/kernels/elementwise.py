"""Kernels of elementwise ops."""
from . import kernel


@kernel("neg")
def neg(xp, x):
    return -x


@kernel("exp")
def exp(xp, x):
    return xp.exp(x)


@kernel("add")
def add(xp, a, b):
    return a + b


@kernel("mul")
def mul(xp, a, b):
    return a * b
