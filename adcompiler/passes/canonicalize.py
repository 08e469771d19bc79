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

from dataclasses import dataclass

from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, Value, release
from ..ops import registry
from ..ops.patterns import (Pattern, all_patterns, match_op, may_match, names_fit,
                            root_names)
from .cse import pure_op_names
from .pipeline import FunctionPass, register_pass


# ---- the driver -----------------------------------------------------------------------

def pattern_table(patterns=None) -> dict[str, list[Pattern]]:
    """The available patterns (default: every registered op's) keyed by root op name."""
    table: dict[str, list[Pattern]] = {}
    for p in all_patterns() if patterns is None else patterns:
        if p.available():
            table.setdefault(p.match.name, []).append(p)
    return table


def fit_key(op: Op) -> tuple:
    """`op`'s name and the names of the ops defining its operands (None: a block argument):
    what decides which patterns may match it. Spelled out for one and two operands, the
    common cases, as a comprehension costs more than the rest of a visit."""
    operands = op.operands
    if len(operands) == 2:
        a, b = operands[0].owner, operands[1].owner
        return (op.name, a.name if type(a) is Op else None, b.name if type(b) is Op else None)
    if len(operands) == 1:
        a = operands[0].owner
        return (op.name, a.name if type(a) is Op else None)
    return (op.name, *[v.owner.name if type(v.owner) is Op else None for v in operands])


class _Driver:
    """One sweep over a function in program order, each op rewritten until no pattern
    matches it.

    Patterns look only at an op's operands and the ops defining them, never at its users,
    so a sweep in program order reaches the fixed point: when an op is replaced, its users
    come later in the sweep (or inside a later op's region) and are matched then. Ops a
    rewrite builds are matched before the op they replace is dropped. The same order
    rewrites uses: a replaced value is recorded, and each op visited later takes the
    replacements of its operands, so a fold costs nothing beyond its own op.
    """

    def __init__(self, fn: Function, table: dict[str, list[Pattern]]):
        # each pattern with the names its operands' defining ops may have: most ops fail
        # this test on names before any value is looked at
        self.table = {name: [(p, root_names(p.match)) for p in pats]
                      for name, pats in table.items()}
        self.fits: dict[tuple, tuple[list[Pattern], bool]] = {}  # see `fit`
        self.folds = 0  # rewrites applied (the tests check that this grows linearly)
        self.visits = 0  # ops matched against the table
        self.replaced: dict[Value, Value] = {}
        self.scratch = Block()  # what a rewrite builds: emptied for each, not made anew

    def block(self, block: Block) -> None:
        old, block.ops = block.ops, []
        self.append(block, old)

    def append(self, block: Block, ops: list[Op]) -> None:
        """Append `ops` to `block`, each unless a pattern replaces it (then its
        replacement's new ops are appended instead, each rewritten first).

        The common case, an op that no pattern rewrites, stays in this loop (no call per
        op), with the tables in local variables."""
        table, fits, replaced = self.table, self.fits, self.replaced
        replaced_keys, out = replaced.keys(), block.ops
        for op in ops:
            for region in op.regions:
                self.block(region)
            # a C-level test first: most ops use no replaced value, and keep their operands
            if replaced and not replaced_keys.isdisjoint(op.operands):
                op.operands = [replaced.get(v, v) for v in op.operands]
            op.parent = block
            if op.name in table:
                key = fit_key(op)
                candidates, swap = fits.get(key) or self.fit(key)
                if candidates:  # most ops have none once their operands' ops are known
                    new = self.rewrite(block, op, candidates, swap)
                    if new is not None:
                        while new in replaced:  # a built op was itself rewritten
                            new = replaced[new]
                        replaced[op.result] = new
                        release(op)
                        continue
            out.append(op)
        self.visits += len(ops)

    def fit(self, key: tuple) -> tuple[list[Pattern], bool]:
        """For an op named `key[0]` whose operands are defined by ops named `key[1:]` (None:
        a block argument): the patterns that may match it, and whether it is matched with
        its operands swapped too. Memoized in `fits`."""
        name, names = key[0], key[1:]
        swap = len(names) == 2 and registry.get(name).has("commutative")
        found = self.fits[key] = ([
            pat for pat, roots in self.table[name] if len(roots) == len(names) and (
                names_fit(roots, names) or swap and names_fit(roots, names[::-1]))], swap)
        return found

    def rewrite(self, block: Block, op: Op, candidates: list[Pattern],
                swap: bool) -> Value | None:
        """The value of the first of `candidates` that rewrites `op` (its new ops appended
        to `block`, each rewritten first); None if none does."""
        for pat in candidates:
            if not may_match(pat.match, op, swap):
                continue
            env = {"op": op}
            if not match_op(pat.match, op, env):
                continue
            scratch = self.scratch
            scratch.ops, scratch.parent = [], block.parent
            new = pat.rewrite(Builder(scratch, op.loc), env)
            if new is None or new.type != op.result.type:
                continue  # whatever a declined rewrite built is dropped with `scratch.ops`
            self.folds += 1
            self.append(block, scratch.ops)
            return new
        return None


def erase_dead(fn: Function) -> None:
    """Erase pure registry ops (without regions) whose results are unused.

    One backward sweep: every use of a value (nested regions included) comes after its
    definition, so an op's kept users are all seen before the op is."""
    pure = pure_op_names()
    need: set[Value] = set()

    def sweep(block: Block) -> None:
        kept = []
        for op in reversed(block.ops):
            if op.regions:
                for region in op.regions:
                    sweep(region)
            elif op.name in pure:
                results = op.results
                if not (results[0] in need if len(results) == 1
                        else any(r in need for r in results)):
                    release(op)
                    continue
            need.update(op.operands)
            kept.append(op)
        kept.reverse()
        block.ops = kept

    sweep(fn.body)
    del sweep  # it refers to itself: a cycle that would keep `need` alive until a collection


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
