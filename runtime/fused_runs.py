"""Runs of elementwise ops compiled into one loop (numba), for the compiled executor.

A training step's optimizer update is a chain of elementwise ops per parameter (Adam's is
13), and run one NumPy call at a time each op is a pass over memory and a call's overhead.
Here a *run*, consecutive ops of a function body that are each one IEEE operation from
`FORMULAS` in one float dtype over one shape of rank 1 or more (0-d operands broadcast, and a ``where``
condition may be bool), becomes a single loop over the elements, compiled once per process
by numba, that writes only the values read after the run.

Bit-identical to the ops run one by one: each formula is one correctly rounded operation
(or a select) in the run's dtype, as NumPy's loops compute it, and numba compiles without
fast-math, so LLVM contracts no multiply and add into an FMA and keeps f32 arithmetic in f32
(``tests/test_fused_runs.py`` compares bits with the NumPy path). Two differences: NumPy's
floating-point warnings (division by zero, invalid) are not raised by the loop, and a NaN
may have another sign or payload (LLVM may swap the operands of a commutative operation,
and x86 hands on the first of two NaN operands); a NaN stays a NaN in the same places.

Memory: each element's reads happen before its writes, so an output may be an input's own
buffer (an update in place); the executor leaves a run unfused when buffers overlap in any
other way (`CompiledExecutor` checks). 0-d operands are passed as NumPy scalars, read before the loop.

numba is optional (``pip install 'adcompiler[fast]'``): without it, or with the environment
variable ``ADC_FUSE=0``, nothing is fused and every op runs as its NumPy call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy

# op name -> its one-element formula; placeholders are operands in order
FORMULAS = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
    "neg": "-{0}", "sqrt": "np.sqrt({0})", "where": "{1} if {0} else {2}",
}
ARITY = {"neg": 1, "sqrt": 1, "where": 3}
MIN_OPS = 3  # a shorter run is about as fast as its NumPy calls; not worth a compile

_numba = None
_kernels: dict[str, object] = {}  # kernel source -> its numba dispatcher


def enabled() -> bool:
    """Whether runs are fused: numba imports and ``ADC_FUSE`` is not ``0``."""
    global _numba
    if os.environ.get("ADC_FUSE", "1") == "0":
        return False
    if _numba is None:
        try:
            import numba
            _numba = numba
        except ImportError:
            _numba = False
    return bool(_numba)


def kernel_source(ops, full: list, scalars: list, outputs: list, into: dict,
                  checked: set) -> str:
    """The loop's source, ``kernel(n, *full, *scalars, *outputs) -> bool``: `full` and
    `scalars` are the run's external operands (arrays of the run's shape, of `n` elements,
    and 0-d values passed as NumPy scalars), `outputs` the arrays of the results it writes,
    but those that `into` maps to the index of an operand in `full` whose array they replace
    (an update in place: one array, so that LLVM sees no possible overlap and vectorizes
    the loop). It writes nothing and returns False when an output of `checked` (indices) is
    not C-contiguous (its flat view would be a copy). The arrays keep their shapes (a
    reshape in Python costs more than the loop of a small array); the loop runs over their
    flat views. The text holds only identifiers made here and the formulas of `FORMULAS`."""
    name: dict = {}
    params = ["n"] + [f"x{j}" for j in range(len(full))]
    for j, v in enumerate(scalars):
        params.append(f"s{j}")
        name[v] = f"s{j}"
    dest = [f"x{into[j]}" if j in into else f"o{j}" for j in range(len(outputs))]
    params += [d for d in dest if d[0] == "o"]
    head = [f"    if not {dest[j]}.flags.c_contiguous:\n        return False"
            for j in sorted(checked)]
    head += [f"    {a}f = {a}.ravel()" for a in params[1:] if a[0] in "xo"]
    body = []
    for j, v in enumerate(full):
        body.append(f"        a{j} = x{j}f[i]")
        name[v] = f"a{j}"
    for k, op in enumerate(ops):
        r = op.results[0]
        name[r] = f"t{k}"
        body.append(f"        t{k} = " + FORMULAS[op.name].format(
            *[name[v] for v in op.operands]))
    body += [f"        {d}f[i] = {name[v]}" for d, v in zip(dest, outputs)]
    return "\n".join([f"def kernel({', '.join(params)}):", *head,
                      "    for i in range(n):", *body, "    return True"]) + "\n"


def compiled(source: str):
    """The numba dispatcher of `source` (`kernel_source`), made once per process."""
    k = _kernels.get(source)
    if k is None:
        import numpy
        ns = {"np": numpy}
        exec(compile(source, "<adc fused run>", "exec"), ns)  # generated identifiers only
        k = _kernels[source] = _numba.njit(error_model="numpy", nogil=True)(ns["kernel"])
    return k


def member(op, resolve) -> tuple | None:
    """(shape, dtype) of `op` when it can be in a run, else None: an op of `FORMULAS`
    with its arity and no attributes, one float result of rank 1 or more, operands of the
    result's dtype and shape or 0-d (a ``where`` condition: bool)."""
    f = FORMULAS.get(op.name)
    if f is None or op.regions or op.attrs or len(op.results) != 1 or \
            len(op.operands) != ARITY.get(op.name, 2):
        return None
    r = op.results[0]
    dt = r.type.dtype
    if dt not in ("f32", "f64"):
        return None
    shape = tuple(resolve(r.type.shape))
    if not shape:  # 0-d values may be NumPy scalars, not arrays; nothing to gain either
        return None
    for j, v in enumerate(op.operands):
        want = "bool" if (op.name == "where" and j == 0) else dt
        if v.type.dtype != want:
            return None
        s = tuple(resolve(v.type.shape))
        if s != shape and s != ():
            return None
    return shape, dt


