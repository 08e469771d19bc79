"""Generated step code for the CUDA backend: each function run as one straight-line Python
function, as the CPU's compiled executor (`adc_runtime.compiled`) does, with the per-op
decisions made once:

* every op is a call of a launcher bound at code generation: the fused group's kernel with
  its planned output buffers, a row kernel (`adc_runtime.cuda_rows`; a row adjoint of
  `adc_runtime.cuda_row_groups`), the fused attention kernel (`adc_runtime.cuda_attention`),
  or the table kernel with its attributes resolved and its planned ``out=`` buffer;
  constants are uploaded once;
* runs of fused kernels of one text (the optimizer's update of each parameter) are one
  multi-tensor launch (`adc_runtime.cuda_multi`);
* with ``graphs=True``, runs of two or more consecutive generated kernels (fused groups,
  multi-tensor batches) are captured into a CUDA graph on the second call and replayed
  afterwards (one launch for the run). CuPy refuses cuBLAS calls during stream capture
  (``cublas.setStream`` raises NotImplementedError while the stream captures), so matrix
  products, and with them the whole step, stay outside; so do CuPy's library calls, which
  may synchronise (a label check) or allocate unplanned memory. A replay needs each array
  the run reads at the address it had when captured: a run whose inputs moved (a caller
  that passed other arrays) runs its kernels one by one instead, as does a run that yields
  a value the function returns (the next replay would overwrite the caller's array). Arrays
  a captured run makes without a planned buffer are kept for the graph's lifetime;
* ``del`` after each value's last use frees it as the interpreter would; live bytes are
  counted at code generation (every size is known once the dimensions are bound).

Ops the generated code cannot bind (loops, calls, plugin ops, fused ops without a kernel,
slices of symbolic axes) run through the interpreter (`CudaExecutor.run_op`). The
generated text contains only identifiers made here; every object is passed in a namespace.

`launches` counts, per call, the kernels this executor launched itself (``adc``: fused,
row, multi-tensor kernels and graph replays) and the ops it handed to CuPy's library
(``library``: each one or more CuPy kernels or a cuBLAS call; views launch nothing).
"""
from __future__ import annotations

import itertools

from . import cuda_multi
from .buffers import value_nbytes
from .cuda import NOT_LIBRARY, CudaExecutor, _check_extremum
from .executor import Executor, RunError
from .kernels import BUILTIN, DTYPES
from .liveness import last_uses

_counter = itertools.count()
INTERPRETED = frozenset({"for", "repeat", "call", "index", "index_grad"})


