"""``call(args...) {callee}``: runs a function of the module."""
from __future__ import annotations

from ...ir.verifier import types_text


def verify(checker, op) -> None:
    """The callee exists and its argument and result types match."""
    callee = op.attrs.get("callee")
    if callee not in checker.module:
        checker.fail(op, f"calls unknown function {callee!r}")
        return
    f = checker.module[callee]
    args = [v.type for v in op.operands]
    if args != [a.type for a in f.args]:
        checker.fail(op, f"passes {types_text(args)} to @{callee}, which takes "
                         f"{types_text(a.type for a in f.args)}")
    res = [r.type for r in op.results]
    if res != list(f.result_types):
        checker.fail(op, f"expects results {types_text(res)} but @{callee} returns "
                         f"{types_text(f.result_types)}")


def flops(op, counter) -> int:
    """The callee's (0 for a callee the module does not hold): all of it, or, counting only
    recomputation, what it recomputes (all of it when the call is marked)."""
    if counter.module is None or op.attrs["callee"] not in counter.module:
        return 0
    return counter.function(op.attrs["callee"], everything=bool(op.attrs.get("recompute")))


def memory(walk, op) -> None:
    """The callee's frame on top of the caller's (walked once per callee); its results stay
    as the call's."""
    walk.call(op, None)
