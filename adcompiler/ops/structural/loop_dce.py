"""Dead code elimination inside a ``for`` loop (the ``dce`` pass, `adcompiler.passes.dce`):
unneeded stacked outputs and carries go, then the sliced inputs the pruned body no longer
reads."""
from __future__ import annotations

from ...ir.core import Block, Op, Value
from ...passes.dce import sweep


def _slice(block: Block, roots: set[Value], effects) -> set[Value]:
    """Values of and above `block` that `roots` (or impure ops) depend on; no mutation.

    Conservative for nested regions: a kept region op needs everything its region reads.
    """
    need = set(roots)
    for op in reversed(block.ops[:-1]):
        if effects.impure(op) or any(r in need for r in op.results):
            for o in op.walk():
                need.update(o.operands)
    return need


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
    carry_args = body.args[1:1 + n_carry]
    live_carry = {j for j in range(n_carry) if op.results[j] in need}
    live_ys = {k for k in range(n_carry, len(op.results)) if op.results[k] in need}
    while True:
        roots = {yield_op.operands[k] for k in live_ys | live_carry}
        inside = _slice(body, roots, effects)
        grown = live_carry | {j for j, a in enumerate(carry_args) if a in inside}
        if grown == live_carry:
            break
        live_carry = grown
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
