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


class _Effects:
    """Whether ops must stay although their results are unused, remembered per callee and
    per region op: each callee and each loop body is walked once per run, however many
    calls and enclosing loops lead to it. A call back into a callee being examined adds
    nothing; an answer that met such a call depends on the path to it, and is not kept."""

    def __init__(self, module: Module | None):
        self.module = module
        self.known: dict = {}        # callee name or region op -> its answer
        self.open: set[str] = set()  # the callees being examined
        self.cycles = 0              # calls met back into an open callee

    def impure(self, op: Op) -> bool:
        """Whether `op` must stay even if its results are unused."""
        return has_trait(op, "terminator") or self.effects(op)

    def effects(self, op: Op) -> bool:
        """Whether `op` or anything it contains or calls is impure (unknown callees are)."""
        if has_trait(op, "terminator"):
            return False
        if has_trait(op, "calls"):
            name = op.attrs["callee"]
            if self.module is None or name not in self.module:
                return True
            if name in self.open:
                self.cycles += 1
                return False
            return self._remember(name, lambda: self.module[name].walk())
        if has_trait(op, "impure"):
            return True
        if not op.regions:
            return False
        return self._remember(op, lambda: (o for r in op.regions for o in r.ops))

    def _remember(self, key, ops) -> bool:
        answer = self.known.get(key)
        if answer is not None:
            return answer
        cycles = self.cycles
        if isinstance(key, str):
            self.open.add(key)
        answer = any(self.effects(o) for o in ops())
        self.open.discard(key)
        if self.cycles == cycles:
            self.known[key] = answer
        return answer


def _slice(block: Block, roots: set[Value], effects: _Effects) -> set[Value]:
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


def prune_loop(op: Op, need: set[Value], effects: _Effects) -> set[Value]:
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


def sweep(block: Block, need: set[Value], effects: _Effects) -> None:
    """Erase the dead ops of `block`, adding the values its live ops use (nested regions
    included) to `need`."""
    kept = []
    for op in reversed(block.ops):
        results = op.results
        live = results[0] in need if len(results) == 1 else any(r in need for r in results)
        if not live and not effects.impure(op):
            continue
        if op.regions:
            if has_trait(op, "loop"):
                need.update(prune_loop(op, need, effects))
            else:
                for region in op.regions:
                    sweep(region, need, effects)
        need.update(op.operands)
        kept.append(op)
    kept.reverse()
    block.ops = kept


def dce_function(fn: Function, module: Module | None = None) -> None:
    sweep(fn.body, set(), _Effects(module))


@register_pass("dce")
@dataclass(frozen=True)
class DCE(FunctionPass):
    """Remove pure ops whose results are unused, and prune loops (see the module doc)."""

    def run_on_function(self, fn: Function, module: Module) -> None:
        dce_function(fn, module)
