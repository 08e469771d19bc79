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

Each op is one declaration: `unary` and `binary` take the local derivative once and derive
both rules from it (an elementwise op's Jacobian is diagonal, so its VJP rule applied to a
tangent is its JVP rule), beside the CUDA formula and the FLOP count. JVP rules may return
tangents of an operand's shape: the forward driver broadcasts them to the result.
"""
from __future__ import annotations

import math

import numpy as np

from ..diagnostics import ShapeError
from ..emit.c import COMPUTE, expr, fn, fn2, infix, lit, math_fn
from ..ir.types import TensorType, broadcast_shapes, join_dtypes
from .batching import broadcast_rule
from .patterns import P, Pattern, Scalar, Splat, bound, fold
from .registry import Option, register
from .rules import add_all, float_tangent, scalar
from . import roles

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
        first = types[0]
        same = True
        for t in types:  # a loop, not all(<generator>): this runs once per op created
            if t is not first and t != first:
                same = False
                break
        if same:  # the common case: nothing to broadcast or join
            shape, dtype = first.shape, first.dtype
        else:
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
        return first if same else TensorType(dtype, shape)
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

def _self_adjoint(vjp):
    """The JVP rule of a unary elementwise op: its diagonal Jacobian is its own transpose,
    so the VJP rule applied to the tangent gives the result's tangent."""
    def jvp(b, op, tangents):
        if tangents[0] is None or not op.operands[0].type.is_float:
            return [None]
        return vjp(b, op, tangents)
    return jvp


def unary(name, cuda, *, deriv=None, scale=None, vjp=None, infer=None, traits=(),
          options=(), flops=None, doc="", rewrites=(), fresh=True, param_role=None):
    """Declare a unary elementwise op from one of: `deriv(b, x, y)`, its local derivative
    (the cotangent is multiplied by it); `scale(b, x, y, g)`, the cotangent of `x` from the
    cotangent `g`; `vjp`, a whole rule. The JVP rule is the same map applied to the tangent.
    Without any of them the op has derivative zero (give the ``no_grad`` trait)."""
    if deriv is not None:  # one lambda, not a `scale` made of `deriv`: a call fewer per op
        vjp = lambda b, op, ct: [b.emit("mul", ct[0],  # noqa: E731
                                        deriv(b, op.operands[0], op.results[0]))]
    elif scale is not None:
        vjp = lambda b, op, ct: [scale(b, op.operands[0], op.results[0], ct[0])]  # noqa: E731
    register(name, infer or _float_unary(name), options=options, traits=EW + tuple(traits),
             vjp=vjp, jvp=_self_adjoint(vjp) if vjp else None, cuda=cuda, flops=flops, doc=doc,
             batch=broadcast_rule, rewrites=rewrites, fresh=fresh, param_role=param_role)


# ---- unary ---------------------------------------------------------------------------

GELU_APPROXIMATIONS = ("none", "tanh")   # PyTorch's names; "none" (exact, erf) by default


def _gelu_type(types, attrs):
    if attrs["approximate"] not in GELU_APPROXIMATIONS:
        raise ShapeError(f"gelu: approximate must be \"none\" (exact, with erf) or \"tanh\", "
                         f"got {attrs['approximate']!r}")
    return _float_unary("gelu")(types, attrs)


def _gelu_deriv(b, x, approximate):
    if approximate == "none":
        # gelu = x Phi(x): gelu' = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
        phi_x = b.emit("mul", scalar(b, 0.5, x), b.emit("add", scalar(b, 1.0, x), b.emit(
            "erf", b.emit("mul", x, scalar(b, math.sqrt(0.5), x)))))
        density = b.emit("mul", scalar(b, 1 / math.sqrt(2 * math.pi), x), b.emit(
            "exp", b.emit("mul", scalar(b, -0.5, x), b.emit("square", x))))
        return b.emit("add", phi_x, b.emit("mul", x, density))
    # gelu = 0.5 x (1 + t), t = tanh(k x (1 + a x^2)):
    # gelu' = 0.5 ((1 + t) + x (1 - t^2) k (1 + 3 a x^2))
    k, a = math.sqrt(2.0 / math.pi), 0.044715
    one, x2 = scalar(b, 1.0, x), b.emit("square", x)
    t = b.emit("tanh", b.emit("mul", b.emit("mul", scalar(b, k, x), x),
                              b.emit("add", one, b.emit("mul", scalar(b, a, x), x2))))
    du = b.emit("mul", scalar(b, k, x), b.emit("add", one, b.emit("mul", scalar(b, 3 * a, x), x2)))
    right = b.emit("mul", b.emit("mul", x, b.emit("sub", one, b.emit("square", t))), du)
    return b.emit("mul", scalar(b, 0.5, x), b.emit("add", b.emit("add", one, t), right))


