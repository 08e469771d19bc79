"""Scan inputs: a value a loop only reads as ``X[i]`` becomes a sliced input of the loop.

A ``for`` body may read a value `X` of an enclosing block directly (implicit capture). When
every use of `X` inside the body, nested regions included, is ``index(X, %i)`` with
``idx = ("?",)`` (one dynamic index on the first axis) and ``%i`` the loop's own counter,
and `X`'s leading dimension is the trip count ``n`` as the IR stores both (the same int,
or the same symbolic name or canonical product), the loop scans `X` instead::

    %y = for(%h0) {n = 64, ...} {                %y = for(%h0, %W) {n = 64, ...} {
    ^(%i: i64[], %h: f32[B, 8]):                 ^(%i: i64[], %h: f32[B, 8], %W.1: f32[8, 8]):
      %0 = index(%W, %i) {idx = ("?",)}   ->       ... uses of %0 read %W.1 ...
      ... uses of %0 ...

The slice argument takes `X`'s name; the index ops are erased. A value read in any other
way as well (whole, at another index, sliced, by an inner loop's counter) is left captured,
and so is one whose leading dimension is not provably ``n``. Each loop decides for itself,
inner loops first: an inner loop that scans `X` makes `X` an operand there, so an outer loop
reading `X` only through it leaves `X` captured; an inner loop reading ``X[i]`` with the
outer counter counts as the outer loop's use, and then reads the outer slice.

The results are unchanged: a slice is ``x[i]`` in either loop direction, as ``index`` is.
Reverse mode benefits: the cotangent of a scanned input is a stacked per-iteration output
of the reverse loop, where a captured value's is a full-size carry updated every iteration.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Function, Module, Op, Value, replace_all_uses
from ..ops.registry import has_trait, lookup
from .pipeline import FunctionPass, register_pass
from .reverse import captured_values


def _is_slice_read(op: Op, x: Value, index: Value) -> bool:
    """Whether `op` reads the row ``x[index]`` (its definition's `reads_row` says, e.g.
    ``index(x, index) {idx = ("?",)}``), giving `x` without its first axis."""
    d = lookup(op.name)
    row = d.reads_row(op) if d is not None and d.reads_row is not None else None
    return (row is not None and row[0] is x and row[1] is index
            and len(op.results) == 1 and not op.regions
            and op.result.type == x.type.with_shape(x.type.shape[1:]))


def scan_loop(op: Op) -> int:
    """Turn the values the ``for`` op `op` reads only as ``X[i]`` into scanned inputs;
    returns how many. Nested loops are not visited (see `scan_block`)."""
    body, n = op.regions[0], op.attrs["n"]
    index = body.args[0]
    users: dict[Value, dict[Op, None]] = {}  # ordered, each op once
    for inner in body.walk():
        for v in inner.operands:
            users.setdefault(v, {})[inner] = None
    mapping: dict[Value, Value] = {}
    erased: set[Op] = set()
    count = 0
    for x in captured_values(body):
        if not x.type.shape or x.type.shape[0] != n:
            continue
        reads = list(users[x])
        if not all(_is_slice_read(u, x, index) for u in reads):
            continue
        slice_ = body.add_arg(reads[0].result.type, x.name or reads[0].result.name)
        op.operands.append(x)
        mapping.update((u.result, slice_) for u in reads)
        erased.update(reads)
        count += 1
    if count:  # one walk for every scanned input
        replace_all_uses(body, mapping)
        _erase(body, erased)
    return count


def _erase(block: Block, erased: set) -> None:
    """Drop the ops in `erased` from `block` and the regions nested in it."""
    block.ops = [o for o in block.ops if o not in erased]
    for o in block.ops:
        for r in o.regions:
            _erase(r, erased)


def scan_block(block: Block) -> int:
    """`scan_loop` on every ``for`` op in `block`, inner loops before the loops around them."""
    count = 0
    for op in block.ops:
        for region in op.regions:
            count += scan_block(region)
        if has_trait(op, "loop"):
            count += scan_loop(op)
    return count


@register_pass("scan-inputs")
@dataclass(frozen=True)
class ScanInputs(FunctionPass):
    """Make values that loops read only as ``X[i]`` scanned inputs (see the module doc)."""

    def run_on_function(self, fn: Function, module: Module) -> None:
        scan_block(fn.body)
