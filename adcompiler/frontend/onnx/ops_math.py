"""ONNX elementwise ops, matrix products, casts and reductions as TDSL."""
from __future__ import annotations

from ..importer.names import ints, number
from .table import lowers

# op type -> (TDSL expression of `x`, the versions); float ops take the TDSL op's dtype rule
UNARY = {
    "Abs": ("abs({x})", (6, 13)), "Neg": ("-{x}", (6, 13)), "Exp": ("exp({x})", (6, 13)),
    "Log": ("log({x})", (6, 13)), "Sqrt": ("sqrt({x})", (6, 13)),
    "Reciprocal": ("reciprocal({x})", (6, 13)), "Relu": ("relu({x})", (6, 13, 14)),
    "Sigmoid": ("sigmoid({x})", (6, 13)), "Tanh": ("tanh({x})", (6, 13)),
    "Erf": ("erf({x})", (9, 13)), "Sin": ("sin({x})", (7, 22)), "Cos": ("cos({x})", (7, 22)),
    "Floor": ("floor({x})", (6, 13)), "Ceil": ("ceil({x})", (6, 13)),
    "Round": ("round({x})", (11, 22)),   # half to even, as NumPy
    "Sign": ("sign({x})", (9, 13)), "Softplus": ("softplus({x})", (1, 22)),
    "Softsign": ("{x} / (1 + abs({x}))", (1, 22)),
    "Identity": ("{x}", (1, 13, 14, 16, 19, 21, 23, 24, 25)),
}
# op type -> (TDSL operator or function, versions); NumPy broadcasting as ONNX's
BINARY = {
    "Add": ("{a} + {b}", (7, 13, 14)), "Sub": ("{a} - {b}", (7, 13, 14)),
    "Mul": ("{a} * {b}", (7, 13, 14)), "Div": ("{a} / {b}", (7, 13, 14)),
    "Pow": ("{a} ** {b}", (7, 12, 13, 15)),
    "Equal": ("{a} == {b}", (7, 11, 13, 19)), "Less": ("{a} < {b}", (7, 9, 13)),
    "Greater": ("{a} > {b}", (7, 9, 13)), "LessOrEqual": ("{a} <= {b}", (12, 16)),
    "GreaterOrEqual": ("{a} >= {b}", (12, 16)),
}
VARIADIC = {"Sum": ("{a} + {b}", (6, 8, 13)), "Max": ("maximum({a}, {b})", (6, 8, 12, 13)),
            "Min": ("minimum({a}, {b})", (6, 8, 12, 13)), "Mean": ("{a} + {b}", (6, 8, 13))}


def _unary(op: str, form: str, versions):
    @lowers(op, *versions)
    def lower(n):
        n.emit(form.format(x=n.x(0).name))


def _binary(op: str, form: str, versions):
    @lowers(op, *versions)
    def lower(n):
        a, b = n.x(0, literal=True), n.x(1, literal=True)
        if op == "Div" and not (a.type.is_float or b.type.is_float):
            n.refuse("integer division is not supported (TDSL '/' is true division)")
        if op == "Pow" and a.dtype != b.dtype and not b.name[0].isdigit():
            n.refuse(f"Pow of {a.dtype} by {b.dtype} is not supported (one dtype)")
        n.emit(form.format(a=_paren(a.name), b=_paren(b.name)))


def _variadic(op: str, form: str, versions):
    @lowers(op, *versions)
    def lower(n):
        xs = [n.x(i).name for i in range(n.n_in)]
        expr = xs[0]
        for x in xs[1:]:
            expr = form.format(a=expr, b=x)
        if op == "Mean":
            expr = f"({expr}) / {len(xs)}" if len(xs) > 1 else expr
        n.emit(expr)


def _paren(text: str) -> str:
    return f"({text})" if text.startswith("-") or " " in text else text


for _op, (_f, _v) in UNARY.items():
    _unary(_op, _f, _v)
for _op, (_f, _v) in BINARY.items():
    _binary(_op, _f, _v)
for _op, (_f, _v) in VARIADIC.items():
    _variadic(_op, _f, _v)


def _f(n, name: str, default: float, dtype: str) -> str:
    return number(float(n.attr(name, default)), dtype)


@lowers("LeakyRelu", 6, 16)
def leaky_relu(n):
    x = n.x(0)
    n.emit(f"leaky_relu({x.name}, slope={_f(n, 'alpha', 0.01, x.dtype)})")