def _gelu_cuda(w, ct, dt, op, a):
    if op.attrs.get("approximate", "none") == "none":
        return (f"{lit(0.5, ct)} * {a} * ({lit(1.0, ct)} + {math_fn('erf', ct)}("
                f"{a} * {lit(math.sqrt(0.5), ct)}))")
    return (f"{lit(0.5, ct)} * {a} * ({lit(1.0, ct)} + {math_fn('tanh', ct)}("
            f"{lit(math.sqrt(2.0 / math.pi), ct)} * ({a} + {lit(0.044715, ct)} * {a} * {a} * {a})))")


def _sigmoid_cuda(w, ct, dt, op, a):
    # exp(-|x|) <= 1 never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0
    e = w.local(ct, f"{math_fn('exp', ct)}(-{math_fn('fabs', ct)}({a}))")
    one = lit(1.0, ct)
    return f"{a} >= {lit(0.0, ct)} ? {one} / ({one} + {e}) : {e} / ({one} + {e})"


def _softplus_cuda(w, ct, dt, op, a):
    return (f"adc_max({a}, {lit(0.0, ct)}) + "
            f"{math_fn('log1p', ct)}({math_fn('exp', ct)}(-{math_fn('fabs', ct)}({a})))")


def _sign_cuda(w, ct, dt, op, a):
    """-1, 0 or 1; +0 for both zeros and NaN for NaN, as NumPy's sign."""
    zero = lit(0.0, ct)
    return (f"{a} > {zero} ? {lit(1.0, ct)} : ({a} < {zero} ? {lit(-1.0, ct)} : "
            f"({a} == {zero} ? {zero} : {a}))")


def _int_identity(name):
    """floor/ceil/round: the identity on integers (as the NumPy kernels)."""
    return expr(lambda w, ct, dt, op, a: f"{math_fn(name, ct)}({a})" if dt.startswith("f")
                else a)


def _leaky_relu_vjp(b, op, ct):
    x, g = op.operands[0], ct[0]
    slope = b.emit("mul", g, scalar(b, op.attrs["slope"], g))
    return [b.emit("where", b.emit("gt", x, scalar(b, 0.0, x)), g, slope)]


unary("neg", expr(lambda w, ct, dt, op, a: f"-{a}"), infer=_numeric_unary("neg"),
      traits=("linear",), param_role=roles.first_through,
      vjp=lambda b, op, ct: [b.emit("neg", ct[0]) if op.operands[0].type.is_float else None],
      rewrites=(Pattern(P("neg", P("neg", "x")), bound("x"), "-(-x) -> x"),
                Pattern(P("neg", Scalar("a")), fold(np.negative), "fold -a")))
unary("exp", fn("exp"), deriv=lambda b, x, y: y)
unary("log", fn("log"), scale=lambda b, x, y, g: b.emit("div", g, x))
unary("log1p", fn("log1p"),
      scale=lambda b, x, y, g: b.emit("div", g, b.emit("add", x, scalar(b, 1.0, x))))
unary("expm1", fn("expm1"), deriv=lambda b, x, y: b.emit("add", y, scalar(b, 1.0, y)))
unary("sqrt", fn("sqrt"),
      scale=lambda b, x, y, g: b.emit("div", g, b.emit("mul", y, scalar(b, 2.0, y))))
# rsqrt' = -x^(-3/2) / 2 = -y^3 / 2
unary("rsqrt", expr(lambda w, ct, dt, op, a: f"{lit(1.0, ct)} / {math_fn('sqrt', ct)}({a})"),
      deriv=lambda b, x, y: b.emit("mul", scalar(b, -0.5, y), b.emit("mul", y, b.emit("square", y))))
unary("abs", fn("fabs"), deriv=lambda b, x, y: b.emit("sign", x))
unary("sin", fn("sin"), deriv=lambda b, x, y: b.emit("cos", x))
unary("cos", fn("cos"), deriv=lambda b, x, y: b.emit("neg", b.emit("sin", x)))
unary("tanh", fn("tanh"), flops=4,
      deriv=lambda b, x, y: b.emit("sub", scalar(b, 1.0, y), b.emit("square", y)))
unary("sigmoid", expr(_sigmoid_cuda), flops=4,
      deriv=lambda b, x, y: b.emit("mul", y, b.emit("sub", scalar(b, 1.0, y), y)))
