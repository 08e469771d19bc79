"""A training step's gradient norms and optimizer update, each as one compiled call.

The ``train-step`` pass (`adcompiler.passes.train_step`) writes, after the gradients, the
norm of each, ``sqrt(sum(g * g))``, and their norm, ``sqrt(sum(stack(norms) ** 2))``: three
NumPy calls per parameter and four more, each a few microseconds of call overhead on a
small model. `match_norms` finds these ops; the compiled executor runs them as one call of
`row_passes.grad_norms` over the flat gradients (the same pairwise sums, the same bits).

Then every parameter's update is a run of elementwise ops (`fused_runs`), one compiled loop
each. `foreach` joins the runs that are the same loop with the same 0-d operands (a step's
parameters of one dtype share the learning rate, the bias corrections and the clip factor)
into one call: a generated function that checks every output that must be C-contiguous
first, so that it either updates every parameter or none (and the ops run one by one), then
runs each parameter's loop. That is PyTorch's ``foreach`` Adam: one call for all
parameters, each still updated in one pass over its own arrays.
"""
from __future__ import annotations

import numpy

from . import fused_runs, row_passes
from .kernels import DTYPES


def _one(v, name):
    """The op that makes `v` when it is a `name` op of one result, else None."""
    op = v.defining_op
    if op is None or op.name != name or len(op.results) != 1 or op.regions:
        return None
    return op


def _norm_of(v, dtype):
    """``(ops, operand)`` when `v` is ``sqrt(sum(mul(a, a)))`` over all axes of `a`, else
    None."""
    root = _one(v, "sqrt")
    total = root and _one(root.operands[0], "sum")
    square = total and _one(total.operands[0], "mul")
    if square is None or square.operands[0] is not square.operands[1] or \
            total.attrs.get("axis") is not None or total.attrs.get("keepdims"):
        return None
    a = square.operands[0]
    if a.type.dtype != dtype or v.type.rank != 0 or root.attrs or square.attrs:
        return None
    return [square, total, root], a


def match_norms(op, resolve, consts, read_at, index):
    """The gradient norms ending at `op` (the norm of the norms), for `row_fusion.plan`."""
    if op.name != "sqrt" or len(op.results) != 1:
        return None
    dtype = op.results[0].type.dtype
    if dtype not in ("f32", "f64"):
        return None
    found = _norm_of(op.results[0], dtype)
    if found is None:
        return None
    ops, stacked = found
    stack = _one(stacked, "stack")
    if stack is None or stack.attrs.get("axis", 0) not in (0, -1) or not stack.operands:
        return None
    members, grads = list(ops) + [stack], []
    for n in stack.operands:
        one = _norm_of(n, dtype)
        if one is None or n in {m.results[0] for m in members}:
            return None
        members += one[0]
        grads.append(one[1])
    inside = {index[m] for m in members}
    outputs = [op.results[0]] + [n for n in stack.operands
                                 if set(read_at.get(n, ())) - inside]
    for m in members:
        r = m.results[0]
        if r not in outputs and set(read_at.get(r, ())) - inside:
            return None
    return members, grads, outputs, norms_runner(
        len(grads), numpy.dtype(DTYPES[dtype]), [stack.operands.index(n) for n in outputs[1:]])


def norms_runner(count: int, dtype, places: list):
    """``run(*grads, *buffers) -> (total, norms at places...)``, NumPy scalars as the
    ops give them; None for a gradient that is not C-contiguous (NumPy's sum over such an
    array adds in another order)."""
    k = row_passes.get("grad_norms")
    zero, empty = dtype.type(0), numpy.empty

    def run(*args):
        grads = args[:count]
        for g in grads:
            if not g.flags.c_contiguous:
                return None
        out = empty(count + 1, dtype)
        k(tuple([g.reshape(-1) for g in grads]), out, zero)
        return (out[count], *[out[j] for j in places])
    return run


def foreach(runs: dict, key, ops, skip) -> dict:
    """`runs` (op index -> `fused_runs.Run`) with the runs that `key(run)` shows to be the
    same loop on the same 0-d operands joined into one `Foreach` each, two or more runs
    that follow each other in `ops` (only ops that `skip` holds for between them: the call
    at the last run's end stands for all of them)."""
    first = {}
    for k in sorted(runs):
        first.setdefault(id(runs[k]), k)
    out = dict(runs)
    chain: list = []

    def close():
        if len(chain) >= 2:
            group, ids = Foreach(list(chain)), {id(r) for r in chain}
            out.update((k, group) for k, r in runs.items() if id(r) in ids)
        chain.clear()

    for run in sorted({id(r): r for r in runs.values()}.values(), key=lambda r: r.last):
        if chain:
            gap = range(chain[-1].last + 1, first[id(run)])
            if key(run) != key(chain[-1]) or not all(skip(ops[i]) for i in gap):
                close()
        chain.append(run)
    close()
    return out


class Foreach:
    """Runs of one loop on the same 0-d operands, called once at the last run's last op."""

    def __init__(self, runs: list):
        self.runs = runs
        self.last = max(r.last for r in runs)
        self.inner = [v for r in runs for v in r.inner]
        self.ops = [op for r in runs for op in r.ops]


def wrapper_source(arities: list, checked: list) -> str:
    """``kernel(*args of run 0, *args of run 1, ...) -> bool``: each run's own loop
    ``k(*its args)`` (`fused_runs.kernel_source`) after a check that every output of
    `checked` (per run: argument positions) is C-contiguous. Identifiers made here only."""
    params, calls, checks = [], [], []
    for j, (n, pos) in enumerate(zip(arities, checked)):
        names = [f"a{j}_{i}" for i in range(n)]
        params += names
        checks += [f"not {names[i]}.flags.c_contiguous" for i in pos]
        calls.append(f"    k({', '.join(names)})")
    head = [f"def kernel({', '.join(params)}):"]
    if checks:
        head += [f"    if {' or '.join(checks)}:", "        return False"]
    return "\n".join(head + calls + ["    return True"]) + "\n"


def compiled_wrapper(arities: list, checked: list, loop):
    """The numba function of `wrapper_source`, calling `loop` (a run's dispatcher)."""
    source = wrapper_source(arities, checked)
    key = (source, id(loop))
    k = _wrappers.get(key)
    if k is None:
        ns = {"k": loop}
        exec(compile(source, "<adc foreach>", "exec"), ns)  # generated identifiers only
        k = _wrappers[key] = fused_runs._numba.njit(nogil=True)(ns["kernel"])
        k.runs = len(arities)   # what it stands for (tests count the loops)
    return k


_wrappers: dict = {}
