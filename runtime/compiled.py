"""The compiled CPU executor: a function run as generated straight-line Python.

`CompiledExecutor` is an `Executor` that, the first time it calls a function, writes the
function's body as the source of one Python function, compiles it once and runs that on
every later call with the same binding of the dimensions (a `Runner` keeps one executor per
binding). What the interpreter decides per op on every call is decided here once:

* each op's kernel, with its attributes bound (``functools.partial``), or the NumPy ufunc
  itself for elementwise ops whose operands share the result's dtype (the case in which the
  kernel calls that same ufunc);
* the planned buffer an op writes into (``out=``), a view of the same arena as the
  interpreter's (`adc_runtime.buffers`), so the same ops write in place;
* when each value dies: a ``del`` after its last use frees it as the interpreter would;
* values that depend on constants only (the seed of the adjoint, its scalings, shapes) are
  computed once, at code generation, when they are small, never leave the function and
  are read only by ops that make new arrays (so nothing can write into them);
* a few kernels specialized to the shapes (`adc_runtime.specialize`), among them
  cross-entropy and the softmax of its adjoint sharing one pass, and the two-operand
  einsums that are one batched matrix product (the table kernel's own plan, made once).

The generated text contains only identifiers made here (``v12``, ``k12``, ``b12``) and
integer literals; every object it uses (kernels, buffers, ops handed to the interpreter) is
passed in a namespace, never written into the source. Nothing in a program (value names,
attributes, file names) can therefore become code.

Ops without a kernel of their own (``for``, ``call``, ``fused``), plugin ops (whose results
the interpreter checks against their types) and the slice checks of symbolic axes that
fail run through the interpreter (`Executor.run_op`) from the generated
code. The kernels are the interpreter's, in the same order on the same operands, so
results are bit-identical; ``tests/test_compiled.py`` compares both on every sample. A
kernel that rejects its data (a ValueError or IndexError) makes the call run again on the
interpreter, which reports the op and its line as usual.

Live bytes are counted as the interpreter counts them, but at code generation: every size
is known once the dimensions are bound, so the generated code only adds the straight-line
part's peak to what the ops run by the interpreter (loops, calls) count themselves; the
``peak_bytes`` of a run are the interpreter's.
"""
from __future__ import annotations

import functools
import itertools
import math
import time

import numpy

from . import fused_runs, row_fusion, row_losses, row_passes, specialize, step_fusion
from .buffers import returns_new, value_nbytes
from .executor import ANNOTATION_ATTRS, RunError, SHAPE_ATTRS, Executor, check_slices
from .kernels import BUILTIN, DTYPES, KERNELS, OUT_KERNELS
from .kernels.linalg import einsum_matmul, matmul_rows
from .liveness import borrowed_positions, borrows_args, last_uses

# built-in ops (deterministic; a plugin's op never is one of these names) evaluated at code
# generation when their operands are constants
FOLDABLE = frozenset({
    "const", "zeros", "ones", "full", "zeros_like", "ones_like", "arange", "dim_value",
    "neg", "add", "sub", "mul", "div", "sqrt", "reciprocal", "cast", "sum", "mean",
    "reshape", "broadcast_to", "expand_dims", "squeeze", "transpose",
})
FOLD_MAX_BYTES = 1 << 16

# ops whose kernel is this NumPy ufunc when every operand has the result's dtype: the
# kernel's Python operator or xp.<ufunc> call is the same loop
UFUNCS = {
    "neg": numpy.negative, "exp": numpy.exp, "log": numpy.log, "log1p": numpy.log1p,
    "expm1": numpy.expm1, "sqrt": numpy.sqrt, "abs": numpy.abs, "sin": numpy.sin,
    "cos": numpy.cos, "tanh": numpy.tanh, "add": numpy.add, "sub": numpy.subtract,
    "mul": numpy.multiply, "div": numpy.divide, "pow": numpy.power,
    "maximum": numpy.maximum, "minimum": numpy.minimum, "matmul": numpy.matmul,
}
# comparisons: operands of one dtype, a bool result
COMPARISONS = {
    "lt": numpy.less, "le": numpy.less_equal, "gt": numpy.greater,
    "ge": numpy.greater_equal, "eq": numpy.equal, "ne": numpy.not_equal,
}

