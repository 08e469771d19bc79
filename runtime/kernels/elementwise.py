"""Kernels of elementwise ops.

Results keep the operands' float dtype: constants are Python scalars (weakly typed under
NumPy 2 and CuPy, so they never widen an f32 array), and an integer operand that meets a
float one is converted to that float dtype first.
"""
import math

from .table import ELEMENTWISE_OUT, kernel, out_kernel

GELU_K = math.sqrt(2.0 / math.pi)


def _promote(xp, *arrays):
    """Convert integer/bool arrays to the float dtype of the others, if there is one."""
    floats = [a.dtype for a in arrays if a.dtype.kind == "f"]
    if not floats:
        return arrays
    return tuple(a if a.dtype.kind == "f" else a.astype(floats[0]) for a in arrays)


for _name, _fn in {
    "neg": lambda xp, x: -x,
    "exp": lambda xp, x: xp.exp(x),
    "log": lambda xp, x: xp.log(x),
    "log1p": lambda xp, x: xp.log1p(x),
    "expm1": lambda xp, x: xp.expm1(x),
    "sqrt": lambda xp, x: xp.sqrt(x),
    "rsqrt": lambda xp, x: 1 / xp.sqrt(x),
    "abs": lambda xp, x: xp.abs(x),
    "sign": lambda xp, x: xp.sign(x),
    "sin": lambda xp, x: xp.sin(x),
    "cos": lambda xp, x: xp.cos(x),
    "tanh": lambda xp, x: xp.tanh(x),
    "relu": lambda xp, x: xp.maximum(x, 0),
    "square": lambda xp, x: x * x,
    "reciprocal": lambda xp, x: 1 / x,
    # rounding an integer tensor is the identity (xp.floor would return floats)
    "round": lambda xp, x: xp.round(x) if x.dtype.kind == "f" else x,
    "floor": lambda xp, x: xp.floor(x) if x.dtype.kind == "f" else x,
    "ceil": lambda xp, x: xp.ceil(x) if x.dtype.kind == "f" else x,
}.items():
    kernel(_name)(_fn)


@kernel("sigmoid")
def sigmoid(xp, x):
    # exp(-|x|) <= 1 never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


@kernel("softplus")
def softplus(xp, x):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), finite for any finite x
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


def _erf(xp, x):
    """erf in `x`'s dtype: SciPy's for NumPy arrays, cupyx's for CuPy arrays."""
    if xp.__name__ == "numpy":
        from scipy.special import erf
    else:
        from cupyx.scipy.special import erf
    return erf(x).astype(x.dtype, copy=False)


@kernel("erf")
def erf(xp, x):
    return _erf(xp, x)


@kernel("gelu")
def gelu(xp, x, approximate="none"):
    if approximate == "none":   # x Phi(x), PyTorch's default
        return 0.5 * x * (1 + _erf(xp, x * x.dtype.type(math.sqrt(0.5))))
    return 0.5 * x * (1 + xp.tanh(GELU_K * (x + 0.044715 * x * x * x)))


@kernel("leaky_relu")
def leaky_relu(xp, x, slope=0.01):
    return xp.where(x > 0, x, x * slope)


@kernel("clip")
def clip(xp, x, lo, hi):
    x, lo, hi = _promote(xp, x, lo, hi)
    return xp.minimum(xp.maximum(x, lo), hi)


def _arith(fn):
    return lambda xp, a, b: fn(xp, *_promote(xp, a, b))


for _name, _fn in {
    "add": lambda xp, a, b: a + b,
    "sub": lambda xp, a, b: a - b,
    "mul": lambda xp, a, b: a * b,
    "div": lambda xp, a, b: a / b,
    "pow": lambda xp, a, b: xp.power(a, b),
    "maximum": lambda xp, a, b: xp.maximum(a, b),
    "minimum": lambda xp, a, b: xp.minimum(a, b),
}.items():
    kernel(_name)(_arith(_fn))

for _name, _fn in {
    "lt": lambda xp, a, b: xp.less(a, b),
    "le": lambda xp, a, b: xp.less_equal(a, b),
    "gt": lambda xp, a, b: xp.greater(a, b),
    "ge": lambda xp, a, b: xp.greater_equal(a, b),
    "eq": lambda xp, a, b: xp.equal(a, b),
    "ne": lambda xp, a, b: xp.not_equal(a, b),
}.items():
    kernel(_name)(_fn)


@kernel("where")
def where(xp, cond, a, b):
    return xp.where(cond, *_promote(xp, a, b))


# ---- the same ops writing into a planned buffer (operands of one dtype) ----------------

def _ufunc_out(name: str, *pre):
    """``xp.<name>(*pre, *operands, out=out)``: `pre` holds leading scalar operands."""
    return lambda xp, *args, out: getattr(xp, name)(*pre, *args, out=out)


for _names, _ufunc, _pre in (
    (("neg",), "negative", ()), (("exp",), "exp", ()), (("log",), "log", ()),
    (("log1p",), "log1p", ()), (("expm1",), "expm1", ()), (("sqrt",), "sqrt", ()),
    (("abs",), "abs", ()), (("sin",), "sin", ()), (("cos",), "cos", ()),
    (("tanh",), "tanh", ()), (("reciprocal",), "divide", (1,)),
    (("add",), "add", ()), (("sub",), "subtract", ()), (("mul",), "multiply", ()),
    (("div",), "divide", ()), (("pow",), "power", ()), (("maximum",), "maximum", ()), (("minimum",), "minimum", ()),
    (("lt",), "less", ()), (("le",), "less_equal", ()), (("gt",), "greater", ()),
    (("ge",), "greater_equal", ()), (("eq",), "equal", ()), (("ne",), "not_equal", ()),
):
    out_kernel(*_names)(_ufunc_out(_ufunc, *_pre))
    ELEMENTWISE_OUT.update(_names)


@out_kernel("relu")
def relu_out(xp, x, out):
    return xp.maximum(x, 0, out=out)


@out_kernel("square")
def square_out(xp, x, out):
    return xp.multiply(x, x, out=out)


@out_kernel("gelu", rule="float")
def gelu_out(xp, x, out, approximate="none"):
    """`gelu`'s operations, in its order, through one temporary: `out` holds ``0.5 * x``
    and the temporary the factor beside it (the table kernel makes a new array per
    operation). `x` is read after `out` is written, so `out` must not be `x`."""
    if approximate == "none":
        t = xp.multiply(x, x.dtype.type(math.sqrt(0.5)), out=xp.empty_like(x))
        if xp.__name__ == "numpy":
            from scipy.special import erf
            erf(t, out=t)
        else:
            t = _erf(xp, t)
    else:
        t = xp.multiply(x, 0.044715, out=xp.empty_like(x))  # an array even when 0-d
        xp.multiply(t, x, out=t)
        xp.multiply(t, x, out=t)
        xp.add(x, t, out=t)
        xp.multiply(t, GELU_K, out=t)
        xp.tanh(t, out=t)
    xp.add(t, 1, out=t)
    xp.multiply(x, 0.5, out=out)
    return xp.multiply(out, t, out=out)
