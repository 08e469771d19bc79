"""FLOP counts per op, from the types alone.

The table is keyed by op name first, then by trait: elementwise ops cost one FLOP per output
element, reductions one per input element, ``matmul`` ``2*m*n*k`` per batch entry, ``einsum``
two per point of its full index space, the fused nn ops a few per element. Data movement
(shape ops, indexing, constructors, casts) costs nothing. A loop costs ``n`` times its body.
"""
from __future__ import annotations

import math
from typing import Mapping

from ..ir.core import Block, Function, Module, Op
from ..ir.types import resolve_dim
from ..ops import registry
from .sizes import trip_count

# FLOPs per element of the (first) operand for ops whose cost is a multiple of their size
_PER_ELEMENT = {"softmax": 5, "log_softmax": 5, "logsumexp": 4, "layernorm": 8, "var": 3,
                "cross_entropy": 6, "mse": 3, "bce": 6, "bce_with_logits": 6, "gelu": 8,
                "sigmoid": 4, "tanh": 4, "softplus": 4}
_FREE = {"const", "zeros", "ones", "full", "arange", "dim_value", "zeros_like", "ones_like",
         "reshape", "transpose", "broadcast_to", "expand_dims", "squeeze", "concat", "split",
         "stack", "index", "index_grad", "take", "take_grad", "one_hot", "cast",
         "stop_gradient"}


def _elements(shape, dims: Mapping[str, int]) -> int:
    return math.prod(resolve_dim(d, dims) for d in shape)


def _matmul(op: Op, dims) -> int:
    a = [resolve_dim(d, dims) for d in op.operands[0].type.shape]
    out = _elements(op.results[0].type.shape, dims)
    k = a[-1] if a else 1
    return 2 * out * k


def _einsum(op: Op, dims) -> int:
    spec = op.attrs["spec"].replace(" ", "")
    ins = spec.split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for sub, v in zip(ins, op.operands):
        shape = [resolve_dim(d, dims) for d in v.type.shape]
        letters = [c for c in sub if c.isalpha()]
        for c, d in zip(letters[-len(shape):] if shape else [], shape[-len(letters):]):
            sizes[c] = max(sizes.get(c, 1), d)
    extra = _elements(op.results[0].type.shape, dims) if "..." in spec else 1
    return 2 * math.prod(sizes.values()) * max(extra, 1)


def op_flops(op: Op, dims: Mapping[str, int], module: Module | None = None) -> int:
    """FLOPs of one execution of `op` (regions and callees included)."""
    if op.name == "for":
        n = trip_count(op.attrs["n"], dims) or 0
        return n * block_flops(op.regions[0], dims, module)
    if op.name == "call":
        if module is None or op.attrs["callee"] not in module:
            return 0
        return function_flops(module[op.attrs["callee"]], dims, module)
    if op.name in ("yield", "return") or op.name in _FREE:
        return 0
    if op.name == "matmul":
        return _matmul(op, dims)
    if op.name == "einsum":
        return _einsum(op, dims)
    first = op.operands[0].type.shape if op.operands else ()
    if op.name in _PER_ELEMENT:
        return _PER_ELEMENT[op.name] * _elements(first, dims)
    opdef = registry.REGISTRY.get(op.name)
    if opdef is not None and opdef.has("reduction"):
        return _elements(first, dims)
    return sum(_elements(r.type.shape, dims) for r in op.results)


def block_flops(block: Block, dims: Mapping[str, int], module: Module | None = None,
                only_recompute: bool = False) -> int:
    """FLOPs of `block`; with `only_recompute`, only ops marked ``recompute = true``."""
    total = 0
    for op in block.ops:
        if op.name == "for":
            n = trip_count(op.attrs["n"], dims) or 0
            total += n * block_flops(op.regions[0], dims, module, only_recompute)
        elif not only_recompute or op.attrs.get("recompute"):
            total += op_flops(op, dims, module)
    return total


def function_flops(fn: Function, dims: Mapping[str, int], module: Module | None = None,
                   only_recompute: bool = False) -> int:
    return block_flops(fn.body, dims, module, only_recompute)