@dataclass
class Run:
    """One run: its ops (consecutive in the block, the last at index `last`), its external
    operands of the run's shape (`full`) and 0-d (`scalars`), the results read after it
    (`outputs`) and those read only inside it (`inner`)."""

    ops: list
    last: int
    shape: tuple
    full: list = field(default_factory=list)
    scalars: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    inner: list = field(default_factory=list)


def plan(block, resolve, skip, exclude, memory) -> dict:
    """The fused runs of `block`: op index -> its `Run`, for every index of every run.
    `skip(op)`: the op is evaluated ahead of time; `exclude(op)`: it has a kernel of its own;
    ``memory(v) -> (kind, array)`` says where a value lives: ``"arena"`` with its planned
    buffer, ``"caller"`` (an input, or a result written into one), ``"const"``, ``"fresh"``
    (a new array), or ``"unknown"`` (maybe a view of another). Runs whose outputs' buffers
    overlap an operand's other than exactly, or that read an unknown array, are left out."""
    ops = block.ops
    read_at: dict = {}  # value -> the op indices that read it (nested regions included)
    for k, op in enumerate(ops):
        for inner in op.walk():
            for v in inner.operands:
                read_at.setdefault(v, set()).add(k)
    key = lambda op: None if exclude(op) else member(op, resolve)  # noqa: E731
    out: dict = {}
    for idx in find_runs(ops, key, skip):
        members = [ops[k] for k in idx]
        made = {op.results[0] for op in members}
        shape, _ = member(members[0], resolve)
        run = Run(members, idx[-1], shape)
        inside = set(idx)
        for op in members:
            for v in op.operands:
                if v in made or v in run.full or v in run.scalars:
                    continue
                (run.full if resolve(v.type.shape) else run.scalars).append(v)
            r = op.results[0]
            if read_at.get(r, set()) - inside:
                run.outputs.append(r)
            else:
                run.inner.append(r)
        if run.outputs and _safe(run, memory):
            out.update((k, run) for k in idx)
    return out


def _safe(run: Run, memory) -> bool:
    """Whether the loop may write `run`'s outputs where they go: no operand of unknown
    memory, and a planned output buffer overlaps no other output and no operand's buffer
    except as that very buffer (read element by element before it is written)."""
    places = {v: memory(v) for v in run.full + run.outputs}
    if any(kind == "unknown" for kind, _ in places.values()):
        return False
    for o in run.outputs:
        kind, buf = places[o]
        if kind != "arena":
            continue
        for v in run.full + run.outputs:
            vk, other = places[v]
            if v is o or vk not in ("arena", "const"):
                continue
            if numpy.may_share_memory(buf, other) and not (
                    v in run.full and other.__array_interface__["data"][0]
                    == buf.__array_interface__["data"][0] and other.shape == buf.shape):
                return False
    return True


def find_runs(ops, key, skip) -> list[list[int]]:
    """Maximal runs of consecutive op indices with one non-None `key(op)` each, of
    `MIN_OPS` ops or more; ops for which `skip(op)` holds (evaluated ahead of time, no code)
    neither join nor end a run."""
    runs, cur, cur_key = [], [], None
    for k, op in enumerate(ops):
        if skip(op):
            continue
        kk = key(op)
        if kk is None or kk != cur_key:
            if len(cur) >= MIN_OPS:
                runs.append(cur)
            cur, cur_key = ([k], kk) if kk is not None else ([], None)
        else:
            cur.append(k)
    if len(cur) >= MIN_OPS:
        runs.append(cur)
    return runs
