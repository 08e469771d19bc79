"""Elementwise ops: unary math, binary arithmetic, comparisons, `where`, `clip`.

Rules return cotangents in the broadcast result shape; the reverse driver unbroadcasts.
Integer and bool operands get no cotangent (``None``).

Conventions at kinks and singular points (tests check each):

* ``relu'(0) = 0``, ``abs'(0) = 0`` (through ``sign(0) = 0``), ``sign' = 0``;
* ``leaky_relu'(x) = 1`` for ``x > 0`` else `slope`, so ``leaky_relu'(0) = slope`` (as PyTorch);
* ``maximum``/``minimum`` give each of two tied arguments half the cotangent;
* ``clip(x, lo, hi)`` passes the cotangent to `x` where ``lo <= x <= hi`` (bounds inclusive),
  to `lo` where ``x < lo`` and to `hi` where ``x > hi``; where ``lo > hi`` the result is `hi`
  (as NumPy's minimum(maximum(x, lo), hi)) and `hi` gets the whole cotangent (as PyTorch);
* ``pow(a, b)``: ``d/da = b * a**(b-1)``, read as 0 where ``b == 0`` (as PyTorch and JAX),
  and ``d/db = log(a) * a**b`` with ``log(a)`` read as 0 where ``a == 0`` (as JAX), so
  ``0**b`` has a zero `b`-derivative; a negative base gives NaN for ``d/db`` (the logarithm
  is undefined there);
* ``round floor ceil sign`` and comparisons have derivative 0 (trait ``no_grad``).
"""
from __future__ import annotations

import math

from ..diagnostics import ShapeError
from ..ir.types import TensorType, broadcast_shapes, join_dtypes
from .registry import Option, register, set_jvp

EW = ("elementwise",)
NO_GRAD = EW + ("no_grad",)


# ---- type rules ----------------------------------------------------------------------

def _float_unary(name):
    def infer(types, attrs):
        if not types[0].is_float:
            raise ShapeError(f"{name} expects a float tensor, got {types[0]}")
        return types[0]
    return infer


def _numeric_unary(name):
    def infer(types, attrs):
        if types[0].dtype == "bool":
            raise ShapeError(f"{name} expects a numeric tensor, got {types[0]}")
        return types[0]
    return infer


def _broadcast(name, *, float_result=False, result_dtype=None):
    """Type rule of an op whose operands broadcast together (NumPy rules)."""
    def infer(types, attrs):
        try:
            shape = broadcast_shapes(*(t.shape for t in types))
            dtype = join_dtypes(*(t.dtype for t in types))
        except ShapeError as e:
            raise ShapeError(f"{name}: {e.message}") from None
        if result_dtype is not None:
            return TensorType(result_dtype, shape)
        if dtype == "bool":
            raise ShapeError(f"{name} expects numeric tensors, got "
                             f"{' and '.join(map(str, types))}")
        if float_result and dtype not in ("f16", "f32", "f64"):
            raise ShapeError(f"{name} expects a float operand, got "
                             f"{' and '.join(map(str, types))}; use cast")
        return TensorType(dtype, shape)
    return infer


def _where(types, attrs):
    if types[0].dtype != "bool":
        raise ShapeError(f"where expects a bool condition, got {types[0]}")
    try:
        return TensorType(join_dtypes(types[1].dtype, types[2].dtype),
                          broadcast_shapes(*(t.shape for t in types)))
    except ShapeError as e:
        raise ShapeError(f"where: {e.message}") from None


# ---- rule helpers --------------------------------------------------------------------

def _c(b, value, like):
    """A scalar constant of `like`'s dtype."""
    dtype = like.type.dtype
    return b.const(value if like.type.is_float else int(value), dtype)


def _unary_vjp(fn):
    """Lift ``fn(b, x, y, g) -> dx`` (operand, result, cotangent) to a VJP rule."""
    return lambda b, op, ct: [fn(b, op.operands[0], op.result, ct[0])]


def _chain(fn):
    """VJP rule ``g * fn(b, x, y)`` for a unary op with local derivative `fn`."""
    return _unary_vjp(lambda b, x, y, g: b.emit("mul", g, fn(b, x, y)))


