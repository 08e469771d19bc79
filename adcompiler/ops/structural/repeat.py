"""``repeat(i, inits...) {count = (a, b), n_carry}``: a loop of carries run ``a*i + b``
times, ``i`` the index of the ``for`` whose body holds it (`adcompiler.ops.control`)."""
from __future__ import annotations

from ...ir.core import Op
from ...ir.types import TensorType
from ...ir.verifier import ANNOTATION_ATTRS, types_text
from ...memory.sizes import trip_count
from ..registry import ends, has_trait


def verify(checker, op) -> None:
    """Directly in a ``for`` body, whose index is its first operand; attrs ``count = (a, b)``
    (ints >= 0) and ``n_carry`` (the other operands); block arguments ``[i64[],
    carries...]``; yield and results the carries' types."""
    count, nc = op.attrs.get("count"), op.attrs.get("n_carry")
    if set(op.attrs) - ANNOTATION_ATTRS != {"count", "n_carry"} \
            or not isinstance(count, tuple) or len(count) != 2 \
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                       for c in count) or nc != len(op.operands) - 1:
        checker.fail(op, "needs exactly the attrs count (a, b: ints >= 0) and n_carry "
                         "(its operands after the index)")
        return
    outer = op.parent.parent if op.parent is not None else None
    if not (isinstance(outer, Op) and has_trait(outer, "loop")) \
            or op.operands[0] is not op.parent.args[0]:
        checker.fail(op, "must be in the body of a 'for' and take its index first: it runs "
                         "a*i + b times, i the index of that loop")
        return
    if len(op.regions) != 1:
        checker.fail(op, f"needs one region, has {len(op.regions)}")
        return
    carries = [v.type for v in op.operands[1:]]
    args = [a.type for a in op.regions[0].args]
    want = [TensorType("i64", ())] + carries
    if args != want:
        checker.fail(op, f"body arguments {types_text(args)} should be "
                         f"{types_text(want)} (index, carries)")
    term = op.regions[0].ops[-1] if op.regions[0].ops else None
    if term is not None and ends(term, "region") \
            and [v.type for v in term.operands] != carries:
        checker.fail(term, f"yields {types_text(v.type for v in term.operands)} but the "
                           f"loop carries {types_text(carries)}")
    if [r.type for r in op.results] != carries:
        checker.fail(op, f"has result types {types_text(r.type for r in op.results)} but "
                         f"carries {types_text(carries)}")


def repeat_counts(op, n_outer: int) -> tuple[int, int]:
    """(the most times, the total times) `op` (a ``repeat``, ``a, b >= 0``) runs over the
    `n_outer` iterations of its enclosing loop."""
    a, b = op.attrs["count"]
    if n_outer <= 0:
        return 0, 0
    return a * (n_outer - 1) + b, a * n_outer * (n_outer - 1) // 2 + b * n_outer


def flops(op, counter) -> int:
    """Nothing on its own: its enclosing loop counts it, from its total count (`loop.flops`)."""
    return 0


def memory(walk, op) -> None:
    """Its body's values, when it runs at all in its enclosing loop (no stacks)."""
    n = trip_count(op.parent.parent.attrs["n"], walk.dims)
    if n is None or repeat_counts(op, n)[0] > 0:
        walk.block(op.regions[0])
