"""Straight-line remat by the chain DP: schedules for a budget or for the least peak.

The plan becomes clones (`dag.apply_clones`): each recomputation pass goes right before the
reverse of the segment it serves (the reverse ops carry their primal op's location), and
each clone replaces the value from there on, so a checkpoint lives until the pass that
recomputes it again. The exact peak then comes from `memory.predict_peak`; while it misses
the budget, the plan for fewer units is taken (`solve_chain`). The memory model is checked
on each plan, not optimized.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.core import Module
from .chain import INF, Chain, build_chain
from .chain_dp import COARSE, UNITS, Plan, Tables
from .dag import Problem

SECOND_FINE = 48       # the second chain of `solve_chains` in UNITS up to this many segments


def _least(ch: Chain, store_all: int, exact, tab: Tables | None = None,
           units: int = UNITS) -> tuple[Plan, int] | None:
    """The DP's schedule of least peak and its exact peak: found in `tab` when given (a
    table for a budget near the least peak), else in coarse units of the store-all peak,
    then again in finer units."""
    if tab is None:
        tab = Tables(ch, store_all, units=COARSE)
        m = tab.least()
        if m is None:
            return None
        fine = Tables(ch, tab.floor + (m + 1) * tab.unit, units)
        tab = fine if fine.least() is not None else tab
    m = tab.least()
    if m is None:
        return None
    plan = tab.plan(m)
    return plan, exact(plan.clones)


def _first(ch: Chain, budget: int, exact, tries: int, units: int, model: Chain | None = None):
    """The DP's schedules for `budget` in `model` (default `ch`), fewer units by the
    shortfall while the exact peak misses (at most `tries`): ((plan, peak) or None, table)."""
    tab = Tables(model or ch, budget, units)
    m = tab.units(budget)
    for _ in range(tries):
        plan = tab.plan(m) if m >= 0 else None
        if plan is None:
            break
        peak = exact(plan.clones)
        if peak <= budget:
            return (plan, peak), tab
        m -= max(1, -(-(peak - budget) // tab.unit))
    return None, tab


def _fallbacks(ch: Chain, budget: int, store_all: int, exact, tries: int, units: int):
    """After `_first`: the bytes alone for `over`, the least peak of that table, then the
    schedule of least peak (`min-memory`'s)."""
    got, tab = (None, None) if not ch.raw_over else \
        _first(ch, budget, exact, tries, units, replace(ch, over=ch.raw_over))
    if got is not None:
        return got
    for table in (tab, None):
        least = _least(ch, store_all, exact, table, units)
        if least is not None and least[1] <= budget:
            return least
    return None


def solve_chain(ch: Chain, budget: int | None, store_all: int, exact,
                tries: int = 4, units: int = UNITS) -> tuple[Plan, int] | None:
    """The DP's schedule for `budget` (None: the least peak) and its exact peak
    (`exact(clones)`). While the exact peak misses the budget (the chain model rounds sizes
    to its units and does not see every byte), the DP's schedule for fewer units is taken,
    fewer by the shortfall (at most `tries` schedules), first with `over` calibrated on the
    store-all profile, then with the bytes alone (more room kept); when neither has a
    schedule that fits, the schedule of least peak in the last table is tried, then the one
    of `budget` None (so that `min-memory`'s peak is always a budget that fits). None if
    nothing fits."""
    if budget is None:
        return _least(ch, store_all, exact, units=units)
    got, _ = _first(ch, budget, exact, tries, units)
    return got if got is not None else _fallbacks(ch, budget, store_all, exact, tries, units)


def solve_chains(prob: Problem, module: Module, dims, budget: int | None, store_all: int,
                 exact, tries: int = 4, segment_milp: bool = True
                 ) -> tuple[list[Chain], tuple[Plan, int, Chain] | None]:
    """The chains of `prob` (one-op segments merged into the next, and every cut when that
    differs) and the DP's best schedule over them: the fewest FLOPs that fit `budget`, or
    (None) the least peak; (plan, exact peak, its chain). The merged chain's options are
    refined by its segments' MILPs (`segment_milp`); where that changed them, the chain
    with the enumerated options alone runs too (up to `SECOND_FINE` segments: a third DP
    on longer chains would cost more time than a schedule has), and so does the chain of
    every cut: the DP's chain model does not see every byte (a plan's exact peak can miss
    the budget its model fits, and the retries for fewer units cost FLOPs), so the exact
    peaks decide.
    Beyond `SECOND_FINE` segments the chain of every cut is solved in half the memory
    units (the DP's time grows as K^3). With a budget, `solve_chain`'s fallbacks run only
    when no chain's first schedules fit, first on the chain whose model reaches the lower
    peak, and stop at the first that fits.
    `segment_milp`: the merged chain's options refined (`build_chain`)."""
    merged = build_chain(prob, module, dims, segment_milp=segment_milp)
    tried = [(merged, UNITS)]
    if merged is not None and merged.milp.improved and merged.size <= SECOND_FINE:
        tried.append((build_chain(prob, module, dims, segment_milp=False), UNITS))
    every = build_chain(prob, module, dims, merge=False, segment_milp=False)
    if every is not None:
        tried.append((every, UNITS // 2 if every.size > SECOND_FINE else UNITS))
    chains, units = [], []
    for ch, u in tried:
        if ch is not None and not any(c.stages == ch.stages and c.options == ch.options
                                      for c in chains):
            chains.append(ch)
            units.append(u)
    if budget is None:
        got = [(solve_chain(ch, None, store_all, exact, units=u), ch)
               for ch, u in zip(chains, units)]
        got = [(g[1], g[0].flops, k, g, ch) for k, (g, ch) in enumerate(got) if g is not None]
    else:
        firsts = [(_first(ch, budget, exact, tries, u), ch, u) for ch, u in zip(chains, units)]
        got = [(g[0].flops, g[1], k, g, ch) for k, ((g, _), ch, _) in enumerate(firsts)
               if g is not None]
        if not got:
            def reach(tab):
                m = tab.least()
                return INF if m is None else tab.floor + m * tab.unit
            for (_, tab), ch, u in sorted(firsts, key=lambda f: reach(f[0][1])):
                g = _fallbacks(ch, budget, store_all, exact, tries, u)
                if g is not None:
                    got = [(g[0].flops, g[1], 0, g, ch)]
                    break
    if not got:
        return chains, None
    _, _, _, (plan, peak), ch = min(got, key=lambda c: c[:3])
    return chains, (plan, peak, ch)