unary("relu", expr(lambda w, ct, dt, op, a: f"adc_max({a}, {lit(0.0, ct)})"),
      scale=lambda b, x, y, g: b.emit("where", b.emit("gt", x, scalar(b, 0.0, x)), g, scalar(b, 0.0, g)))
unary("erf", fn("erf"), flops=8, deriv=lambda b, x, y: b.emit(
    "mul", scalar(b, 2 / math.sqrt(math.pi), x), b.emit("exp", b.emit("neg", b.emit("square", x)))))
unary("gelu", expr(_gelu_cuda), infer=_gelu_type, flops=8,
      options=(Option("approximate", "str", "none"),),
      vjp=lambda b, op, ct: [b.emit("mul", ct[0], _gelu_deriv(b, op.operands[0],
                                                               op.attrs["approximate"]))],
      doc="x Phi(x) (approximate=\"none\", as PyTorch's default) or its tanh approximation")
# softplus' = sigmoid, which the sigmoid kernel computes stably
unary("softplus", expr(_softplus_cuda), deriv=lambda b, x, y: b.emit("sigmoid", x), flops=4)
unary("square", expr(lambda w, ct, dt, op, a: f"{a} * {a}"),
      deriv=lambda b, x, y: b.emit("mul", x, scalar(b, 2.0, x)))
unary("reciprocal", expr(lambda w, ct, dt, op, a: f"{lit(1.0, ct)} / {a}"),
      deriv=lambda b, x, y: b.emit("neg", b.emit("square", y)))
unary("leaky_relu", expr(lambda w, ct, dt, op, a: f"{a} > {lit(0.0, ct)} ? {a} : "
                                                  f"{a} * {lit(op.attrs['slope'], ct)}"),
      options=(Option("slope", "float", 0.01),), vjp=_leaky_relu_vjp)
unary("sign", expr(_sign_cuda), traits=("no_grad",))
# rounding an integer tensor returns the operand itself: not fresh
unary("round", _int_identity("rint"), infer=_numeric_unary("round"), traits=("no_grad",),
      fresh=False)
unary("floor", _int_identity("floor"), infer=_numeric_unary("floor"), traits=("no_grad",),
      fresh=False)
unary("ceil", _int_identity("ceil"), infer=_numeric_unary("ceil"), traits=("no_grad",),
      fresh=False)


# ---- clip ----------------------------------------------------------------------------

def _clip_vjp(b, op, ct):
    x, lo, hi = op.operands
    g, zero = ct[0], scalar(b, 0.0, ct[0])
    below, above = b.emit("lt", x, lo), b.emit("gt", x, hi)
    # with lo > hi the result is hi everywhere (min(max(x, lo), hi)): hi takes it all
    crossed = b.emit("gt", lo, hi) if lo.type.is_float or hi.type.is_float else None
    return [b.emit("where", below, zero, b.emit("where", above, zero, g))
            if x.type.is_float else None,
            b.emit("where", below, b.emit("where", crossed, zero, g), zero)
            if lo.type.is_float else None,
            b.emit("where", above, g, b.emit("where", crossed, g, zero))
            if hi.type.is_float else None]


def _clip_jvp(b, op, tangents):
    x, lo, hi = op.operands
    tx, tlo, thi = (float_tangent(v, t) for v, t in zip(op.operands, tangents))
    if tx is None and tlo is None and thi is None:
        return [None]
    zero = scalar(b, 0.0, op.result)
    below, above = b.emit("lt", x, lo), b.emit("gt", x, hi)
    inside = b.emit("where", above, zero if thi is None else thi, zero if tx is None else tx)
    low = zero if tlo is None else tlo
    if tlo is not None or thi is not None:  # lo > hi: the result is hi (see _clip_vjp)
        low = b.emit("where", b.emit("gt", lo, hi), zero if thi is None else thi, low)
    return [b.emit("where", below, low, inside)]


register("clip", _broadcast("clip"), operands=("x", "lo", "hi"), traits=EW, vjp=_clip_vjp,
         jvp=_clip_jvp, batch=broadcast_rule,
         cuda=expr(lambda w, ct, dt, op, x, lo, hi: f"adc_min(adc_max({x}, {lo}), {hi})"),
         fresh=True)


# ---- binary --------------------------------------------------------------------------

