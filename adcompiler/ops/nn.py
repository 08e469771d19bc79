"""Neural-net ops: softmax, log_softmax, cross_entropy, bce, bce_with_logits, mse, layernorm;
plus stop_gradient and cast. (take, take_grad and one_hot: `gather`.)

The kernels of softmax, log_softmax, cross_entropy and bce_with_logits subtract the maximum
(or use ``log1p(exp(-|z|))``), and their VJP rules are written in terms of softmax,
log_softmax and sigmoid, so values and derivatives stay finite for large inputs.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..emit.c import COMPUTE, expr, lit, math_fn
from ..ir.types import TensorType, broadcast_shapes, join_dtypes, normalize_axis, num_elements
from .create import dim_scalar
from .batching import axis_rule, broadcast_rule, expand_to, rank, shift_axis, unsupported
from .patterns import P, Pattern, bound
from .registry import Option, register
from .rules import add_all, float_tangent
from . import roles

AXIS = Option("axis", "int", -1)


def _float(t: TensorType, op: str) -> None:
    if not t.is_float:
        raise ShapeError(f"{op} expects a float tensor, got {t}")


def _same_float(types, op: str) -> str:
    for t in types:
        _float(t, op)
    return join_dtypes(*(t.dtype for t in types))


def move_last_to(b, x, axis: int):
    """`x` with its last axis moved to position `axis` (a no-op when `axis` is last)."""
    rank = x.type.rank
    if axis == rank - 1:
        return x
    perm = list(range(rank - 1))
    perm.insert(axis, rank - 1)
    return b.emit("transpose", x, perm=perm)


# ---- softmax / log_softmax ------------------------------------------------------------

def _softmax_type(op: str):
    def infer(types, attrs):
        t = types[0]
        _float(t, op)
        normalize_axis(attrs["axis"], t.rank)
        return t
    return infer


def _softmax_vjp(b, op, cts):
    y, axis = op.result, op.attrs["axis"]
    s = b.emit("sum", b.emit("mul", cts[0], y), axis=axis, keepdims=True)
    return [b.emit("mul", y, b.emit("sub", cts[0], s))]


def _log_softmax_vjp(b, op, cts):
    axis = op.attrs["axis"]
    p = b.emit("exp", op.result)                       # softmax; exp of values <= 0
    s = b.emit("sum", cts[0], axis=axis, keepdims=True)
    return [b.emit("sub", cts[0], b.emit("mul", p, s))]


def _softmax_jvp(b, op, tangents):
    # the Jacobian diag(y) - y y^T is symmetric: the VJP rule gives the JVP
    return [None] if tangents[0] is None else _softmax_vjp(b, op, tangents)


def _log_softmax_jvp(b, op, tangents):
    t = tangents[0]
    if t is None:
        return [None]
    p = b.emit("exp", op.result)
    s = b.emit("sum", b.emit("mul", p, t), axis=op.attrs["axis"], keepdims=True)
    return [b.emit("sub", t, s)]


register("softmax", _softmax_type("softmax"), options=(AXIS,), vjp=_softmax_vjp,
         jvp=_softmax_jvp, flops=5, batch=axis_rule, fresh=True)
register("log_softmax", _softmax_type("log_softmax"), options=(AXIS,), vjp=_log_softmax_vjp,
         jvp=_log_softmax_jvp, flops=5, batch=axis_rule, fresh=True)


# ---- cross_entropy --------------------------------------------------------------------

def _cross_entropy(types, attrs):
    z, y = types
    _float(z, "cross_entropy")
    if z.rank == 0:
        raise ShapeError("cross_entropy needs logits of rank >= 1")
    axis = normalize_axis(attrs["axis"], z.rank)
    batch = z.shape[:axis] + z.shape[axis + 1:]
    if y.dtype in ("i32", "i64"):
        if y.shape != batch:
            raise ShapeError(f"cross_entropy: integer labels {y} must have the logits' shape "
                             f"without axis {axis}: [{', '.join(map(str, batch))}]")
    elif y.is_float:
        if y.shape != z.shape or y.dtype != z.dtype:
            raise ShapeError(f"cross_entropy: probability labels {y} must have the logits' "
                             f"type {z}")
    else:
        raise ShapeError(f"cross_entropy: labels must be integers or floats, got {y}")
    return z.with_shape(batch)


def _cross_entropy_vjp(b, op, cts):
    z, y = op.operands
    axis = normalize_axis(op.attrs["axis"], z.type.rank)
    ct = b.emit("expand_dims", cts[0], axis=axis)
    if not y.type.is_float:
        onehot = b.emit("one_hot", y, n=z.type.shape[axis], dtype=z.type.dtype)
        p = b.emit("softmax", z, axis=axis)
        gz = b.emit("sub", p, move_last_to(b, onehot, axis))
        return [b.emit("mul", ct, gz), None]
    # loss = -sum(y * log_softmax(z)): dz = softmax(z) * sum(y) - y (= softmax - y when the
    # labels sum to 1), dy = -log_softmax(z).
    ls = b.emit("log_softmax", z, axis=axis)
    mass = b.emit("sum", y, axis=axis, keepdims=True)
    gz = b.emit("sub", b.emit("mul", b.emit("exp", ls), mass), y)
    return [b.emit("mul", ct, gz), b.emit("mul", ct, b.emit("neg", ls))]


def _cross_entropy_jvp(b, op, tangents):
    z, y = op.operands
    tz, ty = float_tangent(z, tangents[0]), float_tangent(y, tangents[1])
    axis = normalize_axis(op.attrs["axis"], z.type.rank)
    parts = []
    if not y.type.is_float:
        if tz is not None:
            onehot = b.emit("one_hot", y, n=z.type.shape[axis], dtype=z.type.dtype)
            gz = b.emit("sub", b.emit("softmax", z, axis=axis), move_last_to(b, onehot, axis))
            parts.append(b.emit("mul", gz, tz))
    else:
        ls = b.emit("log_softmax", z, axis=axis)
        if tz is not None:
            mass = b.emit("sum", y, axis=axis, keepdims=True)
            gz = b.emit("sub", b.emit("mul", b.emit("exp", ls), mass), y)
            parts.append(b.emit("mul", gz, tz))
        if ty is not None:
            parts.append(b.emit("mul", b.emit("neg", ls), ty))
    total = add_all(b, parts)
    return [None if total is None else b.emit("sum", total, axis=axis)]


def _label_bound(op, size):
    """Integer labels must lie in [0, n) for the n classes along `axis` (probabilities have
    no bound)."""
    z, y = op.operands
    if y.type.is_float:
        return None
    return y, size(z, op.attrs.get("axis", -1)), True


register("cross_entropy", _cross_entropy, operands=("logits", "labels"), options=(AXIS,),
         vjp=_cross_entropy_vjp,
         doc="per-example logsumexp(logits) - logits[label], or -sum(p * log_softmax)",
         jvp=_cross_entropy_jvp, flops=6, index_bound=_label_bound, batch=axis_rule, fresh=True)


# ---- bce / bce_with_logits / mse ------------------------------------------------------

def _binary_float(op: str):
    def infer(types, attrs):
        return TensorType(_same_float(types, op), broadcast_shapes(*(t.shape for t in types)))
    return infer


def _bce_vjp(b, op, cts):
    """dp = (p - y) / (p (1 - p)), dy = log(1 - p) - log(p)."""
    p, y = op.operands
    ct = cts[0]
    one_minus_p = b.emit("sub", b.const(1.0, p.type.dtype), p)
    gp = b.emit("div", b.emit("mul", ct, b.emit("sub", p, y)), b.emit("mul", p, one_minus_p))
    gy = b.emit("mul", ct, b.emit("sub", b.emit("log1p", b.emit("neg", p)), b.emit("log", p)))
    return [gp, gy]


def _bce_with_logits_vjp(b, op, cts):
    """dz = sigmoid(z) - y, dy = -z."""
    z, y = op.operands
    ct = cts[0]
    gz = b.emit("mul", ct, b.emit("sub", b.emit("sigmoid", z), y))
    return [gz, b.emit("mul", ct, b.emit("neg", z))]


def _bce_jvp(b, op, tangents):
    p, y = op.operands
    tp, ty = float_tangent(p, tangents[0]), float_tangent(y, tangents[1])
    parts = []
    if tp is not None:
        one_minus_p = b.emit("sub", b.const(1.0, p.type.dtype), p)
        parts.append(b.emit("div", b.emit("mul", tp, b.emit("sub", p, y)),
                            b.emit("mul", p, one_minus_p)))
    if ty is not None:
        parts.append(b.emit("mul", ty, b.emit("sub", b.emit("log1p", b.emit("neg", p)),
                                              b.emit("log", p))))
    return [add_all(b, parts)]


def _bce_with_logits_jvp(b, op, tangents):
    z, y = op.operands
    tz, ty = float_tangent(z, tangents[0]), float_tangent(y, tangents[1])
    return [add_all(b, [
        b.emit("mul", tz, b.emit("sub", b.emit("sigmoid", z), y)) if tz is not None else None,
        b.emit("mul", ty, b.emit("neg", z)) if ty is not None else None])]


register("bce", _binary_float("bce"), operands=("p", "y"), traits=("elementwise",),
         vjp=_bce_vjp, jvp=_bce_jvp, flops=6, doc="-(y log p + (1 - y) log(1 - p))",
         batch=broadcast_rule,
         cuda=expr(lambda w, ct, dt, op, p, y: (
             f"-({y} * {math_fn('log', ct)}({p}) + ({lit(1.0, ct)} - {y}) * "
             f"{math_fn('log1p', ct)}(-{p}))")), fresh=True)
register("bce_with_logits", _binary_float("bce_with_logits"), operands=("z", "y"),
         traits=("elementwise",), vjp=_bce_with_logits_vjp, jvp=_bce_with_logits_jvp,
         flops=6, doc="max(z, 0) - z y + log1p(exp(-|z|))", batch=broadcast_rule,
         cuda=expr(lambda w, ct, dt, op, z, y: (
             f"adc_max({z}, {lit(0.0, ct)}) - {z} * {y} + "
             f"{math_fn('log1p', ct)}({math_fn('exp', ct)}(-{math_fn('fabs', ct)}({z})))")),
         fresh=True)


def _mse(types, attrs):
    return _binary_float("mse")(types, attrs).with_shape(())


def _mse_vjp(b, op, cts):
    x, y = op.operands
    d = b.emit("sub", x, y)
    size = dim_scalar(b, num_elements(d.type.shape), d.type.dtype)   # symbolic: at run time
    scale = b.emit("div", b.emit("mul", cts[0], b.const(2.0, d.type.dtype)), size)
    gx = b.emit("mul", d, scale)
    return [gx, b.emit("neg", gx)]


def _mse_jvp(b, op, tangents):
    x, y = op.operands
    tx, ty = float_tangent(x, tangents[0]), float_tangent(y, tangents[1])
    if tx is None and ty is None:
        return [None]
    dt = tx if ty is None else b.emit("neg", ty) if tx is None else b.emit("sub", tx, ty)
    d = b.emit("sub", x, y)
    size = dim_scalar(b, num_elements(d.type.shape), d.type.dtype)
    total = b.emit("sum", b.emit("mul", d, dt))
    return [b.emit("div", b.emit("mul", total, b.const(2.0, d.type.dtype)), size)]


def _mse_batch(b, op, args, batched, n):
    """mean((a - b) ** 2) over the axes of an example."""
    r = max(rank(v, f) for v, f in zip(args, batched))
    x, y = [expand_to(b, v, r) if f else v for v, f in zip(args, batched)]
    sq = b.emit("square", b.emit("sub", x, y))
    return [b.emit("mean", sq, axis=list(range(1, r + 1))) if r else sq]


register("mse", _mse, operands=("a", "b"), vjp=_mse_vjp, jvp=_mse_jvp, flops=3,
         doc="mean((a - b) ** 2)", batch=_mse_batch, fresh=True)


# ---- layernorm ------------------------------------------------------------------------

def affine_along_axis(x: TensorType, p: TensorType, axis: int) -> bool:
    """Whether gamma/beta `p` is a 1-D vector laid along `axis` of `x` rather than a tensor
    that broadcasts against `x` by NumPy rules (the two agree when `axis` is the last)."""
    return p.rank == 1 and axis != x.rank - 1 and p.shape[0] == x.shape[axis]


def _layernorm(types, attrs):
    x, gamma, beta = types
    _same_float(types, "layernorm")
    axis = normalize_axis(attrs["axis"], x.rank)
    for name, p in (("gamma", gamma), ("beta", beta)):
        if affine_along_axis(x, p, axis):
            continue
        try:
            ok = broadcast_shapes(p.shape, x.shape) == x.shape
        except ShapeError:
            ok = False
        if not ok:
            raise ShapeError(f"layernorm: {name} {p} must be a vector of size {x.shape[axis]} "
                             f"(axis {axis}) or broadcast to {x}")
    return x


def _placed(b, p, x, axis):
    """gamma/beta as a tensor that broadcasts against `x` by NumPy rules."""
    if affine_along_axis(x.type, p.type, axis):
        return b.emit("reshape", p, shape=[d if k == axis else 1
                                           for k, d in enumerate(x.type.shape)])
    return p


def _param_ct(b, g, p, x, axis):
    """Reduce the full-shape cotangent `g` of gamma/beta; NumPy-broadcast ones are left to
    the driver's unbroadcast."""
    if affine_along_axis(x.type, p.type, axis):
        others = [k for k in range(x.type.rank) if k != axis]
        return b.emit("sum", g, axis=others)
    return g