class CudaStepExecutor(CudaExecutor):
    """A `CudaExecutor` that runs each function as generated code (module doc)."""

    def __init__(self, module, cupy, dims=None, specs=None, rows: bool = True,
                 graphs: bool = False, fused_attention: bool = True):
        super().__init__(module, cupy, dims, specs, rows, fused_attention)
        self.graphs = graphs
        self._programs: dict = {}
        self._segments: list = []

    def call(self, fn, arrays: list, borrowed: frozenset = frozenset()) -> list:
        key = (id(fn), borrowed)
        program = self._programs.get(key)
        if program is None:
            if self.plan_buffers and id(fn) not in self._arenas:
                self._allocate_arena(fn)
            self.room_for_calls()
            program = self._programs[key] = self.compile_function(fn, borrowed)
        return program(*arrays)

    def donate(self, fn, arrays: list) -> None:
        """As the interpreter's; the generated code binds the planned buffers when it is
        made, so a donation that moves a value's buffer (arrays other than the last call's)
        drops `fn`'s generated code, to be made again on these arrays."""
        pairs = self._donations.get(id(fn), ())
        before = [self._views.get(v) for v, _ in pairs]
        super().donate(fn, arrays)
        after = [self._views.get(v) for v, _ in self._donations[id(fn)]]
        if len(before) != len(after) or any(a is not b for a, b in zip(before, after)):
            for key in [k for k in self._programs if k[0] == id(fn)]:
                del self._programs[key]

    # -- launchers ------------------------------------------------------------------------
    def _launcher(self, op):
        """A function of `op`'s operand arrays (then captures) returning its results."""
        spec = self.specs.get(op) if op.name == "fused" else None
        count = self.launches
        if spec is not None:
            return self._fused_launcher(op, spec)
        if self.own_kernel(op):
            generic = self._table_launcher(op)

            def row(*args):
                r = self.run_row(op, list(args))
                return generic(*args) if r is None else [r]
            return row
        return self._table_launcher(op)

    def _fused_launcher(self, op, spec):
        count = self.launches
        bufs = [self._views.get(r) for r in op.results]
        if getattr(spec, "kind", "elementwise") == "reduction":
            red = op.regions[0].ops[-2]

            def reduce(*args):
                _check_extremum(red, self._resolve)
                return [self._launch(op, spec, lambda kern: self._reduce(
                    kern, spec, op.results[0], list(args)))]
            return reduce
        shapes = [self._resolve(r.type.shape) for r in op.results]
        dtypes = [r.type.dtype for r in op.results]
        empty = self.xp.empty

        def elementwise(*args):
            outs = [b if b is not None else empty(s, dtype=DTYPES[d])
                    for b, s, d in zip(bufs, shapes, dtypes)]
            self._launch(op, spec, lambda kern: kern(*args, *outs))
            return outs
        return elementwise

    def _table_launcher(self, op):
        count = self.launches
        view = op.name in NOT_LIBRARY

        def table(*args):
            env = dict(zip(op.operands, args))
            if not view:
                count["library"] += 1
            return Executor.run_op(self, op, env)
        return table

    # -- code generation ------------------------------------------------------------------
    def compile_function(self, fn, borrowed: frozenset = frozenset()):
        lines, ns, names = [], {"e": self}, {}

        def var(v):
            if v not in names:
                names[v] = f"v{len(names)}"
            return names[v]

        def bind(prefix, obj):
            name = f"{prefix}{len(ns)}"
            ns[name] = obj
            return name

        params = [var(a) for a in fn.args]
        dead = last_uses(fn.body, borrowed)
        size = lambda v: max(value_nbytes(v, self.dims), 0)  # noqa: E731
        live = sum(size(a) for j, a in enumerate(fn.args) if j not in borrowed)
        peak = live
        live -= sum(size(v) for v in dead.get(-1, ()))
        body = ["n0 = e.live"]
        ops = list(fn.body.ops)
        returned = set(ops[-1].operands) if ops and ops[-1].name == "return" else set()
        plan = self._plan(ops, returned)
        rows = self.row_groups(fn.body) if self.rows else {}
        held: list = []
        for k, op in enumerate(ops):
            if op.name == "return":
                live -= sum(size(v) for v in dead.get(k, ()) if v not in op.operands)
                body.append(f"e.live = n0 + {live}")
                body.append(f"if n0 + {peak} > e.peak: e.peak = n0 + {peak}")
                body.append(f"return [{', '.join(var(v) for v in op.operands)}]")
                break
            step, group = plan.get(k), rows.get(k)
            inner = group.inner if group is not None else ()
            if op.name == "const" and not op.operands:
                names[op.results[0]] = bind("c", self.run_op(op, {})[0])
            elif group is not None:
                if group.last == k:  # a row adjoint launches at its last op
                    body.append(f"{', '.join(var(r) for r in group.outputs)}, = "
                                f"{bind('r', self._row_launcher(group))}"
                                f"({', '.join(var(v) for v in group.inputs)})")
            elif step is not None:
                if step[0] == k:  # the run's first op launches it
                    body += self._run_line(step[1], step[2], var, bind)
            else:
                args = [var(v) for v in op.operands] + [var(v) for v in self._free(op)]
                res = ", ".join(var(r) for r in op.results)
                if self._interpreted(op):
                    body.append(f"e.live = n0 + {live}")
                    fn_name = bind("i", self._via_interpreter(op))
                else:
                    fn_name = bind("k", self._launcher(op))
                body.append(f"{res}{',' if len(op.results) == 1 else ''} = "
                            f"{fn_name}({', '.join(args)})" if op.results
                            else f"{fn_name}({', '.join(args)})")
            live += sum(size(r) for r in op.results if r not in inner)
            peak = max(peak, live)
            dying = [v for v in dead.get(k, ()) if v in names and not names[v].startswith("c")]
            if step is not None or group is not None:  # freed after the run's last op
                last = step[1][-1] is op if step is not None else group.last == k
                held += dying
                dying, held = (held, []) if last else ([], held)
            if dying:
                body.append(f"del {', '.join(dict.fromkeys(var(v) for v in dying))}")
            live -= sum(size(v) for v in dead.get(k, ()) if v not in inner)
        lines.append(f"def program({', '.join(params)}):")
        lines += ["    " + line for line in body]
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<adc cuda step #{next(_counter)}>", "exec"), ns)
        program = ns["program"]
        program.source = source
        return program

    def _row_launcher(self, group):
        """The group's row kernel (`CudaExecutor.run_group`), the constants its ops read
        bound once."""
        consts = {v: self.run_op(v.defining_op, {})[0] for op in group.ops
                  for v in op.operands if v.defining_op is not None
                  and v.defining_op.name == "const" and not v.defining_op.operands}
        return lambda *args: self.run_group(group, list(args), consts)

    def _interpreted(self, op) -> bool:
        return (op.name in INTERPRETED or op.name not in BUILTIN and op.name != "fused"
                or (op.name == "fused" and op not in self.specs))

    def _free(self, op) -> list:
        """The outer values `op`'s regions read (its captures), in a fixed order."""
        spec = self.specs.get(op) if op.name == "fused" else None
        if spec is not None:
            return list(spec.captures)
        if not op.regions:
            return []
        defined, free = set(), []
        for inner in op.walk():
            for r in inner.regions:
                defined.update(r.args)
            defined.update(inner.results)
        for inner in op.walk():
            if inner is op:
                continue
            for v in inner.operands:
                if v not in defined and v not in free:
                    free.append(v)
        return free

    def _via_interpreter(self, op):
        free = self._free(op)
        n = len(op.operands)

        def run(*args):
            env = dict(zip(op.operands, args[:n]))
            env.update(zip(free, args[n:]))
            return CudaExecutor.run_op(self, op, env)
        return run

    # -- runs: multi-tensor batches and captured segments -----------------------------------
    def _plan(self, ops, returned) -> dict:
        """op index -> (index of its run's first op, the run's ops, Segment or Batch) for
        the ops that run as part of a captured segment or a multi-tensor batch."""
        plan = {}
        if self.graphs:
            k = 0
            while k < len(ops):
                j = k
                while j < len(ops) and self._capturable(ops[j], returned):
                    j += 1
                if j - k >= 2:
                    for m in range(k, j):
                        plan[m] = (k, ops[k:j], Segment)
                k = max(j, k + 1)
        if hasattr(self.xp, "RawModule"):
            index = {op: k for k, op in enumerate(ops)}
            for run in cuda_multi.batches(ops, self.specs):
                if index[run[0]] not in plan:
                    for op in run:
                        plan[index[op]] = (index[run[0]], run, Batch)
        return plan

    def _capturable(self, op, returned) -> bool:
        return (op.name == "fused" and op in self.specs
                and not any(r in returned for r in op.results))

    def _run_line(self, run_ops, kind, var, bind) -> list[str]:
        """The line that launches a run (a captured segment or a multi-tensor batch)."""
        ins, made = [], set()
        for op in run_ops:
            for v in list(op.operands) + self._free(op):
                if v not in made and v not in ins:
                    ins.append(v)
            made.update(op.results)
        outs = [r for op in run_ops for r in op.results]
        fn_name = bind("g", kind(self, run_ops, ins))
        return [f"{', '.join(var(r) for r in outs)}, = {fn_name}("
                f"{', '.join(var(v) for v in ins)})"]


