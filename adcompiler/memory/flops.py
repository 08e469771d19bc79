"""FLOP counts per op, from the types alone.

Each op declares its count in the registry (`OpDef.flops`): by default one FLOP per result
element; an int `k` for `k` per element of the first operand (0 for data movement: shape
ops, indexing, constructors, casts; 1 for the reductions; a few for the fused nn ops); or a
function (``matmul`` ``2*m*n*k`` per batch entry, ``einsum`` two per point of its full
index space). A loop costs ``n`` times its body, a call its callee; a ``repeat`` in a loop's
body its total count over that loop's iterations times its own body.
"""
from __future__ import annotations

import math
from typing import Mapping

from ..ir.core import Block, Function, Module, Op
from ..ir.types import resolve_dim
from ..ops import registry
from ..ops.control import repeat_counts
from ..ops.registry import has_trait
from .sizes import trip_count


def _elements(shape, dims: Mapping[str, int]) -> int:
    return math.prod(resolve_dim(d, dims) for d in shape)


def op_flops(op: Op, dims: Mapping[str, int], module: Module | None = None) -> int:
    """FLOPs of one execution of `op` (regions and callees included)."""
    if has_trait(op, "loop"):
        return _loop_flops(op, dims, module, False)
    if has_trait(op, "counted"):   # counted by its enclosing loop (`_loop_flops`)
        return 0
    if has_trait(op, "calls"):
        if module is None or op.attrs["callee"] not in module:
            return 0
        return function_flops(module[op.attrs["callee"]], dims, module)
    opdef = registry.lookup(op.name)
    count = opdef.flops if opdef is not None else None
    if count is None:
        return sum(_elements(r.type.shape, dims) for r in op.results)
    if callable(count):
        return count(op, lambda shape: _elements(shape, dims))
    first = op.operands[0].type.shape if op.operands else ()
    return count * _elements(first, dims) if count else 0


def block_flops(block: Block, dims: Mapping[str, int], module: Module | None = None,
                only_recompute: bool = False) -> int:
    """FLOPs of `block`; with `only_recompute`, only ops marked ``recompute = true``."""
    total = 0
    for op in block.ops:
        if has_trait(op, "loop"):
            total += _loop_flops(op, dims, module, only_recompute)
        elif has_trait(op, "counted"):
            continue
        elif not only_recompute or op.attrs.get("recompute"):
            total += op_flops(op, dims, module)
    return total


def _loop_flops(op: Op, dims: Mapping[str, int], module: Module | None,
                only_recompute: bool) -> int:
    """``n`` times the loop's body, plus each ``repeat`` of the body its total count times."""
    n = trip_count(op.attrs["n"], dims) or 0
    body = op.regions[0]
    total = n * block_flops(body, dims, module, only_recompute)
    for inner in body.ops:
        if has_trait(inner, "counted"):
            total += repeat_counts(inner, n)[1] * block_flops(inner.regions[0], dims, module,
                                                              only_recompute)
    return total


def function_flops(fn: Function, dims: Mapping[str, int], module: Module | None = None,
                   only_recompute: bool = False) -> int:
    return block_flops(fn.body, dims, module, only_recompute)