def _layernorm_vjp(b, op, cts):
    """With xhat = (x - mean) * rstd: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) for
    g = ct * gamma; dgamma = ct * xhat; dbeta = ct (each summed to the parameter's shape)."""
    x, gamma, beta = op.operands
    axis, dtype, ct = normalize_axis(op.attrs["axis"], x.type.rank), x.type.dtype, cts[0]

    def mean(v):
        return b.emit("mean", v, axis=axis, keepdims=True)

    xc = b.emit("sub", x, mean(x))
    var = mean(b.emit("mul", xc, xc))
    rstd = b.emit("rsqrt", b.emit("add", var, b.const(float(op.attrs["eps"]), dtype)))
    xhat = b.emit("mul", xc, rstd)
    g = b.emit("mul", ct, _placed(b, gamma, x, axis))
    proj = b.emit("mul", xhat, mean(b.emit("mul", g, xhat)))
    inner = b.emit("sub", b.emit("sub", g, mean(g)), proj)
    gx = b.emit("mul", rstd, inner)
    ggamma = _param_ct(b, b.emit("mul", ct, xhat), gamma, x, axis)
    gbeta = _param_ct(b, b.emit("broadcast_to", ct, shape=x.type.shape), beta, x, axis)
    return [gx, ggamma, gbeta]