@lowers("Elu", 6, 22)
def elu(n):
    x = n.x(0)
    a = _f(n, "alpha", 1.0, x.dtype)
    n.emit(f"where({x.name} > 0, {x.name}, {a} * expm1(minimum({x.name}, 0)))")


@lowers("Celu", 12, 28)
def celu(n):
    x = n.x(0)
    a = _f(n, "alpha", 1.0, x.dtype)
    n.emit(f"maximum({x.name}, 0) + minimum(0, {a} * expm1({x.name} / {a}))")


@lowers("Selu", 6, 22)
def selu(n):
    x = n.x(0)
    a = _f(n, "alpha", 1.67326319217681884765625, x.dtype)
    g = _f(n, "gamma", 1.05070102214813232421875, x.dtype)
    n.emit(f"{g} * where({x.name} > 0, {x.name}, {a} * expm1(minimum({x.name}, 0)))")


@lowers("ThresholdedRelu", 10, 22)
def thresholded_relu(n):
    x = n.x(0)
    n.emit(f"where({x.name} > {_f(n, 'alpha', 1.0, x.dtype)}, {x.name}, 0)")


@lowers("HardSigmoid", 6, 22)
def hard_sigmoid(n):
    x = n.x(0)
    a, b = _f(n, "alpha", 0.2, x.dtype), _f(n, "beta", 0.5, x.dtype)
    n.emit(f"clip({a} * {x.name} + {_paren(b)}, 0, 1)")


@lowers("HardSwish", 14, 22)
def hard_swish(n):
    x = n.x(0)
    n.emit(f"{x.name} * clip({x.name} / 6 + 0.5, 0, 1)")


@lowers("Mish", 18, 22)
def mish(n):
    x = n.x(0)
    n.emit(f"{x.name} * tanh(softplus({x.name}))")


@lowers("PRelu", 7, 9, 16)
def prelu(n):
    x, s = n.x(0), n.x(1)
    n.emit(f"where({x.name} < 0, {s.name} * {x.name}, {x.name})")


@lowers("Gelu", 20)
def gelu(n):
    x = n.x(0)
    approx = n.only("approximate", ("none", "tanh"), "none")
    n.emit(f"gelu({x.name})" if approx == "none" else f'gelu({x.name}, approximate="tanh")')


@lowers("Not", 1)
def not_(n):
    n.emit(f"{n.x(0).name} == false")


@lowers("Where", 9, 16)
def where(n):
    c, a, b = n.x(0), n.x(1, literal=True), n.x(2, literal=True)
    n.emit(f"where({c.name}, {a.name}, {b.name})")


@lowers("Clip", 6, 11, 12, 13)
def clip(n):
    x = n.x(0)
    if n.version < 11:
        lo, hi = n.attr("min", None), n.attr("max", None)
        lo = None if lo is None or lo <= -3.4e38 else number(lo, x.dtype)
        hi = None if hi is None or hi >= 3.4e38 else number(hi, x.dtype)
    else:
        lo = n.x(1, literal=True).name if n.has(1) else None
        hi = n.x(2, literal=True).name if n.has(2) else None
    expr = x.name
    if lo is not None and hi is not None:
        # ONNX clips with min first, then max: hi < lo gives hi everywhere
        expr = f"minimum(maximum({expr}, {lo}), {hi})"
    elif lo is not None:
        expr = f"maximum({expr}, {lo})"
    elif hi is not None:
        expr = f"minimum({expr}, {hi})"
    n.emit(expr)


@lowers("MatMul", 1, 9, 13)
def matmul(n):
    a, b = n.x(0), n.x(1)
    n.emit(f"{a.name} @ {b.name}")


@lowers("Gemm", 7, 9, 11, 13)
def gemm(n):
    a, b = n.x(0), n.x(1)
    ta, tb = n.only("transA", (0, 1), 0), n.only("transB", (0, 1), 0)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    lhs = f"transpose({a.name})" if ta else a.name
    rhs = f"transpose({b.name})" if tb else b.name
    expr = f"{lhs} @ {rhs}"
    if alpha != 1.0:
        expr = f"{number(alpha, a.dtype)} * ({expr})"
    if n.has(2):
        c = n.x(2)
        expr += f" + {c.name}" if beta == 1.0 else f" + {number(beta, a.dtype)} * {c.name}"
    n.emit(expr)


@lowers("Einsum", 12, 28)
def einsum(n):
    eq = str(n.attr("equation")).replace(" ", "")
    if "->" not in eq or "." in eq or not all(c.isalpha() or c in ",->" for c in eq):
        n.refuse(f"equation '{eq}' is not supported (explicit '->', letters only)")
    xs = ", ".join(n.x(i).name for i in range(n.n_in))
    n.emit(f'einsum("{eq}", {xs})')


