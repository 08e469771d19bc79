"""Normalization with a per-channel scale: `batchnorm` (training mode: the statistics of the
batch over every axis but the channel axis) and `rmsnorm` (over one axis). (`layernorm`,
whose gamma and beta may also broadcast by NumPy rules: `nn`.)

Both take gamma (and beta) as vectors of the size of the kept (`batchnorm`) or normalized
(`rmsnorm`) axis, laid along that axis, as PyTorch's weight and bias. Their derivative rules
recompute the normalized value from the operands with ops that have rules of their own, so
the derivative programs differentiate again (Hessian-vector products); the reverse sweep
keeps x, gamma and beta, not the normalized x. `batchnorm` is a pure op: running statistics
are state updated next to it (tdsl.md section 9), not by it.

`rmsnorm` divides a row by ``s = max|x|`` before squaring it when ``s > 1`` (the result is
the same in exact arithmetic), so the mean of squares never overflows: a row of 1e20 in f32
(or of 300 in f16) is normalized rather than sent to zero.
"""
from __future__ import annotations

import math

from ..diagnostics import ShapeError
from ..ir.types import TensorType, normalize_axis, num_elements
from .batching import rank
from .create import dim_scalar
from .registry import Option, register
from .rules import add_all, float_tangent
from . import roles


def _vector_along(x: TensorType, axis: int, types, names, op: str) -> None:
    """gamma/beta: float vectors of x's dtype, of the size of `axis`."""
    want = (x.shape[axis],)
    for name, p in zip(names, types):
        if p.dtype != x.dtype:
            raise ShapeError(f"{op}: {name} {p} must have x's dtype {x.dtype}")
        if tuple(p.shape) != want:
            raise ShapeError(f"{op}: {name} {p} must have shape [{x.shape[axis]}], the size "
                             f"of axis {axis} of x {x}")


def _axis_of(x: TensorType, axis, op: str) -> int:
    if not x.is_float:
        raise ShapeError(f"{op} expects a float tensor, got {x}")
    if x.rank == 0:
        raise ShapeError(f"{op} needs x of rank >= 1, got {x}")
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ShapeError(f"{op}: axis must be an int, got {axis!r}")
    try:
        return normalize_axis(axis, x.rank)
    except ShapeError as e:
        raise ShapeError(f"{op}: {e.message} (x is {x})") from None


def _eps(attrs, op: str) -> float:
    eps = attrs["eps"]
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ShapeError(f"{op} needs a finite eps >= 0, got {eps!r}")
    return float(eps)


def along(b, p, r: int, axis: int, lead: int = 0):
    """The vector `p` (``lead`` leading axes, then one) shaped to broadcast along `axis` of
    a tensor of rank `r` that has the same leading axes."""
    if lead == 0 and axis == r - 1:   # NumPy broadcasting lays it there already
        return p
    shape = list(p.type.shape[:lead]) + [1] * (r - lead)
    shape[lead + axis] = p.type.shape[lead]
    return b.emit("reshape", p, shape=shape)


def others(r: int, axis: int) -> list[int]:
    return [k for k in range(r) if k != axis]


# ---- batchnorm --------------------------------------------------------------------------

def _batchnorm(types, attrs):
    x = types[0]
    axis = _axis_of(x, attrs["axis"], "batchnorm")
    _eps(attrs, "batchnorm")
    _vector_along(x, axis, types[1:], ("gamma", "beta"), "batchnorm")
    count = num_elements([d for k, d in enumerate(x.shape) if k != axis])
    if count == 0:
        raise ShapeError(f"batchnorm of {x} over every axis but {axis}: no elements to take "
                         f"the statistics of")
    return x


def standardize(b, x, axes: list[int], eps: float):
    """(xhat, rstd): ``xhat = (x - mean) * rstd``, ``rstd = 1/sqrt(var + eps)`` over `axes`
    (kept as size-1 axes)."""
    def mean(v):
        return b.emit("mean", v, axis=axes, keepdims=True)
    xc = b.emit("sub", x, mean(x))
    var = mean(b.emit("mul", xc, xc))
    rstd = b.emit("rsqrt", b.emit("add", var, b.const(float(eps), x.type.dtype)))
    return b.emit("mul", xc, rstd), rstd