def _layernorm_jvp(b, op, tangents):
    """y = xhat * gamma + beta with dxhat = rstd * (dx - mean(dx) - xhat * mean(xhat dx))."""
    x, gamma, beta = op.operands
    tx, tg, tb = (float_tangent(v, t) for v, t in zip(op.operands, tangents))
    axis, dtype = normalize_axis(op.attrs["axis"], x.type.rank), x.type.dtype

    def mean(v):
        return b.emit("mean", v, axis=axis, keepdims=True)

    xc = b.emit("sub", x, mean(x))
    rstd = b.emit("rsqrt", b.emit("add", mean(b.emit("mul", xc, xc)),
                                  b.const(float(op.attrs["eps"]), dtype)))
    xhat = b.emit("mul", xc, rstd)
    parts = []
    if tx is not None:
        proj = b.emit("mul", xhat, mean(b.emit("mul", xhat, tx)))
        dxhat = b.emit("mul", rstd, b.emit("sub", b.emit("sub", tx, mean(tx)), proj))
        parts.append(b.emit("mul", dxhat, _placed(b, gamma, x, axis)))
    if tg is not None:
        parts.append(b.emit("mul", xhat, _placed(b, tg, x, axis)))
    if tb is not None:
        parts.append(_placed(b, tb, x, axis))
    return [add_all(b, parts)]


