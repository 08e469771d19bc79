"""The straight-line remat MILP (Checkmate-style, on the program's own order), solved by HiGHS.

Binary variables, for the `dag.Problem` of one block:

* ``L[v, t]``: value `v` (its original or its latest clone) is held during op ``t``; forced
  to 1 where op ``t`` uses `v`;
* ``R[v, t]``: a clone of `v` is made right before op ``t``.

Constraints: a value held at ``t`` was held at ``t-1`` or is cloned at ``t`` (nothing comes
back once freed without a recomputation); a clone's operands are held at ``t``; a clone is
held at its own time; at every ``t`` the held bytes plus the bytes the schedule cannot move
(`Problem.fixed`) fit the budget. Objective: the FLOPs of the clones (plus one per clone, so
that free ops are not cloned for nothing).

The model counts every clone made before op ``t`` as held during op ``t``, also one that a
later clone of the same chain consumes and frees; so its peak bounds the peak of the IR it
produces from above, and that IR's exact peak comes from `memory.predict_peak`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .dag import Problem

DEFAULT_TIME_LIMIT = 10.0  # seconds per HiGHS solve, at most


def deadline(variables: int, limit: float = DEFAULT_TIME_LIMIT) -> float:
    """Seconds a solve may take: proportional to the model (5 s plus 2 ms per ten
    variables), at most `limit`. The straight-line solver also has the baselines'
    schedules as incumbents, so a stopped solve never leaves a worse schedule than them."""
    return min(limit, 5.0 + variables * 2e-4)


class _Progress:
    """A line on stderr every second while a solve runs past its first second."""

    def __init__(self, what: str, limit: float | None):
        import threading
        self.what, self.limit, self.start = what, limit, time.perf_counter()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import sys
        while not self.done.wait(1.0):
            t = time.perf_counter() - self.start
            most = f" of at most {self.limit:.1f} s" if self.limit is not None else ""
            print(f"remat: {self.what}: {t:.0f} s{most}", file=sys.stderr, flush=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


@dataclass
class Solution:
    clones: dict[int, list[int]] = field(default_factory=dict)  # time -> ops cloned there
    status: str = "optimal"   # optimal, time limit (feasible), infeasible, no solution, too large
    optimal: bool = True           # always the same as status == "optimal" (or "infeasible")
    gap: float | None = 0.0        # HiGHS's relative MIP gap (0 when proven optimal)
    bound: float | None = None     # HiGHS's dual bound on the objective
    model_peak: int = 0
    seconds: float = 0.0
    variables: int = 0

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "time limit")


class _Model:
    def __init__(self, prob: Problem):
        self.prob = prob
        self.col: dict[tuple, int] = {}
        self.lb: list[float] = []
        self.cost: list[float] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []
        for v in prob.free:
            for t in range(prob.born[v] + 1, prob.last[v] + 1):
                self._var(("L", v, t), 1.0 if t in prob.uses[v] else 0.0, 0.0)
        for v, ts in prob.clone_times.items():
            for t in ts:
                self._var(("R", v, t), 0.0, float(prob.cost[v] + 1))
        for v in prob.free:
            for t in range(prob.born[v] + 2, prob.last[v] + 1):
                row = {self.col[("L", v, t)]: 1.0, self.col[("L", v, t - 1)]: -1.0}
                if ("R", v, t) in self.col:
                    row[self.col[("R", v, t)]] = -1.0
                self.rows.append((row, -np.inf, 0.0))
        for v, ts in prob.clone_times.items():
            for t in ts:
                r = self.col[("R", v, t)]
                for u in set(prob.operands(v)) | {v}:
                    self.rows.append(({r: 1.0, self.col[("L", u, t)]: -1.0}, -np.inf, 0.0))
        self.memory: list[dict[int, float]] = [{} for _ in prob.ops]
        for v in prob.free:
            for t in range(prob.born[v] + 1, prob.last[v] + 1):
                self.memory[t][self.col[("L", v, t)]] = float(prob.nbytes[v])

    def _var(self, key, lb: float, cost: float) -> None:
        self.col[key] = len(self.lb)
        self.lb.append(lb)
        self.cost.append(cost)

    def solve(self, budget: int | None, time_limit: float,
              cutoff: float | None = None) -> tuple[Solution, np.ndarray | None]:
        """Least recomputation within `budget`, or (None) the least model peak. `cutoff`:
        only schedules whose objective is below it (an incumbent's), so that "infeasible"
        proves that none is, and "no solution" says that none was found by the deadline."""
        from .highs import build, run, triplets
        prob, n = self.prob, len(self.lb)
        peak_col = n if budget is None else None
        nv = n + (peak_col is not None)
        cost = np.zeros(nv)
        if peak_col is None:
            cost[:n] = self.cost
        else:
            cost[peak_col] = 1.0
        rows = list(self.rows)
        if cutoff is not None and peak_col is None:
            rows.append(({c: x for c, x in enumerate(self.cost) if x}, -np.inf,
                         float(cutoff) - 0.5))
        for t, row in enumerate(self.memory):
            if peak_col is None:
                rows.append((row, -np.inf, float(budget - prob.fixed[t])))
            else:
                rows.append(({**row, peak_col: -1.0}, -np.inf, float(-prob.fixed[t])))
        floor = float(max([prob.start_bytes] + prob.fixed))
        lb = np.array(self.lb + ([floor] if peak_col is not None else []))
        ub = np.ones(nv)
        integer = np.ones(nv, dtype=bool)
        if peak_col is not None:
            ub[peak_col], integer[peak_col] = np.inf, False
        with _Progress(f"straight-line MILP ({nv:,} variables)", time_limit):
            res = run(build(cost, *triplets(rows), lb, ub, integer), time_limit)
        sol = Solution(seconds=res.seconds, variables=nv, bound=res.bound)
        if res.x is None:
            sol.status, sol.optimal = res.status, res.status == "infeasible"
            return sol, None
        sol.optimal = res.status == "optimal"
        sol.status = "optimal" if sol.optimal else "time limit"
        sol.gap = 0.0 if sol.optimal or res.gap is None else res.gap
        x = np.round(res.x[:n]).astype(int)
        for (kind, v, t), c in self.col.items():
            if kind == "R" and x[c]:
                sol.clones.setdefault(t, []).append(prob.born[v])
        sol.model_peak = self.peak_of(x)
        return sol, x

    def peak_of(self, x: np.ndarray) -> int:
        """The model peak of a (rounded) assignment, in exact integers."""
        prob = self.prob
        best = prob.start_bytes
        for t, row in enumerate(self.memory):
            held = sum(int(w) for c, w in row.items() if x[c])
            best = max(best, prob.fixed[t] + held)
        return best


MAX_VARIABLES = 200_000   # beyond this, building the model alone takes longer than a deadline


def model_size(prob: Problem) -> int:
    """The number of variables `_Model` would have, counted without building it."""
    return sum(prob.last[v] - prob.born[v] for v in prob.free) + \
        sum(len(ts) for ts in prob.clone_times.values())


def solve(prob: Problem, budget: int | None, time_limit: float | None = None,
          cutoff: float | None = None) -> Solution:
    """The clones of least FLOPs whose model peak fits `budget`; with `budget` None, the
    least model peak (then the least FLOPs at that peak, in a second solve). `time_limit`:
    seconds per solve (default: `deadline` of the model's size). A model of more than
    `MAX_VARIABLES` is not solved (status ``too large``). `cutoff` (with a budget): the
    objective of an incumbent (`objective`); the search looks only below it (a row: as
    HiGHS's first solution, measured, it saved no time, benchmarks/remat_warm_start.py),
    and status ``infeasible`` then proves that no schedule of the model is cheaper."""
    size = model_size(prob)
    if size > MAX_VARIABLES:
        return Solution(status="too large", optimal=False, gap=None, variables=size)
    model = _Model(prob)
    if time_limit is None:
        time_limit = deadline(len(model.lb))
    if budget is not None:
        return model.solve(budget, time_limit, cutoff)[0]
    first, _ = model.solve(None, time_limit)
    if not first.feasible or not first.optimal:   # an unproven peak: not worth a second wait
        return first
    second, _ = model.solve(first.model_peak, time_limit)
    if not second.feasible:   # time ran out before a cheaper schedule at that peak was found
        return first
    # the least peak is only proven if the first solve proved it
    second.optimal = second.optimal and first.optimal
    second.status = "optimal" if second.optimal else "time limit"
    second.gap = max(second.gap, first.gap)
    second.bound = second.bound if first.optimal else None
    second.seconds += first.seconds
    return second


def objective(prob: Problem, clones: dict[int, list[int]]) -> float:
    """The MILP's objective of a clone schedule: FLOPs plus one per clone."""
    return float(sum(prob.cost[prob.ops[k].result] + 1 for ks in clones.values() for k in ks))
