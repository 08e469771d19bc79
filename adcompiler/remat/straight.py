"""Scheduling the straight-line part of an adjoint function under a budget (or the least
peak): the `milp` model, applied to a copy of the module, checked by `predict_peak`.

Runs after the loops are scheduled (`schedule.solve_budget`), on what they leave: loops are
fixed ops here, and the forward values around them are stored or recomputed. The
baselines of `saved` (Chen's √n segments, the `mincut`) are incumbents: each is applied and
its exact peak predicted, and when the MILP stops at its deadline with a worse schedule
(or none), the best incumbent is taken. What is proven is said in `StraightLine.guarantee`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..diagnostics import AdcError
from ..ir.core import Module
from ..memory.liveness import predict_peak
from ..memory.sizes import format_bytes
from ..passes.clone import clone_function
from ..passes.dce import dce_function
from .chain_solve import solve_chains
from .dag import Problem, apply_clones, build_problem
from .milp import Solution, _Progress, model_size, objective, solve


@dataclass
class StraightLine:
    """What the straight-line solver did, for `explain`.

    `solver` made the schedule taken (``highs-milp``, ``chen``, ``mincut``); `status` is
    the MILP's (``optimal``, ``time limit``, ``infeasible``, ``no solution``) or ``store-all
    fits`` / ``heuristic``; `optimal` is true exactly when the schedule taken is proven
    optimal for the straight-line model, and `gap` (when known) bounds how far from it."""
    solver: str = "highs-milp"
    status: str = "store-all fits"
    optimal: bool = True
    gap: float | None = 0.0
    seconds: float = 0.0
    variables: int = 0
    model_peak: int | None = None
    segments: int | None = None                       # the chain DP's segments
    segment_milp: dict | None = None                  # its segments' MILPs (`segment_milp`)
    fallback_peak: int | None = None                  # a baseline's peak, not taken
    stored: list = field(default_factory=list)        # forward values the reverse reads
    recomputed: list = field(default_factory=list)    # (primal op, [clone ops])

    @property
    def guarantee(self) -> str:
        if self.optimal:
            return "optimal"
        return "gap" if self.gap is not None else "heuristic"


def _apply(module: Module, fn: str, clones: dict, dims) -> tuple[Module, None, list, int]:
    """`module` with `clones` applied to a copy of `fn` (the other functions shared until
    `_finish` copies them): (module, None, the clones made as (primal op index, clone),
    exact peak, `clones`)."""
    out = module
    made = []
    if clones:
        out = replace(module, functions={**module.functions, fn: clone_function(module[fn])[0]})
        made = apply_clones(out[fn], clones)
        dce_function(out[fn], out)
        kept = {id(op) for op in out[fn].body.ops}
        made = [(k, op) for k, op in made if id(op) in kept]
    return out, None, made, predict_peak(out, fn, dims).peak_bytes, clones


def _flops(prob: Problem, clones: dict) -> int:
    return sum(prob.cost[prob.ops[k].result] for ks in clones.values() for k in ks)


def _incumbents(prob: Problem) -> list[tuple[str, dict]]:
    """The baselines' clone schedules, as incumbents for the MILP."""
    from .mincut import mincut_saved
    from .saved import chen_saved, clones_for
    out = []
    for name, saved in (("chen", chen_saved), ("mincut", mincut_saved)):
        clones = clones_for(prob, saved(prob))
        if clones:
            out.append((name, clones))
    return out


def _infeasible(budget: int, floor: int, proven: bool) -> AdcError:
    how = "" if proven else " found (not proven minimal within the solver's deadline)"
    return AdcError(f"remat budget {format_bytes(budget)} ({budget} bytes) cannot be met: "
                    f"the smallest feasible peak{how} is {format_bytes(floor)} "
                    f"({floor} bytes)")


