"""Canonicalization: algebraic simplification by the rewrite patterns of the ops.

Each op declares its patterns on its definition (``register(..., rewrites=)``; the pattern
language is `adcompiler.ops.patterns`): a match tree rooted at the op and a rewrite that
builds the replacement with a `Builder`, or returns None to decline. One driver applies
them to a fixed point. It is generic:

* a commutative op (registry trait) is also matched with its operands swapped;
* a replacement must have exactly the type of the value it replaces, so ``x + 0`` is only
  folded when the zero does not broadcast ``x`` to a larger shape or another dtype;
* a pattern that matches or emits an op that is not registered is skipped;
* ops left unused by a rewrite are erased if they are pure.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, UseLists, Value, blocks
from ..ops import registry
from ..ops.patterns import (Pattern, all_patterns, match_op, may_match, names_fit,
                            root_names)
from .pipeline import FunctionPass, register_pass


# ---- the driver -----------------------------------------------------------------------

def pattern_table(patterns=None) -> dict[str, list[Pattern]]:
    """The available patterns (default: every registered op's) keyed by root op name."""
    table: dict[str, list[Pattern]] = {}
    for p in all_patterns() if patterns is None else patterns:
        if p.available():
            table.setdefault(p.match.name, []).append(p)
    return table


class _Driver:
    """One sweep over a function in program order, each op rewritten until no pattern
    matches it.

    Patterns look only at an op's operands and the ops defining them, never at its users,
    so a sweep in program order reaches the fixed point: when an op is replaced, its users
    come later in the sweep (or inside a later op's region) and are matched then. Ops a
    rewrite builds are matched before the op they replace is dropped. Uses are rewritten
    through use lists, so a fold costs the size of its users, not of the function.
    """

    def __init__(self, fn: Function, table: dict[str, list[Pattern]]):
        # each pattern with the names its operands' defining ops may have: most ops fail
        # this test on names before any value is looked at
        self.table = {name: [(p, root_names(p.match)) for p in pats]
                      for name, pats in table.items()}
        self.fits: dict[tuple, list[Pattern]] = {}  # (op, operands' ops) -> candidates
        self.uses = UseLists(fn.body)
        self.folds = 0  # rewrites applied (the tests check that this grows linearly)
        self.visits = 0  # ops matched against the table
        self.replaced: dict[Value, Value] = {}

    def block(self, block: Block) -> None:
        old, block.ops = block.ops, []
        for op in old:
            self.op(block, op)

    def op(self, block: Block, op: Op) -> None:
        """Append `op` to `block` unless a pattern replaces it (then its replacement's new
        ops are appended instead, each rewritten first)."""
        for region in op.regions:
            self.block(region)
        self.visits += 1
        pats = self.table.get(op.name)
        if pats is None:
            op.parent = block
            block.ops.append(op)
            return
        operands = op.operands
        swap = len(operands) == 2 and registry.get(op.name).has("commutative")
        key = (op.name, *[v.owner.name if isinstance(v.owner, Op) else None
                          for v in operands])
        candidates = self.fits.get(key)
        if candidates is None:
            names = key[1:]
            candidates = self.fits[key] = [
                pat for pat, roots in pats if len(roots) == len(names) and (
                    names_fit(roots, names) or swap and names_fit(roots, names[::-1]))]
        for pat in candidates:
            if not may_match(pat.match, op, swap):
                continue
            env = {"op": op}
            if not match_op(pat.match, op, env):
                continue
            scratch = Block()
            scratch.parent = block.parent
            new = pat.rewrite(Builder(scratch, op.loc), env)
            if new is None or new.type != op.result.type:
                continue  # whatever a declined rewrite built is dropped with `scratch`
            self.folds += 1
            for built in scratch.ops:
                self.uses.add(built)
                built.parent = block
                self.op(block, built)
            while new in self.replaced:  # a built op was itself rewritten
                new = self.replaced[new]
            self.replaced[op.result] = new
            self.uses.replace(op.result, new)
            return
        op.parent = block
        block.ops.append(op)


def erase_dead(fn: Function) -> None:
    """Erase pure registry ops (without regions) whose results are unused."""
    counts = Counter([v for block in blocks(fn.body) for op in block.ops for v in op.operands])
    used = counts.get

    def sweep(block: Block) -> None:
        kept = []
        for op in reversed(block.ops):
            if op.regions:
                for region in op.regions:
                    sweep(region)
            elif (not any(used(r) for r in op.results) and op.name in registry.REGISTRY
                  and not registry.get(op.name).has("impure")):
                counts.subtract(op.operands)
                continue
            kept.append(op)
        block.ops = kept[::-1]

    sweep(fn.body)


def canonicalize_function(fn: Function, patterns=None) -> "_Driver":
    """Canonicalize `fn` in place; returns the driver, whose `folds` and `visits` count
    the rewrites applied and the ops matched."""
    driver = _Driver(fn, pattern_table(patterns))
    driver.block(fn.body)
    erase_dead(fn)
    return driver


@register_pass("canonicalize")
@dataclass(frozen=True)
class Canonicalize(FunctionPass):
    """Simplify with the ops' rewrite patterns to a fixed point; erase dead pure ops."""

    def run_on_function(self, fn: Function, module: Module) -> None:
        canonicalize_function(fn)
