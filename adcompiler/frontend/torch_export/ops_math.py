"""Core ATen elementwise ops, matrix products, casts and reductions as TDSL."""
from __future__ import annotations

from ..importer.names import ints, number
from .table import TDSL_OF, lowers

UNARY = {
    "aten.relu.default": "relu({x})", "aten.tanh.default": "tanh({x})",
    "aten.sigmoid.default": "sigmoid({x})", "aten.exp.default": "exp({x})",
    "aten.log.default": "log({x})", "aten.sqrt.default": "sqrt({x})",
    "aten.rsqrt.default": "rsqrt({x})", "aten.neg.default": "-{x}",
    "aten.abs.default": "abs({x})", "aten.erf.default": "erf({x})",
    "aten.sin.default": "sin({x})", "aten.cos.default": "cos({x})",
    "aten.reciprocal.default": "reciprocal({x})", "aten.log1p.default": "log1p({x})",
    "aten.expm1.default": "expm1({x})", "aten.sign.default": "sign({x})",
    "aten.floor.default": "floor({x})", "aten.ceil.default": "ceil({x})",
    "aten.clone.default": "{x}", "aten.alias.default": "{x}",
    "aten.lift_fresh_copy.default": "{x}", "aten.detach.default": "stop_gradient({x})",
    "aten.logical_not.default": "{x} == false",
}
BINARY = {
    "aten.mul.Tensor": "{a} * {b}", "aten.mul.Scalar": "{a} * {b}",
    "aten.div.Scalar": "{a} / {b}",
    "aten.pow.Tensor_Scalar": "{a} ** {b}", "aten.pow.Tensor_Tensor": "{a} ** {b}",
    "aten.maximum.default": "maximum({a}, {b})", "aten.minimum.default": "minimum({a}, {b})",
    "aten.eq.Tensor": "{a} == {b}", "aten.ne.Tensor": "{a} != {b}",
    "aten.lt.Tensor": "{a} < {b}", "aten.le.Tensor": "{a} <= {b}",
    "aten.gt.Tensor": "{a} > {b}", "aten.ge.Tensor": "{a} >= {b}",
    "aten.lt.Scalar": "{a} < {b}", "aten.le.Scalar": "{a} <= {b}",
    "aten.gt.Scalar": "{a} > {b}", "aten.ge.Scalar": "{a} >= {b}",
    "aten.logical_and.default": "where({a}, {b}, false)",
    "aten.logical_or.default": "where({a}, true, {b})",
}


def _p(text: str) -> str:
    return f"({text})" if text.startswith("-") or " " in text else text


def _unary(target: str, form: str):
    @lowers(target)
    def lower(n):
        x = n.x(0)
        if target == "aten.logical_not.default" and x.dtype != "bool":
            n.refuse("logical_not of a non-bool tensor is not supported")
        if target == "aten.clone.default":
            n.arg(1, None, "memory_format")
        n.emit(form.format(x=x.name))


def _binary(target: str, form: str):
    @lowers(target)
    def lower(n):
        a, b = n.x(0, literal=True), n.x(1, literal=True)
        n.emit(form.format(a=_p(a.name), b=_p(b.name)))


for _t, _f in UNARY.items():
    _unary(_t, _f)
for _t, _f in BINARY.items():
    _binary(_t, _f)


@lowers("aten.add.Tensor", "aten.sub.Tensor", "aten.add.Scalar", "aten.sub.Scalar")
def add_sub(n):
    a, b = n.x(0, literal=True), n.x(1, literal=True)
    alpha = n.arg(2, 1, "alpha")
    rhs = _p(b.name) if alpha == 1 else f"{number(alpha, a.dtype)} * {_p(b.name)}"
    n.emit(f"{_p(a.name)} {'+' if 'add' in n.op else '-'} {rhs}")


