"""Scheduling the straight-line part of an adjoint function under a budget (or the least
peak): the `milp` model, applied to a copy of the module, checked by `predict_peak`.

Runs after the loops are scheduled (`schedule.solve_budget`), on what they leave: loops are
fixed ops here, and the forward values around them are stored or recomputed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..diagnostics import AdcError
from ..ir.core import Module
from ..memory.liveness import predict_peak
from ..memory.sizes import format_bytes
from ..passes.clone import clone_module
from ..passes.dce import dce_function
from .dag import Problem, apply_clones, build_problem
from .milp import DEFAULT_TIME_LIMIT, Solution, solve


@dataclass
class StraightLine:
    """What the straight-line solver did, for `explain`."""
    solver: str = "highs-milp"
    status: str = "store-all fits"
    optimal: bool = True
    gap: float = 0.0
    seconds: float = 0.0
    variables: int = 0
    model_peak: int | None = None
    stored: list = field(default_factory=list)        # forward values the reverse reads
    recomputed: list = field(default_factory=list)    # (primal op, [clone ops])


def _apply(module: Module, fn: str, sol: Solution, dims) -> tuple[Module, Problem, list, int]:
    out = clone_module(module)
    prob = build_problem(out, fn, dims)
    made = apply_clones(prob, sol.clones) if sol.clones else []
    if made:
        dce_function(out[fn], out)
    kept = {id(op) for op in out[fn].body.ops}
    made = [(k, op) for k, op in made if id(op) in kept]
    return out, prob, made, predict_peak(out, fn, dims).peak_bytes


def _infeasible(budget: int, floor: int, sol: Solution) -> AdcError:
    proven = "" if sol.optimal else \
        f" found (not proven minimal within the time limit: gap {sol.gap:.1%})"
    return AdcError(f"remat budget {format_bytes(budget)} ({budget} bytes) cannot be met: "
                    f"the smallest feasible peak{proven} is {format_bytes(floor)} "
                    f"({floor} bytes)")


def schedule_straight(module: Module, fn: str, budget: int | None, dims: Mapping[str, int],
                      time_limit: float = DEFAULT_TIME_LIMIT) -> tuple[Module, StraightLine]:
    """`module` with the straight-line values of `fn` stored or recomputed so that the
    predicted peak fits `budget` with the fewest recomputed FLOPs (None: the least peak)."""
    prob = build_problem(module, fn, dims)
    info = StraightLine()
    base = predict_peak(module, fn, dims).peak_bytes
    if budget is not None and base <= budget:
        info.stored = prob.reverse_uses
        info.model_peak = base
        return module, info
    if not prob.clone_times:
        sol = Solution(status="nothing to recompute", model_peak=base)
    else:
        sol = solve(prob, budget, time_limit)
    if budget is not None and not sol.feasible:
        floor_sol = solve(prob, None, time_limit)
        if not floor_sol.feasible:
            floor_sol = Solution(status="no solution", optimal=False, gap=1.0, model_peak=base)
        out, p2, made, peak = _apply(module, fn, floor_sol, dims)
        if peak > budget:
            raise _infeasible(budget, min(peak, base), floor_sol)
        sol = floor_sol
    elif not sol.feasible:       # the least peak, and no solution within the time limit
        sol = Solution(status="no solution", optimal=False, gap=1.0, model_peak=base)
    out, p2, made, peak = _apply(module, fn, sol, dims)
    if budget is not None and peak > budget:
        raise AssertionError(f"remat model peak {sol.model_peak} below its IR's {peak}")
    info.status, info.optimal, info.gap = sol.status, sol.optimal, sol.gap
    info.seconds, info.variables, info.model_peak = sol.seconds, sol.variables, sol.model_peak
    if budget is None and peak >= base:   # recomputing does not lower this peak
        info.stored = prob.reverse_uses
        return module, info
    by_primal: dict[int, list] = {}
    for k, op in made:
        by_primal.setdefault(k, []).append(op)
    info.recomputed = [(p2.ops[k], ops) for k, ops in sorted(by_primal.items())]
    info.stored = [v for v in p2.reverse_uses if v.defining_op is None
                   or p2.born[v] not in by_primal]
    return out, info