register("layernorm", _layernorm, operands=("x", "gamma", "beta"),
         options=(AXIS, Option("eps", "float", 1e-5)), vjp=_layernorm_vjp,
         param_role=roles.norm(gain=1, bias=2),
         doc="(x - mean) / sqrt(var + eps) * gamma + beta over one axis; a 1-D gamma/beta "
             "lies along that axis",
         jvp=_layernorm_jvp, flops=8, batch=lambda b, op, args, batched, n: (
             unsupported(op, "with gamma or beta that differ between examples")
             if any(batched[1:]) else
             [b.emit("layernorm", *args, axis=shift_axis(op.attrs["axis"]),
                     eps=op.attrs["eps"])]), fresh=True)


# ---- stop_gradient / cast -------------------------------------------------------------

register("stop_gradient", lambda types, attrs: types[0], traits=("no_grad", "elementwise"),
         doc="the value of x with zero derivative", flops=0, batch=broadcast_rule,
         cuda=expr(lambda w, ct, dt, op, a: a))


def _cast_vjp(b, op, cts):
    x = op.operands[0]
    if not (x.type.is_float and op.result.type.is_float):
        return [None]  # to or from integers: the derivative is zero
    return [b.emit("cast", cts[0], dtype=x.type.dtype)]


def _cast_jvp(b, op, tangents):
    x, t = op.operands[0], tangents[0]
    if t is None or not (x.type.is_float and op.result.type.is_float):
        return [None]  # to or from integers: the derivative is zero
    return [b.emit("cast", t, dtype=op.result.type.dtype)]


