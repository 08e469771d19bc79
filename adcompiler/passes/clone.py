"""Deep copies of blocks, functions and modules.

Passes never mutate their input: they clone it and rewrite the copy. A clone keeps value
names, op locations and (deep-copied) attributes. `value_map` maps every original value to
its copy; an operand missing from the map (a value captured from outside the cloned block)
is kept as is, so cloning a loop body alone still refers to the enclosing values, while
cloning the enclosing block as well remaps the capture to the new outer value.
"""
from __future__ import annotations

import copy
import dataclasses

from ..ir.builder import TYPE_OF
from ..ir.core import Block, Function, Module, Op, Value


_IMMUTABLE = (int, float, str, bool, type(None))


def copy_attr(x):
    """A deep copy of an attribute value (plain constants, tuples, lists and dicts of them);
    `copy.deepcopy`'s result at a fraction of its cost, which matters in a pass that clones
    every op of a large program."""
    if isinstance(x, _IMMUTABLE):
        return x
    if isinstance(x, tuple):
        return x if all(isinstance(v, _IMMUTABLE) for v in x) else tuple(map(copy_attr, x))
    if isinstance(x, list):
        return [copy_attr(v) for v in x]
    if isinstance(x, dict):
        return {k: copy_attr(v) for k, v in x.items()}
    return copy.deepcopy(x)


def clone_op(op: Op, value_map: dict[Value, Value]) -> Op:
    """A copy of `op` (regions included) whose operands go through `value_map`."""
    regions = [clone_block(r, value_map) for r in op.regions] if op.regions else None
    attrs = {k: copy_attr(v) for k, v in op.attrs.items()} if op.attrs else None
    get, results, operands = value_map.get, op.results, op.operands
    # `map` rather than comprehensions (no frame per list, for each op of a large program);
    # over the operands twice, it calls `get(v, v)`: the operand's copy, else the operand
    new = Op(op.name, list(map(get, operands, operands)), list(map(TYPE_OF, results)), attrs,
             regions, op.loc)
    for old, res in zip(results, new.results):
        res.name = old.name  # here, not through Op's result_names: one loop, not two
        value_map[old] = res
    return new


def clone_block(block: Block, value_map: dict[Value, Value] | None = None) -> Block:
    """A deep copy of `block`; `value_map` (updated in place) seeds and records the mapping.

    Pre-seeding an argument of `block` in `value_map` does not change the new block's own
    arguments (they are always fresh); use `clone_ops_into` to splice ops with substituted
    arguments.
    """
    value_map = {} if value_map is None else value_map
    new = Block([a.type for a in block.args], [a.name for a in block.args])
    for old, arg in zip(block.args, new.args):
        value_map[old] = arg
    for op in block.ops:
        new.append(clone_op(op, value_map))
    return new


def clone_ops_into(ops, target: Block, index: int, value_map: dict[Value, Value]) -> int:
    """Insert copies of `ops` into `target` at `index`; returns the index after the last."""
    for op in ops:
        target.insert(index, clone_op(op, value_map))
        index += 1
    return index


def clone_function(fn: Function, name: str | None = None) -> tuple[Function, dict[Value, Value]]:
    """A deep copy of `fn` (renamed to `name` if given) and the map from old values to new."""
    value_map: dict[Value, Value] = {}
    body = clone_block(fn.body, value_map)
    new = dataclasses.replace(fn, name=name or fn.name, body=body,
                              result_types=list(fn.result_types), params=set(fn.params),
                              attrs=copy.deepcopy(fn.attrs))
    return new, value_map


def clone_module(module: Module) -> Module:
    """A deep copy of `module`; function order and any further module fields are kept."""
    functions = {name: clone_function(f)[0] for name, f in module.functions.items()}
    return dataclasses.replace(module, functions=functions)