class Batch:
    """A multi-tensor launch of fused ops with one kernel text (`cuda_multi`)."""

    def __init__(self, ex: CudaStepExecutor, ops: list, ins: list):
        self.ex, self.ops, self.ins = ex, ops, ins
        self.launchers = [ex._fused_launcher(op, ex.specs[op]) for op in ops]
        self.where = [[ins.index(v) for v in list(op.operands) + ex._free(op)] for op in ops]
        spec = ex.specs[ops[0]]
        self.multi = cuda_multi.MultiLaunch(ex.xp, spec, f"{spec.name}_multi")
        self.bufs = [[ex._views.get(r) for r in op.results] for op in ops]

    def __call__(self, *args):
        members, outs = [], []
        for op, where, bufs in zip(self.ops, self.where, self.bufs):
            res = [b if b is not None else self.ex.result_buffer(r)
                   for b, r in zip(bufs, op.results)]
            members.append(([args[j] for j in where], res))
            outs += res
        if self.multi(members):
            self.ex.launches["adc"] += 1
            return outs
        out = []
        for launch, where in zip(self.launchers, self.where):
            out += launch(*[args[j] for j in where])
        return out


class Segment:
    """A run of generated kernels: launched one by one (or as multi-tensor batches) on the
    first call, captured into a CUDA graph on the second, replayed after (module doc)."""

    def __init__(self, ex: CudaStepExecutor, ops: list, ins: list):
        self.ex, self.ops, self.ins = ex, ops, ins
        self.parts = []  # (launcher, its operands, its results)
        for group in _split_batches(ops, ex.specs):
            sub_ins = []
            for op in group:
                for v in list(op.operands) + ex._free(op):
                    if v not in sub_ins and not any(v in o.results for o in group):
                        sub_ins.append(v)
            runner = Batch(ex, group, sub_ins) if len(group) > 1 else \
                ex._fused_launcher(group[0], ex.specs[group[0]])
            self.parts.append((runner, sub_ins, [r for o in group for r in o.results]))
        self.calls = 0
        self.graph = None
        self.key = None
        self.kept = None
        self.fallbacks = 0

    def run(self, args) -> list:
        env = dict(zip(self.ins, args))
        outs = []
        for runner, sub_ins, results in self.parts:
            got = runner(*[env[v] for v in sub_ins])
            env.update(zip(results, got))
            outs += got
        return outs

    def __call__(self, *args):
        self.calls += 1
        xp = self.ex.xp
        key = tuple(map(cuda_multi.pointer, args))
        if self.graph is not None:
            if key == self.key:
                self.graph.launch(xp.cuda.get_current_stream())
                self.ex.launches["adc"] += 1
                return self.kept
            self.fallbacks += 1
            return self.run(args)
        if self.calls < 2 or not self.ex.graphs:
            return self.run(args)
        stream = xp.cuda.Stream(non_blocking=True)
        before = dict(self.ex.launches)
        xp.cuda.get_current_stream().synchronize()  # the inputs are written before capture
        with stream:
            stream.begin_capture()
            try:
                outs = self.run(args)
            finally:
                graph = stream.end_capture()
        self.ex.launches.update(before)  # capturing launches nothing
        self.graph, self.key, self.kept = graph, key, outs
        graph.launch(xp.cuda.get_current_stream())
        self.ex.launches["adc"] += 1
        return outs


