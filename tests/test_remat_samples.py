"""Remat on the samples and through the command line: bit-identical gradients, the √n
guarantee on the 64-layer sample, budgets met by the measured peak, stats JSON."""
import json
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli
from adcompiler.cli.compile import compile_program
from adcompiler.files.inputs import DimBinder, check_inputs, load_data
from adcompiler.cli.remat import apply_remat
from adc_runtime.executor import run_function

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def load(name, bind=None):
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), "reverse", bind=bind)
    binder = DimBinder(bind or {})
    data = str(SAMPLES / f"{name}.json")
    return comp, check_inputs(comp.run_fn, load_data(data), data, binder), binder.env


@pytest.mark.parametrize("name,bind", [("deep_mlp", None), ("transformer_stack", None),
                                       ("rnn", {"T": 6})])
@pytest.mark.parametrize("policy", ["sqrt", "revolve:2", "budget:1MiB", "min-memory"])
def test_samples_bit_identical(name, bind, policy):
    comp, inputs, dims = load(name, bind)
    ref, _ = run_function(comp.module, comp.run_name, inputs, dims=dims)
    module, stats, _ = apply_remat(comp.module, comp.run_name, policy, dims)
    outs, run_stats = run_function(module, comp.run_name, inputs, dims=dims)
    assert all(np.array_equal(a, b) for a, b in zip(outs, ref))
    assert run_stats["peak_bytes"] == stats["peak_bytes_predicted"]
    if policy != "budget:1MiB":   # 1 MiB holds everything: nothing to recompute
        assert stats["recompute_flops"] > 0


def test_deep_mlp_sqrt():
    comp, inputs, dims = load("deep_mlp")
    n = 64
    _, stats, _ = apply_remat(comp.module, comp.run_name, "sqrt", dims)
    assert stats["stored_bytes_peak"] <= 2 * n ** 0.5 / n * stats["stored_bytes_peak_store_all"]
    assert 0 < stats["recompute_flops"] <= stats["forward_flops"]
    assert stats["loops"][0]["recomputed_steps"] == 56


def test_cli_run_budget_and_stats_json(tmp_path, capsys):
    out = tmp_path / "stats.json"
    tdsl, data = str(SAMPLES / "deep_mlp.tdsl"), str(SAMPLES / "deep_mlp.json")
    budget = 120_000
    code = cli.main(["run", tdsl, "--inputs", data, "--remat", f"budget:{budget}",
                     "--stats-json", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "predicted peak" in err and "peak under none" in err
    stats = json.loads(out.read_text())
    assert stats["peak_bytes_measured"] == stats["peak_bytes_predicted"] <= budget
    assert stats["peak_bytes_store_all"] > budget


def test_cli_budget_too_small(capsys):
    code = cli.main(["compile", str(SAMPLES / "deep_mlp.tdsl"), "--bind", "B=32",
                     "--remat", "budget:10KiB"])
    assert code == 1
    assert "smallest feasible peak is" in capsys.readouterr().err


def test_cli_remat_curve(tmp_path, capsys):
    rows_file = tmp_path / "rows.json"
    code = cli.main(["remat-curve", str(SAMPLES / "transformer_stack.tdsl"),
                     "--inputs", str(SAMPLES / "transformer_stack.json"), "--points", "4",
                     "--json", str(rows_file)])
    assert code == 0
    assert "predicted peak" in capsys.readouterr().out
    rows = json.loads(rows_file.read_text())["rows"]
    assert len(rows) == 4 and rows[-1]["recompute_fraction"] == 0
    for r in rows:
        assert r["peak_bytes_measured"] == r["peak_bytes_predicted"] <= r["budget"]
    fractions = [r["recompute_fraction"] for r in rows]
    assert fractions == sorted(fractions, reverse=True)


def test_symbolic_trip_count_bound_from_the_inputs(tmp_path):
    # compiled without --bind, T stays symbolic in the IR; the inputs (T = 6) fix it
    comp, inputs, dims = load("rnn")
    assert dims == {"T": 6}
    ref, _ = run_function(comp.module, comp.run_name, inputs, dims=dims)
    module, stats, _ = apply_remat(comp.module, comp.run_name, "sqrt", dims)
    assert stats["loops"][0]["steps"] == 6 and stats["loops"][0]["recomputed_steps"] == 4
    outs, run_stats = run_function(module, comp.run_name, inputs, dims=dims)
    assert all(np.array_equal(a, b) for a, b in zip(outs, ref))
    assert run_stats["peak_bytes"] == stats["peak_bytes_predicted"]
    # adc compile without --bind leaves the loop as it is, and says why
    _, stats, _ = apply_remat(comp.module, comp.run_name, "sqrt", {})
    assert not stats["loops"] and "symbolic" in stats["notes"][0]
    out = tmp_path / "s.json"
    assert cli.main(["run", str(SAMPLES / "rnn.tdsl"), "--inputs", str(SAMPLES / "rnn.json"),
                     "--remat", "sqrt", "--stats-json", str(out)]) == 0
    stats = json.loads(out.read_text())
    assert stats["loops"][0]["recomputed_steps"] == 4
    assert stats["peak_bytes_measured"] == stats["peak_bytes_predicted"]


def test_rnn_of_350_steps_under_min_memory_and_budget():
    """Chains of a few hundred steps used to exhaust Python's recursion limit."""
    from adcompiler.memory import predict_peak
    from adcompiler.remat.schedule import schedule
    comp = compile_program(str(SAMPLES / "rnn.tdsl"), "reverse", bind={"T": 350})
    from adcompiler.passes.to_dtype import bind_dims
    module = bind_dims(comp.module, {"T": 350})
    lo = schedule(module, "min-memory", comp.run_name, {"T": 350})
    floor = predict_peak(lo.module, comp.run_name, {"T": 350}).peak_bytes
    assert lo.plans[0] and lo.rewrites[0].recomputed_steps == 350 * 349 // 2
    mid = schedule(module, f"budget:{floor + 2000}", comp.run_name, {"T": 350})
    assert predict_peak(mid.module, comp.run_name, {"T": 350}).peak_bytes <= floor + 2000
    assert mid.rewrites[0].recomputed_steps < 350 * 349 // 2