_counter = itertools.count()


def _fix(r, want):
    """The interpreter's result check: `r` as an array of dtype `want` unless it is one."""
    if getattr(r, "dtype", None) != want:
        r = numpy.asarray(r, dtype=want)
    return r


class _Program:
    """The generated source of one function and the namespace it runs in."""

    def __init__(self):
        self.lines: list[str] = []
        self.ns: dict = {"fix": _fix}
        self.names: dict = {}  # IR value -> its identifier in the source

    def bind(self, prefix: str, obj) -> str:
        """A fresh identifier for `obj` in the namespace."""
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = obj
        return name

    def var(self, v) -> str:
        name = self.names.get(v)
        if name is None:
            name = self.names[v] = f"v{len(self.names)}"
        return name


class CompiledExecutor(Executor):
    """An `Executor` on NumPy that runs each function as generated code (module doc)."""

    def __init__(self, module, xp=numpy, dims=None, plan_buffers: bool = True,
                 fuse: bool = False):
        if xp is not numpy:
            raise ValueError("the compiled executor runs on NumPy")
        super().__init__(module, xp, dims, plan_buffers)
        # runs of elementwise ops as one compiled loop each (`adc_runtime.fused_runs`)
        self.fuse = fuse and fused_runs.enabled()
        self._programs: dict[int, object] = {}  # id(function) -> its compiled program
        # row passes (`adc_runtime.row_passes`): now, never, or once the calls have taken
        # `row_passes.ROWS_AFTER_S` (then the programs are made again, with them)
        self.rows = row_passes.policy()
        if self.fuse and self.rows == "later":
            self.rows = "now"   # numba is paid for already
        self._waited = 0.0
        self._inside = False

    def call(self, fn, arrays: list, borrowed: frozenset = frozenset()) -> list:
        key = (id(fn), borrowed) if borrowed else id(fn)
        program = self._programs.get(key)
        if program is None:  # the first call: the arena and the frames, then the program
            if self.plan_buffers and id(fn) not in self._arenas:
                self._allocate_arena(fn)
            self.room_for_calls()
            program = self._programs[key] = self.compile_function(fn, borrowed)
        if self.rows == "later" and not self._inside:
            return self._timed(program, fn, arrays, borrowed)
        try:
            return program(*arrays)
        except (ValueError, IndexError):  # the interpreter names the op and its line
            return Executor.call(self, fn, arrays, borrowed)

    def _timed(self, program, fn, arrays, borrowed) -> list:
        """A call counted towards `ROWS_AFTER_S`; past it, the programs are dropped, to be
        made again with row passes."""
        start = time.perf_counter()
        self._inside = True
        try:
            try:
                return program(*arrays)
            except (ValueError, IndexError):
                return Executor.call(self, fn, arrays, borrowed)
        finally:
            self._inside = False
            self._waited += time.perf_counter() - start
            if self._waited >= row_passes.ROWS_AFTER_S and row_passes.enabled():
                self.rows = "now"
                self._programs.clear()

    # -- code generation ------------------------------------------------------------------
    def compile_function(self, fn, borrowed: frozenset = frozenset()):
        """`fn` as a Python function; `borrowed`: arguments its frame does not count."""
        p = _Program()
        params = [p.var(a) for a in fn.args]
        p.lines.append(f"def program({', '.join(params)}):")
        ex = p.bind("e", self)
        dead = last_uses(fn.body, borrowed)
        # results written into the input they replace (`Executor.donate`): the buffer is that
        # call's input array, so the input's variable is kept, not a constant
        self._donated = {r: params[j] for r, j in self._donations.get(id(fn), ())}
        self._donated_arg = {r: fn.args[j] for r, j in self._donations.get(id(fn), ())}
        keep = set(self._donated.values())
        self._consts = self._fold(fn.body)
        self._pairs_ce = _softmax_of_cross_entropy(fn.body)
        self._shared = {}
        self._label_subs = _one_hot_subtractions(fn.body, self._resolve)
        self._label_rows = set(self._label_subs.values())
        # live bytes, counted as the interpreter counts them (`Executor.run_block`): the sizes
        # are known, so the count is worked out here; ops run by the interpreter start from it
        size = lambda v: max(value_nbytes(v, self.dims), 0)  # noqa: E731
        live = sum(size(a) for j, a in enumerate(fn.args) if j not in borrowed)
        peak = live
        live -= sum(size(v) for v in dead.get(-1, ()))
        body = [f"n0 = {ex}.live"]
        runs = self._row_groups(fn) if self.rows == "now" and row_passes.enabled() else {}
        if self.fuse:   # a training step's gradient norms and updates (`step_fusion`)
            runs.update(self._row_groups(fn, step_fusion.match_norms, runs))
            fused = self._fused_runs(fn, exclude={fn.body.ops[k] for k in runs})
            runs.update(step_fusion.foreach(fused, self._run_key, fn.body.ops, self._skip))
        deferred: list = []  # values that die inside a fused run: deleted after it
        for k, op in enumerate(fn.body.ops):
            if op.name == "return":
                live -= sum(size(v) for v in dead.get(k, ()) if v not in op.operands)
                body.append(f"{ex}.live = n0 + {live}")
                body.append(f"if n0 + {peak} > {ex}.peak: {ex}.peak = n0 + {peak}")
                outs = ", ".join(p.var(v) for v in op.operands)
                body.append(f"return [{outs}]")
                break
            if op.results and all(r in self._consts for r in op.results):
                for r in op.results:
                    p.names[r] = p.bind("c", self._consts[r])
            else:
                if self._direct(op) is None:  # run by the interpreter, which counts on
                    body.append(f"{ex}.live = n0 + {live}")
                run = runs.get(k)
                if op.name == "call" and borrows_args(self.module.functions[op.attrs["callee"]]):
                    stay = borrowed_positions(op, set(dead.get(k, ())))
                    body += self._via_interpreter(p, op, [], [p.var(r) for r in op.results],
                                                  stay)
                elif run is not None:
                    if k == run.last:
                        body += (self._group_lines(p, run) if isinstance(run, row_fusion.Group)
                                 else self._foreach_lines(p, run)
                                 if isinstance(run, step_fusion.Foreach)
                                 else self._run_lines(p, run))
                else:
                    body += self._op_lines(p, op)
                gone = [v for v in dead.get(k, ())
                        if v in p.names and v not in self._consts and p.var(v) not in keep]
                if run is not None:  # after the run, and not its values made inside it
                    deferred += [v for v in gone if v not in run.inner]
                    gone, deferred = (deferred, []) if k == run.last else ([], deferred)
                if gone:
                    body.append(f"del {', '.join(p.var(v) for v in gone)}")
            live += sum(size(r) for r in op.results)
            peak = max(peak, live)
            live -= sum(size(v) for v in dead.get(k, ()))
        p.lines += ["    " + line for line in body]
        source = "\n".join(p.lines) + "\n"
        code = compile(source, f"<adc compiled #{next(_counter)}>", "exec")
        exec(code, p.ns)  # the source holds generated identifiers only (module doc)
        program = p.ns["program"]
        program.source = source
        return program

    def _memory(self, fn):
        """``memory(v) -> (kind, array)``: where a value of `fn` lives (`fused_runs.plan`)."""
        args = set(fn.args)

        def memory(v):
            if v in args or v in self._donated:
                return "caller", None
            if v in self._consts:
                return "const", self._consts[v]
            if v in self._views:
                return "arena", self._views[v]
            op = v.defining_op
            return ("fresh" if op is not None and returns_new(op) else "unknown"), None
        return memory

    def _skip(self, op) -> bool:
        """Whether `op` is evaluated at code generation (its results are constants)."""
        return bool(op.results) and all(r in self._consts for r in op.results)

    def _fused_runs(self, fn, exclude=frozenset()) -> dict:
        """The runs of `fn`'s body compiled as one loop each (`fused_runs.plan`), none of
        them holding an op of `exclude`."""
        return fused_runs.plan(
            fn.body, self._resolve, skip=self._skip,
            exclude=lambda op: (op.name not in BUILTIN or op in self._label_subs
                                or op in exclude),
            memory=self._memory(fn))

    def _row_groups(self, fn, match=row_fusion.match_rows, taken=()) -> dict:
        """The ops of `fn`'s body run as row passes (`row_fusion.plan`, or the groups
        `match` finds), not those at the indices of `taken` nor those with a kernel of
        their own here (cross-entropy's softmax, the labels' flat indices; a one-hot
        subtraction may be part of cross-entropy's adjoint, `row_losses`)."""
        own = set(self._label_rows) | set(self._pairs_ce.values())
        own |= {fn.body.ops[k] for k in taken}
        return row_fusion.plan(
            fn.body, self._resolve, self._consts, skip=self._skip,
            exclude=lambda op: op.name not in BUILTIN or op in own,
            memory=self._memory(fn), match=match)

    def _group_lines(self, p: _Program, group) -> list[str]:
        """A row-pass group (`row_fusion`): one call writing its outputs (into their planned
        buffers, or the inputs they replace); when it declines, the ops one by one."""
        bufs = []
        for r in group.outputs:
            if r in self._donated:
                bufs.append(self._donated[r])
            elif r in self._views:
                bufs.append(p.bind("b", self._views[r]))
            else:
                bufs.append("None")
        k = p.bind("k", group.run)
        tmp = f"t{len(p.ns)}"
        p.ns[tmp] = None  # reserves the identifier (a local of the function)
        args = [p.var(v) for v in group.inputs] + bufs
        outs = ", ".join(p.var(r) for r in group.outputs)
        one_by_one = [line for op in group.ops for line in self._op_lines(p, op)]
        if group.inner:
            one_by_one.append(f"del {', '.join(p.var(v) for v in group.inner)}")
        return ([f"{tmp} = {k}({', '.join(args)})", f"if {tmp} is not None:",
                 f"    {outs}, = {tmp}", "else:"] + ["    " + line for line in one_by_one]
                + [f"del {tmp}"])

    def _run_plan(self, run) -> tuple:
        """``(into, checked)`` of a fused run (`fused_runs.kernel_source`): the outputs
        written over the operand they replace, and those written into a caller's array."""
        into, checked = {}, set()
        for j, r in enumerate(run.outputs):
            if r in self._donated:
                checked.add(j)
                a = self._donated_arg[r]
                if a in run.full:
                    into[j] = run.full.index(a)
        return into, checked

    def _run_key(self, run):
        """What makes two runs one loop on the same 0-d operands (`step_fusion.foreach`)."""
        into, checked = self._run_plan(run)
        if len(checked) != len(run.outputs):
            return ("alone", id(run))   # outputs in buffers of their own: not joined
        source = fused_runs.kernel_source(run.ops, run.full, run.scalars, run.outputs,
                                          into, checked)
        return source, tuple(run.scalars)

    def _run_call(self, p: _Program, run):
        """``(pre, args, post, source, checked argument positions)`` of a fused run."""
        size = 1
        for d in run.shape:
            size *= d
        full = [p.var(v) for v in run.full]
        args = [str(size)] + full + [  # 0-d values as NumPy scalars (constants: once)
            p.bind("c", self._consts[v][()]) if v in self._consts else f"{p.var(v)}[()]"
            for v in run.scalars]
        into, checked = self._run_plan(run)
        pre, post, positions = [], [], []
        for j, r in enumerate(run.outputs):
            if r in self._donated:
                a = self._donated[r]
                post.append(f"{p.var(r)} = {a}")
                if j in into:  # written over the operand it replaces
                    positions.append(1 + into[j])
                else:
                    positions.append(len(args))
                    args.append(a)
            elif r in self._views:
                buf = p.bind("b", self._views[r])
                args.append(buf)
                post.append(f"{p.var(r)} = {buf}")
            else:
                new = p.bind("z", functools.partial(numpy.empty, tuple(run.shape),
                                                    numpy.dtype(DTYPES[r.type.dtype])))
                pre.append(f"{p.var(r)} = {new}()")
                args.append(p.var(r))
        source = fused_runs.kernel_source(run.ops, run.full, run.scalars, run.outputs,
                                          into, checked)
        return pre, args, post, source, positions

    def _checked_call(self, p: _Program, runs, pre, call, post, checked) -> list[str]:
        """`call`, or with outputs written into the caller's arrays, `call` as the test of
        an ``if`` whose ``else`` runs the ops one by one (the loop declines when such an
        output is not C-contiguous)."""
        if not checked:
            return pre + [call] + post
        one_by_one = [line for run in runs for op in run.ops for line in self._op_lines(p, op)]
        inner = [v for run in runs for v in run.inner]
        if inner:
            one_by_one.append(f"del {', '.join(p.var(v) for v in inner)}")
        return (pre + [f"if {call}:"] + ["    " + line for line in post]
                + ["else:"] + ["    " + line for line in one_by_one])

    def _run_lines(self, p: _Program, run) -> list[str]:
        """A fused run: one call of its loop, then its outputs named."""
        pre, args, post, source, positions = self._run_call(p, run)
        k = p.bind("k", fused_runs.compiled(source))
        return self._checked_call(p, [run], pre, f"{k}({', '.join(args)})", post, positions)

    def _foreach_lines(self, p: _Program, group) -> list[str]:
        """Runs of one loop (`step_fusion.Foreach`): one call that runs each, or none."""
        parts = [self._run_call(p, run) for run in group.runs]
        loop = fused_runs.compiled(parts[0][3])
        k = p.bind("k", step_fusion.compiled_wrapper([len(a) for _, a, *_ in parts],
                                                     [pos for *_, pos in parts], loop))
        args = [a for _, part_args, *_ in parts for a in part_args]
        return self._checked_call(p, group.runs, [x for part in parts for x in part[0]],
                                  f"{k}({', '.join(args)})",
                                  [x for part in parts for x in part[2]],
                                  any(part[4] for part in parts))

    def _fold(self, block) -> dict:
        """The values of `block` computed at code generation (see the module doc)."""
        consts: dict = {}
        returned = set(block.ops[-1].operands) if block.ops else set()
        for op in block.ops:
            if (op.name not in FOLDABLE or len(op.results) != 1 or op.regions
                    or op.name not in KERNELS or op.results[0] in returned
                    or not all(v in consts for v in op.operands)
                    or value_nbytes(op.results[0], self.dims) > FOLD_MAX_BYTES):
                continue
            attrs = {k: (self._resolve(v) if k in SHAPE_ATTRS else v)
                     for k, v in op.attrs.items() if k not in ANNOTATION_ATTRS}
            try:
                with numpy.errstate(all="raise"):
                    r = KERNELS[op.name](numpy, *[consts[v] for v in op.operands], **attrs)
            except (ArithmeticError, ValueError, IndexError, TypeError):
                continue  # left to run time, where the interpreter reports it
            consts[op.results[0]] = _fix(r, numpy.dtype(DTYPES[op.results[0].type.dtype]))
        # a constant read by an op that may return a view of it is computed on each call
        # (the view could leave the function and be written to)
        for op in reversed(block.ops):
            if op.results and all(r in consts for r in op.results):
                continue
            if not returns_new(op):
                for inner in op.walk():
                    for v in inner.operands:
                        consts.pop(v, None)
        return consts

    def _op_lines(self, p: _Program, op) -> list[str]:
        args = [p.var(v) for v in op.operands]
        outs = [p.var(r) for r in op.results]
        special = self._special(p, op, args, outs)
        if special is not None:
            return special
        kern = self._direct(op)
        if kern is None:
            return self._via_interpreter(p, op, args, outs)
        planned = op.results[0] if op.results and op.results[0] in self._views else None
        if planned is not None:
            buf = self._donated.get(planned) or p.bind("b", self._views[planned])
            if kern[0] == "ufunc":
                k = p.bind("u", kern[1])
                return [f"{outs[0]} = {k}({', '.join(args)}, out={buf})"]
            k = p.bind("k", functools.partial(OUT_KERNELS[op.name], numpy, **kern[1]))
            return [f"{k}({', '.join(args + [f'out={buf}'])})", f"{outs[0]} = {buf}"]
        if kern[0] == "ufunc":
            k = p.bind("u", kern[1])
            return [f"{outs[0]} = {k}({', '.join(args)})"]
        k = p.bind("k", functools.partial(KERNELS[op.name], numpy, **kern[1]))
        if len(op.results) == 1:
            dt = p.bind("d", numpy.dtype(DTYPES[op.results[0].type.dtype]))
            return [f"{outs[0]} = fix({k}({', '.join(args)}), {dt})"]
        dts = [p.bind("d", numpy.dtype(DTYPES[r.type.dtype])) for r in op.results]
        tmp = f"t{len(p.ns)}"
        p.ns[tmp] = None  # reserves the identifier; the function assigns it as a local
        return [f"{tmp} = {k}({', '.join(args)})"] + [
            f"{o} = fix({tmp}[{j}], {dt})" for j, (o, dt) in enumerate(zip(outs, dts))]

    def _special(self, p: _Program, op, args, outs):
        """Lines for an op with a shape-specialized kernel (`adc_runtime.specialize`), or
        None. Only for results without a planned buffer, but for the softmax that
        cross-entropy computes: a new array then stands for that softmax's buffer (which
        may still hold another value when cross-entropy runs)."""
        name = op.name
        if name == "softmax" and op in self._shared:
            tmp = self._shared.pop(op)
            return [f"{outs[0]} = {tmp}", f"del {tmp}"]
        if op in self._label_rows:   # the labels as flat indices: the one-hot rows' ones
            labels = op.operands[0]
            k = p.bind("k", specialize.label_indices(labels.type.dtype,
                                                     self._resolve(labels.type.shape),
                                                     self._resolve(op.attrs["n"])))
            return [f"{outs[0]} = {k}({args[0]})"]
        if op in self._label_subs:
            k = p.bind("k", specialize.subtract_one_hot(self._resolve(op.results[0].type.shape)))
            planned = op.results[0] in self._views
            buf = self._donated.get(op.results[0]) or (
                p.bind("b", self._views[op.results[0]]) if planned else "None")
            return [f"{outs[0]} = {k}({', '.join(args)}, {buf})"]
        run = self._any_buffer_kernel(op)
        if run is not None:
            k = p.bind("k", run)
            if op.results[0] in self._views:
                buf = self._donated.get(op.results[0]) or p.bind("b", self._views[op.results[0]])
                return [f"{k}({', '.join(args)}, out={buf})", f"{outs[0]} = {buf}"]
            dt = p.bind("d", numpy.dtype(DTYPES[op.results[0].type.dtype]))
            return [f"{outs[0]} = fix({k}({', '.join(args)}), {dt})"]
        if op.results and op.results[0] in self._views:
            return None
        if name == "cross_entropy" and op in self._pairs_ce:
            z, labels = op.operands
            k = p.bind("k", self._cross_entropy_softmax(z, labels))
            dt = p.bind("d", numpy.dtype(DTYPES[op.results[0].type.dtype]))
            tmp = f"s{len(p.ns)}"
            p.ns[tmp] = None  # reserves the identifier (a local of the function)
            self._shared[self._pairs_ce[op]] = tmp
            return [f"{outs[0]}, {tmp} = {k}({', '.join(args)})",
                    f"{outs[0]} = fix({outs[0]}, {dt})"]
        dt = p.bind("d", numpy.dtype(DTYPES[op.results[0].type.dtype])) if op.results else None
        floats = op.operands and op.operands[0].type.dtype in ("f32", "f64")
        if name == "mean" and floats and op.results[0].type.dtype == op.operands[0].type.dtype:
            run = specialize.mean(self._resolve(op.operands[0].type.shape),
                                  op.attrs.get("axis"), op.attrs.get("keepdims", False))
            if run is not None:
                return [f"{outs[0]} = fix({p.bind('k', run)}({args[0]}), {dt})"]
        if name == "where" and _masks_to_zero(op, self._consts, self._resolve):
            k = p.bind("k", specialize.where_zero(numpy.dtype(DTYPES[op.results[0].type.dtype])))
            return [f"{outs[0]} = {k}({args[0]}, {args[1]})"]
        if name == "einsum" and len(op.operands) == 2:
            a, b = op.operands
            run = einsum_matmul(op.attrs["spec"].replace(" ", ""),
                                self._resolve(a.type.shape), self._resolve(b.type.shape),
                                numpy.dtype(DTYPES[a.type.dtype]),
                                numpy.dtype(DTYPES[b.type.dtype]))
            if run is not None:
                return [f"{outs[0]} = fix({p.bind('k', run)}({args[0]}, {args[1]}), {dt})"]
        if name == "transpose":
            k = p.bind("k", specialize.transpose(op.attrs.get("perm")))
            return [f"{outs[0]} = fix({k}({args[0]}), {dt})"]
        if name == "sum_to" and floats:
            k = p.bind("k", specialize.sum_to(self._resolve(op.operands[0].type.shape),
                                              self._resolve(op.attrs["shape"]),
                                              DTYPES[op.operands[0].type.dtype]))
            return [f"{outs[0]} = fix({k}({args[0]}), {dt})"]
        if name == "one_hot":
            k = p.bind("k", specialize.one_hot(self._resolve(op.attrs["n"]),
                                               DTYPES[op.attrs.get("dtype", "f32")]))
            return [f"{outs[0]} = fix({k}({args[0]}), {dt})"]
        return None

    def _cross_entropy_softmax(self, z, labels):
        """The kernel of a cross-entropy and the softmax it shares
        (`specialize.cross_entropy_softmax`), as a row pass (`row_losses`) when they run
        and the logits have `row_fusion.MIN_ELEMENTS`."""
        shape, classes = self._resolve(labels.type.shape), self._resolve(z.type.shape[-1])
        table = specialize.cross_entropy_softmax(shape, classes)
        if self.rows != "now" or not row_passes.enabled() \
                or math.prod(shape) * classes < row_fusion.MIN_ELEMENTS:
            return table
        return row_losses.cross_entropy_softmax(shape, classes,
                                                numpy.dtype(DTYPES[z.type.dtype]), table)

    def _any_buffer_kernel(self, op):
        """A specialized kernel ``run(*operands, out=None)`` of `op` that writes into its
        planned buffer when it has one (`specialize.reduce_sum`, `stack`, `relu`, and the
        table kernel's stacked-times-one matrix product), or None."""
        if len(op.results) != 1 or not op.operands:
            return None
        name, r = op.name, op.results[0]
        dtypes = {v.type.dtype for v in op.operands}
        if dtypes != {r.type.dtype}:
            return None
        dtype = numpy.dtype(DTYPES[r.type.dtype])
        if name == "sum" and r.type.dtype in ("f32", "f64"):
            return specialize.reduce_sum(op.operands[0].type.rank, op.attrs.get("axis"),
                                         op.attrs.get("keepdims", False))
        if name == "stack":
            shapes = {tuple(self._resolve(v.type.shape)) for v in op.operands}
            if len(shapes) != 1:  # numpy.stack refuses them; a copy would broadcast
                return None
            return specialize.stack(len(op.operands), op.operands[0].type.rank,
                                    op.attrs.get("axis", 0), self._resolve(r.type.shape), dtype)
        if name == "relu" and r.type.dtype in ("f16", "f32", "f64"):
            return specialize.relu(dtype)
        if name == "matmul" and len(op.operands) == 2 and op.operands[0].type.rank > 2 \
                and op.operands[1].type.rank == 2:   # the table kernel's one product
            return functools.partial(matmul_rows, numpy)
        return None

    def _direct(self, op):
        """How the generated code runs `op` itself: ``("ufunc", f)`` or ``("kernel",
        attrs)``; None when the interpreter must (regions, no kernel, a failing check)."""
        if op.regions or op.name in ("call", "for", "fused", "yield", "return"):
            return None
        if op.name not in BUILTIN:
            return None  # no kernel, or a plugin's: the interpreter checks what it returns
        if op.name in ("index", "index_grad"):
            try:
                if op.name == "index":
                    shape = self._resolve(op.operands[0].type.shape)
                    check_slices(op.attrs["idx"], op.operands[0].type.shape, shape)
                else:
                    check_slices(op.attrs["idx"], op.attrs["shape"],
                                 self._resolve(op.attrs["shape"]))
            except RunError:
                return None  # the interpreter raises it when the op is reached
        result = [r.type.dtype for r in op.results]
        operands = {v.type.dtype for v in op.operands}
        if len(result) == 1 and len(operands) == 1 and not op.attrs:
            want = result[0]
            if op.name in UFUNCS and operands == {want} and want in ("f16", "f32", "f64"):
                return "ufunc", UFUNCS[op.name]
            if op.name in COMPARISONS and want == "bool":
                return "ufunc", COMPARISONS[op.name]
        attrs = {k: (self._resolve(v) if k in SHAPE_ATTRS else v)
                 for k, v in op.attrs.items() if k not in ANNOTATION_ATTRS}
        return "kernel", attrs

    def _via_interpreter(self, p: _Program, op, args, outs, keep=None) -> list[str]:
        """``run_op`` on an environment of the op's operands and of every outer value its
        regions read (``run_call`` for a call that borrows operands `keep`)."""
        env_values = list(dict.fromkeys(
            [v for inner in op.walk() for v in inner.operands]))
        entries = []
        for v in env_values:
            if v in p.names:
                entries.append(f"{p.bind('V', v)}: {p.var(v)}")
        o = p.bind("op", op)
        run = p.bind("run", self.run_op if keep is None else
                     functools.partial(self.run_call, keep=keep))
        env = "{" + ", ".join(entries) + "}"
        if not outs:
            return [f"{run}({o}, {env})"]
        return [f"{', '.join(outs)}, = {run}({o}, {env})"]


