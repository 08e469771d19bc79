"""NumPy and ``math`` functions, array methods and builtins, each as the TDSL it spells.

One entry per function: its Python signature (the arguments adc supports, with NumPy's
defaults) and a handler that builds the TDSL call. An elementwise function of compile-time
numbers is computed at compile time (``np.sqrt(2.0)``).
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from .calls import STATIC_BUILTINS, method, numpy_fn
from .values import NUMPY_DTYPE, TDSL_DTYPE, Tensor, as_dtype, describe, has_tensor, plain_number

# ---- elementwise ------------------------------------------------------------------------

UNARY = {"exp": (np.exp, math.exp), "log": (np.log, math.log),
         "log1p": (np.log1p, math.log1p), "expm1": (np.expm1, math.expm1),
         "sqrt": (np.sqrt, math.sqrt), "abs": (np.abs, np.absolute, np.fabs, math.fabs),
         "sign": (np.sign,), "sin": (np.sin, math.sin), "cos": (np.cos, math.cos),
         "tanh": (np.tanh, math.tanh), "square": (np.square,),
         "reciprocal": (np.reciprocal,), "floor": (np.floor,), "ceil": (np.ceil,),
         "neg": (np.negative,), "round": (np.rint,), "erf": (math.erf,)}


def _unary(op: str, fn):
    def handler(self, a, call):
        x = a["x"]
        if not has_tensor(x):
            return self.fold_call(fn, [x], call)
        return self.op(op, [self.array(x, call)], call)
    return handler


for _op, _fns in UNARY.items():
    for _f in _fns:
        numpy_fn(_f, sig="x")(_unary(_op, _f))


@numpy_fn(np.positive, sig="x")
def _positive(self, a, call):
    return a["x"]


@numpy_fn(np.round, np.around, sig="x, decimals=0")
def _round(self, a, call):
    if a["decimals"] != 0:
        raise self.src.error("np.round with decimals is not supported", call.node)
    return _unary("round", np.round)(self, a, call)


def _composite(funcs, build):
    """An elementwise function written with other ops: `build(self, x, call)`."""
    for fn in funcs:
        def handler(self, a, call, fn=fn):
            x = a["x"]
            if not has_tensor(x):
                return self.fold_call(fn, [x], call)
            return build(self, self.array(x, call), call)
        numpy_fn(fn, sig="x")(handler)


def _mul(self, x, c, call):
    return self.op("mul", [x, c], call)


def _exps(self, x, call, combine):
    e, m = self.op("exp", [x], call), self.op("exp", [self.negate(x, call)], call)
    return _mul(self, self.op(combine, [e, m], call), 0.5, call)


_composite((np.log2,), lambda self, x, call: self.op(
    "div", [self.op("log", [x], call), math.log(2.0)], call))
_composite((np.log10, math.log10), lambda self, x, call: self.op(
    "div", [self.op("log", [x], call), math.log(10.0)], call))
_composite((np.exp2,), lambda self, x, call: self.op(
    "exp", [_mul(self, x, math.log(2.0), call)], call))
_composite((np.tan, math.tan), lambda self, x, call: self.op(
    "div", [self.op("sin", [x], call), self.op("cos", [x], call)], call))
_composite((np.sinh, math.sinh), lambda self, x, call: _exps(self, x, call, "sub"))
_composite((np.cosh, math.cosh), lambda self, x, call: _exps(self, x, call, "add"))

BINARY = {"add": (np.add,), "sub": (np.subtract,), "mul": (np.multiply,),
          "div": (np.divide, np.true_divide), "pow": (np.power, math.pow),
          "maximum": (np.maximum, np.fmax), "minimum": (np.minimum, np.fmin),
          "gt": (np.greater,), "ge": (np.greater_equal,), "lt": (np.less,),
          "le": (np.less_equal,), "eq": (np.equal,), "ne": (np.not_equal,)}


_OPERATOR = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "gt": ">",
             "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!="}


def _binary(op: str, fn):
    def handler(self, a, call):
        x, y = a["x1"], a["x2"]
        if not has_tensor(x) and not has_tensor(y):
            return self.fold_call(fn, [x, y], call)
        if op in _OPERATOR:   # as the operator: the same op, and NumPy's int promotion
            return self.binary_op(_OPERATOR[op], self.array(x, call), self.array(y, call),
                                  call)
        return self.op(op, [self.array(x, call), self.array(y, call)], call)
    return handler


for _op, _fns in BINARY.items():
    for _f in _fns:
        numpy_fn(_f, sig="x1, x2")(_binary(_op, _f))


@numpy_fn(np.logaddexp, sig="x1, x2")
def _logaddexp(self, a, call):
    x, y = a["x1"], a["x2"]
    if not has_tensor(x) and not has_tensor(y):
        return self.fold_call(np.logaddexp, [x, y], call)
    x, y = self.array(x, call), self.array(y, call)
    d = self.op("abs", [self.op("sub", [x, y], call)], call)
    tail = self.op("log1p", [self.op("exp", [self.negate(d, call)], call)], call)
    return self.op("add", [self.op("maximum", [x, y], call), tail], call)


@numpy_fn(np.where, sig="condition, x=None, y=None")
def _where(self, a, call):
    if a["x"] is None or a["y"] is None:
        raise self.src.error("np.where(condition) (the indices form) is not supported; "
                             "give np.where(condition, x, y)", call.node)
    return self.op("where", [self.array(a["condition"], call), self.array(a["x"], call),
                             self.array(a["y"], call)], call)


@numpy_fn(np.clip, sig="a, a_min, a_max")
def _clip(self, a, call):
    x, lo, hi = a["a"], a["a_min"], a["a_max"]
    if not has_tensor(x) and not has_tensor(lo) and not has_tensor(hi):
        return self.fold_call(np.clip, [x, lo, hi], call)
    x = self.array(x, call)
    if lo is None and hi is None:
        raise self.src.error("np.clip needs a_min or a_max", call.node)
    if lo is None:
        return self.op("minimum", [x, self.array(hi, call)], call)
    if hi is None:
        return self.op("maximum", [x, self.array(lo, call)], call)
    return self.op("clip", [x, self.array(lo, call), self.array(hi, call)], call)


method("clip", sig="a, min=None, max=None")(
    lambda self, a, call: _clip(self, {"a": a["a"], "a_min": a["min"], "a_max": a["max"]},
                                call))


@numpy_fn(np.logical_and, sig="x1, x2")
def _and(self, a, call):
    return self.op("where", [self.array(a["x1"], call), self.array(a["x2"], call), False],
                   call)


@numpy_fn(np.logical_or, sig="x1, x2")
def _or(self, a, call):
    return self.op("where", [self.array(a["x1"], call), True, self.array(a["x2"], call)],
                   call)


@numpy_fn(np.logical_not, sig="x")
def _not(self, a, call):
    return self.op("eq", [self.array(a["x"], call), False], call)


# ---- reductions ---------------------------------------------------------------------------

def _reduction(op: str):
    def handler(self, a, call):
        for k in ("out", "dtype", "initial", "where"):
            if a.get(k) is not None:
                raise self.src.error(f"{call.name}(): '{k}=' is not supported", call.node)
        x = self.array(a["x"], call)
        axis = self.axes(a["axis"], call)
        keep = a["keepdims"]
        if not isinstance(keep, (bool, np.bool_)):
            raise self.src.error(f"{call.name}(): keepdims must be True or False", call.node)
        out = self.op(op, [x], call, axis=axis, keepdims=bool(keep) or None)
        ddof = a.get("ddof", 0)
        if op == "var" and ddof:
            n = self.reduced_count(x, axis, call)
            out = self.op("mul", [out, n / (n - ddof)], call)
        if a.get("std"):
            out = self.op("sqrt", [out], call)
        return out
    return handler


_REDUCE_SIG = "x, axis=None, dtype=None, out=None, keepdims=False"
numpy_fn(np.sum, sig=_REDUCE_SIG)(_reduction("sum"))
numpy_fn(np.mean, sig=_REDUCE_SIG)(_reduction("mean"))
numpy_fn(np.max, np.amax, sig="x, axis=None, out=None, keepdims=False, initial=None, "
         "where=None")(_reduction("max"))
numpy_fn(np.min, np.amin, sig="x, axis=None, out=None, keepdims=False, initial=None, "
         "where=None")(_reduction("min"))
numpy_fn(np.var, sig=_REDUCE_SIG + ", ddof=0")(_reduction("var"))
method("sum", sig=_REDUCE_SIG)(_reduction("sum"))
method("mean", sig=_REDUCE_SIG)(_reduction("mean"))
method("max", sig="x, axis=None, out=None, keepdims=False")(_reduction("max"))
method("min", sig="x, axis=None, out=None, keepdims=False")(_reduction("min"))
method("var", sig=_REDUCE_SIG + ", ddof=0")(_reduction("var"))


def _std(self, a, call):
    return _reduction("var")(self, {**a, "std": True}, call)


numpy_fn(np.std, sig=_REDUCE_SIG + ", ddof=0")(_std)
method("std", sig=_REDUCE_SIG + ", ddof=0")(_std)


@numpy_fn(np.linalg.norm, sig="x, ord=None, axis=None, keepdims=False")
def _norm(self, a, call):
    if a["ord"] not in (None, 2, "fro") or (a["ord"] == 2 and a["axis"] is None and
                                          self.rank(self.array(a["x"], call), call) > 1):
        raise self.src.error("np.linalg.norm: only the 2-norm of vectors and the Frobenius "
                             "norm are supported", call.node)
    x = self.array(a["x"], call)
    s = self.op("sum", [self.op("mul", [x, x], call)], call, axis=self.axes(a["axis"], call),
                keepdims=bool(a["keepdims"]) or None)
    return self.op("sqrt", [s], call)


# ---- linear algebra -------------------------------------------------------------------------

@numpy_fn(np.matmul, sig="x1, x2")
def _matmul(self, a, call):
    return self.op("matmul", [self.array(a["x1"], call), self.array(a["x2"], call)], call)


@numpy_fn(np.dot, sig="a, b")
def _dot(self, a, call):
    x, y = self.array(a["a"], call), self.array(a["b"], call)
    rx, ry = self.rank(x, call), self.rank(y, call)
    if rx == 0 or ry == 0:
        return self.op("mul", [x, y], call)
    if rx > 2 or ry > 2:
        raise self.src.error("np.dot of arrays of rank above 2 is not supported; use "
                             "np.matmul or np.einsum", call.node)
    return self.op("matmul", [x, y], call)


method("dot", sig="a, b")(_dot)


@numpy_fn(np.einsum, sig="subscripts, *operands")
def _einsum(self, a, call):
    spec = a["subscripts"]
    if not isinstance(spec, str):
        raise self.src.error("np.einsum needs the subscripts string first", call.node)
    ops = [self.array(x, call) for x in a["operands"]]
    return self.op("einsum", ops, call, spec=spec)


@numpy_fn(np.outer, sig="a, b")
def _outer(self, a, call):
    x, y = (self.op("reshape", [self.array(a[k], call)], call, shape=(-1,)) for k in "ab")
    return self.op("einsum", [x, y], call, spec="i,j->ij")


@numpy_fn(np.inner, sig="a, b")
def _inner(self, a, call):
    x, y = self.array(a["a"], call), self.array(a["b"], call)
    if self.rank(x, call) != 1 or self.rank(y, call) != 1:
        raise self.src.error("np.inner is supported for 1-D arrays", call.node)
    return self.op("einsum", [x, y], call, spec="i,i->")


@numpy_fn(np.trace, sig="a")
def _trace(self, a, call):
    x = self.array(a["a"], call)
    shape = self.shape(x, call)
    if len(shape) != 2:
        raise self.src.error("np.trace is supported for 2-D arrays", call.node)
    eye = self.op("one_hot", [self.op("arange", [], call, n=shape[0], dtype=np.int64)],
                  call, n=shape[1], dtype=NUMPY_DTYPE[self.type_of(x).dtype])
    return self.op("sum", [self.op("mul", [x, eye], call)], call)


# ---- builtins -------------------------------------------------------------------------------

@numpy_fn(builtins.abs, sig="x")
def _abs(self, a, call):
    x = a["x"]
    return abs(x) if not has_tensor(x) else self.op("abs", [x], call)


@numpy_fn(builtins.len, sig="x")
def _len(self, a, call):
    x = a["x"]
    if isinstance(x, Tensor):
        shape = self.shape(x, call)
        if not shape:
            raise self.src.error("len() of a 0-d array", call.node)
        return shape[0]
    try:
        return len(x)
    except TypeError:
        raise self.src.error(f"len() of {describe(x)}", call.node) from None


@numpy_fn(builtins.sum, sig="iterable, start=0")
def _sum(self, a, call):
    seq = a["iterable"]
    if isinstance(seq, Tensor):
        raise self.src.error("sum() of an array: use np.sum", call.node)
    total = a["start"]
    for x in seq:
        if has_tensor(total) or has_tensor(x):
            total = self.op("add", [total, x], call)
        else:
            total = total + x
    return total


@numpy_fn(builtins.float, sig="x=0.0")
def _float(self, a, call):
    if has_tensor(a["x"]):
        raise self.src.error("float() of a run-time value: keep it an array (x.astype("
                             "np.float64) for a dtype)", call.node)
    return float(a["x"])


def _static(fn):
    def handler(self, a, call):
        args = a["args"]
        kwargs = {}
        if any(isinstance(x, Tensor) for x in args):
            hint = {"min": "np.minimum", "max": "np.maximum", "round": "np.round",
                    "int": "x.astype(np.int64)", "bool": "a comparison"}.get(fn.__name__, "")
            raise self.src.error(f"{fn.__name__}() of a run-time value" +
                                 (f": use {hint}" if hint else ""), call.node)
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the user's own Python error
            raise self.src.error(f"{fn.__name__}(): {e}", call.node) from None
    return handler


for _f in STATIC_BUILTINS:
    numpy_fn(_f, sig="*args", name=_f.__name__)(_static(_f))


# ---- dtypes ---------------------------------------------------------------------------------

def _dtype_call(dtype):
    def handler(self, a, call):
        x = a["x"]
        if not has_tensor(x):
            return plain_number(dtype.type(x))
        return self.cast(self.array(x, call), dtype, call)
    return handler


for _d in TDSL_DTYPE:
    if _d.kind != "b":
        numpy_fn(_d.type, sig="x=0", name=f"np.{_d.name}")(_dtype_call(_d))


@method("astype", sig="x, dtype")
def _astype(self, a, call):
    d = as_dtype(a["dtype"])
    if d is None:
        raise self.src.error(f"astype: unsupported dtype {a['dtype']!r}", call.node)
    return self.cast(a["x"], d, call)


@numpy_fn(np.asarray, np.array, sig="a, dtype=None")
def _asarray(self, a, call):
    x = self.array(a["a"], call)
    if a["dtype"] is None:
        return x
    d = as_dtype(a["dtype"])
    if d is None:
        raise self.src.error(f"unsupported dtype {a['dtype']!r}", call.node)
    return self.cast(x, d, call)


@method("copy", sig="x")
def _copy(self, a, call):
    return a["x"]

