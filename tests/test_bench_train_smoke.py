"""The training benchmark runs end to end at small sizes and prints its table; every
runner's loss after the same steps agrees with adc's."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_train.py"


def test_bench_train_smoke(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))      # the script adds its folder
    spec = importlib.util.spec_from_file_location("bench_train", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_train", bench)  # dataclasses look the module up
    spec.loader.exec_module(bench)
    out = tmp_path / "table.md"
    assert bench.main(["--size", "small", "--steps", "1", "--repeats", "1", "--warmup", "1",
                       "--runners", "adc,torch", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.strip() in capsys.readouterr().out
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")][1:]
    assert {r[0].strip("| ") for r in rows if r[1] == "adc"} == \
        {"mlp", "transformer_block", "deep_mlp"}
    for r in rows:
        assert float(r[2]) > 0
        if r[1] != "adc":
            assert float(r[7]) < 1e-4   # the same training trajectory
