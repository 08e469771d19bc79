"""CUDA source of fused groups: one ``cupy.ElementwiseKernel`` per ``fused`` op, or one
``cupy.ReductionKernel`` where a reduction closes the group.

Each op of a group becomes one typed statement, in region order; intermediates are kernel
locals, so the group reads its inputs and writes its outputs once. The formulas are those of
``adc_runtime.kernels`` (the stable sigmoid, softplus and bce_with_logits, the tanh GELU,
NaN-propagating maximum/minimum, round half to even). Arithmetic runs in the result's type,
with float16 computed in float and rounded back after every op, as NumPy does. Math
functions are picked by type: ``expf`` for float, ``exp`` for double.

``cast`` converts as C does, which is NumPy's rule where NumPy defines one: float to integer
truncates toward zero, anything to bool is ``x != 0`` (NaN is true), integers and bools to
float round to nearest, and f64 to f16 rounds once (no detour through float). A NaN, an
infinity or an out-of-range float cast to an integer is undefined in C and
platform-dependent in NumPy (with a warning), so those values may differ. ``stop_gradient``
is the identity.

A group closed by a reduction (`adcompiler.passes.fuse.CLOSERS`) becomes a ReductionKernel:
its elementwise statements go into a ``__device__`` function ``<kernel>_map`` in the
kernel's preamble, returning the reduction's operand rounded to its dtype; ``map_expr``
calls it, and the reduction gives ``reduce_expr``, ``identity`` and ``post_map_expr``:

* ``sum`` and ``sum_to``: ``a + b`` from 0, accumulated in float for f16 and f32, double for
  f64 and ``long long`` for integers and bools (an i32 sum wraps as NumPy's int64 sum
  cast back to i32 does);
* ``mean``: the float sum divided by the count of reduced elements,
  ``_in_ind.size() / _out_ind.size()`` (f16 accumulates in float, as NumPy's mean does);
* ``max``/``min``: NaN-propagating ``adc_max``/``adc_min`` from -inf/+inf (floats; a
  slice of NaNs gives NaN, as in NumPy) or the integer type's extreme.

The launch passes ``axis`` (normalized, sorted) and ``keepdims`` from the reduction; for
``sum_to`` the runtime works the axes out from the shapes (`KernelSpec.in_shape`,
`KernelSpec.to_shape`) and reduces with ``keepdims``, then reshapes. A GPU sums in another
order than NumPy's pairwise summation, so reduction results agree with NumPy to rounding
(about ``n * eps`` relative for n reduced elements), not bitwise; max and min are exact.

Kernel names are ``adc_<function>_<k>``, `k` counting the fused ops of the function in
order, so the same program always gives the same source.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.core import Function, Module, Op, Value
from ..ir.types import join_dtypes
from ..ops.reduce import reduced_axes
from ..passes.fuse import CLOSERS
from .names import sanitize

PARAM_TYPE = {"f16": "float16", "f32": "float32", "f64": "float64", "i32": "int32",
              "i64": "int64", "bool": "bool"}
STORAGE = {"f16": "float16", "f32": "float", "f64": "double", "i32": "int",
           "i64": "long long", "bool": "bool"}
COMPUTE = {**STORAGE, "f16": "float"}  # float16 arithmetic runs in float

GELU_K = math.sqrt(2.0 / math.pi)

# helpers whose NaN behaviour matches NumPy's maximum/minimum (fmaxf would drop a NaN)
PREAMBLE = """\
template <typename T> __device__ __forceinline__ T adc_max(T a, T b) {
    return (a != a || a > b) ? a : b;
}
template <typename T> __device__ __forceinline__ T adc_min(T a, T b) {
    return (a != a || a < b) ? a : b;
}
"""

_FLOAT_FNS = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "floor", "ceil",
              "rint", "fabs", "pow")


def math_fn(name: str, ctype: str) -> str:
    """``expf`` for float, ``exp`` for double."""
    assert name in _FLOAT_FNS, name
    return name + "f" if ctype == "float" else name


def literal(value, dtype: str) -> str:
    """A constant of `dtype` as C source, rounded to the dtype first (as NumPy does)."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in ("i32", "i64"):
        return f"{int(value)}{'LL' if dtype == 'i64' else ''}"
    x = float(np.asarray(value, dtype={"f16": np.float16, "f32": np.float32,
                                       "f64": np.float64}[dtype]))
    single = COMPUTE[dtype] == "float"
    if math.isnan(x):
        return "__int_as_float(0x7fc00000)" if single else "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(x):
        inf = "__int_as_float(0x7f800000)" if single else \
            "__longlong_as_double(0x7ff0000000000000LL)"
        return inf if x > 0 else f"(-{inf})"
    text = repr(x)  # the shortest decimal that reads back as x
    return f"{text}f" if single else text


