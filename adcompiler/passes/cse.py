"""Common subexpression elimination by hash-consing pure ops.

Two ops are the same expression when they have the same name, the same operand values (in
either order for a commutative op), equal attributes and equal result types. Scopes follow
regions: an op in a loop body may reuse a value computed outside the loop, never the other
way round, and values computed in one loop body are not visible in another.

Merged: pure registry ops without regions (not ``impure``). Not merged: ``call``, ``for``,
``yield`` and ``return``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ir.core import Block, Function, Module, Op, Value, release
from ..ops import registry
from .pipeline import FunctionPass, register_pass


_SCALARS = (int, str, type(None))


def freeze(x: Any) -> Any:
    """A hashable form of an attribute; ``1`` and ``1.0`` (and ``0.0``, ``-0.0``) differ.
    Scalars are tested first: most attributes are, and every const op has some."""
    if isinstance(x, float):
        return ("float", x.hex())
    if isinstance(x, _SCALARS):
        return (type(x).__name__, x)
    if isinstance(x, dict):
        return ("dict", *sorted([(k, freeze(v)) for k, v in x.items()]))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, *[freeze(v) for v in x])
    if isinstance(x, (set, frozenset)):
        return ("set",) + tuple(sorted(map(freeze, x), key=repr))
    return (type(x).__name__, x)


def pure_op_names() -> frozenset[str]:
    """The registry ops that are not ``impure``: those CSE merges and dead-op erasure drops."""
    return frozenset(registry.REGISTRY) - registry.names_with("impure", structural=False)


def commutative_op_names() -> frozenset[str]:
    return registry.names_with("commutative", structural=False)


def mergeable(op: Op) -> bool:
    if op.regions or op.name not in registry.REGISTRY:
        return False
    return not registry.get(op.name).has("impure")


def expression_key(op: Op, commutative: frozenset[str] | None = None) -> tuple:
    """What makes `op` the same expression as another (`commutative`: the names of the
    commutative ops, `commutative_op_names()` if not given): its name, attributes, result
    types and operands, in one flat tuple (the operands last, their number may vary).

    A result type enters the key as its (dtype, shape) fields, which is how types compare,
    hashed in C: hashing the type itself is a Python call per op."""
    operands = op.operands
    if len(operands) == 2 and operands[1].uid < operands[0].uid and op.name in (
            commutative_op_names() if commutative is None else commutative):
        operands = operands[::-1]
    attrs = freeze(op.attrs) if op.attrs else ()
    results = op.results
    if len(results) == 1:
        t = results[0].type
        return (op.name, attrs, t.dtype, t.shape, *operands)
    # a tuple where one result has a dtype: no single-result key equals this one
    return (op.name, attrs, tuple([(r.type.dtype, r.type.shape) for r in results]),
            *operands)


class _Scopes:
    """The expressions seen so far, one flat table for all scopes: a region's entries are
    taken out again when it ends (an undo list per scope), so a lookup costs one probe
    however deeply the regions nest. An inner scope never shadows a key: a key already
    seen is merged, not entered again."""

    def __init__(self):
        self.table: dict[tuple, Op] = {}
        self.added: list[list[tuple]] = [[]]

    def enter(self) -> None:
        self.added.append([])

    def leave(self) -> None:
        for key in self.added.pop():
            del self.table[key]


def cse_block(block: Block, scope: _Scopes, mapping: dict[Value, Value],
              pure: frozenset[str] | None = None,
              commutative: frozenset[str] | None = None) -> int:
    """Merge ops of `block` with those in `scope`; returns how many ops were removed."""
    pure = pure_op_names() if pure is None else pure
    commutative = commutative_op_names() if commutative is None else commutative
    removed, kept = 0, []
    get, merged = mapping.get, mapping.keys()   # a live view of the merged values
    table, added = scope.table, scope.added[-1]
    for op in block.ops:
        # a C-level test first: most ops use no merged value, and keep their operand list
        if mapping and not merged.isdisjoint(op.operands):
            op.operands = [get(v, v) for v in op.operands]
        if op.regions:
            for region in op.regions:
                scope.enter()
                removed += cse_block(region, scope, mapping, pure, commutative)
                scope.leave()
        elif op.name in pure:
            key = expression_key(op, commutative)
            prior = table.setdefault(key, op)   # one hash of the key, whether seen or not
            if prior is not op:
                mapping.update(zip(op.results, prior.results))
                removed += 1
                release(op)
                continue
            added.append(key)
        kept.append(op)
    block.ops = kept
    return removed


@register_pass("cse")
@dataclass(frozen=True)
class CSE(FunctionPass):
    """Hash-cons pure ops so that each expression is computed once per scope."""

    def run_on_function(self, fn: Function, module: Module) -> None:
        cse_block(fn.body, _Scopes(), {})
