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
from ..ir.core import Block, Function, Module, Op, Value, replace_all_uses
from ..ops.registry import has_trait
from .clone import clone_function, clone_op
from .pipeline import FunctionPass, register_pass


def has_custom_rule(module: Module, name: str, kinds=("grad", "tangent")) -> bool:
    return any(module.rule_for(name, kind) is not None for kind in kinds)


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
        for f in self.functions(module):
            self._inline_block(f.body, module, flat, (f.name,))
        if self.prune:
            self._prune(module)
        return module

    def _should_inline(self, op: Op, module: Module) -> bool:
        return has_trait(op, "calls") and not (
            self.keep_custom and has_custom_rule(module, op.attrs["callee"], self.rules))

    def _flat(self, name: str, module: Module, flat: dict[str, Function],
              stack: tuple[str, ...]) -> Function:
        """A copy of `name` with its own calls inlined (memoized; the module is untouched)."""
        if name in stack:
            cycle = " -> ".join(stack[stack.index(name):] + (name,))
            raise AdcError(f"cannot inline recursive calls: {cycle}", module[name].loc)
        if name not in flat:
            if name not in module:
                raise AdcError(f"call to unknown function '{name}'")
            copy, _ = clone_function(module[name])
            self._inline_block(copy.body, module, flat, stack + (name,))
            flat[name] = copy
        return flat[name]

    def _inline_block(self, block: Block, module: Module, flat: dict[str, Function],
                      stack: tuple[str, ...]) -> None:
        mapping: dict[Value, Value] = {}
        new_ops: list[Op] = []
        for op in block.ops:
            op.operands = [mapping.get(v, v) for v in op.operands]
            for region in op.regions:
                replace_all_uses(region, mapping)
                self._inline_block(region, module, flat, stack)
            if not self._should_inline(op, module):
                new_ops.append(op)
                continue
            callee = self._flat(op.attrs["callee"], module, flat, stack)
            if len(callee.args) != len(op.operands):
                raise AdcError(f"call to '{callee.name}' passes {len(op.operands)} arguments; "
                               f"it takes {len(callee.args)}", op.loc)
            value_map = dict(zip(callee.args, op.operands))
            new_ops += [clone_op(cop, value_map) for cop in callee.body.ops[:-1]]
            for res, v in zip(op.results, callee.returned):
                mapping[res] = value_map.get(v, v)
        block.ops = []
        for op in new_ops:
            block.append(op)

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