DTYPE_OF = {1: "f32", 11: "f64", 10: "f16", 7: "i64", 6: "i32", 9: "bool"}


@lowers("Cast", 6, 9, 13, 19, 21, 23, 24, 25, 28)
def cast(n):
    x, to = n.x(0), n.attr("to")
    n.attr("saturate", 1)            # only float8 targets read it; those are refused
    n.only("round_mode", ("up",), "up")
    if to not in DTYPE_OF:
        n.refuse(f"cast to element type {to} is not supported (supported: float, double, "
                 "float16, int64, int32, bool)")
    if x.dtype == DTYPE_OF[to]:
        n.emit(x.name)
    else:
        n.emit(f"cast({x.name}, {DTYPE_OF[to]})")


@lowers("CastLike", 15, 19, 21, 23, 24, 25)
def cast_like(n):
    x, like = n.x(0), n.x(1)
    n.attr("saturate", 1)
    n.only("round_mode", ("up",), "up")
    n.emit(x.name if x.dtype == like.dtype else f"cast({x.name}, {like.dtype})")


# reductions: op type -> (TDSL form of x over `axes`, versions taking axes as an input)
REDUCE = {
    "ReduceSum": ("sum({x}, {k})", 13, (1, 11, 13)),
    "ReduceMean": ("mean({x}, {k})", 18, (1, 11, 13, 18)),
    "ReduceMax": ("max({x}, {k})", 18, (1, 11, 12, 13, 18, 20)),
    "ReduceMin": ("min({x}, {k})", 18, (1, 11, 12, 13, 18, 20)),
    "ReduceLogSumExp": ("logsumexp({x}, {k})", 18, (1, 11, 13, 18, 28)),
    "ReduceSumSquare": ("sum(square({x}), {k})", 18, (1, 11, 13, 18)),
    "ReduceL1": ("sum(abs({x}), {k})", 18, (1, 11, 13, 18)),
    "ReduceL2": ("sqrt(sum(square({x}), {k}))", 18, (1, 11, 13, 18)),
    "ReduceLogSum": ("log(sum({x}, {k}))", 18, (1, 11, 13, 18, 28)),
}


def _reduce(op: str, form: str, input_since: int, versions):
    @lowers(op, *versions)
    def lower(n):
        x = n.x(0)
        keep = n.only("keepdims", (0, 1), 1)
        if n.version >= input_since:
            axes = n.ints(1, "axes") if n.has(1) else None
            noop = n.only("noop_with_empty_axes", (0, 1), 0)
            if not axes and noop:
                n.emit(x.name)
                return
        else:
            axes = n.attr("axes", None)
        axes = list(range(x.rank)) if not axes else [int(a) for a in axes]
        if any(not -x.rank <= a < x.rank for a in axes):
            n.refuse(f"axes {axes} are out of range for rank {x.rank}")
        if x.rank and any(x.shape[a] == 0 for a in axes) and op in ("ReduceMax", "ReduceMin"):
            n.refuse("a reduction over an empty axis is not supported")
        opts = f"axis={ints(axes)}" + (", keepdims=true" if keep else "")
        if x.rank == 0:
            n.emit(form.format(x=x.name, k="axis=None"))
            return
        n.emit(form.format(x=x.name, k=opts))


for _op, (_f2, _since, _v) in REDUCE.items():
    _reduce(_op, _f2, _since, _v)


def _arg(op: str, fn: str):
    @lowers(op, 11, 12, 13)
    def lower(n):
        x = n.x(0)
        axis = int(n.attr("axis", 0))
        keep = n.only("keepdims", (0, 1), 1)
        n.only("select_last_index", (0,), 0)
        expr = f"{fn}({x.name}, axis={axis})"
        n.emit(f"expand_dims({expr}, {axis % max(x.rank, 1)})" if keep else expr)


_arg("ArgMax", "argmax")
_arg("ArgMin", "argmin")


@lowers("CumSum", 11, 14)
def cumsum(n):
    x = n.x(0)
    axis = n.ints(1, "axis")
    if len(axis) != 1:
        n.refuse("axis must hold one value")
    rev = n.only("reverse", (0, 1), 0)
    excl = n.only("exclusive", (0, 1), 0)
    expr = f"cumsum({x.name}, {axis[0]}" + (", reverse=true)" if rev else ")")
    n.emit(f"{expr} - {x.name}" if excl else expr)