ELEMENTWISE, REDUCTION = "elementwise", "reduction"


@dataclass(frozen=True)
class KernelSpec:
    """What the CuPy runtime needs to build and launch one fused op's kernel.

    The kernel takes the fused op's operands, then `captures` (outer values its region reads
    directly), then one output per result. `kind` is ``"elementwise"`` (`operation` is the
    statement list) or ``"reduction"`` (`operation` is ``map_expr``; the map function is in
    `preamble` after `PREAMBLE`; the launch takes ``axis=axis, keepdims=keepdims``, or, for
    ``sum_to`` (`to_shape` set), axes found from the run-time `in_shape` and `to_shape`)."""

    name: str
    in_params: str
    out_params: str
    operation: str
    captures: tuple = ()
    where: str = ""
    preamble: str = PREAMBLE
    kind: str = ELEMENTWISE
    reduce_expr: str = ""
    post_map_expr: str = ""
    identity: str = ""
    reduce_type: str = ""
    axis: tuple = ()
    keepdims: bool = False
    in_shape: tuple = ()
    to_shape: tuple | None = None

    def python(self) -> str:
        """The kernel as a Python statement building it."""
        head = f"# {self.where}\n" if self.where else ""
        if self.kind == REDUCTION:
            if self.to_shape is not None:
                launch = (f"axes summed from {list(self.in_shape)} down to "
                          f"{list(self.to_shape)} (sum_to), keepdims=True, then reshaped")
            else:
                launch = f"axis={self.axis!r}, keepdims={self.keepdims!r}"
            map_fn = self.preamble[len(PREAMBLE):]
            return (f"{head}# launch: {launch}\n"
                    f"{self.name} = cupy.ReductionKernel(\n"
                    f"    {self.in_params!r},\n    {self.out_params!r},\n"
                    f"    {self.operation!r},\n    {self.reduce_expr!r},\n"
                    f"    {self.post_map_expr!r},\n    {self.identity!r},\n"
                    f"    {self.name!r}, reduce_type={self.reduce_type!r},\n"
                    f"    preamble=PREAMBLE + r'''\n{map_fn}''')\n")
        body = "\n".join("    " + line for line in self.operation.splitlines())
        return (f"{head}{self.name} = cupy.ElementwiseKernel(\n"
                f"    {self.in_params!r},\n    {self.out_params!r},\n"
                f"    r'''\n{body}\n''',\n    {self.name!r}, preamble=PREAMBLE)\n")