def _cast_cuda(w, op):
    """C's conversion, which is NumPy's rule where NumPy defines one: float to integer
    truncates toward zero, anything to bool is ``x != 0`` (NaN is true), integers and bools
    to float round to nearest, and f64 to f16 rounds once (no detour through float). A NaN,
    an infinity or an out-of-range float cast to an integer is undefined in C and
    platform-dependent in NumPy (with a warning), so those values may differ."""
    (x,) = op.operands
    dtype, src = op.result.type.dtype, COMPUTE[x.type.dtype]
    if dtype == "bool":
        if x.type.dtype == "bool":
            return w.names[x]
        return w.let(dtype, f"{w.ref(x, src)} != {lit(0, src)}", "bool")
    # one C conversion from the operand's value (f64 -> f16 without a float detour)
    return w.let(dtype, w.ref(x, src), src)


register("cast", lambda types, attrs: types[0].with_dtype(attrs["dtype"]),
         options=(Option("dtype", "dtype"),), traits=("elementwise",), vjp=_cast_vjp,
         jvp=_cast_jvp, flops=0, cuda=_cast_cuda, batch=broadcast_rule,
         rewrites=(Pattern(P("cast", "x"), bound("x"), "cast to the same dtype -> x"),),
         fresh=True, param_role=roles.first_through)
