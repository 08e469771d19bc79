"""Structural ops: loops, calls, block terminators and fused groups. They carry regions or
end them rather than compute values from operands, so each pass that understands them asks
their traits (`registry.has_trait`); the names below are the only place they are spelled.

* ``for(inits..., xs...) {n, n_carry, reverse}``: a loop whose body takes the index, the
  carried values and one slice of each scanned input, and yields the next carries and the
  slices to stack (trait ``loop``);
* ``repeat(i, inits...) {count = (a, b), n_carry}``: a loop of carries only, run ``a*i + b``
  times where ``i`` is the index of the ``for`` whose body holds it (a triangular loop nest:
  the trip count is known for every iteration of the enclosing loop, so FLOPs and memory stay
  exact); its body takes its own index and the carries and yields the next carries (trait
  ``counted``). Rematerialization emits it to recompute a state from a checkpoint;
* ``call(args...) {callee}``: runs another function of the module (trait ``calls``);
* ``yield(values...)`` ends a loop body or a fused region, ``return(values...)`` a function
  (trait ``terminator``);
* ``fused(inputs...)``: a group of ops with CUDA formulas that runs as one kernel; its
  region computes exactly what the ops computed (trait ``group``; `adcompiler.passes.fuse`).
"""
from __future__ import annotations

from .registry import Rule, register_structural

FOR, CALL, YIELD, RETURN, FUSED = "for", "call", "yield", "return", "fused"
REPEAT = "repeat"


def _rules(module: str, *slots: str) -> dict:
    """The slots `slots` of an op, each pointing at the function of that name in
    `adcompiler.ops.structural.<module>`."""
    return {s: Rule(f"adcompiler.ops.structural.{module}", s) for s in slots}


register_structural(FOR, traits=("loop",), doc="a loop over a body region",
                    **_rules("loop", "verify", "flops", "memory"),
                    dce=Rule("adcompiler.ops.structural.loop_dce", "dce"),
                    reverse=Rule("adcompiler.ops.structural.loop_reverse", "reverse"),
                    forward=Rule("adcompiler.ops.structural.loop_forward", "forward"),
                    batch=Rule("adcompiler.ops.structural.loop_batch", "batch"))
register_structural(REPEAT, traits=("counted",),
                    doc="a loop of carries run a*i + b times, i the enclosing loop's index",
                    **_rules("repeat", "verify", "flops", "memory"))
register_structural(CALL, traits=("calls",), doc="a call of a function of the module",
                    **_rules("call", "verify", "flops", "memory"),
                    **_rules("call_ad", "reverse", "forward"))
register_structural(YIELD, traits=("terminator",), doc="ends a loop body or fused region",
                    ends="region", **_rules("terminator", "verify"))
register_structural(RETURN, traits=("terminator",), doc="ends a function body",
                    ends="function", **_rules("terminator", "verify"))


# a fused group costs one FLOP per result element (as an op of unknown cost)
register_structural(FUSED, traits=("group",), doc="a group of ops run as one kernel",
                    flops=None, **_rules("fused", "verify"))