class _KernelWriter:
    def __init__(self, op: Op):
        self.op = op
        self.names: dict[Value, str] = {}
        self.lines: list[str] = []
        self.temps = 0

    def ref(self, v: Value, ctype: str) -> str:
        """`v` as an expression of type `ctype`."""
        name = self.names[v]
        return name if STORAGE[v.type.dtype] == ctype else f"({ctype}){name}"

    def let(self, dtype: str, expr: str, ctype: str) -> str:
        name = f"t{self.temps}"
        self.temps += 1
        st = STORAGE[dtype]
        rhs = expr if st == ctype else f"({st})({expr})"
        self.lines.append(f"const {st} {name} = {rhs};")
        return name

    def local(self, ctype: str, expr: str) -> str:
        """A helper local of the compute type (not rounded to the storage type)."""
        name = f"t{self.temps}"
        self.temps += 1
        self.lines.append(f"const {ctype} {name} = {expr};")
        return name

    def write(self) -> tuple[list[Value], list[str], str]:
        body = self.op.regions[0]
        inputs = list(body.args)
        for k, a in enumerate(inputs):
            self.names[a] = f"in{k}"
        defined = set(inputs) | {r for o in body.ops for r in o.results}
        captures = []
        for o in body.ops:
            for v in o.operands:
                if v not in defined and v not in captures:
                    captures.append(v)
        for v in captures:
            self.names[v] = f"in{len(inputs) + captures.index(v)}"
        red = reduction_of(self.op)
        for o in body.ops:
            if o is red:
                self.lines.append(f"return {self.names[o.operands[0]]};")
                break
            if o.name == "yield":
                for k, v in enumerate(o.operands):
                    self.lines.append(f"out{k} = {self.names[v]};")
            else:
                self.names[o.result] = self.statement(o)
        return inputs + captures, captures, "\n".join(self.lines)

    def statement(self, o: Op) -> str:
        dtype = o.result.type.dtype
        if o.name == "const":
            return self.let(dtype, literal(o.attrs["value"], dtype), COMPUTE[dtype])
        if o.name in ("lt", "le", "gt", "ge", "eq", "ne"):
            ct = COMPUTE[join_dtypes(*(v.type.dtype for v in o.operands))]
            a, b = (self.ref(v, ct) for v in o.operands)
            sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[o.name]
            return self.let(dtype, f"{a} {sym} {b}", "bool")
        if o.name == "cast":
            (x,) = o.operands
            src = COMPUTE[x.type.dtype]
            if dtype == "bool":
                if x.type.dtype == "bool":
                    return self.names[x]
                return self.let(dtype, f"{self.ref(x, src)} != {_c(0, src)}", "bool")
            # one C conversion from the operand's value (f64 -> f16 without a float detour)
            return self.let(dtype, self.ref(x, src), src)
        ct = COMPUTE[dtype]
        if o.name == "where":
            cond = self.names[o.operands[0]]
            a, b = (self.ref(v, ct) for v in o.operands[1:])
            return self.let(dtype, f"{cond} ? {a} : {b}", ct)
        args = [self.ref(v, ct) for v in o.operands]
        rule = RULES.get(o.name)
        if rule is None:
            raise NotImplementedError(f"no CUDA formula for the op '{o.name}'")
        return self.let(dtype, rule(self, ct, dtype, o, *args), ct)


# ---- formulas: rule(writer, ctype, dtype, op, *operand exprs) -> expression ------------

def _c(value, ct: str) -> str:
    """A literal in the compute type `ct`."""
    return literal(value, {"float": "f32", "double": "f64", "int": "i32",
                           "long long": "i64", "bool": "bool"}[ct])


def _fn(name):
    return lambda w, ct, dt, op, a: f"{math_fn(name, ct)}({a})"


def _fn2(name):
    return lambda w, ct, dt, op, a, b: f"{math_fn(name, ct)}({a}, {b})"


def _int_identity(name):
    """floor/ceil/round: the identity on integers (as the NumPy kernels)."""
    return lambda w, ct, dt, op, a: f"{math_fn(name, ct)}({a})" if dt.startswith("f") else a


def _sigmoid(w, ct, dt, op, a):
    # exp(-|x|) <= 1 never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0
    e = w.local(ct, f"{math_fn('exp', ct)}(-{math_fn('fabs', ct)}({a}))")
    one = _c(1.0, ct)
    return f"{a} >= {_c(0.0, ct)} ? {one} / ({one} + {e}) : {e} / ({one} + {e})"


def _softplus(w, ct, dt, op, a):
    return (f"adc_max({a}, {_c(0.0, ct)}) + "
            f"{math_fn('log1p', ct)}({math_fn('exp', ct)}(-{math_fn('fabs', ct)}({a})))")


def _gelu(w, ct, dt, op, a):
    return (f"{_c(0.5, ct)} * {a} * ({_c(1.0, ct)} + {math_fn('tanh', ct)}("
            f"{_c(GELU_K, ct)} * ({a} + {_c(0.044715, ct)} * {a} * {a} * {a})))")


def _sign(w, ct, dt, op, a):
    zero = _c(0.0, ct)
    return f"{a} > {zero} ? {_c(1.0, ct)} : ({a} < {zero} ? {_c(-1.0, ct)} : {a})"


