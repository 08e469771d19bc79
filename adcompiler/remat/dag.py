"""Rematerialization of straight-line code: the model of one adjoint block.

The top-level block of an adjoint function is a forward part (ops ``0 .. B-1``, the ops the
primal results depend on) followed by the reverse sweep. A schedule keeps the program order
and may, right before any op ``t >= B``, recompute forward values: a clone of the producing
op, marked ``recompute = true`` with the primal op's location, whose result replaces the
value in op ``t`` and in every later op (until a later clone of the same value). The
original is then freed after its last use before the clone. Clones read the latest version
of their operands, so a chain of forward ops is recomputed op by op, and every clone runs
the same op on the same inputs as the original (bit-identical gradients).

Time ``t`` is "during op t" in the convention of `memory.liveness`: values defined before
op ``t`` and used at ``t`` or later, plus op ``t``'s results and its own transient bytes
(a loop's body, a callee's frame). `Problem` lists, per value, when it must be live and when
a clone may be made; `milp` turns that into a MILP. Recomputable: forward ops with one
result and no region (not ``for``/``call``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..ir.core import Function, Module, Op, Value
from ..memory.flops import op_flops
from ..memory.liveness import _Walk
from ..memory.sizes import value_bytes
from ..ops import registry
from ..passes.clone import clone_op


@dataclass
class Problem:
    fn: Function
    boundary: int                              # B: the first op of the reverse sweep
    ops: list[Op]
    born: dict[Value, int]                     # defining op index (-1: function input)
    uses: dict[Value, list[int]]               # indices of the top-level ops using a value
    free: list[Value]                          # values whose liveness the schedule decides
    last: dict[Value, int]                     # the latest time a free value may be live
    clone_times: dict[Value, list[int]]        # recomputable value -> times a clone may go
    nbytes: dict[Value, int]
    cost: dict[Value, int]                     # FLOPs of one recomputation
    fixed: list[int] = field(default_factory=list)  # bytes at time t the schedule can't move
    start_bytes: int = 0                       # the function inputs, all live at the start

    def operands(self, v: Value) -> list[Value]:
        return [u for u in v.defining_op.operands if u in self.born]

    @property
    def reverse_uses(self) -> list[Value]:
        """Forward values the reverse sweep reads (what store-all keeps)."""
        return [v for v, ts in self.uses.items()
                if self.born[v] < self.boundary and any(t >= self.boundary for t in ts)]


def _boundary(module: Module, fn: Function, born: dict[Value, int]) -> int:
    """1 + the last op that the primal results depend on."""
    primal = module.functions.get(fn.attrs.get("adjoint_of", ""))
    ret = fn.body.ops[-1]
    k = len(primal.result_types) if primal is not None else len(ret.operands)
    stack, seen, last = list(ret.operands[:k]), set(), -1
    while stack:
        v = stack.pop()
        if v in seen or born.get(v, -1) < 0:
            continue
        seen.add(v)
        op = v.defining_op
        last = max(last, born[v])
        stack += [u for inner in op.walk() for u in inner.operands if u in born]
    return last + 1


def recomputable(op: Op) -> bool:
    return len(op.results) == 1 and not op.regions and op.name in registry.REGISTRY


def _transient(module: Module, op: Op, dims) -> int:
    """Bytes op `op` adds while it runs: its results, or its loop body / callee frame."""
    w = _Walk(module, dims, None, None)
    w.op(op)
    for r in op.results:
        w.add(r)
    return w.peak


def build_problem(module: Module, fn: str, dims: Mapping[str, int]) -> Problem:
    f = module[fn]
    ops = list(f.body.ops)
    born: dict[Value, int] = {a: -1 for a in f.body.args}
    uses: dict[Value, list[int]] = {a: [] for a in f.body.args}
    for t, op in enumerate(ops):
        for inner in op.walk():
            for v in inner.operands:
                if v in born and (not uses[v] or uses[v][-1] != t):
                    uses[v].append(t)
        for r in op.results:
            born[r], uses[r] = t, []
    B = _boundary(module, f, born)
    # clone times, users first: a clone goes where the value is used, or with a user's clone
    rec = [op.result for op in ops[:B] if recomputable(op)]
    clone_times: dict[Value, list[int]] = {}
    users: dict[Value, list[Value]] = {}
    for v in rec:
        for u in set(v.defining_op.operands):
            users.setdefault(u, []).append(v)
    for v in reversed(rec):
        ts = {t for t in uses[v] if t >= B}
        for w in users.get(v, ()):
            ts.update(clone_times.get(w, ()))
        if ts:
            clone_times[v] = sorted(ts)
    free_set = set(clone_times)
    for v in clone_times:
        free_set.update(u for u in v.defining_op.operands if u in born)
    free = sorted(free_set, key=lambda v: (born[v], v.uid))
    last = {}
    for v in free:
        ts = list(uses[v]) + [t for w in users.get(v, ()) for t in clone_times.get(w, ())]
        last[v] = max(ts, default=born[v])
    nbytes = {v: value_bytes(v, dims) for v in born}
    prob = Problem(f, B, ops, born, uses, free, last, clone_times, nbytes,
                   {v: op_flops(v.defining_op, dims, module) for v in clone_times})
    prob.fixed = [0 if registry.has_trait(op, "terminator") else _transient(module, op, dims)
                  for op in ops]
    prob.start_bytes = sum(nbytes[a] for a in f.body.args)
    for v in born:
        if v not in free_set and uses[v]:
            for t in range(born[v] + 1, uses[v][-1] + 1):
                prob.fixed[t] += nbytes[v]
    return prob


def apply_clones(fn: Function, clones: dict[int, list[int]]) -> list[tuple[int, Op]]:
    """Insert the clones (time -> indices of the ops to clone, as in `build_problem`) into
    `fn` and reroute later uses to them; returns (index of the primal op, clone) pairs."""
    block, made, cur = fn.body, [], {}
    ops = list(block.ops)
    new_ops: list[Op] = []
    for t, op in enumerate(ops):
        for k in sorted(clones.get(t, ())):
            v = ops[k].result
            c = clone_op(ops[k], dict(cur))
            c.attrs = {**c.attrs, "recompute": True}
            cur[v] = c.result
            new_ops.append(c)
            made.append((k, c))
        if cur:
            for inner in op.walk():
                inner.operands = [cur.get(u, u) for u in inner.operands]
        new_ops.append(op)
    block.ops = []
    for op in new_ops:
        block.append(op)
    return made
