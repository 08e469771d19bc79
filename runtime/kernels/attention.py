"""Kernel of attention: ``softmax(q @ k^T * s + mask) @ v`` over the last two axes.

q is scaled before the product (``Tq x d`` multiplications rather than ``Tq x Tk``); the
row maximum is subtracted before the exponential, so no score overflows it; and the rows
are divided by their sums after the product with v (``Tq x dv`` divisions). The one
``Tq x Tk`` array is shifted, exponentiated and masked in place.
"""
import math

from .table import kernel


@kernel("attention")
def attention(xp, q, k, v, causal=False, scale=0.0):
    s = scale if scale else 1.0 / math.sqrt(q.shape[-1])
    scores = xp.matmul(q * s, xp.swapaxes(k, -1, -2))   # a Python float keeps q's dtype
    if causal:
        tq, tk = scores.shape[-2:]
        hidden = ~xp.tril(xp.ones((tq, tk), dtype=bool))   # key j > query i
        xp.copyto(scores, -math.inf, where=hidden)
    scores -= xp.max(scores, axis=-1, keepdims=True)
    weights = xp.exp(scores, out=scores)
    total = xp.sum(weights, axis=-1, keepdims=True)
    out = xp.matmul(weights, v)
    return xp.divide(out, total, out=out)