RULES = {
    "neg": lambda w, ct, dt, op, a: f"-{a}",
    "stop_gradient": lambda w, ct, dt, op, a: a,
    "exp": _fn("exp"), "log": _fn("log"), "log1p": _fn("log1p"), "expm1": _fn("expm1"),
    "sqrt": _fn("sqrt"), "sin": _fn("sin"), "cos": _fn("cos"), "tanh": _fn("tanh"),
    "abs": _fn("fabs"),
    "rsqrt": lambda w, ct, dt, op, a: f"{_c(1.0, ct)} / {math_fn('sqrt', ct)}({a})",
    "sign": _sign,
    "relu": lambda w, ct, dt, op, a: f"adc_max({a}, {_c(0.0, ct)})",
    "square": lambda w, ct, dt, op, a: f"{a} * {a}",
    "reciprocal": lambda w, ct, dt, op, a: f"{_c(1.0, ct)} / {a}",
    "round": _int_identity("rint"), "floor": _int_identity("floor"),
    "ceil": _int_identity("ceil"),
    "sigmoid": _sigmoid, "softplus": _softplus, "gelu": _gelu,
    "leaky_relu": lambda w, ct, dt, op, a: (f"{a} > {_c(0.0, ct)} ? {a} : "
                                            f"{a} * {_c(op.attrs['slope'], ct)}"),
    "clip": lambda w, ct, dt, op, x, lo, hi: f"adc_min(adc_max({x}, {lo}), {hi})",
    "add": lambda w, ct, dt, op, a, b: f"{a} + {b}",
    "sub": lambda w, ct, dt, op, a, b: f"{a} - {b}",
    "mul": lambda w, ct, dt, op, a, b: f"{a} * {b}",
    "div": lambda w, ct, dt, op, a, b: f"{a} / {b}",
    "pow": _fn2("pow"),  # float only (its type rule)
    "maximum": lambda w, ct, dt, op, a, b: f"adc_max({a}, {b})",
    "minimum": lambda w, ct, dt, op, a, b: f"adc_min({a}, {b})",
    "bce": lambda w, ct, dt, op, p, y: (
        f"-({y} * {math_fn('log', ct)}({p}) + ({_c(1.0, ct)} - {y}) * "
        f"{math_fn('log1p', ct)}(-{p}))"),
    "bce_with_logits": lambda w, ct, dt, op, z, y: (
        f"adc_max({z}, {_c(0.0, ct)}) - {z} * {y} + "
        f"{math_fn('log1p', ct)}({math_fn('exp', ct)}(-{math_fn('fabs', ct)}({z})))"),
}
HANDLED = set(RULES) | {"const", "where", "lt", "le", "gt", "ge", "eq", "ne", "cast"}


# ---- reductions ----------------------------------------------------------------------

_INT_LIMITS = {"int": ("(-2147483647 - 1)", "2147483647"),
               "long long": ("(-9223372036854775807LL - 1LL)", "9223372036854775807LL")}


def reduction_of(op: Op) -> Op | None:
    """The reduction that closes the ``fused`` op `op`'s group, if one does: the region's
    last op before ``yield``, whose result is the only one yielded."""
    ops = op.regions[0].ops
    if len(ops) < 2 or ops[-1].name != "yield" or ops[-2].name not in CLOSERS:
        return None
    red = ops[-2]
    return red if list(ops[-1].operands) == [red.result] else None


def reduce_parts(red: Op) -> tuple[str, str, str, str]:
    """(reduce_expr, identity, reduce_type, post_map_expr) of the reduction `red`."""
    src, res = red.operands[0].type.dtype, red.result.type.dtype
    out = STORAGE[res]
    if red.name in ("sum", "sum_to", "mean"):
        rt = {"f16": "float", "f32": "float", "f64": "double"}.get(src, "long long")
        expr, identity = "a + b", "0"
    else:
        rt = COMPUTE[src]
        expr = f"adc_{red.name}(a, b)"
        if rt in _INT_LIMITS:
            identity = _INT_LIMITS[rt][0 if red.name == "max" else 1]
        else:
            identity = literal(float("-inf" if red.name == "max" else "inf"),
                               "f32" if rt == "float" else "f64")
    value = f"a / ({rt})(_in_ind.size() / _out_ind.size())" if red.name == "mean" else "a"
    post = f"out0 = {value}" if out == rt and red.name != "mean" else f"out0 = ({out})({value})"
    return expr, identity, rt, post


