"""HiGHS on a 0-1 program, through its own Python binding (highspy).

The remat MILPs always have a schedule in hand before they start (the chain DP's, an
enumerated tape option). It enters as a cutoff: a row that keeps the search below its
objective, so that "infeasible" proves it optimal and a solution found is better. Handing
it to HiGHS as its first solution (`Highs.setSolution`) was measured on these models and
saved no time; with HiGHS 1.16 the columns read back after a run that improved on such a
start were still the start's, beside the better objective, and a second run of one
instance read back the first run's columns unless the solver is cleared in between. So
`run` clears the solver first and drops columns whose objective disagrees with HiGHS's.

highspy rather than `scipy.optimize.milp`: the same solver, in a newer release than scipy
bundles, which proved several of these models within a deadline where scipy's did not
(benchmarks/remat_warm_start.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass
class Result:
    x: np.ndarray | None           # the best solution found (None: none)
    status: str                    # optimal, time limit, infeasible, no solution
    objective: float | None
    bound: float | None            # HiGHS's dual bound on the objective
    gap: float | None              # relative gap of `objective` to `bound` (0: proven)
    seconds: float


def triplets(constraints) -> tuple[list, list, list, list, list]:
    """Rows given as (column -> coefficient, lower, upper) as the triplets of `build`:
    (row indices, column indices, coefficients, lowers, uppers)."""
    rows, cols, vals, lo, hi = [], [], [], [], []
    for row, a, b in constraints:
        for c, w in row.items():
            rows.append(len(lo))
            cols.append(c)
            vals.append(w)
        lo.append(a)
        hi.append(b)
    return rows, cols, vals, lo, hi


def build(cost, rows, cols, vals, lo, hi, lb, ub, integer):
    """A HiGHS instance holding min cost.x subject to lo <= A x <= hi (A given by its
    triplets), lb <= x <= ub, the columns flagged in `integer` integral. Row bounds can be
    changed between runs (`Highs.changeRowsBounds`) without building it again."""
    import highspy
    from scipy.sparse import csc_matrix
    n = len(cost)
    # the binding itself where it is exposed: `Highs` adds callbacks and prints a banner
    h = getattr(highspy, "_Highs", highspy.Highs)()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, len(lo)
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_ = np.asarray(lb, dtype=np.float64)
    lp.col_upper_ = np.asarray(ub, dtype=np.float64)
    lp.row_lower_ = np.asarray(lo, dtype=np.float64)
    lp.row_upper_ = np.asarray(hi, dtype=np.float64)
    A = csc_matrix((vals, (rows, cols)), shape=(len(lo), n))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(np.float64)
    lp.integrality_ = [highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous
                       for f in integer]
    h.passModel(lp)
    return h


def run(h, time_limit: float) -> Result:
    """Solve `h` (from `build`) for at most `time_limit` seconds. `Result.x` is None when
    no solution is at hand, or when the columns read back do not have the objective HiGHS
    reports."""
    import highspy
    h.setOptionValue("time_limit", float(max(time_limit, 0.0)))
    h.clearSolver()       # no solution of an earlier run is read back as this one's
    t0 = time.perf_counter()
    h.run()
    seconds = time.perf_counter() - t0
    ms = h.getModelStatus()
    info = h.getInfo()
    S = highspy.HighsModelStatus
    found = info.primal_solution_status == 2          # a feasible solution is at hand
    bound = float(info.mip_dual_bound)
    bound = bound if np.isfinite(bound) else None
    if ms == S.kOptimal:
        status = "optimal"
    elif ms == S.kInfeasible:
        status = "infeasible"
    else:
        status = "time limit" if found else "no solution"
    if not found:
        return Result(None, status, None, bound, None, seconds)
    x = np.asarray(h.getSolution().col_value)
    obj = float(info.objective_function_value)
    gap = 0.0 if status == "optimal" else _gap(obj, bound)
    if abs(float(np.dot(h.getLp().col_cost_, x)) - obj) > 1e-6 * max(1.0, abs(obj)):
        x = None           # not the solution of that objective (see the module docstring)
    return Result(x, status, obj, bound, gap, seconds)


def solve(cost, rows, cols, vals, lo, hi, lb, ub, integer, time_limit: float) -> Result:
    """`build` and `run` once."""
    return run(build(cost, rows, cols, vals, lo, hi, lb, ub, integer), time_limit)


def _gap(value: float, bound: float | None) -> float | None:
    if bound is None:
        return None
    return 0.0 if value <= 0 else max(0.0, (value - bound) / abs(value))