def _batchnorm_vjp(b, op, cts):
    """dbeta = sum(ct), dgamma = sum(ct * xhat) over the batch axes (N elements per
    channel); gamma is constant along those axes, so
    dx = gamma * rstd * (ct - dbeta / N - xhat * dgamma / N)."""
    x, gamma, _ = op.operands
    r, axis, ct = x.type.rank, normalize_axis(op.attrs["axis"], x.type.rank), cts[0]
    axes = others(r, axis)
    xhat, rstd = standardize(b, x, axes, op.attrs["eps"])
    dgamma = b.emit("sum", b.emit("mul", ct, xhat), axis=axes)
    dbeta = b.emit("sum", ct, axis=axes)
    n = dim_scalar(b, num_elements([x.type.shape[k] for k in axes]), x.type.dtype)
    per = b.emit("div", along(b, gamma, r, axis), n)         # gamma / N, per channel
    shift = b.emit("mul", per, along(b, dbeta, r, axis))
    slope = b.emit("mul", per, along(b, dgamma, r, axis))
    inner = b.emit("sub", b.emit("sub", b.emit("mul", ct, along(b, gamma, r, axis)), shift),
                   b.emit("mul", xhat, slope))
    return [b.emit("mul", inner, rstd), dgamma, dbeta]


def _batchnorm_jvp(b, op, tangents):
    """dy = rstd * (dx - mean(dx) - xhat * mean(xhat * dx)) * gamma + xhat * dgamma + dbeta."""
    x, gamma, _ = op.operands
    tx, tg, tb = (float_tangent(v, t) for v, t in zip(op.operands, tangents))
    r, axis = x.type.rank, normalize_axis(op.attrs["axis"], x.type.rank)
    axes = others(r, axis)
    xhat, rstd = standardize(b, x, axes, op.attrs["eps"])

    def mean(v):
        return b.emit("mean", v, axis=axes, keepdims=True)
    parts = []
    if tx is not None:
        proj = b.emit("mul", xhat, mean(b.emit("mul", xhat, tx)))
        dxhat = b.emit("mul", rstd, b.emit("sub", b.emit("sub", tx, mean(tx)), proj))
        parts.append(b.emit("mul", dxhat, along(b, gamma, r, axis)))
    if tg is not None:
        parts.append(b.emit("mul", xhat, along(b, tg, r, axis)))
    if tb is not None:
        parts.append(along(b, tb, r, axis))
    total = add_all(b, parts)
    if total is not None and total.type.shape != x.type.shape:   # dbeta alone
        total = b.emit("broadcast_to", total, shape=x.type.shape)
    return [total]


def _batchnorm_batch(b, op, args, batched, n):
    """Each example takes the statistics of its own batch: the normalization is written
    with reductions over the example's axes (the op keeps one axis, the batch two)."""
    x, gamma, beta = args
    r = rank(x, batched[0])
    axis = normalize_axis(op.attrs["axis"], r)
    lead = 1 if batched[0] else 0
    xhat, _ = standardize(b, x, [k + lead for k in others(r, axis)], op.attrs["eps"])

    def place(p, f):   # a batched vector: [n, C] -> [n, 1, .., C, .., 1]
        return along(b, p, r + 1, axis, lead=1) if f else along(b, p, r, axis)
    # some operand is batched, so the sum has the batch axis in front
    return [b.emit("add", b.emit("mul", xhat, place(gamma, batched[1])),
                   place(beta, batched[2]))]


def _batchnorm_flops(op, elements):
    return 8 * elements(op.operands[0].type.shape)


register("batchnorm", _batchnorm, operands=("x", "gamma", "beta"),
         options=(Option("axis", "int", 1), Option("eps", "float", 1e-5)),
         vjp=_batchnorm_vjp, jvp=_batchnorm_jvp, batch=_batchnorm_batch,
         flops=_batchnorm_flops, fresh=True, param_role=roles.norm(gain=1, bias=2),
         doc="(x - mean) / sqrt(var + eps) * gamma + beta, mean and biased var over every "
             "axis but axis (the batch's statistics); gamma and beta: [x.shape[axis]]")


# ---- rmsnorm ----------------------------------------------------------------------------

def _rmsnorm(types, attrs):
    x, gamma = types
    axis = _axis_of(x, attrs["axis"], "rmsnorm")
    _eps(attrs, "rmsnorm")
    _vector_along(x, axis, [gamma], ("gamma",), "rmsnorm")
    if x.shape[axis] == 0:
        raise ShapeError(f"rmsnorm over axis {axis} of {x}: the axis has no elements")
    return x


