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


def test_remat_scale_smoke(capsys, monkeypatch):
    """benchmarks/remat_scale.py: its loop table at 20 steps, and its generated networks
    scheduled, run and checked (predicted peak = measured) at small sizes."""
    import argparse
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "remat_scale.py"
    spec = importlib.util.spec_from_file_location("remat_scale", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))      # the script adds its folder
    spec.loader.exec_module(bench)
    bench.loops(argparse.Namespace(loops=[20], cap=60.0, run_evals=10_000))
    rows = [[c.strip(" |") for c in r.split(" | ")]
            for r in capsys.readouterr().out.splitlines() if r.startswith("| 20 |")]
    assert [r[1].split(":")[0] for r in rows] == ["revolve", "revolve", "revolve", "budget",
                                                  "min-memory", "sqrt"]
    for r in rows:
        if "smallest feasible peak" in r[2]:        # half of store-all: tight at 20 steps
            continue
        assert r[-1] == r[-2] and int(r[-1].replace(",", "")) > 0   # measured = predicted
        assert r[1] == "sqrt" or r[5] == r[6]                        # the binomial optimum
    from adcompiler.remat.schedule import schedule
    for text in (bench.mlp(3, width=4, batch=2), bench.transformer(2, t=3, d=4)):
        module, fn, inputs = bench.compiled(text)
        for policy in ("min-memory", "mincut"):
            stats = bench.checked(module, fn, schedule(module, policy, fn), {}, inputs)
            assert stats["peak_bytes_measured"] == stats["peak_bytes_predicted"]
        budget = (stats["peak_bytes_store_all"] + stats["peak_bytes_predicted"]) // 2
        for whole in (False, True):         # the exact table's DP columns
            got = bench._dp_alone(module, fn, budget, whole=whole)
            assert got is None or got[0] <= budget


def _load(name: str, monkeypatch):
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(sys, "path", list(sys.path))      # the script adds its folder
    spec.loader.exec_module(module)
    return module


def test_cpu_gradient_bench_smoke(tmp_path, capsys, monkeypatch):
    bench = _load("bench_cpu", monkeypatch)
    out = tmp_path / "table.md"
    assert bench.main(["--threads", "1", "--models", "tiny_mlp", "digits_cnn", "char_gpt",
                       "--batch", "4", "--steps", "1", "--repeats", "1", "--warmup", "1",
                       "--interpreter", "--out", str(out)]) == 0
    main, split = out.read_text().split("The steps split")   # the times, then BLAS and the rest
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in main.splitlines() if line.startswith("| tiny_mlp")]
    assert [r[1:3] for r in rows] == [["grad", "1"], ["train", "1"]]
    parts = [[cell.strip() for cell in line.strip().strip("|").split("|")]
             for line in split.splitlines() if line.startswith("| tiny_mlp")]
    assert [r[1:3] for r in parts] == [["grad", "1"], ["train", "1"]]
    assert all(float(r[4]) > 0 for r in parts)   # adc's matrix products took some time
    assert all(float(r[3]) > 0 for r in rows)
    assert rows[1][4] == "-"                     # the interpreter times gradient steps only
    if importlib.util.find_spec("torch") is not None:
        assert "adc / torch eager" in out.read_text()
        # torch's gradient, and its parameters after one Adam update, agree with adc's
        assert float(rows[0][7]) < 1e-5 and float(rows[1][7]) < 1e-5
    # the samples' training steps: the peers' models agree with adc's after one step
    samples = [[cell.strip() for cell in line.strip().strip("|").split("|")]
               for line in main.splitlines() if line.startswith(("| digits_cnn", "| char_gpt"))]
    assert [r[:3] for r in samples] == [["digits_cnn", "train", "1"], ["char_gpt", "train", "1"]]
    head = next([cell.strip() for cell in line.strip().strip("|").split("|")]
                for line in main.splitlines() if line.startswith("| workload"))
    for r in samples:
        assert float(r[3]) > 0
        for peer in ("torch eager", "jax.jit"):
            if f"{peer} ms" in head:
                assert float(r[head.index(f"{peer} ms")]) > 0
                assert float(r[head.index(f"grad diff vs {peer}")]) < 1e-4


def test_compile_scale_smoke(capsys, monkeypatch):
    bench = _load("compile_scale", monkeypatch)
    assert bench.main(["--sizes", "20", "40", "--modes", "reverse", "hvp"]) == 0
    printed = capsys.readouterr().out
    for stage in ("frontend", "canonicalize", "reverse", "hvp", "print", "buffer-plan",
                  "parse-ir"):
        assert f"| {stage} |" in printed
    assert "largest growth exponent of the total" in printed