def _softmax_of_cross_entropy(block) -> dict:
    """``cross_entropy`` op -> the later ``softmax`` op of the same logits, both along the
    last axis, for integer labels (the pair reverse mode makes)."""
    ce: dict = {}
    pairs: dict = {}
    for op in block.ops:
        if op.name == "cross_entropy" and len(op.operands) == 2:
            z, labels = op.operands
            rank = z.type.rank
            if (rank >= 1 and labels.type.dtype in ("i32", "i64")
                    and op.attrs.get("axis", -1) in (-1, rank - 1)
                    and z.type.dtype in ("f32", "f64") and z not in ce):
                ce[z] = op
        elif op.name == "softmax" and op.operands and op.operands[0] in ce:
            z = op.operands[0]
            if op.attrs.get("axis", -1) in (-1, z.type.rank - 1) \
                    and op.results[0].type.dtype == z.type.dtype:
                pairs[ce.pop(z)] = op
    return pairs


def _one_hot_subtractions(block, resolve) -> dict:
    """``sub`` op -> the ``one_hot`` op it subtracts, where that one-hot array has no
    other use and the minuend already has the result's shape and float dtype (the
    adjoint of cross-entropy): the subtraction becomes a copy less one at each label."""
    uses: dict = {}
    for op in block.ops:
        for inner in op.walk():
            for v in inner.operands:
                uses[v] = uses.get(v, 0) + 1
    made = {op.results[0]: op for op in block.ops
            if op.name == "one_hot" and len(op.results) == 1 and len(op.operands) == 1}
    found = {}
    for op in block.ops:
        if op.name != "sub" or len(op.operands) != 2 or op.operands[1] not in made:
            continue
        a, oh = op.operands
        r = op.results[0]
        one_hot = made[oh]
        if (uses.get(oh) == 1 and r.type.dtype in ("f32", "f64")
                and a.type.dtype == oh.type.dtype == r.type.dtype
                and one_hot.operands[0].type.dtype in ("i32", "i64")
                and resolve(a.type.shape) == resolve(r.type.shape) == resolve(oh.type.shape)):
            found[op] = one_hot
    return found


def _masks_to_zero(op, consts: dict, resolve) -> bool:
    """Whether `op` is ``where(mask, a, 0.0)`` with `a` of the result's shape and float
    dtype (f32, f64) and a +0.0 constant (the adjoint of relu): a bitwise and."""
    if len(op.operands) != 3 or len(op.results) != 1:
        return False
    cond, a, zero = op.operands
    r = op.results[0]
    if zero not in consts or r.type.dtype not in ("f32", "f64") or cond.type.dtype != "bool":
        return False
    c = consts[zero]
    return (a.type.dtype == r.type.dtype and c.dtype == numpy.dtype(DTYPES[r.type.dtype])
            and c.size == 1 and c.ndim <= len(r.type.shape) and not c.tobytes().strip(b"\0")
            and resolve(a.type.shape) == resolve(cond.type.shape) == resolve(r.type.shape))
