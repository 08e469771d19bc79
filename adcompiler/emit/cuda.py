"""CUDA source of fused groups: one ``cupy.ElementwiseKernel`` per ``fused`` op.

Each op of a group becomes one typed statement, in region order; intermediates are kernel
locals, so the group reads its inputs and writes its outputs once. The formulas are those of
``adc_runtime.kernels`` (the stable sigmoid, softplus and bce_with_logits, the tanh GELU,
NaN-propagating maximum/minimum, round half to even). Arithmetic runs in the result's type,
with float16 computed in float and rounded back after every op, as NumPy does. Math
functions are picked by type: ``expf`` for float, ``exp`` for double.

Kernel names are ``adc_<function>_<k>``, `k` counting the fused ops of the function in
order, so the same program always gives the same source.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.core import Function, Module, Op, Value
from ..ir.types import join_dtypes
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


@dataclass(frozen=True)
class KernelSpec:
    """What the CuPy runtime needs to build and launch one fused op's kernel.

    The kernel takes the fused op's operands, then `captures` (outer values its region reads
    directly), then one output per result."""

    name: str
    in_params: str
    out_params: str
    operation: str
    captures: tuple = ()
    where: str = ""
    preamble: str = PREAMBLE

    def python(self) -> str:
        """The kernel as a Python statement building it."""
        body = "\n".join("    " + line for line in self.operation.splitlines())
        head = f"# {self.where}\n" if self.where else ""
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
        for o in body.ops:
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
                           "long long": "i64"}[ct])


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
HANDLED = set(RULES) | {"const", "where", "lt", "le", "gt", "ge", "eq", "ne"}


# ---- modules -------------------------------------------------------------------------

def kernel_spec(op: Op, name: str, where: str = "") -> KernelSpec:
    """The kernel of one ``fused`` op."""
    inputs, captures, operation = _KernelWriter(op).write()
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
    parts = ['"""CUDA kernels of the fused elementwise groups, emitted by adc (one\n'
             'cupy.ElementwiseKernel each; inputs in0.., outputs out0..)."""',
             "import cupy", "", f"PREAMBLE = r'''\n{PREAMBLE}'''", ""]
    parts += [s.python() for s in specs.values()]
    if not specs:
        parts.append("# no fused groups")
    return "\n".join(parts)
