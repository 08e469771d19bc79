"""Dead code elimination.

A backward sweep over each block keeps an op when it is impure or terminates the block, or
when one of its results is needed; the operands of kept ops (nested regions included,
whose captures name outer values) become needed. ``for`` loops are pruned from the inside:

* stacked outputs (``ys``) that are not needed are dropped;
* a carried value is dropped when its final value is not needed and no needed value of the
  body depends on it: a fixed point, since carries can feed each other;
* sliced inputs (``xs``) that the pruned body no longer reads are dropped;
* a loop with no needed result and no impure op inside is removed.

A ``call`` is removable when its callee (transitively) contains no impure op.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Function, Module, Op, Value
from ..ops.registry import has_trait
from .pipeline import FunctionPass, register_pass


def _impure(op: Op, module: Module | None) -> bool:
    """Whether `op` must stay even if its results are unused."""
    return has_trait(op, "terminator") or _effects(op, module)


def _effects(op: Op, module: Module | None, seen: frozenset = frozenset()) -> bool:
    """Whether `op` or anything it contains or calls is impure (unknown callees are)."""
    if has_trait(op, "terminator"):
        return False
    if has_trait(op, "calls"):
        callee = op.attrs["callee"]
        if module is None or callee not in module or callee in seen:
            return module is None or callee not in module
        return any(_effects(o, module, seen | {callee}) for o in module[callee].walk())
    if has_trait(op, "impure"):
        return True
    return any(_effects(o, module, seen) for r in op.regions for o in r.ops)


def _slice(block: Block, roots: set[Value], module: Module | None) -> set[Value]:
    """Values of and above `block` that `roots` (or impure ops) depend on; no mutation.

    Conservative for nested regions: a kept region op needs everything its region reads.
    """
    need = set(roots)
    for op in reversed(block.ops[:-1]):
        if _impure(op, module) or any(r in need for r in op.results):
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


def prune_loop(op: Op, need: set[Value], module: Module | None) -> None:
    """Remove the carries, stacked outputs and sliced inputs of `op` that are not needed."""
    body = op.regions[0]
    yield_op = body.ops[-1]
    n_carry = op.attrs["n_carry"]
    carry_args = body.args[1:1 + n_carry]
    live_carry = {j for j in range(n_carry) if op.results[j] in need}
    live_ys = {k for k in range(n_carry, len(op.results)) if op.results[k] in need}
    while True:
        roots = {yield_op.operands[k] for k in live_ys | live_carry}
        inside = _slice(body, roots, module)
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
    sweep(body, body_need, module)
    n_carry = len(live_carry)
    dead_xs = {k for k, a in enumerate(body.args[1 + n_carry:]) if a not in body_need}
    _drop_args(body, {1 + n_carry + k for k in dead_xs})
    op.operands = [v for k, v in enumerate(op.operands) if k - n_carry not in dead_xs]


def sweep(block: Block, need: set[Value], module: Module | None) -> None:
    """Erase the dead ops of `block`, adding the values its live ops use to `need`."""
    kept = []
    for op in reversed(block.ops):
        live = any(r in need for r in op.results)
        if not live and not _impure(op, module):
            continue
        loop = has_trait(op, "loop")
        if loop:
            prune_loop(op, need, module)
        for region in op.regions:
            if not loop:
                sweep(region, need, module)
            need.update(v for o in region.walk() for v in o.operands)
        need.update(op.operands)
        kept.append(op)
    block.ops = kept[::-1]


def dce_function(fn: Function, module: Module | None = None) -> None:
    sweep(fn.body, set(), module)


@register_pass("dce")
@dataclass(frozen=True)
class DCE(FunctionPass):
    """Remove pure ops whose results are unused, and prune loops (see the module doc)."""

    def run_on_function(self, fn: Function, module: Module) -> None:
        dce_function(fn, module)
