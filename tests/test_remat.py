"""The remat pass: gradients bit-identical under every policy, the schedule visible in the
IR, the √n and budget guarantees, measured peaks equal to predicted ones."""
import numpy as np
import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.memory import predict_peak
from adcompiler.passes.pipeline import run_pipeline
from adcompiler.remat.explain import format_stats, remat_stats
from adcompiler.remat.schedule import schedule
from adc_runtime.executor import run_function
from test_remat_programs import adjoint, mlp_inputs, nested, residual_mlp, scan_with_outputs

POLICIES = ["sqrt", "revolve:1", "revolve:2", "revolve:3", "min-memory"]


def run(module, inputs):
    outs, stats = run_function(module, "f_grad", inputs)
    return outs, stats["peak_bytes"]


def assert_same(outs, ref):
    assert len(outs) == len(ref)
    for a, b in zip(outs, ref):
        assert np.array_equal(a, b)


CASES = {
    "mlp_scanned": (lambda: adjoint(residual_mlp(16, 4, 3), ["x", "W", "b"]),
                    lambda: mlp_inputs(16, 4, 3)),
    "mlp_indexed": (lambda: adjoint(residual_mlp(13, 4, 3, scan=False), ["x", "W", "b"]),
                    lambda: mlp_inputs(13, 4, 3, seed=1)),
    "scan_outputs": (lambda: adjoint(scan_with_outputs(11), ["xs", "c0"]),
                     lambda: {"xs": 0.5 * np.random.default_rng(2).standard_normal((11, 3)),
                              "c0": np.array([0.3, -0.2, 0.9])}),
    "nested": (lambda: adjoint(nested(9, 3), ["h0", "w"]),
               lambda: {"h0": np.array([0.4, -0.7]), "w": np.array([1.1, 0.6])}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("policy", POLICIES)
def test_bit_identical_gradients(case, policy):
    build, inputs = CASES[case]
    m, data = build(), inputs()
    ref, _ = run(m, data)
    sched = schedule(m, policy)
    verify(sched.module)
    outs, peak = run(sched.module, data)
    assert_same(outs, ref)
    assert peak == predict_peak(sched.module, "f_grad").peak_bytes
    assert sched.rewrites  # something was scheduled


def test_pass_in_a_pipeline_and_ir_text_round_trip():
    m = residual_mlp(8, 2, 2)
    out = run_pipeline(m, "reverse{wrt=W,b fn=f},dce,remat{policy=revolve:2}", verify=True)
    text = print_module(out)
    assert "recompute = true" in text
    again = parse_module(text)
    assert print_module(again) == text
    data = mlp_inputs(8, 2, 2)
    ref, _ = run(run_pipeline(m, "reverse{wrt=W,b fn=f},dce"), data)
    assert_same(run(again, data)[0], ref)


def test_recompute_ops_are_marked_with_the_primal_location():
    m = adjoint(residual_mlp(8, 2, 2), ["W", "b"])
    primal = {op.name: op.loc for op in m["f_grad"].walk() if op.name in ("tanh", "matmul")}
    out = schedule(m, "sqrt").module
    tanhs = [op for op in out["f_grad"].walk() if op.name == "tanh"]
    marked = [op for op in tanhs if op.attrs.get("recompute")]
    assert marked and len(marked) < len(tanhs)
    assert all(op.loc == primal["tanh"] for op in tanhs)


def test_none_is_the_identity():
    m = adjoint(residual_mlp(8, 2, 2), ["W"])
    assert print_module(schedule(m, "none").module) == print_module(m)


def test_revolve_recomputes_the_binomial_optimum():
    # t(n, c) = r*n - binom(c+r, c+1) for binom(c+r-1, c) < n <= binom(c+r, c)
    n, data = 16, mlp_inputs(16, 4, 3)
    m = adjoint(residual_mlp(n, 4, 3), ["W", "b"])
    want = {c: next(r * n - _comb(c + r, c + 1) for r in range(1, n + 1)
                    if _comb(c + r, c) >= n) for c in (1, 2, 3)}
    assert want[1] == n * (n - 1) // 2
    for c, steps in want.items():
        sched = schedule(m, f"revolve:{c}")
        assert sum(r.recomputed_steps for r in sched.rewrites) == steps
        stats = remat_stats(m, sched)
        step = stats["forward_flops"] // n
        assert abs(stats["recompute_flops"] - steps * step) <= 0.05 * steps * step
        assert_same(run(sched.module, data)[0], run(m, data)[0])


def _comb(a, b):
    from math import comb
    return comb(a, b) if b >= 0 else 0


def test_sqrt_on_64_layers():
    n = 64
    m = adjoint(residual_mlp(n, 16, 8), ["x", "W", "b"])
    data = mlp_inputs(n, 16, 8)
    ref, none_peak = run(m, data)
    sched = schedule(m, "sqrt")
    outs, peak = run(sched.module, data)
    assert_same(outs, ref)
    stats = remat_stats(m, sched)
    # activations kept for the reverse sweep: at most 2*sqrt(n)/n of storing all of them
    assert stats["stored_bytes_peak"] <= 2 * n ** 0.5 / n * stats["stored_bytes_peak_store_all"]
    assert stats["recompute_flops"] <= stats["forward_flops"]    # at most one forward pass
    assert peak == stats["peak_bytes_predicted"] < none_peak == stats["peak_bytes_store_all"]
    text = format_stats(stats)
    assert "predicted peak" in text and "recomputed" in text and "checkpoint" in text


def test_budgets_hold_when_measured():
    n = 24
    m = adjoint(residual_mlp(n, 8, 4), ["W", "b"])
    data = mlp_inputs(n, 8, 4)
    ref, none_peak = run(m, data)
    floor = remat_stats(m, schedule(m, "min-memory"))["peak_bytes_predicted"]
    last = None
    for k in range(5):
        budget = floor + (none_peak - floor) * k // 4
        sched = schedule(m, f"budget:{budget}")
        outs, peak = run(sched.module, data)
        assert_same(outs, ref)
        assert peak <= budget
        steps = sum(r.recomputed_steps for r in sched.rewrites)
        assert last is None or steps <= last    # more memory never costs more recomputation
        last = steps
    assert last == 0


def test_budget_below_the_floor_is_an_error_naming_it():
    m = adjoint(residual_mlp(8, 4, 4), ["W"])
    floor = predict_peak(schedule(m, "min-memory").module, "f_grad").peak_bytes
    with pytest.raises(AdcError, match=f"smallest feasible peak is .*{floor} bytes"):
        schedule(m, "budget:1KiB")


@pytest.mark.parametrize("bad", ["fast", "revolve", "revolve:0", "budget:", "budget:12XB",
                                 "sqrt:3"])
def test_bad_policies(bad):
    with pytest.raises(AdcError):
        schedule(adjoint(residual_mlp(4, 2, 2), ["W"]), bad)


def test_stats_keys():
    m = adjoint(residual_mlp(8, 2, 2), ["W"])
    stats = remat_stats(m, schedule(m, "revolve:2"))
    for key in ("peak_bytes_predicted", "peak_bytes_store_all", "forward_flops",
                "recompute_flops", "stored_values", "recomputed_values"):
        assert key in stats
    kinds = {v["kind"] for v in stats["stored_values"]}
    assert kinds == {"checkpoint", "residual"}
    assert stats["recomputed_values"][0]["steps"] == 14  # t(8, 2): r = 3, 24 - binom(5, 3)


def test_recompute_loops_are_marked_and_verify():
    m = adjoint(residual_mlp(8, 2, 2), ["W", "b"])
    out = schedule(m, "revolve:2").module
    verify(out)
    loops = [op for op in out["f_grad"].body.ops if op.name == "for"]
    marked = [op for op in loops if op.attrs.get("recompute")]
    # the forward sweep (primal) and the reverse loops stay unmarked; advances and
    # re-recordings in the reverse sweep are marked, their bodies too
    assert marked and len(marked) < len(loops)
    assert not any(op.attrs["reverse"] for op in marked)
    assert all(o.attrs.get("recompute") for op in marked for o in op.regions[0].ops[:-1])
    text = print_module(out)
    assert print_module(parse_module(text)) == text
    marked[0].attrs = {**marked[0].attrs, "unrolled": True}
    with pytest.raises(AdcError, match="needs exactly the attrs"):
        verify(out)


@pytest.mark.parametrize("best", [1, 2, 7, 50, 1000])
@pytest.mark.parametrize("guess", [1, 6, 7, 8, 999, 5000])
def test_most_slots_finds_the_boundary_from_any_guess(best, guess):
    """The search for the most slots that fit (`schedule._most_slots`) against the answer
    of a monotone test; a guess next to it costs a few tests, not a bisection of all."""
    from adcompiler.remat.schedule import _most_slots
    asked = []

    def fits(c):
        asked.append(c)
        return c <= best
    assert _most_slots(fits, 1000, guess) == best
    assert all(1 <= c <= 1000 for c in asked)
    if abs(guess - best) <= 1:
        assert len(asked) <= 4
