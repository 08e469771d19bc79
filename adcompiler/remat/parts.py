"""Shared parts of a long checkpointing plan: one function per distinct sub-plan.

A binomial plan of n steps has thousands of splits at n = 10^5, but few distinct ones: the
part that reverses ``l`` steps with ``k`` slots has the same shape wherever it starts. So a
long plan is emitted with one function per distinct part (a split reversed from a
checkpoint), taking the part's first step as an ``i64[]`` argument, its checkpoint state
and the cotangents, and returning the cotangents and its steps' stacked outputs. The
checkpoint a split holds is a value in its function's frame, so the slots in use are the
frames on the call stack and the program's size follows the number of distinct parts,
not n. The functions borrow their arguments (``borrows_args``: the caller counts them),
so passing the loop's inputs down a chain of calls costs no memory in the model or the
runtime.
"""
from __future__ import annotations

from ..ir.core import Op, Value
from .binomial import Leaf, Plan, Split, nodes

MIN_PIECES = 100   # plans of this many pieces on are emitted with shared parts


def pieces(plan: Plan, min_run: int) -> int:
    """The loops' worth of pieces `plan` has a loop per piece: a split or a leaf each, a run
    or chain of fewer than `min_run` blocks each block (longer ones are nested loops)."""
    return sum(1 if isinstance(p, (Leaf, Split)) or p.q >= min_run else p.q
               for p in nodes(plan))


def part_keys(plan: Plan) -> dict[int, int]:
    """``id(node) -> key`` for every split of `plan`: equal keys for splits of the same
    shape relative to their first step (children before parents, no recursion)."""
    shapes: dict[tuple, int] = {}
    key: dict[int, int] = {}
    for p in reversed(list(nodes(plan))):
        if isinstance(p, Split):
            shape = ("S", p.m - p.a, p.b - p.a, key[id(p.right)], key[id(p.left)])
        elif isinstance(p, Leaf):
            shape = ("L", p.b - p.a)
        else:
            shape = (type(p).__name__, p.f, p.ell, p.q)
        key[id(p)] = shapes.setdefault(shape, len(shapes))
    return key


def length(p: Plan) -> int:
    return p.b - p.a if isinstance(p, (Leaf, Split)) else p.f + p.q * p.ell


def captured(*ops: Op) -> list[Value]:
    """The values that the regions of `ops` read from outside them, in order of first use."""
    out: dict[Value, None] = {}
    for op in ops:
        inside = set()
        for inner in op.walk():
            inside.update(inner.results)
            for region in inner.regions:
                inside.update(region.args)
        for inner in op.walk():
            if inner is op:
                continue
            for v in inner.operands:
                if v not in inside:
                    out.setdefault(v, None)
    return list(out)

