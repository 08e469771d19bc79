"""The lower bound on recomputation (`remat.bound`): below the MILP's proven optimum and every
schedule that fits, positive where the budget forces recomputation, None where nothing
fits; worked by hand on the outer product."""
import pytest

from test_remat_dag import OUTER, chain, compiled

from adcompiler.remat import milp
from adcompiler.remat.bound import recompute_bound
from adcompiler.remat.dag import build_problem
from adcompiler.remat.explain import remat_stats
from adcompiler.remat.policy import Policy
from adcompiler.remat.schedule import schedule
from adcompiler.remat.straight import _flops


def test_outer_product_by_hand(tmp_path):
    # Store-all peaks at 2568 B during cos(z): a and b (80 B each, arguments read by the
    # reverse), z (800 B, read there), the seed and cos(z) (800 B each, not movable) and
    # the 8-byte loss, read only by the return. At 2564 B the room left for the loss is 4 B:
    # half of it fits, so at least half its 100 FLOPs are recomputed (the optimum, 400,
    # also recomputes what the loss needs). Below 2560 B not even the values read there fit.
    prob = build_problem(compiled(tmp_path, OUTER)[0], "f_grad", {})
    assert recompute_bound(prob, 2568) == 0.0
    assert recompute_bound(prob, 2564) == pytest.approx(50.0)
    assert recompute_bound(prob, 2560) == pytest.approx(100.0)
    assert recompute_bound(prob, 2559) is None


def test_below_the_proven_optimum_and_the_schedules(tmp_path):
    m, _ = compiled(tmp_path, chain(5))
    prob = build_problem(m, "f_grad", {})
    hi = remat_stats(m, schedule(m, "none"))["peak_bytes_predicted"]
    lo = remat_stats(m, schedule(m, "min-memory"))["peak_bytes_predicted"]
    positive = proven = 0
    for k in range(6):
        budget = lo + (hi - lo) * k // 5
        bound = recompute_bound(prob, budget)
        assert bound is not None
        sol = milp.solve(prob, budget, 30.0)
        assert sol.optimal     # infeasible at the least exact peak: the model counts more
        if sol.feasible:
            assert bound <= _flops(prob, sol.clones) + 1e-6
            proven += 1
        got = remat_stats(m, schedule(m, Policy("budget", budget=budget)))
        assert bound <= got["recompute_flops"] + 1e-6
        positive += bound > 0
    assert positive >= 3 and proven >= 3   # the bound says something where it is tight
    assert recompute_bound(prob, hi) == 0.0