def _gelu_deriv(b, x, y):
    # gelu = 0.5 x (1 + t), t = tanh(k x (1 + a x^2)):
    # gelu' = 0.5 ((1 + t) + x (1 - t^2) k (1 + 3 a x^2))
    k, a = math.sqrt(2.0 / math.pi), 0.044715
    one, x2 = _c(b, 1.0, x), b.emit("square", x)
    t = b.emit("tanh", b.emit("mul", b.emit("mul", _c(b, k, x), x),
                              b.emit("add", one, b.emit("mul", _c(b, a, x), x2))))
    du = b.emit("mul", _c(b, k, x), b.emit("add", one, b.emit("mul", _c(b, 3 * a, x), x2)))
    right = b.emit("mul", b.emit("mul", x, b.emit("sub", one, b.emit("square", t))), du)
    return b.emit("mul", _c(b, 0.5, x), b.emit("add", b.emit("add", one, t), right))


# ---- unary ---------------------------------------------------------------------------

UNARY_VJPS = {
    "exp": _chain(lambda b, x, y: y),
    "log": _unary_vjp(lambda b, x, y, g: b.emit("div", g, x)),
    "log1p": _unary_vjp(lambda b, x, y, g: b.emit("div", g, b.emit("add", x, _c(b, 1.0, x)))),
    "expm1": _chain(lambda b, x, y: b.emit("add", y, _c(b, 1.0, y))),
    "sqrt": _unary_vjp(lambda b, x, y, g: b.emit("div", g, b.emit("mul", y, _c(b, 2.0, y)))),
    # rsqrt' = -x^(-3/2) / 2 = -y^3 / 2
    "rsqrt": _chain(lambda b, x, y: b.emit("mul", _c(b, -0.5, y),
                                           b.emit("mul", y, b.emit("square", y)))),
    "abs": _chain(lambda b, x, y: b.emit("sign", x)),
    "sin": _chain(lambda b, x, y: b.emit("cos", x)),
    "cos": _chain(lambda b, x, y: b.emit("neg", b.emit("sin", x))),
    "tanh": _chain(lambda b, x, y: b.emit("sub", _c(b, 1.0, y), b.emit("square", y))),
    "sigmoid": _chain(lambda b, x, y: b.emit("mul", y, b.emit("sub", _c(b, 1.0, y), y))),
    "relu": _unary_vjp(lambda b, x, y, g: b.emit(
        "where", b.emit("gt", x, _c(b, 0.0, x)), g, _c(b, 0.0, g))),
    "gelu": _chain(_gelu_deriv),
    # softplus' = sigmoid, which the sigmoid kernel computes stably
    "softplus": _chain(lambda b, x, y: b.emit("sigmoid", x)),
    "square": _chain(lambda b, x, y: b.emit("mul", x, _c(b, 2.0, x))),
    "reciprocal": _chain(lambda b, x, y: b.emit("neg", b.emit("square", y))),
}

register("neg", _numeric_unary("neg"), traits=EW + ("linear",),
         vjp=lambda b, op, ct: [b.emit("neg", ct[0]) if op.operands[0].type.is_float else None])
for _name, _vjp in UNARY_VJPS.items():
    register(_name, _float_unary(_name), traits=EW, vjp=_vjp)
register("sign", _float_unary("sign"), traits=NO_GRAD)
for _name in ("round", "floor", "ceil"):
    register(_name, _numeric_unary(_name), traits=NO_GRAD)


def _leaky_relu_vjp(b, op, ct):
    x, g = op.operands[0], ct[0]
    slope = b.emit("mul", g, _c(b, op.attrs["slope"], g))
    return [b.emit("where", b.emit("gt", x, _c(b, 0.0, x)), g, slope)]


register("leaky_relu", _float_unary("leaky_relu"), options=(Option("slope", "float", 0.01),),
         traits=EW, vjp=_leaky_relu_vjp)


def _clip_vjp(b, op, ct):
    x, lo, hi = op.operands
    g, zero = ct[0], _c(b, 0.0, ct[0])
    below, above = b.emit("lt", x, lo), b.emit("gt", x, hi)
    # with lo > hi the result is hi everywhere (min(max(x, lo), hi)): hi takes it all
    crossed = b.emit("gt", lo, hi) if lo.type.is_float or hi.type.is_float else None
    return [b.emit("where", below, zero, b.emit("where", above, zero, g))
            if x.type.is_float else None,
            b.emit("where", below, b.emit("where", crossed, zero, g), zero)
            if lo.type.is_float else None,
            b.emit("where", above, g, b.emit("where", crossed, g, zero))
            if hi.type.is_float else None]


register("clip", _broadcast("clip"), operands=("x", "lo", "hi"), traits=EW, vjp=_clip_vjp)

# ---- binary --------------------------------------------------------------------------


