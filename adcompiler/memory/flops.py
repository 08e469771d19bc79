"""FLOP counts per op, from the types alone.

Each op declares its count in the registry (`OpDef.flops`): by default one FLOP per result
element; an int `k` for `k` per element of the first operand (0 for data movement: shape
ops, indexing, constructors, casts; 1 for the reductions; a few for the fused nn ops); or a
function (``matmul`` ``2*m*n*k`` per batch entry, ``einsum`` two per point of its full
index space). A structural op counts through its `flops` rule, which gets a `Counter`: a loop
costs ``n`` times its body, a call its callee; a ``repeat`` in a loop's body its total count
over that loop's iterations times its own body (`adcompiler.ops.structural`). Each callee
is counted once per count, callees first (chains of calls are walked without recursion).
Counting only the ops marked ``recompute``, a call counts what its callee recomputes (all of
it when the call itself is marked).
"""
from __future__ import annotations

import math
from typing import Mapping

from ..ir.calls import calls_bottom_up
from ..ir.core import Block, Function, Module, Op
from ..ir.types import resolve_dim
from ..ops import registry
from ..ops.registry import STRUCTURAL, has_trait


def _elements(shape, dims: Mapping[str, int]) -> int:
    return math.prod(resolve_dim(d, dims) for d in shape)


class Counter:
    """What a structural op's `flops` rule may ask: the sizes, its regions' and callees'
    counts. `only_recompute` counts only the ops marked ``recompute = true`` in regions and
    callees; `memo` keeps callees' counts, ``(name, only_recompute) -> FLOPs``."""

    def __init__(self, dims: Mapping[str, int], module: Module | None, only_recompute: bool,
                 memo: dict | None = None):
        self.dims, self.module, self.only_recompute = dims, module, only_recompute
        self.memo = {} if memo is None else memo

    def block(self, block: Block) -> int:
        return block_flops(block, self.dims, self.module, self.only_recompute, self.memo)

    def function(self, name: str, everything: bool = False) -> int:
        """Function `name`'s count (all of it with `everything`), its callees counted
        first."""
        only = self.only_recompute and not everything
        if (name, only) not in self.memo:
            for callee in calls_bottom_up(self.module, name):
                if (callee, only) not in self.memo:
                    self.memo[callee, only] = block_flops(self.module[callee].body, self.dims,
                                                          self.module, only, self.memo)
        return self.memo[name, only]


def op_flops(op: Op, dims: Mapping[str, int], module: Module | None = None) -> int:
    """FLOPs of one execution of `op` (regions and callees included)."""
    opdef = registry.lookup(op.name)
    count = opdef.flops if opdef is not None else None
    if count is None:
        return sum(_elements(r.type.shape, dims) for r in op.results)
    if callable(count):
        if op.name in STRUCTURAL:
            return count(op, Counter(dims, module, False))
        return count(op, lambda shape: _elements(shape, dims))
    first = op.operands[0].type.shape if op.operands else ()
    return count * _elements(first, dims) if count else 0


def block_flops(block: Block, dims: Mapping[str, int], module: Module | None = None,
                only_recompute: bool = False, memo: dict | None = None) -> int:
    """FLOPs of `block`; with `only_recompute`, only ops marked ``recompute = true`` (an op
    counted from its regions, a loop, is entered whether marked or not)."""
    total = 0
    for op in block.ops:
        d = STRUCTURAL.get(op.name)
        if d is not None and (op.regions or has_trait(op, "calls")) and callable(d.flops):
            memo = {} if memo is None else memo
            total += d.flops(op, Counter(dims, module, only_recompute, memo))
        elif not only_recompute or op.attrs.get("recompute"):
            total += op_flops(op, dims, module)
    return total


def function_flops(fn: Function, dims: Mapping[str, int], module: Module | None = None,
                   only_recompute: bool = False) -> int:
    return block_flops(fn.body, dims, module, only_recompute)