def rms_parts(b, x, axis: int, eps: float):
    """(xhat, r): ``r = 1/sqrt(mean(x*x) + eps)`` over `axis` (kept as size 1) and
    ``xhat = x * r``, computed from ``u = x / s`` with the row's ``s = max|x|`` where it is
    above 1 (above 0 when eps is 0) so that no square overflows: ``r = k / s`` for
    ``k = 1/sqrt(mean(u*u) + eps/s^2)``. `s` carries no derivative: r and xhat do not
    depend on it."""
    dtype, eps = x.type.dtype, float(eps)
    one = b.const(1.0, dtype)
    s = b.emit("stop_gradient", b.emit("max", b.emit("abs", x), axis=axis, keepdims=True))
    s = b.emit("where", b.emit("gt", s, one if eps > 0 else b.const(0.0, dtype)), s, one)
    inv = b.emit("div", one, s)
    u = b.emit("mul", x, inv)
    ms = b.emit("mean", b.emit("mul", u, u), axis=axis, keepdims=True)
    if eps > 0:   # then s >= 1 and inv * inv cannot overflow
        ms = b.emit("add", ms, b.emit("mul", b.const(eps, dtype), b.emit("mul", inv, inv)))
    k = b.emit("rsqrt", ms)
    return b.emit("mul", u, k), b.emit("mul", k, inv)


def _rmsnorm_vjp(b, op, cts):
    """dx = r * (g - xhat * mean(g * xhat)) for g = ct * gamma; dgamma = sum(ct * xhat)
    over the other axes."""
    x, gamma = op.operands
    r, axis, ct = x.type.rank, normalize_axis(op.attrs["axis"], x.type.rank), cts[0]
    xhat, rinv = rms_parts(b, x, axis, op.attrs["eps"])
    g = b.emit("mul", ct, along(b, gamma, r, axis))
    proj = b.emit("mul", xhat, b.emit("mean", b.emit("mul", g, xhat), axis=axis,
                                      keepdims=True))
    gx = b.emit("mul", rinv, b.emit("sub", g, proj))
    ggamma = b.emit("mul", ct, xhat)
    return [gx, b.emit("sum", ggamma, axis=others(r, axis)) if r > 1 else ggamma]


def _rmsnorm_jvp(b, op, tangents):
    """dy = r * (dx - xhat * mean(xhat * dx)) * gamma + xhat * dgamma."""
    x, gamma = op.operands
    tx, tg = (float_tangent(v, t) for v, t in zip(op.operands, tangents))
    r, axis = x.type.rank, normalize_axis(op.attrs["axis"], x.type.rank)
    xhat, rinv = rms_parts(b, x, axis, op.attrs["eps"])
    parts = []
    if tx is not None:
        proj = b.emit("mul", xhat, b.emit("mean", b.emit("mul", xhat, tx), axis=axis,
                                          keepdims=True))
        parts.append(b.emit("mul", b.emit("mul", rinv, b.emit("sub", tx, proj)),
                            along(b, gamma, r, axis)))
    if tg is not None:
        parts.append(b.emit("mul", xhat, along(b, tg, r, axis)))
    return [add_all(b, parts)]


def _rmsnorm_batch(b, op, args, batched, n):
    """Shared gamma: the op on the batch, its axis shifted. A gamma per example: the op
    with unit gamma, times each example's gamma laid along the axis."""
    x, gamma = args
    r = rank(x, batched[0])
    axis = normalize_axis(op.attrs["axis"], r)
    lead = 1 if batched[0] else 0
    if not batched[1]:
        return [b.emit("rmsnorm", x, gamma, axis=axis + lead, eps=op.attrs["eps"])]
    unit = b.emit("ones", shape=[x.type.shape[axis + lead]], dtype=x.type.dtype)
    y = b.emit("rmsnorm", x, unit, axis=axis + lead, eps=op.attrs["eps"])
    return [b.emit("mul", y, along(b, gamma, r + 1, axis, lead=1))]


register("rmsnorm", _rmsnorm, operands=("x", "gamma"),
         options=(Option("axis", "int", -1), Option("eps", "float", 1e-6)),
         vjp=_rmsnorm_vjp, jvp=_rmsnorm_jvp, batch=_rmsnorm_batch, flops=7, fresh=True,
         param_role=roles.norm(gain=1),
         doc="x / sqrt(mean(x*x, axis) + eps) * gamma; gamma: [x.shape[axis]]")