def _split_batches(ops, specs) -> list[list]:
    """`ops` as groups: each multi-tensor batch of `cuda_multi.batches`, else one op."""
    runs = cuda_multi.batches(ops, specs)
    first = {id(r[0]): r for r in runs}
    out, k = [], 0
    while k < len(ops):
        run = first.get(id(ops[k]))
        if run is not None:
            out.append(run)
            k += len(run)
        else:
            out.append([ops[k]])
            k += 1
    return out


def runner(module, fn_name: str, specs=None, cupy=None, graphs: bool = False):
    """A `Runner` of `fn_name` by generated step code on the GPU."""
    from .cuda import load_cupy
    from .executor import Runner
    cp = cupy if cupy is not None else load_cupy()
    return Runner(module, fn_name, cp,
                  lambda dims: CudaStepExecutor(module, cp, dims, specs, graphs=graphs))


def run_function(module, fn_name: str, inputs, specs=None, dims=None, cupy=None,
                 graphs: bool = False):
    """Run `fn_name` once by generated step code; (device outputs, stats with launches)."""
    run = runner(module, fn_name, specs, cupy, graphs)
    outs, stats = run(inputs, dims)
    ex = next(reversed(run._executors.values()))
    return outs, {**stats, "launches": dict(ex.launches)}


__all__ = ["CudaStepExecutor", "runner", "run_function", "RunError"]
