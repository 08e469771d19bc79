"""Emit an IR module as a readable, standalone Python module of NumPy code.

The emitted module imports only ``numpy`` and ``adc_runtime`` (its kernel table; its file
writer when run as a script) and calls the same kernels as the executor, one line per op, so
it computes the same numbers as ``adc run``. Each IR function becomes a Python function that
binds its symbolic dimensions from the shapes of its arguments; ``for`` ops become Python
loops that stack their per-iteration outputs; ``fused`` groups are emitted inline, op by op; a
comment names the TDSL line behind each group of ops.
"""
from __future__ import annotations

import keyword
import math
import os

from ..ir.calls import callees, calls_bottom_up
from ..ir.core import Block, Function, Module, Op
from ..ir.types import NUMPY_DTYPE, dim_symbols, is_symbol
from ..ir.verifier import ANNOTATION_ATTRS
from ..ops import registry
from ..ops.registry import has_trait
from .names import Namer, comment_text, dim_expr, sanitize, string_literal

# names the emitted code uses: no value, dimension or function may take them
RESERVED = {"np", "K", "dims", "range", "float", "str", "ValueError"}
# names the script part of the module uses, kept free of function names
MAIN_LOCALS = {"sys", "_main", "argv", "signature", "inputs", "outs", "names", "name",
               "value", "saves", "len", "print", "zip", "dict", "__import__", "__name__",
               "AdcError", "read_inputs", "save_npz", "e", "dims", "arg", "key", "size", "_",
               "int"}

_MAIN = '''
def _main(argv):
    """Run on the arrays of argv[1] (.npz or .json, checked as `adc run --inputs` checks
    them); save the outputs to OUT.npz if given; DIM=SIZE binds a symbolic dimension."""
    import sys
    from adc_runtime.errors import AdcError
    from adc_runtime.datafiles import read_inputs
    if len(argv) < 2:
        sys.exit(f"usage: python {{argv[0]}} INPUTS.npz|INPUTS.json [OUT.npz] [DIM=SIZE ...]")
    dims = {{}}
    for arg in argv[2:]:
        key, _, size = arg.partition("=")
        if _ == "=":
            if not key.isidentifier() or not size.isdigit():
                sys.exit(f"error: expected DIM=SIZE (e.g. B=32), got '{{arg}}'")
            dims[key] = int(size)
    signature = {signature!r}
    try:
        inputs = read_inputs(argv[1], signature, dims)[0]
    except AdcError as e:
        sys.exit(f"error: {{e}}")
    outs = {call}
    names = {names!r}
    for name, value in zip(names, outs):
        print(f"{{name}}: shape {{value.shape}} {{value.dtype}}")
        print(np.array2string(np.asarray(value), precision=6))
    saves = [a for a in argv[2:] if "=" not in a]
    if saves:  # atomic for a regular file, written through for a device or a FIFO
        from adc_runtime.files import save_npz
        try:
            save_npz(saves[0], dict(zip(names, outs)))
        except AdcError as e:
            sys.exit(f"error: {{e}}")


if __name__ == "__main__":
    _main(__import__("sys").argv)
'''


class _Sources:
    """Source lines for provenance comments: given texts first, then ``.tdsl`` files on
    disk (the locations in IR text are data: they must not quote arbitrary files)."""

    def __init__(self, texts: dict[str, str] | None):
        self.lines = {k: _lines(v) for k, v in (texts or {}).items()}

    def line(self, file: str, n: int) -> str:
        if file not in self.lines:
            if not file.endswith(".tdsl"):
                return ""  # IR text may name any file: only TDSL programs are quoted
            try:
                with open(file, "rb") as f:  # as the frontend reads it: no newline translation
                    self.lines[file] = _lines(f.read().decode("utf-8", "replace"))
            except OSError:
                self.lines[file] = []
        lines = self.lines[file]
        return lines[n - 1].strip() if 1 <= n <= len(lines) else ""


def _lines(text: str) -> list[str]:
    """Lines as the TDSL parser counts them: ended by LF, CR LF or CR only (not U+2028, a
    form feed, ...)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _bindable(fn: Function) -> dict[str, tuple]:
    """Symbols bound by an argument's shape: ``{"B": (x, 0)}`` (first occurrence)."""
    found: dict[str, tuple] = {}
    for a in fn.args:
        for axis, d in enumerate(a.type.shape):
            if is_symbol(d) and d not in found:
                found[d] = (a, axis)
    return found


