"""Dead code elimination inside a ``for`` loop (the ``dce`` pass, `adcompiler.passes.dce`):
unneeded stacked outputs and carries go, then the sliced inputs the pruned body no longer
reads."""
from __future__ import annotations

from ...ir.core import Block, Op, Value
from ...passes.dce import sweep


def _live_carries(op: Op, live_carry: set[int], live_ys: set[int], effects) -> set[int]:
    """The carries of loop `op` that its needed results depend on: those given, and every
    carry whose block argument a needed value of the body (or an impure op) reads, which
    makes the value yielded for it needed too. One worklist pass over the body, however the
    carries feed each other. Conservative for nested regions: a kept region op needs
    everything its region reads."""
    body = op.regions[0]
    yielded = body.ops[-1].operands
    carry_of = {a: j for j, a in enumerate(body.args[1:1 + op.attrs["n_carry"]])}
    defined_by = {r: o for o in body.ops[:-1] for r in o.results}
    live, need, kept = set(live_carry), set(), set()
    todo = [yielded[k] for k in live_ys | live_carry]

    def keep(o: Op) -> None:
        if o not in kept:
            kept.add(o)
            for inner in o.walk():
                todo.extend(inner.operands)

    for o in body.ops[:-1]:
        if effects.impure(o):
            keep(o)
    while todo:
        v = todo.pop()
        if v in need:
            continue
        need.add(v)
        o = defined_by.get(v)
        if o is not None:
            keep(o)
        j = carry_of.get(v)
        if j is not None and j not in live:
            live.add(j)
            todo.append(yielded[j])
    return live


def _drop_args(block: Block, drop: set[int]) -> None:
    block.args = [a for k, a in enumerate(block.args) if k not in drop]
    for k, a in enumerate(block.args):
        a.index = k


def _drop_results(op: Op, drop: set[int]) -> None:
    op.results = [r for k, r in enumerate(op.results) if k not in drop]
    for k, r in enumerate(op.results):
        r.index = k


def dce(op: Op, need: set[Value], effects) -> set[Value]:
    """Remove the carries, stacked outputs and sliced inputs of `op` that are not needed;
    returns the values its pruned body uses."""
    body = op.regions[0]
    yield_op = body.ops[-1]
    n_carry = op.attrs["n_carry"]
    live_carry = {j for j in range(n_carry) if op.results[j] in need}
    live_ys = {k for k in range(n_carry, len(op.results)) if op.results[k] in need}
    live_carry = _live_carries(op, live_carry, live_ys, effects)
    dead_carry = set(range(n_carry)) - live_carry
    dead_ys = set(range(n_carry, len(op.results))) - live_ys
    yield_op.operands = [v for k, v in enumerate(yield_op.operands)
                         if k not in dead_carry | dead_ys]
    _drop_results(op, dead_carry | dead_ys)
    _drop_args(body, {1 + j for j in dead_carry})
    op.attrs["n_carry"] = len(live_carry)
    op.operands = [v for k, v in enumerate(op.operands) if k not in dead_carry]
    # sweep the body now, so that sliced inputs read only by dead ops show up as unused
    body_need: set[Value] = set()
    sweep(body, body_need, effects)
    n_carry = len(live_carry)
    dead_xs = {k for k, a in enumerate(body.args[1 + n_carry:]) if a not in body_need}
    _drop_args(body, {1 + n_carry + k for k in dead_xs})
    op.operands = [v for k, v in enumerate(op.operands) if k - n_carry not in dead_xs]
    return body_need