def _binary_vjp(da, db):
    """VJP rule from ``da(b, a, bb, y, g)`` and ``db(...)``; skipped for non-float operands."""
    def vjp(b, op, ct):
        a, bb = op.operands
        args = (b, a, bb, op.result, ct[0])
        return [da(*args) if a.type.is_float else None,
                db(*args) if bb.type.is_float else None]
    return vjp


def _pow_db(b, a, bb, y, g):
    # log(a) read as 0 at a == 0, so 0**b contributes nothing to d/db (and no NaN)
    if not a.type.is_float:  # an integer base: its log is taken in the result's dtype
        a = b.emit("cast", a, dtype=y.type.dtype)
    safe = b.emit("where", b.emit("eq", a, _c(b, 0.0, a)), _c(b, 1.0, a), a)
    return b.emit("mul", g, b.emit("mul", y, b.emit("log", safe)))


def _pow_da(b, a, bb, y, g):
    # b * a**(b-1) is 0 * 0**-1 = NaN at a == b == 0, where a**0 = 1 has derivative 0 (as
    # PyTorch and JAX): the base is read as 1 there. Elsewhere the rule and its own
    # derivatives (d/db included, for second order) are untouched.
    zero = _c(b, 0.0, a)
    safe = b.emit("where", b.emit("eq", a, zero),
                  b.emit("where", b.emit("eq", bb, _c(b, 0.0, bb)), _c(b, 1.0, a), a), a)
    pw = b.emit("pow", safe, b.emit("sub", bb, _c(b, 1.0, bb)))
    return b.emit("mul", g, b.emit("mul", bb, pw))


def _tie_weight(b, a, bb, y, wins):
    """Share of the cotangent owed to `a` in maximum/minimum: 1 if it `wins`, 0.5 on a tie."""
    one, half, zero = _c(b, 1.0, y), _c(b, 0.5, y), _c(b, 0.0, y)
    tie = b.emit("where", b.emit("eq", a, bb), half, zero)
    return b.emit("where", b.emit(wins, a, bb), one, tie)


def _extremum_vjp(wins):
    def vjp(b, op, ct):
        a, bb = op.operands
        g = ct[0]
        w = _tie_weight(b, a, bb, op.result, wins)
        return [b.emit("mul", g, w) if a.type.is_float else None,
                b.emit("mul", g, b.emit("sub", _c(b, 1.0, w), w)) if bb.type.is_float else None]
    return vjp


_first = lambda b, a, bb, y, g: g  # noqa: E731
BINARY = {
    "add": (("linear", "commutative"), _binary_vjp(_first, lambda b, a, bb, y, g: g)),
    "sub": (("linear",), _binary_vjp(_first, lambda b, a, bb, y, g: b.emit("neg", g))),
    "mul": (("commutative",), _binary_vjp(lambda b, a, bb, y, g: b.emit("mul", g, bb),
                                          lambda b, a, bb, y, g: b.emit("mul", g, a))),
    # d/db (a / b) = -(a / b) / b = -y / b
    "div": ((), _binary_vjp(lambda b, a, bb, y, g: b.emit("div", g, bb),
                            lambda b, a, bb, y, g: b.emit(
                                "neg", b.emit("div", b.emit("mul", g, y), bb)))),
    "pow": ((), _binary_vjp(_pow_da, _pow_db)),
    "maximum": (("commutative",), _extremum_vjp("gt")),
    "minimum": (("commutative",), _extremum_vjp("lt")),
}

for _name, (_traits, _vjp) in BINARY.items():
    register(_name, _broadcast(_name, float_result=_name in ("div", "pow")),
             operands=("a", "b"), traits=EW + _traits, vjp=_vjp)

# ---- comparisons and where -----------------------------------------------------------

for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    register(_name, _broadcast(_name, result_dtype="bool"), operands=("a", "b"),
             traits=NO_GRAD + (("commutative",) if _name in ("eq", "ne") else ()))


def _where_vjp(b, op, ct):
    cond, a, bb = op.operands
    g = ct[0]
    zero = _c(b, 0.0, g)
    return [None,
            b.emit("where", cond, g, zero) if a.type.is_float else None,
            b.emit("where", cond, zero, g) if bb.type.is_float else None]


register("where", _where, operands=("cond", "a", "b"), traits=EW, vjp=_where_vjp)


# ---- JVP rules -----------------------------------------------------------------------
# An elementwise op's Jacobian is diagonal: the tangent of its result is the sum over
# operands of (operand tangent) * (local derivative), which is what each VJP rule above
# computes for one operand when handed that operand's tangent as the cotangent. Rules may
# return tangents of an operand's shape: the forward driver broadcasts to the result.


