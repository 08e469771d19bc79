"""The benchmark script runs end to end at small sizes on the CPU and prints its table."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"


def test_bench_cpu_smoke(tmp_path, capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_gpu", bench)  # dataclasses look the module up
    monkeypatch.setattr(sys, "path", list(sys.path))      # the script adds its folder
    spec.loader.exec_module(bench)
    out = tmp_path / "table.md"
    assert bench.main(["--cpu", "--steps", "1", "--repeats", "1", "--warmup", "1",
                       "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    text = out.read_text()
    assert text.strip() in printed
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")][1:]
    runners = {(r[0].strip("| "), r[1]) for r in rows}
    assert {("mlp", "adc"), ("transformer_block", "adc"), ("deep_mlp", "adc remat=none"),
            ("deep_mlp", "adc remat=sqrt")} <= runners
    if importlib.util.find_spec("torch") is not None:
        assert ("mlp", "torch eager") in runners
    for r in rows:
        if r[1].startswith("adc"):
            fwd, grad = float(r[2]), float(r[3])
            assert fwd > 0 and grad > 0  # times print rounded, the ratio is of the exact ones
            # the times print to 0.001 ms and the ratio to 0.01: bound the rounding of each
            ratio = grad / fwd
            slack = ratio * (0.0005 / fwd + 0.0005 / grad) + 0.005
            assert abs(float(r[4]) - ratio) <= slack


def test_per_example_bench_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        "bench_per_example", BENCH.parent / "bench_per_example.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "table.md"
    assert bench.main(["--rows", "4", "--repeats", "1", "--warmup", "0", "--runners", "adc",
                       "--out", str(out)]) == 0
    rows = {r.split(" | ")[0].strip("| "): r.split(" | ")
            for r in out.read_text().splitlines() if r.startswith("| adc")}
    assert set(rows) == {"adc Python loop", "adc.vmap(adc.grad)"}
    assert float(rows["adc.vmap(adc.grad)"][3].strip(" |")) < 1e-6   # same gradients
