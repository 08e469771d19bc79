"""`attention(q, k, v, causal, scale)`: ``softmax(q @ k^T * s + mask) @ v`` over the last two
axes, the leading (batch) axes broadcast; ``s = scale``, or ``1/sqrt(d)`` for the key size
``d = q.shape[-1]`` when `scale` is 0. With `causal`, query `i` sees the keys ``j <= i``
(``tril(ones(Tq, Tk))``, as PyTorch's ``scaled_dot_product_attention(is_causal=True)``):
key 0 is always seen, so no row is empty.

The op is one kernel, and the forward pass keeps no ``Tq x Tk`` matrix. The derivative
rules recompute the probabilities P from q and k (one more product, as fused attention
kernels do) and are written with matmul, softmax and elementwise ops, whose own rules
differentiate them again. So the reverse sweep reads q, k, v and the result o; with
``dP = ct @ v^T`` and ``D = rowsum(ct * o) = rowsum(P * dP)``:
``dS = P * (dP - D)``, ``dq = s * dS @ k``, ``dk = s * dS^T @ q``, ``dv = P^T @ ct``.
"""
from __future__ import annotations

import math

from ..diagnostics import ShapeError
from ..ir.types import TensorType, broadcast_shapes
from .batching import broadcast_rule
from .create import dim_scalar
from .registry import Option, register
from .rules import add_all


def _attention(types, attrs):
    q, k, v = types
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_float:
            raise ShapeError(f"attention expects float tensors, got {name} {t}")
        if t.rank < 2:
            raise ShapeError(f"attention needs {name} of rank >= 2 ([..., T, d]), got {t}")
    if not q.dtype == k.dtype == v.dtype:
        raise ShapeError(f"attention: q {q}, k {k} and v {v} must have one dtype")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"attention: q {q} and k {k} must have the same last axis (the key "
                         f"size)")
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"attention: k {k} and v {v} must have as many rows (one value per "
                         f"key)")
    if k.shape[-2] == 0:
        raise ShapeError(f"attention needs at least one key, got k {k}")
    scale, causal = attrs["scale"], attrs["causal"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) \
            or not math.isfinite(scale):
        raise ShapeError(f"attention: scale must be a finite number, got {scale!r}")
    if not isinstance(causal, bool):
        raise ShapeError(f"attention: causal must be true or false, got {causal!r}")
    if scale == 0 and q.shape[-1] == 0:
        raise ShapeError(f"attention: the default scale 1/sqrt(d) needs a key size d > 0, "
                         f"got q {q}; give scale")
    try:
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ShapeError as e:
        raise ShapeError(f"attention: the batch axes of q {q}, k {k} and v {v} do not "
                         f"broadcast ({e.message})") from None
    return TensorType(q.dtype, batch + (q.shape[-2], v.shape[-1]))


def swap_last(b, x):
    """`x` with its last two axes exchanged."""
    r = x.type.rank
    return b.emit("transpose", x, perm=list(range(r - 2)) + [r - 1, r - 2])


def scale_of(b, op):
    """The scale as a scalar of the op's dtype: the option, or 1/sqrt(d) (a symbolic d is
    read at run time)."""
    q = op.operands[0]
    dtype, scale = q.type.dtype, op.attrs["scale"]
    if scale:
        return b.const(float(scale), dtype)
    d = q.type.shape[-1]
    if isinstance(d, int):
        return b.const(1.0 / math.sqrt(d), dtype)
    return b.emit("rsqrt", dim_scalar(b, d, dtype))


def probabilities(b, op, s):
    """P = softmax(q s @ k^T + mask), recomputed from the operands."""
    q, k, _ = op.operands
    scores = b.emit("matmul", b.emit("mul", q, s), swap_last(b, k))
    if op.attrs["causal"]:
        tq, tk = q.type.shape[-2], k.type.shape[-2]
        rows = b.emit("reshape", b.emit("arange", n=tq), shape=[tq, 1])
        seen = b.emit("le", b.emit("arange", n=tk), rows)          # [Tq, Tk]: j <= i
        scores = b.emit("where", seen, scores, b.const(-math.inf, q.type.dtype))
    return b.emit("softmax", scores, axis=-1)


def _attention_vjp(b, op, cts):
    q, k, v = op.operands
    ct, s = cts[0], scale_of(b, op)
    p = probabilities(b, op, s)
    dv = b.emit("matmul", swap_last(b, p), ct)
    dp = b.emit("matmul", ct, swap_last(b, v))
    rows = b.emit("sum", b.emit("mul", ct, op.result), axis=-1, keepdims=True)
    ds = b.emit("mul", p, b.emit("sub", dp, rows))   # zero where the mask hides a key
    dq = b.emit("mul", b.emit("matmul", ds, k), s)
    dk = b.emit("mul", b.emit("matmul", swap_last(b, ds), q), s)
    return [dq, dk, dv]


def _attention_jvp(b, op, tangents):
    """do = P @ dv + (P * dS) @ v - rowsum(P * dS) * o, for dS = (dq k^T + q dk^T) s."""
    q, k, v = op.operands
    tq, tk, tv = tangents
    s = scale_of(b, op)
    p = probabilities(b, op, s)
    parts = []
    if tv is not None:
        parts.append(b.emit("matmul", p, tv))
    dscores = add_all(b, [
        None if tq is None else b.emit("matmul", b.emit("mul", tq, s), swap_last(b, k)),
        None if tk is None else b.emit("matmul", b.emit("mul", q, s), swap_last(b, tk))])
    if dscores is not None:
        dp = b.emit("mul", p, dscores)
        rows = b.emit("sum", dp, axis=-1, keepdims=True)
        parts.append(b.emit("sub", b.emit("matmul", dp, v), b.emit("mul", rows, op.result)))
    total = add_all(b, parts)
    if total is not None and total.type.shape != op.result.type.shape:
        total = b.emit("broadcast_to", total, shape=op.result.type.shape)
    return [total]


def _attention_flops(op, elements):
    """Per batch entry: 2 Tq Tk d for the scores, 2 Tq Tk dv for the weighted sum, 5 per
    score for the softmax, and the scaling of q."""
    q, k, v = op.operands
    batch = tuple(op.result.type.shape[:-2])
    tq, tk = q.type.shape[-2], k.type.shape[-2]
    return (2 * elements(batch + (tq, tk, q.type.shape[-1]))
            + 2 * elements(batch + (tq, tk, v.type.shape[-1]))
            + 5 * elements(batch + (tq, tk)) + elements(q.type.shape))


register("attention", _attention, operands=("q", "k", "v"),
         options=(Option("causal", "bool", False), Option("scale", "float", 0.0)),
         traits=("heavy",), vjp=_attention_vjp, jvp=_attention_jvp, flops=_attention_flops,
         batch=broadcast_rule, fresh=True,
         doc="softmax(q @ k^T * s + mask) @ v over the last two axes; s = scale or "
             "1/sqrt(q.shape[-1]); causal: query i sees keys j <= i")