def binary(name, cuda, da, db, *, traits=(), jvp=None, float_result=False, rewrites=(),
           param_role=None):
    """Declare a binary elementwise op from its per-operand cotangents ``da(b, a, bb, y, g)``
    and ``db(...)`` (skipped for non-float operands); the JVP rule sums the same maps of the
    operands' tangents unless `jvp` is given."""
    def vjp(b, op, ct):
        a, bb = op.operands
        args = (b, a, bb, op.result, ct[0])
        return [da(*args) if a.type.is_float else None,
                db(*args) if bb.type.is_float else None]

    def forward(b, op, tangents):
        (a, bb), (ta, tb), y = op.operands, tangents, op.results[0]
        # an integer operand has no tangent, and joins the result's float dtype (log(a) of
        # pow needs a float)
        if not a.type.is_float:
            ta, a = None, b.emit("cast", a, dtype=y.type.dtype)
        if not bb.type.is_float:
            tb, bb = None, b.emit("cast", bb, dtype=y.type.dtype)
        return [add_all(b, [da(b, a, bb, y, ta) if ta is not None else None,
                            db(b, a, bb, y, tb) if tb is not None else None])]
    register(name, _broadcast(name, float_result=float_result), operands=("a", "b"),
             traits=EW + tuple(traits), vjp=vjp, jvp=jvp or forward, cuda=cuda,
             batch=broadcast_rule, rewrites=rewrites, fresh=True, param_role=param_role)


def _pow_db(b, a, bb, y, g):
    # log(a) read as 0 at a == 0, so 0**b contributes nothing to d/db (and no NaN)
    if not a.type.is_float:  # an integer base: its log is taken in the result's dtype
        a = b.emit("cast", a, dtype=y.type.dtype)
    safe = b.emit("where", b.emit("eq", a, scalar(b, 0.0, a)), scalar(b, 1.0, a), a)
    return b.emit("mul", g, b.emit("mul", y, b.emit("log", safe)))


def _pow_da(b, a, bb, y, g):
    # b * a**(b-1) is 0 * 0**-1 = NaN at a == b == 0, where a**0 = 1 has derivative 0 (as
    # PyTorch and JAX): the base is read as 1 there. Elsewhere the rule and its own
    # derivatives (d/db included, for second order) are untouched.
    zero = scalar(b, 0.0, a)
    safe = b.emit("where", b.emit("eq", a, zero),
                  b.emit("where", b.emit("eq", bb, scalar(b, 0.0, bb)), scalar(b, 1.0, a), a), a)
    pw = b.emit("pow", safe, b.emit("sub", bb, scalar(b, 1.0, bb)))
    return b.emit("mul", g, b.emit("mul", bb, pw))


def _tie_weight(b, a, bb, y, wins):
    """Share of the cotangent owed to `a` in maximum/minimum: 1 if it `wins`, 0.5 on a tie."""
    one, half, zero = scalar(b, 1.0, y), scalar(b, 0.5, y), scalar(b, 0.0, y)
    tie = b.emit("where", b.emit("eq", a, bb), half, zero)
    return b.emit("where", b.emit(wins, a, bb), one, tie)


def _extremum(name, wins, cuda):
    """maximum/minimum: the tie weight is built once and shared by both operands' terms."""
    def vjp(b, op, ct):
        a, bb = op.operands
        g = ct[0]
        w = _tie_weight(b, a, bb, op.result, wins)
        return [b.emit("mul", g, w) if a.type.is_float else None,
                b.emit("mul", g, b.emit("sub", scalar(b, 1.0, w), w)) if bb.type.is_float else None]

    def jvp(b, op, tangents):
        ta, tb = (float_tangent(v, t) for v, t in zip(op.operands, tangents))
        if ta is None and tb is None:
            return [None]
        w = _tie_weight(b, *op.operands, op.result, wins)
        return [add_all(b, [
            b.emit("mul", ta, w) if ta is not None else None,
            b.emit("mul", tb, b.emit("sub", scalar(b, 1.0, w), w)) if tb is not None else None])]
    register(name, _broadcast(name), operands=("a", "b"), traits=EW + ("commutative",),
             vjp=vjp, jvp=jvp, cuda=cuda, batch=broadcast_rule, fresh=True)


def _add_jvp(b, op, tangents):
    return [add_all(b, [float_tangent(v, t) for v, t in zip(op.operands, tangents)])]


def _sub_jvp(b, op, tangents):
    ta, tb = (float_tangent(v, t) for v, t in zip(op.operands, tangents))
    if tb is None:
        return [ta]
    return [b.emit("neg", tb) if ta is None else b.emit("sub", ta, tb)]


