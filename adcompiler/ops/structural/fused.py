"""``fused(inputs...)``: a group of ops with CUDA formulas run as one kernel; its region
computes exactly what the ops computed (`adcompiler.passes.fuse`)."""
from __future__ import annotations

from ...ir.verifier import types_text
from ..registry import ends


def verify(checker, op) -> None:
    """One region whose arguments take the operands' types and whose ``yield`` gives the
    result types."""
    if len(op.regions) != 1:
        checker.fail(op, f"needs one region, has {len(op.regions)}")
        return
    body = op.regions[0]
    args, operands = [a.type for a in body.args], [v.type for v in op.operands]
    if args != operands:
        checker.fail(op, f"body arguments {types_text(args)} should be the operand types "
                         f"{types_text(operands)}")
    term = body.ops[-1] if body.ops else None
    if term is None or not ends(term, "region"):
        return
    yielded, res = [v.type for v in term.operands], [r.type for r in op.results]
    if yielded != res:
        checker.fail(op, f"has result types {types_text(res)} but its body yields "
                         f"{types_text(yielded)}")
