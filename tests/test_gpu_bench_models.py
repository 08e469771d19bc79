"""The GPU benchmark's GPT and CNN (benchmarks/models/gpt.tdsl, cnn.tdsl) and the memory-budget
sweep (benchmarks/memory_budget_sweep.py) at small sizes on the CPU: adc's gradients of both
models agree with PyTorch's (where installed), and the sweep runs every budget from the
least peak to no remat, its measured peaks monotone and equal to the predicted ones (the
NumPy executor's accounting is what the prediction models)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))      # the scripts add their folder
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)           # dataclasses look the module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("model", ["gpt", "cnn"])
def test_gradients_agree_with_pytorch(tmp_path, capsys, monkeypatch, model):
    bench = _load("bench_gpu", monkeypatch)
    out = tmp_path / f"{model}.md"
    runners = "adc,torch" if importlib.util.find_spec("torch") else "adc"
    assert bench.main(["--cpu", "--models", model, "--runners", runners, "--steps", "1",
                       "--repeats", "1", "--warmup", "1", "--out", str(out)]) == 0
    rows = {r.split(" | ")[1]: r.split(" | ") for r in out.read_text().splitlines()
            if r.startswith(f"| {model}")}
    assert float(rows["adc"][3]) > 0
    if "torch eager" in rows:
        assert float(rows["torch eager"][9]) < 1e-5      # ||g - g_adc|| / ||g_adc||


def test_gpt_inputs_are_labels_gains_biases_and_scaled_weights(monkeypatch):
    bench = _load("bench_gpu", monkeypatch)
    sizes = bench.SMALL["gpt"]
    fn = bench.load("gpt", sizes, "forward").primal
    x = bench.make_inputs(fn, sizes)
    assert x["y"].dtype.kind == "i" and 0 <= x["y"].min() and x["y"].max() < sizes["V"]
    assert abs(x["g1"].mean() - 1) < 0.1 and abs(x["be1"].mean()) < 0.1
    assert x["Wq"].shape == (sizes["L"], sizes["H"], sizes["D"], sizes["K"])


def test_memory_budget_sweep_on_the_cpu(tmp_path, capsys, monkeypatch):
    sweep = _load("memory_budget_sweep", monkeypatch)
    out = tmp_path / "budget.md"
    assert sweep.main(["--cpu", "--size", "small", "--fractions", "0,0.5,1",
                       "--out", str(out)]) == 0
    text = out.read_text()
    assert text.strip() in capsys.readouterr().out
    rows = [r.split(" | ") for r in text.splitlines() if r.startswith("| ") and "---" not in r]
    data = rows[1:]
    assert len(data) == 3 and all("refused" not in " ".join(r) for r in data)
    predicted = [float(r[2].replace(",", "")) for r in data]
    measured = [float(r[3].replace(",", "")) for r in data]
    assert measured == sorted(measured) and measured == predicted
    assert predicted[0] < predicted[-1]      # remat reaches below the peak without it
    assert "monotone in the budget: yes" in text and "deviation of measured from predicted: " \
        "0.00%" in text


def test_the_sweep_refuses_fractions_outside_0_and_1(monkeypatch):
    sweep = _load("memory_budget_sweep", monkeypatch)
    with pytest.raises(SystemExit):
        sweep.main(["--cpu", "--fractions", "0.5,1.5"])


def test_half_precision_rows_and_bf16_refused_for_adc(tmp_path, monkeypatch):
    """--dtype f16: every runner computes in float16 (adc's program rewritten to it), the
    gradients within float16 rounding of each other; --dtype bf16: adc's row says why it
    does not run, the peers run."""
    bench = _load("bench_gpu", monkeypatch)
    torch = importlib.util.find_spec("torch") is not None
    runners = "adc,torch" if torch else "adc"
    tables = {}
    for dtype in ("f16", "bf16"):
        out = tmp_path / f"{dtype}.md"
        assert bench.main(["--cpu", "--models", "mlp", "--runners", runners, "--dtype", dtype,
                           "--steps", "1", "--repeats", "1", "--warmup", "1",
                           "--out", str(out)]) == 0
        text = out.read_text()
        assert f"; {dtype}, TF32 off" in text
        tables[dtype] = {r.split(" | ")[1]: r.split(" | ") for r in text.splitlines()
                         if r.startswith("| mlp")}
    assert float(tables["f16"]["adc"][3]) > 0
    assert "not run: bf16 is no IR dtype of adc" in tables["bf16"]["adc"][6]
    if torch:
        assert float(tables["f16"]["torch eager"][9]) < 5e-3
        assert float(tables["bf16"]["torch eager"][3]) > 0