_first = lambda b, a, bb, y, g: g  # noqa: E731
# canonicalization: ``x * 0`` is deliberately not folded: it is NaN for ``x = inf`` or NaN
# (JAX keeps it too); a fold that is not finite, or an integer division, is left alone
binary("add", infix("+"), _first, _first, traits=("linear", "commutative"), jvp=_add_jvp,
       param_role=roles.addend,
       rewrites=(Pattern(P("add", "x", Splat(0)), bound("x"), "x + 0 -> x (and 0 + x)"),
                 Pattern(P("add", "x", P("neg", "y")), lambda b, m: b.emit("sub", m["x"], m["y"]),
                         "x + -y -> x - y", needs=("sub",)),
                 Pattern(P("add", Scalar("a"), Scalar("b")), fold(np.add), "fold a + b")))
binary("sub", infix("-"), _first, lambda b, a, bb, y, g: b.emit("neg", g), traits=("linear",),
       jvp=_sub_jvp, param_role=roles.addend,
       rewrites=(Pattern(P("sub", "x", Splat(0)), bound("x"), "x - 0 -> x"),
                 Pattern(P("sub", Scalar("a"), Scalar("b")), fold(np.subtract), "fold a - b")))
binary("mul", infix("*"), lambda b, a, bb, y, g: b.emit("mul", g, bb),
       lambda b, a, bb, y, g: b.emit("mul", g, a), traits=("commutative",),
       rewrites=(Pattern(P("mul", "x", Splat(1)), bound("x"), "x * 1 -> x (and 1 * x)"),
                 Pattern(P("mul", Scalar("a"), Scalar("b")), fold(np.multiply), "fold a * b")))
# d/db (a / b) = -(a / b) / b = -y / b
binary("div", infix("/"), lambda b, a, bb, y, g: b.emit("div", g, bb),
       lambda b, a, bb, y, g: b.emit("neg", b.emit("div", b.emit("mul", g, y), bb)),
       float_result=True,
       rewrites=(Pattern(P("div", "x", Splat(1)), bound("x"), "x / 1 -> x"),
                 Pattern(P("div", Scalar("a"), Scalar("b")), fold(np.divide, ints=False),
                         "fold a / b")))
binary("pow", fn2("pow"), _pow_da, _pow_db, float_result=True)  # float only (its type rule)
_extremum("maximum", "gt", expr(lambda w, ct, dt, op, a, b: f"adc_max({a}, {b})"))
_extremum("minimum", "lt", expr(lambda w, ct, dt, op, a, b: f"adc_min({a}, {b})"))


# ---- comparisons and where -----------------------------------------------------------

def _compare(symbol):
    """``a <symbol> b`` in the type NumPy compares them in: double where a float meets an
    i32 or i64 (``16777216.0f >= 16777217`` is false), else the joined dtype's."""
    def formula(w, op):
        dtypes = [v.type.dtype for v in op.operands]
        mixed = any(d.startswith("f") for d in dtypes) and any(d in ("i32", "i64")
                                                                for d in dtypes)
        ct = "double" if mixed else COMPUTE[join_dtypes(*dtypes)]
        a, b = (w.ref(v, ct) for v in op.operands)
        return w.let(op.result.type.dtype, f"{a} {symbol} {b}", "bool")
    return formula


for _name, _symbol in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="),
                       ("ne", "!=")):
    register(_name, _broadcast(_name, result_dtype="bool"), operands=("a", "b"),
             traits=NO_GRAD + (("commutative",) if _name in ("eq", "ne") else ()),
             cuda=_compare(_symbol), batch=broadcast_rule, fresh=True)


def _where_vjp(b, op, ct):
    cond, a, bb = op.operands
    g = ct[0]
    zero = scalar(b, 0.0, g)
    return [None,
            b.emit("where", cond, g, zero) if a.type.is_float else None,
            b.emit("where", cond, zero, g) if bb.type.is_float else None]


def _where_jvp(b, op, tangents):
    cond, a, bb = op.operands
    ta, tb = float_tangent(a, tangents[1]), float_tangent(bb, tangents[2])
    if ta is None and tb is None:
        return [None]
    zero = scalar(b, 0.0, op.result)
    return [b.emit("where", cond, zero if ta is None else ta, zero if tb is None else tb)]


def _where_cuda(w, op):
    dtype = op.result.type.dtype
    ct = COMPUTE[dtype]
    cond = w.names[op.operands[0]]
    a, b = (w.ref(v, ct, dtype) for v in op.operands[1:])
    return w.let(dtype, f"{cond} ? {a} : {b}", ct)


register("where", _where, operands=("cond", "a", "b"), traits=EW, vjp=_where_vjp,
         jvp=_where_jvp, cuda=_where_cuda, batch=broadcast_rule, fresh=True)