def _reduction_spec(red: Op, name: str, where: str, inputs, captures,
                    statements: str) -> KernelSpec:
    operand = red.operands[0].type
    args = ", ".join(f"const {STORAGE[v.type.dtype]} in{k}" for k, v in enumerate(inputs))
    body = "\n".join("    " + line for line in statements.splitlines())
    map_fn = (f"__device__ __forceinline__ {STORAGE[operand.dtype]} {name}_map({args}) {{\n"
              f"{body}\n}}\n")
    map_expr = f"{name}_map({', '.join(f'in{k}' for k in range(len(inputs)))})"
    expr, identity, rt, post = reduce_parts(red)
    ins = ", ".join(f"{PARAM_TYPE[v.type.dtype]} in{k}" for k, v in enumerate(inputs))
    outs = f"{PARAM_TYPE[red.result.type.dtype]} out0"
    if red.name == "sum_to":
        axis, keepdims, to_shape = (), True, tuple(red.attrs["shape"])
    else:
        axis = reduced_axes(operand.rank, red.attrs["axis"])
        keepdims, to_shape = bool(red.attrs["keepdims"]), None
    return KernelSpec(name, ins, outs, map_expr, tuple(captures), where, PREAMBLE + map_fn,
                      REDUCTION, expr, post, identity, rt, axis, keepdims,
                      tuple(operand.shape), to_shape)


# ---- modules -------------------------------------------------------------------------

def kernel_spec(op: Op, name: str, where: str = "") -> KernelSpec:
    """The kernel of one ``fused`` op."""
    inputs, captures, operation = _KernelWriter(op).write()
    red = reduction_of(op)
    if red is not None:
        return _reduction_spec(red, name, where, inputs, captures, operation)
    ins = ", ".join(f"{PARAM_TYPE[v.type.dtype]} in{k}" for k, v in enumerate(inputs))
    outs = ", ".join(f"{PARAM_TYPE[r.type.dtype]} out{k}" for k, r in enumerate(op.results))
    return KernelSpec(name, ins, outs, operation, tuple(captures), where)


def _where(fn: Function, op: Op) -> str:
    members = ", ".join(o.name for o in op.regions[0].ops if o.name not in ("const", "yield"))
    loc = f" at {op.loc.file}:{op.loc.line}:{op.loc.col}" if op.loc is not None else ""
    return f"@{fn.name}{loc}: {members}"


def kernel_specs(module: Module) -> dict[Op, KernelSpec]:
    """Every ``fused`` op of `module` with its kernel, in function and op order."""
    out: dict[Op, KernelSpec] = {}
    for fn in module.functions.values():
        k = 0
        for op in fn.walk():
            if op.name == "fused":
                out[op] = kernel_spec(op, f"adc_{sanitize(fn.name)}_{k}", _where(fn, op))
                k += 1
    return out


def ensure_fused(module: Module) -> Module:
    """`module` itself if it has ``fused`` ops, else the result of the ``fuse`` pass."""
    if any(op.name == "fused" for fn in module.functions.values() for op in fn.walk()):
        return module
    from ..passes.fuse import Fuse
    return Fuse()(module)


def emit_cuda(module: Module) -> str:
    """A Python module that builds the CuPy kernels of `module`'s fused groups (fusing the
    module first if no pass has)."""
    specs = kernel_specs(ensure_fused(module))
    parts = ['"""CUDA kernels of the fused groups, emitted by adc (one cupy.ElementwiseKernel\n'
             'each, or a cupy.ReductionKernel where a reduction closes the group; inputs\n'
             'in0.., outputs out0..)."""',
             "import cupy", "", f"PREAMBLE = r'''\n{PREAMBLE}'''", ""]
    parts += [s.python() for s in specs.values()]
    if not specs:
        parts.append("# no fused groups")
    return "\n".join(parts)