@lowers("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(n):
    a, b = n.x(0, literal=True), n.x(1, literal=True)
    alpha = n.arg(2, 1, "alpha")
    lhs = _p(a.name) if alpha == 1 else f"{number(alpha, a.dtype)} * {_p(a.name)}"
    n.emit(f"{_p(b.name)} - {lhs}")


@lowers("aten.div.Tensor", "aten.div.Tensor_mode")
def div(n):
    a, b = n.x(0, literal=True), n.x(1, literal=True)
    if n.arg(2, None, "rounding_mode") is not None:
        n.refuse("div with a rounding mode is not supported")
    if not (a.type.is_float or b.type.is_float):
        n.refuse("integer true division is not supported")
    n.emit(f"{_p(a.name)} / {_p(b.name)}")


@lowers("aten.eq.Scalar", "aten.ne.Scalar")
def eq_scalar(n):
    """Comparisons with an infinity as comparisons with the largest finite number (the
    same result: nothing lies between them), since literals are finite."""
    x = n.x(0)
    v = n.arg(1)
    neg = n.op.endswith("ne.Scalar")
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        big = {"f32": 3.4028234663852886e38, "f64": 1.7976931348623157e308,
               "f16": 65504.0}[x.dtype]
        test = f"{x.name} > {number(big, 'f64')}" if v > 0 else \
            f"{x.name} < -{number(big, 'f64')}"
        n.emit(f"({test}) == false" if neg else test)
        return
    lit = number(v, x.dtype) if not isinstance(v, bool) else ("true" if v else "false")
    n.emit(f"{x.name} {'!=' if neg else '=='} {lit}")


@lowers("aten.where.self")
def where(n):
    c, a, b = n.x(0), n.x(1, literal=True), n.x(2, literal=True)
    n.emit(f"where({c.name}, {a.name}, {b.name})")


@lowers("aten.gelu.default")
def gelu(n):
    x = n.x(0)
    approx = n.arg(1, "none", "approximate")
    if approx not in ("none", "tanh"):
        n.refuse(f"approximate={approx!r}")
    n.emit(f"gelu({x.name})" if approx == "none" else f'gelu({x.name}, approximate="tanh")')


@lowers("aten.leaky_relu.default")
def leaky_relu(n):
    x = n.x(0)
    n.emit(f"leaky_relu({x.name}, slope={n.scalar(1, x.dtype)})" if n.has(1)
           else f"leaky_relu({x.name})")


@lowers("aten.clamp.default")
def clamp(n):
    x = n.x(0)
    lo, hi = n.arg(1, None, "min"), n.arg(2, None, "max")
    expr = x.name
    if lo is not None:
        expr = f"maximum({expr}, {number(lo, x.dtype)})"
    if hi is not None:
        expr = f"minimum({expr}, {number(hi, x.dtype)})"
    n.emit(expr)


@lowers("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def mm(n):
    n.emit(f"{n.x(0).name} @ {n.x(1).name}")


@lowers("aten.addmm.default")
def addmm(n):
    c, a, b = n.x(0), n.x(1), n.x(2)
    beta, alpha = n.arg(3, 1, "beta"), n.arg(4, 1, "alpha")
    prod = f"{a.name} @ {b.name}"
    if alpha != 1:
        prod = f"{number(alpha, a.dtype)} * ({prod})"
    n.emit(f"{prod} + {c.name}" if beta == 1 else f"{prod} + {number(beta, a.dtype)} * {c.name}")


@lowers("aten._to_copy.default", "aten.to.dtype")
def to_copy(n):
    x = n.x(0)
    dt = n.arg(1, None, "dtype")
    dt = TDSL_OF.get(str(dt)) if dt is not None else x.dtype
    if dt is None:
        n.refuse("a cast to this dtype is not supported")
    n.arg(2, None, "non_blocking")
    n.emit(x.name if dt == x.dtype else f"cast({x.name}, {dt})")


REDUCE = {"aten.sum.dim_IntList": "sum", "aten.mean.dim": "mean", "aten.amax.default": "max",
          "aten.amin.default": "min", "aten.logsumexp.default": "logsumexp"}


def _reduce(target: str, fn: str):
    @lowers(target)
    def lower(n):
        x = n.x(0)
        dims = n.arg(1, None, "dim")
        keep = n.arg(2, False, "keepdim")
        if n.arg(3, None, "dtype") is not None:
            n.refuse("a reduction dtype is not supported")
        dims = list(range(x.rank)) if not dims else [dims] if isinstance(dims, int) else dims
        if x.rank == 0:
            n.emit(x.name)
            return
        opts = f"axis={ints(dims)}" + (", keepdims=true" if keep else "")
        n.emit(f"{fn}({x.name}, {opts})")


for _t, _f in REDUCE.items():
    _reduce(_t, _f)


@lowers("aten.var.correction")
def var(n):
    x = n.x(0)
    dims = n.arg(1, None, "dim")
    corr = n.arg(2, None, "correction")
    keep = n.arg(3, False, "keepdim")
    dims = list(range(x.rank)) if not dims else dims
    opts = f"axis={ints(dims)}" + (", keepdims=true" if keep else "")
    expr = f"var({x.name}, {opts})"
    corr = 1 if corr is None else corr
    if corr:
        import math
        if not all(isinstance(x.shape[d], int) for d in dims):
            n.refuse("a corrected variance over a symbolic axis is not supported")
        cnt = math.prod(x.shape[d] for d in dims)
        expr = f"{expr} * {number(cnt / (cnt - corr), x.dtype)}"
    n.emit(expr)


@lowers("aten.any.dim", "aten.any.dims")
def any_(n):
    x = n.x(0)
    dims = n.arg(1, None, "dim")
    keep = n.arg(2, False, "keepdim")
    dims = [dims] if isinstance(dims, int) else dims
    opts = f"axis={ints(dims)}" + (", keepdims=true" if keep else "")
    n.emit(f"sum(cast({x.name}, i64), {opts}) > 0")


@lowers("aten.full_like.default")
def full_like(n):
    x = n.x(0)
    v = n.arg(1)
    if n.arg(2, None, "dtype") not in (None,):
        n.refuse("full_like with a dtype is not supported")
    lit = number(v, x.dtype) if x.dtype != "bool" else None
    if lit is None:
        n.refuse("full_like of a bool tensor is not supported")
    n.emit(f"zeros_like({x.name})" if v == 0 else f"zeros_like({x.name}) + {lit}")