def _float_tangent(v, t):
    """`t`, or None for an operand that carries no derivative (integers, bools)."""
    return t if v.type.is_float else None


def _sum_tangents(b, parts):
    out = None
    for p in parts:
        if p is not None:
            out = p if out is None else b.emit("add", out, p)
    return out


def _self_adjoint(vjp):
    """The JVP rule of a unary elementwise op: its diagonal Jacobian is its own transpose,
    so the VJP rule applied to the tangent gives the result's tangent."""
    def jvp(b, op, tangents):
        if tangents[0] is None or not op.operands[0].type.is_float:
            return [None]
        return vjp(b, op, tangents)
    return jvp


for _name, _vjp in list(UNARY_VJPS.items()) + [("leaky_relu", _leaky_relu_vjp)]:
    set_jvp(_name)(_self_adjoint(_vjp))
set_jvp("neg")(lambda b, op, t: [b.emit("neg", _float_tangent(op.operands[0], t[0]))
                                 if _float_tangent(op.operands[0], t[0]) is not None else None])


def _binary_jvp(da, db):
    """JVP rule from the per-operand local-derivative products `da`, `db` of `_binary_vjp`."""
    def jvp(b, op, tangents):
        ta, tb = (_float_tangent(v, t) for v, t in zip(op.operands, tangents))
        # an integer operand joins the result's float dtype (log(a) of pow needs a float)
        a, bb = (v if v.type.is_float else b.emit("cast", v, dtype=op.result.type.dtype)
                 for v in op.operands)
        return [_sum_tangents(b, [da(b, a, bb, op.result, ta) if ta is not None else None,
                                  db(b, a, bb, op.result, tb) if tb is not None else None])]
    return jvp


@set_jvp("add")
def _add_jvp(b, op, tangents):
    ta, tb = (_float_tangent(v, t) for v, t in zip(op.operands, tangents))
    return [_sum_tangents(b, [ta, tb])]


@set_jvp("sub")
def _sub_jvp(b, op, tangents):
    ta, tb = (_float_tangent(v, t) for v, t in zip(op.operands, tangents))
    if tb is None:
        return [ta]
    return [b.emit("neg", tb) if ta is None else b.emit("sub", ta, tb)]


set_jvp("mul")(_binary_jvp(lambda b, a, bb, y, g: b.emit("mul", g, bb),
                           lambda b, a, bb, y, g: b.emit("mul", g, a)))
set_jvp("div")(_binary_jvp(lambda b, a, bb, y, g: b.emit("div", g, bb),
                           lambda b, a, bb, y, g: b.emit(
                               "neg", b.emit("div", b.emit("mul", g, y), bb))))
set_jvp("pow")(_binary_jvp(_pow_da, _pow_db))


def _extremum_jvp(wins):
    def jvp(b, op, tangents):
        a, bb = op.operands
        ta, tb = (_float_tangent(v, t) for v, t in zip(op.operands, tangents))
        if ta is None and tb is None:
            return [None]
        w = _tie_weight(b, a, bb, op.result, wins)
        return [_sum_tangents(b, [
            b.emit("mul", ta, w) if ta is not None else None,
            b.emit("mul", tb, b.emit("sub", _c(b, 1.0, w), w)) if tb is not None else None])]
    return jvp


set_jvp("maximum")(_extremum_jvp("gt"))
set_jvp("minimum")(_extremum_jvp("lt"))


@set_jvp("where")
def _where_jvp(b, op, tangents):
    cond, a, bb = op.operands
    ta, tb = _float_tangent(a, tangents[1]), _float_tangent(bb, tangents[2])
    if ta is None and tb is None:
        return [None]
    zero = _c(b, 0.0, op.result)
    return [b.emit("where", cond, zero if ta is None else ta, zero if tb is None else tb)]


@set_jvp("clip")
def _clip_jvp(b, op, tangents):
    x, lo, hi = op.operands
    tx, tlo, thi = (_float_tangent(v, t) for v, t in zip(op.operands, tangents))
    if tx is None and tlo is None and thi is None:
        return [None]
    zero = _c(b, 0.0, op.result)
    below, above = b.emit("lt", x, lo), b.emit("gt", x, hi)
    inside = b.emit("where", above, zero if thi is None else thi, zero if tx is None else tx)
    low = zero if tlo is None else tlo
    if tlo is not None or thi is not None:  # lo > hi: the result is hi (see _clip_vjp)
        low = b.emit("where", b.emit("gt", lo, hi), zero if thi is None else thi, low)
    return [b.emit("where", below, low, inside)]
