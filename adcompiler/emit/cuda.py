"""CUDA source of fused groups: one ``cupy.ElementwiseKernel`` per ``fused`` op, or one
``cupy.ReductionKernel`` where a reduction closes the group.

Each op of a group becomes one typed statement, in region order, written by the op's own
CUDA formula (its registry entry's ``cuda``, declared beside the op in its family module;
see `adcompiler.emit.c`); intermediates are kernel locals, so the group reads its inputs
and writes its outputs once. The formulas are those of ``adc_runtime.kernels`` (the stable
sigmoid, softplus and bce_with_logits, the tanh GELU, NaN-propagating maximum/minimum,
round half to even, sign(-0.0) = +0.0). Arithmetic runs in the result's type, as NumPy's;
comparisons run in NumPy's comparison type (double where a float meets an integer).

float16 follows NumPy op by op, not inside an op. Every op's result is rounded to float16,
and an integer or bool operand meeting a float16 one is rounded to float16 first (``0.5 +
2049`` is ``0.5 + 2048``, which gives 2048), so ``add``, ``mul``, ``div``, ``maximum``,
``where``, casts, comparisons and the other ops NumPy computes as one operation match it bit
for bit. An op that NumPy's kernel computes in several float16 steps (``sigmoid``,
``softplus``, ``gelu``, ``rsqrt``, ``leaky_relu``'s slope, ``bce``, ``bce_with_logits``)
runs its whole formula in float and rounds once: the float32 result rounded to float16,
which is what NumPy gives on the operands widened to float32 and is closer to exact than
NumPy's float16 steps (``gelu(-2.5)``: -0.01553, exact -0.01552, NumPy -0.01526). Reductions
of float16 accumulate in float (as NumPy's ``mean`` does) and round once.

A group closed by a reduction (an op with ``cuda_reduce`` facts) becomes a ReductionKernel:
its elementwise statements go into a ``__device__`` function ``adc_map`` in the
kernel's preamble, returning the reduction's operand rounded to its dtype; ``map_expr``
calls it, and the reduction gives ``reduce_expr``, ``identity`` and ``post_map_expr``:

* ``sum`` and ``sum_to``: ``a + b`` from 0, accumulated in float for f16 and f32, double for
  f64 and ``long long`` for integers and bools (an i32 sum wraps as NumPy's int64 sum
  cast back to i32 does);
* ``mean``: the float sum divided by the count of reduced elements,
  ``_in_ind.size() / _out_ind.size()`` (f16 accumulates in float, as NumPy's mean does).
  CuPy's CUB path has no ``_in_ind``: it rewrites these two counts in the post-map (to the
  segment or array size) for kernels whose name contains ``mean``, as for its own
  ``cupy.mean``, so a mean's kernel is named ``adc_<function>_<k>_mean``;
* ``max``/``min``: NaN-propagating ``adc_max``/``adc_min`` from -inf/+inf (floats; a
  slice of NaNs gives NaN, as in NumPy) or the integer type's extreme.

The launch passes ``axis`` (normalized, sorted) and ``keepdims`` from the reduction; for
``sum_to`` the runtime works the axes out from the shapes (`KernelSpec.in_shape`,
`KernelSpec.to_shape`) and reduces with ``keepdims``, then reshapes. A GPU sums in another
order than NumPy's pairwise summation, so reduction results agree with NumPy to rounding
(about ``n * eps`` relative for n reduced elements), not bitwise; max and min are exact.

Kernels take ``x0, x1, ...`` (operands, then captures) and write ``y0, y1, ...`` (see
`adcompiler.emit.c`). Kernel names are ``adc_<function>_<k>``, `k` counting the fused ops of the function in
order, so the same program always gives the same source.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Function, Module, Op, Value
from ..ops import registry
from ..ops.registry import has_trait
from ..ops.reduce import reduced_axes
from .c import (COMPUTE, IN, MAP, OUT, PARAM_TYPE, STORAGE,  # noqa: F401  (re-exported)
                literal, math_fn)
from .names import comment_text, sanitize

# helpers whose NaN behaviour matches NumPy's maximum/minimum (fmaxf would drop a NaN)
PREAMBLE = """\
template <typename T> __device__ __forceinline__ T adc_max(T a, T b) {
    return (a != a || a > b) ? a : b;
}
template <typename T> __device__ __forceinline__ T adc_min(T a, T b) {
    return (a != a || a < b) ? a : b;
}
"""


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
        head = f"# {comment_text(self.where)}\n" if self.where else ""
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

    def ref(self, v: Value, ctype: str, dtype: str | None = None) -> str:
        """`v` as an expression of type `ctype`; as an operand of an op whose result is
        `dtype`, an integer or bool joining a float16 result is rounded to float16 first
        (NumPy converts it to the result's dtype before the arithmetic)."""
        name = self.names[v]
        if STORAGE[v.type.dtype] == ctype:
            return name
        if dtype == "f16" and v.type.dtype in ("i32", "i64", "bool"):
            return f"({ctype})({STORAGE['f16']}){name}"
        return f"({ctype}){name}"

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
            self.names[a] = f"{IN}{k}"
        defined = set(inputs) | {r for o in body.ops for r in o.results}
        captures = []
        for o in body.ops:
            for v in o.operands:
                if v not in defined and v not in captures:
                    captures.append(v)
        for v in captures:
            self.names[v] = f"{IN}{len(inputs) + captures.index(v)}"
        red = reduction_of(self.op)
        for o in body.ops:
            if o is red:
                self.lines.append(f"return {self.names[o.operands[0]]};")
                break
            if has_trait(o, "terminator"):
                for k, v in enumerate(o.operands):
                    self.lines.append(f"{OUT}{k} = {self.names[v]};")
            else:
                self.names[o.result] = self.statement(o)
        return inputs + captures, captures, "\n".join(self.lines)

    def statement(self, o: Op) -> str:
        formula = cuda_formula(o.name)
        if formula is None:
            raise NotImplementedError(f"no CUDA formula for the op '{o.name}'")
        return formula(self, o)


def cuda_formula(name: str):
    """The op's CUDA formula (its registry entry's ``cuda``), or None."""
    opdef = registry.REGISTRY.get(name)
    return opdef.cuda if opdef is not None else None


def cuda_reduction(name: str):
    """The op's `adcompiler.emit.c.Reduce` facts, or None if it cannot close a group."""
    opdef = registry.REGISTRY.get(name)
    return opdef.cuda_reduce if opdef is not None else None


# ---- reductions ----------------------------------------------------------------------

def reduction_of(op: Op) -> Op | None:
    """The reduction that closes the ``fused`` op `op`'s group, if one does: the region's
    last op before ``yield``, whose result is the only one yielded."""
    ops = op.regions[0].ops
    if len(ops) < 2 or not has_trait(ops[-1], "terminator") \
            or cuda_reduction(ops[-2].name) is None:
        return None
    red = ops[-2]
    return red if list(ops[-1].operands) == [red.result] else None


def reduce_parts(red: Op) -> tuple[str, str, str, str]:
    """(reduce_expr, identity, reduce_type, post_map_expr) of the reduction `red`."""
    return cuda_reduction(red.name).parts(red.operands[0].type.dtype, red.result.type.dtype)


def _reduction_spec(red: Op, name: str, where: str, inputs, captures,
                    statements: str) -> KernelSpec:
    operand = red.operands[0].type
    args = ", ".join(f"const {STORAGE[v.type.dtype]} {IN}{k}" for k, v in enumerate(inputs))
    body = "\n".join("    " + line for line in statements.splitlines())
    map_fn = (f"__device__ __forceinline__ {STORAGE[operand.dtype]} {MAP}({args}) {{\n"
              f"{body}\n}}\n")
    map_expr = f"{MAP}({', '.join(f'{IN}{k}' for k in range(len(inputs)))})"
    expr, identity, rt, post = reduce_parts(red)
    if cuda_reduction(red.name).mean:
        name += "_mean"  # see the module docstring
    ins = ", ".join(f"{PARAM_TYPE[v.type.dtype]} {IN}{k}" for k, v in enumerate(inputs))
    outs = f"{PARAM_TYPE[red.result.type.dtype]} {OUT}0"
    if cuda_reduction(red.name).to_shape:
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
    ins = ", ".join(f"{PARAM_TYPE[v.type.dtype]} {IN}{k}" for k, v in enumerate(inputs))
    outs = ", ".join(f"{PARAM_TYPE[r.type.dtype]} {OUT}{k}" for k, r in enumerate(op.results))
    return KernelSpec(name, ins, outs, operation, tuple(captures), where)


def _where(fn: Function, op: Op) -> str:
    members = ", ".join(o.name for o in op.regions[0].ops
                        if o.operands and not has_trait(o, "terminator"))
    loc = f" at {op.loc.file}:{op.loc.line}:{op.loc.col}" if op.loc is not None else ""
    return f"@{fn.name}{loc}: {members}"


def kernel_specs(module: Module) -> dict[Op, KernelSpec]:
    """Every ``fused`` op of `module` with its kernel, in function and op order."""
    out: dict[Op, KernelSpec] = {}
    used: set[str] = set()
    for fn in module.functions.values():
        base = f"adc_{sanitize(fn.name)}"
        while f"{base}_0" in used:  # two function names alike once sanitized
            base += "_"
        k = 0
        for op in fn.walk():
            if has_trait(op, "group"):
                out[op] = kernel_spec(op, f"{base}_{k}", _where(fn, op))
                used.add(f"{base}_{k}")
                k += 1
    return out


def ensure_fused(module: Module, rows: bool = False) -> Module:
    """`module` itself if it has ``fused`` ops, else the result of the ``fuse`` pass; with
    `rows`, leaving the adjoints that generated step code runs as row kernels unfused
    (``Fuse(keep_rows=True)``)."""
    if any(has_trait(op, "group") for fn in module.functions.values() for op in fn.walk()):
        return module
    from ..passes.fuse import Fuse
    return Fuse(keep_rows=rows)(module)


def emit_cuda(module: Module) -> str:
    """A Python module that builds the CuPy kernels of `module`'s fused groups (fusing the
    module first if no pass has)."""
    specs = kernel_specs(ensure_fused(module))
    parts = ['"""CUDA kernels of the fused groups, emitted by adc (one cupy.ElementwiseKernel\n'
             'each, or a cupy.ReductionKernel where a reduction closes the group; inputs\n'
             f'{IN}0.., outputs {OUT}0..)."""',
             "import cupy", "", f"PREAMBLE = r'''\n{PREAMBLE}'''", ""]
    parts += [s.python() for s in specs.values()]
    if not specs:
        parts.append("# no fused groups")
    return "\n".join(parts)
