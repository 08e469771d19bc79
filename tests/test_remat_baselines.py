"""The straight-line baselines (Chen's √n segments, the min-cut) and honest reporting:
bit-identical gradients, predicted = measured peaks, and stats that never claim more than
the solver proved."""
import numpy as np
import pytest

import test_remat_dag

from adcompiler.memory import predict_peak
from adcompiler.remat.dag import build_problem
from adcompiler.remat.explain import remat_stats
from adcompiler.remat.mincut import mincut_saved
from adcompiler.remat.saved import chain_boundaries, chen_saved, clones_for
from adcompiler.remat.schedule import schedule
from adcompiler.remat.straight import schedule_baseline
from adc_runtime.executor import run_function


def pow_chain(n):
    body = "".join(f"    x{k + 1} = x{k} ** 1.01\n" for k in range(n))
    return f"def f(param x0: f64[100]) -> f64 {{\n{body}    return sum(x{n})\n}}\n"


def mlp(layers):
    return test_remat_dag.chain(layers, rows=32, width=8)


def compiled(tmp_path, text):
    module, inputs = test_remat_dag.compiled(tmp_path, text)
    return module, {k: np.abs(v) + 0.5 for k, v in inputs.items()}   # pow: positive


def measure(module, inputs):
    outs, stats = run_function(module, "f_grad", inputs)
    return outs, stats["peak_bytes"]


def test_chain_boundaries_of_a_pow_chain(tmp_path):
    m, _ = compiled(tmp_path, pow_chain(12))
    prob = build_problem(m, "f_grad", {})
    cuts = chain_boundaries(prob)
    assert [v.name for v in cuts] == [f"x{k}" for k in range(1, 13)]   # the shared const aside
    saved = chen_saved(prob)
    assert {v.name for v in saved} >= {"x3", "x6", "x9", "x12"}        # every 3rd of 12
    clones = clones_for(prob, saved)
    recomputed = [prob.ops[k].result.name for ks in clones.values() for k in ks]
    named = sorted(n for n in recomputed if n)                          # and the loss
    assert named == sorted(f"x{k}" for k in range(1, 12) if k % 3)      # each once


@pytest.mark.parametrize("text", [pow_chain(30), mlp(12)], ids=["pow", "mlp"])
@pytest.mark.parametrize("solver", ["chen", "mincut"])
def test_baselines_bit_identical_and_predicted(tmp_path, text, solver):
    m, inputs = compiled(tmp_path, text)
    ref, none_peak = measure(m, inputs)
    out, info = schedule_baseline(m, "f_grad", {}, solver)
    outs, peak = measure(out, inputs)
    assert all(np.array_equal(a, b) for a, b in zip(outs, ref)) and len(outs) == len(ref)
    assert peak == predict_peak(out, "f_grad", {}).peak_bytes
    assert info.solver == solver and not info.optimal and info.gap is None
    if solver == "chen":
        assert peak < none_peak


def test_mincut_saves_the_least_bytes(tmp_path):
    # mlp: tanh's reverse reads its result; matmul is never recomputed, so the cut keeps
    # each layer's matmul or tanh output (same size) -- never both
    m, _ = compiled(tmp_path, mlp(6))
    prob = build_problem(m, "f_grad", {})
    saved = mincut_saved(prob)
    assert clones_for(prob, saved) is not None
    bytes_saved = sum(prob.nbytes[v] for v in saved)
    store_all = sum(prob.nbytes[v] for v in prob.reverse_uses if prob.born[v] >= 0)
    assert bytes_saved <= store_all and len(saved) <= 6 + 1


def test_mincut_policy_and_stats(tmp_path):
    m, inputs = compiled(tmp_path, mlp(8))
    ref, _ = measure(m, inputs)
    sched = schedule(m, "mincut")
    outs, peak = measure(sched.module, inputs)
    assert all(np.array_equal(a, b) for a, b in zip(outs, ref))
    stats = remat_stats(m, sched)
    assert stats["solver"] == "mincut" and stats["guarantee"] == "heuristic"
    assert stats["optimal"] is False and stats["gap"] is None
    assert stats["peak_bytes_predicted"] == peak


def consistent(stats):
    sl = stats.get("straight_line")
    if sl:
        assert sl["optimal"] == (sl["status"] == "optimal" or sl["status"] == "store-all fits")
        assert (sl["gap"] == 0.0) if sl["optimal"] else (sl["gap"] is None or sl["gap"] >= 0)
    assert stats["optimal"] == (stats["guarantee"] == "optimal")
    if stats["guarantee"] == "gap":
        assert stats["gap"] is not None and stats["gap"] > 0
    return stats