def _finish(module: Module, fn: str, info: StraightLine, prob: Problem, applied) -> tuple:
    out, _, made = applied[:3]
    out = replace(out, functions={name: f if name == fn else clone_function(f)[0]
                                  for name, f in out.functions.items()})
    by_primal: dict[int, list] = {}
    for k, op in made:
        by_primal.setdefault(k, []).append(op)
    info.recomputed = [(prob.ops[k], ops) for k, ops in sorted(by_primal.items())]
    info.stored = [v for v in prob.reverse_uses if v.defining_op is None
                   or prob.born[v] not in by_primal]
    return out, info


FALLBACK = "store-all: the baseline's peak was higher"
BEATEN = "optimal for the MILP model, beaten on the exact peak"
MILP_WHOLE = 20_000   # a block with a chain: the MILP runs on it only up to this size


def schedule_straight(module: Module, fn: str, budget: int | None, dims: Mapping[str, int],
                      time_limit: float | None = None) -> tuple[Module, StraightLine]:
    """`module` with the straight-line values of `fn` stored or recomputed so that the
    predicted peak fits `budget` with the fewest recomputed FLOPs (None: the least peak).
    `time_limit`: seconds per MILP solve (default: in proportion to the model).

    The chain DP (`chain`) runs when the forward code is a chain of at least two segments;
    the MILP runs on blocks without one, and on small blocks (`MILP_WHOLE` variables) with
    the DP's schedule as its cutoff; the baselines (Chen's segments, the min-cut) compete
    unless the MILP proved its schedule. The best candidate by exact peak is taken, never
    worse than store-all."""
    prob = build_problem(module, fn, dims)
    info = StraightLine()
    base = predict_peak(module, fn, dims).peak_bytes
    if budget is not None and base <= budget:
        info.stored = prob.reverse_uses
        info.model_peak = base
        return module, info
    # candidates: (exact peak, FLOPs, solver, proven, gap, applied)
    cands = []
    applied_by: dict[int, tuple] = {}
    peaks: dict[tuple, tuple] = {}

    def exact(clones):
        key = tuple(sorted((t, tuple(sorted(ks))) for t, ks in clones.items()))
        if key not in peaks:
            peaks[key] = _apply(module, fn, clones, dims)
        applied_by[id(clones)] = peaks[key]
        return peaks[key][3]
    start = time.perf_counter()
    chains, dp = [], None
    if prob.clone_times:
        with _Progress("chain DP", None):
            chains, dp = solve_chains(prob, module, dims, budget, base, exact)
    ch = chains[0] if chains else None
    if ch is not None:
        info.segments = (dp[2] if dp is not None else ch).size
        info.segment_milp = {**ch.milp.as_dict(),
                             "used": dp is not None and dp[2] is ch and ch.milp.improved > 0}
    if dp is not None and dp[0].clones:     # (no clones: the store-all candidate below)
        plan, peak = dp[:2]
        cands.append((peak, _flops(prob, plan.clones), "chain-dp", False, None,
                      applied_by[id(plan.clones)]))
    info.seconds = time.perf_counter() - start
    fits = [c for c in cands if budget is None or c[0] <= budget]
    size = model_size(prob) if prob.clone_times else 0
    sol = Solution(status="not run", optimal=False, gap=None, variables=size)
    if prob.clone_times and (ch is None or size <= MILP_WHOLE):
        cutoff = objective(prob, min(fits, key=lambda c: c[1])[5][4]) \
            if budget is not None and fits else None
        sol = solve(prob, budget, time_limit, cutoff)
        info.seconds += sol.seconds
        if cutoff is not None and sol.status == "infeasible":   # none cheaper: proven
            best = min(fits, key=lambda c: c[1])
            cands[cands.index(best)] = best[:3] + (True, 0.0) + best[5:]
        elif cutoff is not None and sol.status == "no solution" and sol.bound is not None:
            best = min(fits, key=lambda c: c[1])
            gap = _gap(objective(prob, best[5][4]), sol.bound)
            cands[cands.index(best)] = best[:3] + (gap == 0.0, gap) + best[5:]
    elif not prob.clone_times:
        sol = Solution(status="nothing to recompute", model_peak=base)
    info.status, info.variables = sol.status, sol.variables
    info.model_peak = sol.model_peak if sol.feasible else None
    if sol.feasible:
        applied = _apply(module, fn, sol.clones, dims)
        cands.append((applied[3], _flops(prob, sol.clones), "highs-milp", sol.optimal,
                      sol.gap, applied))
    if not (sol.optimal and sol.feasible):
        for name, clones in _incumbents(prob):
            applied = _apply(module, fn, clones, dims)
            cands.append((applied[3], _flops(prob, clones), name, False, None, applied))
    cands.append((base, 0, "store-all", sol.optimal and sol.status != "not run", sol.gap,
                  (module, prob, [], base, {})))
    if budget is not None:
        fitting = [c for c in cands if c[0] <= budget]
        if not fitting:        # the model's peak bounds the exact one: try its least
            floor, proven = min(c[0] for c in cands), False
            least = solve(prob, None, time_limit) if prob.clone_times and \
                (ch is None or size <= MILP_WHOLE) else None
            if least is not None and least.feasible:
                applied = _apply(module, fn, least.clones, dims)
                floor, proven = min(floor, applied[3]), least.optimal
                if applied[3] <= budget:
                    fitting = [(applied[3], _flops(prob, least.clones), "highs-milp", False,
                                None, applied)]
            if not fitting and chains:   # the DP's least peak, which min-memory reaches
                least_dp = solve_chains(prob, module, dims, None, base, exact)[1]
                if least_dp is not None and least_dp[1] < floor:
                    floor, proven = least_dp[1], False
            if not fitting:
                raise _infeasible(budget, floor, proven)
        best = min(fitting, key=lambda c: (c[1], c[0]))
    else:
        best = min(cands, key=lambda c: (c[0], c[1]))
    peak, flops, solver, proven, gap, applied = best
    if solver == "store-all":
        info.solver, info.optimal, info.gap = "highs-milp", proven, (0.0 if proven else gap)
        info.stored = prob.reverse_uses
        return module, info
    info.solver, info.optimal = solver, proven
    info.gap = 0.0 if proven else gap
    if solver == "highs-milp":
        info.model_peak = sol.model_peak
    elif not proven and gap is None and budget is not None and solver != "chain-dp":
        info.gap = _gap(flops, sol.bound)
    if info.optimal:
        info.status = "optimal"
    elif info.status == "optimal":     # the MILP's schedule, proven for its model, lost
        info.status = BEATEN
    return _finish(module, fn, info, prob, applied)


