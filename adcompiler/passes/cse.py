"""Common subexpression elimination by hash-consing pure ops.

Two ops are the same expression when they have the same name, the same operand values (in
either order for a commutative op), equal attributes and equal result types. Scopes follow
regions: an op in a loop body may reuse a value computed outside the loop, never the other
way round, and values computed in one loop body are not visible in another.

Merged: pure registry ops without regions (not ``impure``). Not merged: ``call``, ``for``,
``yield`` and ``return``.
"""
from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass
from typing import Any

from ..ir.core import Block, Function, Module, Op, Value
from ..ops import registry
from .pipeline import FunctionPass, register_pass


def freeze(x: Any) -> Any:
    """A hashable form of an attribute; ``1`` and ``1.0`` (and ``0.0``, ``-0.0``) differ."""
    if isinstance(x, dict):
        return ("dict",) + tuple(sorted((k, freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(freeze(v) for v in x)
    if isinstance(x, (set, frozenset)):
        return ("set",) + tuple(sorted(map(freeze, x), key=repr))
    if isinstance(x, float):
        return ("float", x.hex())
    return (type(x).__name__, x)


def mergeable(op: Op) -> bool:
    if op.regions or op.name not in registry.REGISTRY:
        return False
    return not registry.get(op.name).has("impure")


def expression_key(op: Op) -> tuple:
    operands = list(op.operands)
    if len(operands) == 2 and registry.get(op.name).has("commutative"):
        operands.sort(key=lambda v: v.uid)
    return (op.name, tuple(operands), freeze(op.attrs), tuple(r.type for r in op.results))


def cse_block(block: Block, scope: ChainMap, mapping: dict[Value, Value]) -> int:
    """Merge ops of `block` with those in `scope`; returns how many ops were removed."""
    removed, kept = 0, []
    for op in block.ops:
        op.operands = [mapping.get(v, v) for v in op.operands]
        for region in op.regions:
            removed += cse_block(region, scope.new_child(), mapping)
        if mergeable(op):
            key = expression_key(op)
            prior = scope.get(key)
            if prior is not None:
                mapping.update(zip(op.results, prior.results))
                removed += 1
                continue
            scope[key] = op
        kept.append(op)
    block.ops = kept
    return removed


@register_pass("cse")
@dataclass(frozen=True)
class CSE(FunctionPass):
    """Hash-cons pure ops so that each expression is computed once per scope."""

    def run_on_function(self, fn: Function, module: Module) -> None:
        cse_block(fn.body, ChainMap(), {})