def test_stats_never_claim_optimal_after_a_deadline(tmp_path):
    m, inputs = compiled(tmp_path, pow_chain(40))
    ref, _ = measure(m, inputs)
    sched = schedule(m, "min-memory", time_limit=0.001)
    stats = consistent(remat_stats(m, sched))
    assert stats["straight_line"]["status"] != "optimal" and not stats["optimal"]
    assert stats["guarantee"] in ("gap", "heuristic")
    outs, peak = measure(sched.module, inputs)      # the incumbent still is a schedule
    assert all(np.array_equal(a, b) for a, b in zip(outs, ref))
    assert peak == stats["peak_bytes_predicted"] < stats["peak_bytes_store_all"]


def test_a_stopped_solve_is_no_worse_than_the_baselines(tmp_path):
    """A chain of 50 `**` stopped at a deadline far too short to prove anything still
    returns a schedule whose peak is no higher than either baseline's (its incumbents)."""
    m, inputs = compiled(tmp_path, pow_chain(50))
    sched = schedule(m, "min-memory", time_limit=0.001)
    _, peak = measure(sched.module, inputs)
    for solver in ("chen", "mincut"):
        out, _ = schedule_baseline(m, "f_grad", {}, solver)
        assert peak <= measure(out, inputs)[1], solver


def test_milp_deadline_grows_with_the_model_and_is_capped():
    from adcompiler.remat.milp import deadline
    assert deadline(0) == 5.0 and deadline(10_000) == pytest.approx(7.0)  # 2 ms per ten
    assert deadline(10**6) == 10.0 and deadline(10**5, limit=60) == pytest.approx(25.0)


def test_every_policy_reports_the_same_stats_keys(tmp_path):
    m, _ = compiled(tmp_path, mlp(4))
    keys, inner = set(), set()
    for policy in ("none", "sqrt", "revolve:2", "mincut", "min-memory", "budget:1GiB"):
        stats = consistent(remat_stats(m, schedule(m, policy, time_limit=60)))
        keys.add(tuple(sorted(stats)))
        if stats["straight_line"] is not None:
            inner.add(tuple(sorted(stats["straight_line"])))
        assert stats["guarantee"] in ("optimal", "gap", "heuristic")
        assert (stats["gap"] == 0.0) if stats["optimal"] else \
            (stats["gap"] is None) == (stats["guarantee"] == "heuristic")
    assert len(keys) == 1 and "straight_line" in keys.pop() and len(inner) == 1


def test_stats_optimal_when_proven(tmp_path):
    m, _ = compiled(tmp_path, mlp(2))
    stats = consistent(remat_stats(m, schedule(m, "min-memory", time_limit=60)))
    assert stats["straight_line"]["status"] == "optimal" and stats["optimal"]
    for policy in ("sqrt", "revolve:2", "none"):
        consistent(remat_stats(m, schedule(m, policy)))


def test_a_model_too_large_for_the_milp_falls_back_to_the_baselines(tmp_path, monkeypatch):
    from adcompiler.remat import milp
    m, inputs = compiled(tmp_path, mlp(8))
    ref, none_peak = measure(m, inputs)
    monkeypatch.setattr(milp, "MAX_VARIABLES", 10)
    sched = schedule(m, "min-memory")
    stats = consistent(remat_stats(m, sched))
    assert stats["straight_line"]["status"] == "too large"
    assert stats["solver"] in ("chain-dp", "chen", "mincut")
    assert stats["guarantee"] == "heuristic"
    outs, peak = measure(sched.module, inputs)
    assert all(np.array_equal(a, b) for a, b in zip(outs, ref))
    assert peak == stats["peak_bytes_predicted"] < none_peak


def test_fit_budget_returns_the_cheapest_fitting_schedule(tmp_path):
    from adcompiler.remat.curve import fit_budget
    m, inputs = compiled(tmp_path, mlp(6))
    ref, none_peak = measure(m, inputs)
    floor = remat_stats(m, schedule(m, "min-memory"))["peak_bytes_predicted"]
    budget = (floor + none_peak) // 2
    fit = fit_budget(m, "f_grad", budget)
    outs, peak = measure(fit.module, inputs)
    assert all(np.array_equal(a, b) for a, b in zip(outs, ref))
    assert peak == fit.peak_bytes <= budget
    assert fit.recompute_flops == remat_stats(m, schedule(m, f"budget:{budget}"))["recompute_flops"]
    assert fit_budget(m, "f_grad", none_peak).recompute_flops == 0