def _gap(value: float, bound: float | None) -> float | None:
    """Relative gap of an objective `value` to a proven lower `bound`."""
    if bound is None:
        return None
    return 0.0 if value <= 0 else max(0.0, (value - bound) / value)


def schedule_baseline(module: Module, fn: str, dims: Mapping[str, int],
                      solver: str) -> tuple[Module, StraightLine]:
    """`module` with the straight-line values of `fn` saved by a baseline (``mincut`` or
    ``chen``, see `saved`) and the rest recomputed; no budget, no optimality claim."""
    from .mincut import mincut_saved
    from .saved import chen_saved, clones_for
    prob = build_problem(module, fn, dims)
    saved: Callable = {"mincut": mincut_saved, "chen": chen_saved}[solver]
    clones = clones_for(prob, saved(prob)) if prob.clone_times else None
    info = StraightLine(solver=solver, status="heuristic", optimal=False, gap=None)
    if not clones:
        info.stored = prob.reverse_uses
        info.model_peak = predict_peak(module, fn, dims).peak_bytes
        return module, info
    applied = _apply(module, fn, clones, dims)
    base = predict_peak(module, fn, dims).peak_bytes
    if applied[3] > base:          # the cut's objective is not the peak: never worse
        info.status, info.model_peak = FALLBACK, base
        info.stored = prob.reverse_uses
        info.fallback_peak = applied[3]
        return module, info
    info.model_peak = applied[3]
    return _finish(module, fn, info, prob, applied)
