"""Inlining: replace ``call`` ops with a copy of the callee's body.

Callees are flattened first (innermost calls first), so one pass leaves no inlinable call
behind. Calls to a function with a custom derivative rule (a ``grad`` or ``tangent`` rule
function in the module) are kept when `keep_custom` is true: the derivative passes use the
rule instead of differentiating the body. Inlined ops keep their own source locations, so
a derivative op still points at the line of the callee it came from.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.core import Block, Function, Module, Op, Value
from ..ops.registry import has_trait, names_with
from .clone import clone_function, clone_op
from .pipeline import FunctionPass, register_pass


def callees(fn: Function) -> list[str]:
    """Names of the functions `fn` calls (nested regions included), in order, once each."""
    seen: dict[str, None] = {}
    for op in fn.walk():
        if has_trait(op, "calls"):
            seen.setdefault(op.attrs["callee"], None)
    return list(seen)


@register_pass("inline")
@dataclass(frozen=True)
class Inline(FunctionPass):
    """Inline calls in every function (or in `fn`).

    `keep_custom`: keep calls to functions that have a custom derivative rule of one of the
    kinds in `rules` (reverse mode keeps only ``grad``: it differentiates the body of a
    function that has only a ``tangent`` rule).
    `prune`: afterwards drop functions no longer called from the entry (`fn`, else the
    module's main function); rule functions and the functions they belong to are kept.
    """

    keep_custom: bool = True
    prune: bool = False
    rules: tuple[str, ...] = ("grad", "tangent")

    def run(self, module: Module) -> Module:
        flat: dict[str, Function] = {}
        # the functions whose calls stay: one look at the module, not one per call
        kept = {f.attrs[f"{kind}_of"] for f in module.functions.values()
                     for kind in self.rules if f"{kind}_of" in f.attrs} \
            if self.keep_custom else set()
        calls = names_with("calls")
        for f in self.functions(module):
            self._inline_block(f.body, module, flat, (f.name,), kept, calls, {})
        if self.prune:
            self._prune(module)
        return module

    def _flat(self, name: str, module: Module, flat: dict[str, Function],
              stack: tuple[str, ...], kept: set[str], calls: frozenset[str]) -> Function:
        """A copy of `name` with its own calls inlined (memoized; the module is untouched)."""
        if name in stack:
            cycle = " -> ".join(stack[stack.index(name):] + (name,))
            raise AdcError(f"cannot inline recursive calls: {cycle}", module[name].loc)
        if name not in flat:
            if name not in module:
                raise AdcError(f"call to unknown function '{name}'")
            copy, _ = clone_function(module[name])
            self._inline_block(copy.body, module, flat, stack + (name,), kept, calls, {})
            flat[name] = copy
        return flat[name]

    def _inline_block(self, block: Block, module: Module, flat: dict[str, Function],
                      stack: tuple[str, ...], kept: set[str], calls: frozenset[str],
                      mapping: dict[Value, Value]) -> None:
        """Inline the calls of `block` and of its regions. `mapping` takes the results of
        the calls inlined so far to the values replacing them; one map serves a block and
        its regions (values are unique), so no region is walked twice. `calls`: the names
        of the ops that call (a set, not a trait lookup per op). A block without calls
        keeps its list of ops (most blocks of a program after inlining)."""
        new_ops: list[Op] | None = None   # the block's ops, once a call is inlined
        for k, op in enumerate(block.ops):
            # a C-level test first: most ops use no inlined call's result
            if mapping and not mapping.keys().isdisjoint(op.operands):
                op.operands = [mapping.get(v, v) for v in op.operands]
            for region in op.regions:
                self._inline_block(region, module, flat, stack, kept, calls, mapping)
            if op.name not in calls or op.attrs["callee"] in kept:
                if new_ops is not None:
                    new_ops.append(op)
                continue
            if new_ops is None:
                new_ops = block.ops[:k]
            callee = self._flat(op.attrs["callee"], module, flat, stack, kept, calls)
            if len(callee.args) != len(op.operands):
                raise AdcError(f"call to '{callee.name}' passes {len(op.operands)} arguments; "
                               f"it takes {len(callee.args)}", op.loc)
            value_map = dict(zip(callee.args, op.operands))
            inlined = [clone_op(cop, value_map) for cop in callee.body.ops[:-1]]
            for cop in inlined:
                cop.parent = block
            new_ops += inlined
            for res, v in zip(op.results, callee.returned):
                mapping[res] = value_map.get(v, v)
        if new_ops is not None:
            block.ops = new_ops

    def _prune(self, module: Module) -> None:
        entry = self.fn or module.main.name
        keep = [entry]
        for f in module.functions.values():
            for kind in ("grad", "tangent"):
                if f"{kind}_of" in f.attrs:
                    keep += [f.name, f.attrs[f"{kind}_of"]]
        live: set[str] = set()
        while keep:
            name = keep.pop()
            if name in live or name not in module:
                continue
            live.add(name)
            keep += callees(module[name])
        module.functions = {n: f for n, f in module.functions.items() if n in live}
