"""Dead code elimination.

A backward sweep over each block keeps an op when it is impure or terminates the block, or
when one of its results is needed; the operands of kept ops (nested regions included,
whose captures name outer values) become needed. An op with a `dce` rule prunes its own
region (`adcompiler.ops.structural.loop_dce`): ``for`` loops are pruned from the inside:

* stacked outputs (``ys``) that are not needed are dropped;
* a carried value is dropped when its final value is not needed and no needed value of the
  body depends on it (carries can feed each other: one worklist pass finds them all);
* sliced inputs (``xs``) that the pruned body no longer reads are dropped;
* a loop with no needed result and no impure op inside is removed.

A ``call`` is removable when its callee (transitively) contains no impure op.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Function, Module, Op, Value
from ..ops.registry import STRUCTURAL, has_trait
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
            d = STRUCTURAL.get(op.name)
            if d is not None and d.dce is not None:   # prunes its region itself
                need.update(d.dce(op, need, effects))
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
