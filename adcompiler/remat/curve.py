"""The memory / recomputation trade-off: budgets swept from min-memory to store-all, and
the baselines (`sqrt`, `mincut`) beside them; and the one schedule that fits a budget best
(`fit_budget`, what training under a memory budget asks for)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from ..ir.core import Module
from ..memory.sizes import format_bytes
from .explain import remat_stats
from .policy import Policy
from .schedule import schedule


def remat_curve(module: Module, fn: str, dims: Mapping[str, int], inputs: dict | None = None,
                points: int = 8, xp=None,
                progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """One row per budget: budget, predicted and (with `inputs`) measured peak, recompute
    fraction, recomputed FLOPs. `module` is the output of ``reverse``; `fn` its adjoint.
    `progress(done, total)` is told of each schedule made (the two ends, then each row)."""
    tell = progress or (lambda done, total: None)
    tell(0, points + 2)
    lo = schedule(module, "min-memory", fn, dims)
    tell(1, points + 2)
    hi = remat_stats(module, schedule(module, "none", fn, dims), dims)["peak_bytes_store_all"]
    floor = remat_stats(module, lo, dims)["peak_bytes_predicted"]
    budgets = sorted({floor + (hi - floor) * k // max(points - 1, 1) for k in range(points)})
    tell(2, len(budgets) + 2)
    rows = []
    for b in budgets:
        rows.append(_row(module, fn, dims, inputs, Policy("budget", budget=b), xp, budget=b))
        tell(len(rows) + 2, len(budgets) + 2)
    return rows


def baseline_rows(module: Module, fn: str, dims: Mapping[str, int], inputs: dict | None = None,
                  xp=None, policies=("sqrt", "mincut"),
                  progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """One row per baseline policy, in the same form (``budget`` None); `progress(done,
    total)` is told of each."""
    rows = []
    for p in policies:
        rows.append(_row(module, fn, dims, inputs, p, xp))
        if progress is not None:
            progress(len(rows), len(policies))
    return rows


def _row(module: Module, fn: str, dims, inputs, policy, xp, budget=None) -> dict:
    sched = schedule(module, policy, fn, dims)
    stats = remat_stats(module, sched, dims)
    row = {"policy": str(policy), "budget": budget,
           "peak_bytes_predicted": stats["peak_bytes_predicted"],
           "peak_bytes_measured": None, "recompute_fraction": stats["recompute_fraction"],
           "recompute_flops": stats["recompute_flops"], "guarantee": stats["guarantee"]}
    if inputs is not None:
        from adc_runtime.executor import run_function
        kw = {"xp": xp} if xp is not None else {}
        _, run_stats = run_function(sched.module, fn, inputs, dims=dims, **kw)
        row["peak_bytes_measured"] = run_stats["peak_bytes"]
    return row


def format_curve(rows: list[dict], baselines: list[dict] = ()) -> str:
    head = f"{'budget':>14} {'predicted peak':>16} {'measured peak':>16} {'recompute':>10}  schedule"
    lines = [head, "-" * len(head)]
    for r in list(rows) + list(baselines):
        meas = "-" if r["peak_bytes_measured"] is None else f"{r['peak_bytes_measured']:,}"
        budget = r["policy"] if r["budget"] is None else f"{r['budget']:,}"
        lines.append(f"{budget:>14} {r['peak_bytes_predicted']:>16,} {meas:>16} "
                     f"{r['recompute_fraction']:>9.2f}x  {r['guarantee']}")
    lines.append(f"(bytes; recompute = recomputed FLOPs / forward FLOPs; "
                 f"from {format_bytes(rows[0]['budget'])} to {format_bytes(rows[-1]['budget'])})")
    return "\n".join(lines)


@dataclass
class Fit:
    """The cheapest schedule found that fits a byte budget (see `fit_budget`)."""
    module: Module
    peak_bytes: int          # predicted peak of the scheduled adjoint
    recompute_flops: int
    guarantee: str           # optimal, gap or heuristic (`explain.remat_stats`)


def fit_budget(module: Module, fn: str, budget: int,
               dims: Mapping[str, int] | None = None) -> Fit:
    """The schedule of least recomputation whose predicted peak fits `budget` bytes, for
    the adjoint `fn` of `module` (the output of ``reverse``), with its predicted peak: what
    training under a memory budget asks for. A budget below every schedule is an
    `AdcError` naming the smallest peak found."""
    dims = dict(dims or {})
    sched = schedule(module, Policy("budget", budget=budget), fn, dims)
    stats = remat_stats(module, sched, dims)
    return Fit(sched.module, stats["peak_bytes_predicted"], stats["recompute_flops"],
               stats["guarantee"])