def _symbols(fn: Function) -> list[str]:
    seen: dict[str, None] = {}
    for v in list(fn.args) + [r for op in fn.walk() for r in op.results]:
        for d in v.type.shape:
            if isinstance(d, str):
                seen.update(dict.fromkeys(dim_symbols(d)))
    for op in fn.walk():
        for kind, value in _dim_attrs(op):
            for d in (value if kind == "shape" else [value]):
                if isinstance(d, str):
                    seen.update(dict.fromkeys(dim_symbols(d)))
    return list(seen)


def _dim_attrs(op: Op):
    if has_trait(op, "loop"):
        yield "dim", op.attrs["n"]
        return
    opdef = registry.REGISTRY.get(op.name)
    for o in (opdef.options if opdef else ()):
        value = op.attrs.get(o.name)
        if o.kind == "dim" and isinstance(value, (int, str)):
            yield "dim", value
        elif o.kind == "shape" and isinstance(value, (list, tuple)):
            yield "shape", value


def _literal(value) -> str:
    """Python source for an attribute constant."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_literal(v) for v in value)
        return f"({items},)" if isinstance(value, tuple) and len(value) == 1 else (
            f"({items})" if isinstance(value, tuple) else f"[{items}]")
    return repr(value)


def _attr_source(op: Op, name: str, value, syms: dict[str, str], kind: str = "") -> str:
    """Python source for the attribute `name` of `op` (or a value of option `kind`)."""
    if not kind:
        opdef = registry.REGISTRY.get(op.name)
        option = opdef.option(name) if opdef else None
        kind = option.kind if option is not None else ""
    if kind == "dim" and isinstance(value, (int, str)):
        return dim_expr(value, syms)
    if kind == "shape" and isinstance(value, (list, tuple)):
        items = ", ".join(dim_expr(d, syms) if isinstance(d, (int, str)) else _literal(d)
                          for d in value)
        return f"({items}{',' if len(value) == 1 else ''})"  # the executor passes tuples
    return _literal(value)


class _FunctionEmitter:
    def __init__(self, module: Module, fn: Function, fn_names: dict[str, str],
                 needs_dims: dict[str, bool], sources: _Sources):
        self.module, self.fn, self.fn_names = module, fn, fn_names
        self.needs_dims, self.sources = needs_dims, sources
        self.symbols = _symbols(fn)
        taken = RESERVED | set(fn_names.values())
        self.syms = {s: s if s not in taken and sanitize(s) == s else f"{sanitize(s)}_dim"
                     for s in self.symbols}
        self.name = Namer(RESERVED | set(self.syms.values()) | set(fn_names.values()))
        self.lines: list[str] = []
        self.last_loc = None

    def emit(self) -> list[str]:
        fn = self.fn
        params = [self.name(a) for a in fn.args]
        if self.needs_dims[fn.name]:
            params.append("dims=None")
        sig = ", ".join(f"{a.name}: {a.type}" for a in fn.args)
        res = ", ".join(str(t) for t in fn.result_types)
        self.lines.append(f"def {self.fn_names[fn.name]}({', '.join(params)}):")
        self.lines.append("    " + string_literal(f"{fn.name}({sig}) -> ({res})"))
        bindable = _bindable(fn)
        for sym in self.symbols:
            if sym in bindable:
                arg, axis = bindable[sym]
                self.lines.append(f"    {self.syms[sym]} = {self.name(arg)}.shape[{axis}]")
            else:
                self.lines.append(f"    {self.syms[sym]} = dims[{sym!r}]")
        self.block(fn.body, 1)
        return self.lines

    def comment(self, op: Op, depth: int) -> None:
        loc = op.loc
        if loc is None or (self.last_loc and (loc.file, loc.line) == self.last_loc):
            return
        self.last_loc = (loc.file, loc.line)
        text = self.sources.line(loc.file, loc.line)
        self.lines.append("    " * depth + "# " + comment_text(
            f"{os.path.basename(loc.file)}:{loc.line}" + (f"  {text}" if text else "")))

    def block(self, block: Block, depth: int) -> None:
        for op in block.ops:
            if registry.ends(op, "region"):
                continue  # the enclosing loop assigns the yielded values
            self.comment(op, depth)
            self.op(op, depth)

    def op(self, op: Op, depth: int) -> None:
        pad = "    " * depth
        args = [self.name(v) for v in op.operands]
        if registry.ends(op, "function"):
            self.lines.append(f"{pad}return ({', '.join(args)}{',' if len(args) == 1 else ''})")
            return
        if has_trait(op, "loop"):
            self.loop(op, depth)
            return
        if has_trait(op, "counted"):
            self.repeat(op, depth)
            return
        if has_trait(op, "group"):
            self.fused(op, depth)
            return
        outs = ", ".join(self.name(r) for r in op.results)
        if has_trait(op, "calls"):
            callee = op.attrs["callee"]
            call_args = args + (["dims=dims"] if self.needs_dims[callee] else [])
            call = f"{self.fn_names[callee]}({', '.join(call_args)})"
            if len(op.results) == 1:
                call += "[0]"
            self.lines.append(f"{pad}{outs} = {call}")
            return
        if op.name not in registry.REGISTRY:
            raise NotImplementedError(f"the Python emitter does not know the op '{op.name}'")
        if registry.get(op.name).sliced_shape is not None:
            self.slice_checks(op, pad)
        kwargs = []
        for k, v in op.attrs.items():
            if k in ANNOTATION_ATTRS:
                continue
            src = _attr_source(op, k, v, self.syms)
            plain = k.isascii() and k.isidentifier() and not keyword.iskeyword(k)
            kwargs.append(f"{k}={src}" if plain else f"**{{{k!r}: {src}}}")
        self.lines.append(f"{pad}{outs} = K[{op.name!r}]({', '.join(['np'] + args + kwargs)})")

    def slice_checks(self, op: Op, pad: str) -> None:
        """The executor's run-time premise of a slice of a symbolic axis (`check_slices`):
        the axis is long enough for the length the compiler gave the slice."""
        shape = registry.get(op.name).sliced_shape(op)
        for axis, (e, d) in enumerate(zip(op.attrs["idx"], shape)):
            if not isinstance(d, str) or not isinstance(e, (list, tuple)) \
                    or e[2] not in (None, 1, -1):
                continue
            from adc_runtime.dims import symbolic_slice  # the rule the runtime checks
            rule = symbolic_slice(*e)
            if rule is None or rule[2] <= 0:
                continue
            written = ":".join("" if v is None else str(v) for v in e[:2]) + (
                "" if e[2] is None else f":{e[2]}")
            size = dim_expr(d, self.syms)
            message = f"the slice [{written}] of axis {axis} needs {d} >= {rule[2]}, but {d} = "
            self.lines.append(f"{pad}if {size} < {rule[2]}:")
            self.lines.append(f"{pad}    raise ValueError({message!r} + str({size}))")

    def fused(self, op: Op, depth: int) -> None:
        """A fused group inline, op by op: its arguments and results are aliases."""
        body = op.regions[0]
        for a, v in zip(body.args, op.operands):
            self.name.names[a] = self.name(v)
        self.block(body, depth)
        for r, v in zip(op.results, body.terminator.operands):
            if r in self.name.names:
                self.lines.append(f"{'    ' * depth}{self.name(r)} = {self.name(v)}")
            else:
                self.name.names[r] = self.name(v)

    def loop(self, op: Op, depth: int) -> None:
        pad, body = "    " * depth, op.regions[0]
        n_carry = op.attrs["n_carry"]
        index, carries = body.args[0], body.args[1:1 + n_carry]
        slices = body.args[1 + n_carry:]
        inits = [self.name(v) for v in op.operands[:n_carry]]
        xs = [self.name(v) for v in op.operands[n_carry:]]
        yielded = body.terminator.operands
        ys = [self.name(r) for r in op.results[n_carry:]]
        it = self.name.fresh("step")
        n = dim_expr(op.attrs["n"], self.syms)
        for c, init in zip(carries, inits):
            self.lines.append(f"{pad}{self.name(c)} = {init}")
        for y, r in zip(ys, op.results[n_carry:]):  # filled step by step; empty if n == 0
            shape = _attr_source(op, "", r.type.shape, self.syms, kind="shape")
            dtype = NUMPY_DTYPE[r.type.dtype]
            self.lines.append(f"{pad}{y} = np.empty({shape}, dtype={dtype!r})")
        rng = f"range({n} - 1, -1, -1)" if op.attrs.get("reverse") else f"range({n})"
        self.lines.append(f"{pad}for {it} in {rng}:")
        self.lines.append(f"{pad}    {self.name(index)} = np.int64({it})")
        for s, x in zip(slices, xs):
            self.lines.append(f"{pad}    {self.name(s)} = {x}[{it}]")
        self.block(body, depth + 1)
        for y, v in zip(ys, yielded[n_carry:]):  # before the carries move on: a y may be one
            self.lines.append(f"{pad}    {y}[{it}] = {self.name(v)}")
        if carries:
            lhs = ", ".join(self.name(c) for c in carries)
            rhs = ", ".join(self.name(v) for v in yielded[:n_carry])
            self.lines.append(f"{pad}    {lhs} = {rhs}")
        for r, c in zip(op.results[:n_carry], carries):
            if r in self.name.names:
                self.lines.append(f"{pad}{self.name(r)} = {self.name(c)}")
            else:  # the final carry stays in the loop's variable
                self.name.names[r] = self.name(c)
        self.last_loc = None


    def repeat(self, op: Op, depth: int) -> None:
        """``a*i + b`` iterations, ``i`` the enclosing loop's index."""
        pad, body = "    " * depth, op.regions[0]
        a, b = op.attrs["count"]
        index, carries = body.args[0], body.args[1:]
        outer = self.name(op.operands[0])
        it = self.name.fresh("step")
        for c, init in zip(carries, op.operands[1:]):
            self.lines.append(f"{pad}{self.name(c)} = {self.name(init)}")
        self.lines.append(f"{pad}for {it} in range({int(a)} * int({outer}) + {int(b)}):")
        self.lines.append(f"{pad}    {self.name(index)} = np.int64({it})")
        self.block(body, depth + 1)
        if carries:
            lhs = ", ".join(self.name(c) for c in carries)
            rhs = ", ".join(self.name(v) for v in body.terminator.operands)
            self.lines.append(f"{pad}    {lhs} = {rhs}")
        for r, c in zip(op.results, carries):
            if r in self.name.names:
                self.lines.append(f"{pad}{self.name(r)} = {self.name(c)}")
            else:
                self.name.names[r] = self.name(c)
        self.last_loc = None


def _needs_dims(module: Module) -> dict[str, bool]:
    """Functions that must be handed sizes their arguments' shapes cannot tell."""
    memo: dict[str, bool] = {}
    for root in module.functions:
        for name in calls_bottom_up(module, root):      # callees first
            if name not in memo:
                fn = module[name]
                memo[name] = bool(set(_symbols(fn)) - set(_bindable(fn))) or any(
                    memo.get(c, False) for c in callees(module, name))
    return memo


def emit_python(module: Module, fn_name: str, output_names: list[str] | None = None,
                sources: dict[str, str] | None = None) -> str:
    """The module as Python source; running it as a script runs `fn_name` on an .npz.

    `output_names` label the results in the script's printout and its output .npz
    (default ``out0``, ``out1``, ...); `sources` maps file names to their text for the
    provenance comments (default: read from disk, ``.tdsl`` files only). Every string from
    the module (file names, source lines, names, attributes) is quoted or escaped: the
    emitted source runs nothing the program or its file name says.
    """
    fn = module[fn_name]
    fn_names, used = {}, RESERVED | MAIN_LOCALS
    for name in module.functions:
        base = sanitize(name)
        py, k = base, 1
        while py in used:
            py, k = f"{base}_{k}", k + 1
        used.add(py)
        fn_names[name] = py
    needs_dims = _needs_dims(module)
    src = _Sources(sources)
    shown = fn_name if string_literal(fn_name).startswith('"') else sanitize(fn_name)
    out = [f'"""NumPy program for {shown}, emitted by adc.',
           "",
           "Run it as: python THIS_FILE.py INPUTS.npz|INPUTS.json [OUT.npz] [DIM=SIZE ...]",
           '"""',
           "import numpy as np",
           "",
           "from adc_runtime.kernels import KERNELS as K",
           ""]
    from adc_runtime.liveness import FRAMES_PER_CALL, frames_needed
    frames = frames_needed(module)
    if frames > 1000 + 500 * FRAMES_PER_CALL:   # chains of calls too deep for the default
        out[-4:-3] = ["import sys", "", "import numpy as np"]
        out[-1:-1] = ["", f"sys.setrecursionlimit(max(sys.getrecursionlimit(), {frames}))"]
    for f in module.functions.values():
        out += ["", *_FunctionEmitter(module, f, fn_names, needs_dims, src).emit(), ""]
    names = output_names or [f"out{k}" for k in range(len(fn.result_types))]
    signature = [(a.name, a.type.dtype, tuple(a.type.shape), str(a.type)) for a in fn.args]
    call = f"{fn_names[fn_name]}(*inputs.values(){', dims=dims' if needs_dims[fn_name] else ''})"
    out += [_MAIN.format(signature=signature, names=list(names), call=call)]
    return "\n".join(out)
