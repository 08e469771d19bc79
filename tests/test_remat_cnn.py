"""benchmarks/remat_cnn.py in its quick mode: SqueezeNet of the onnx wheel imported, its
training step scheduled at three budgets and run, each measured peak equal to the predicted
one (the benchmark stops otherwise), the table and the plot written."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("matplotlib")

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "remat_cnn.py"


def test_remat_cnn_quick(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("remat_cnn", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))      # the script adds its folder
    spec.loader.exec_module(bench)
    out, png = tmp_path / "table.md", tmp_path / "plot.png"
    assert bench.main(["--quick", "--out", str(out), "--plot", str(png)]) == 0
    rows = [r.split(" | ") for r in out.read_text().splitlines()
            if r.startswith("| squeezenet")]
    assert [r[1] for r in rows[:2]] == ["none", "min-memory"] and len(rows) == 3
    for r in rows:
        assert r[2].endswith("= measured")           # run, and equal to the prediction
        share, recompute = float(r[3]), float(r[5])
        assert 0 < share <= 1 and recompute >= 0
    assert float(rows[1][3]) < 1 and float(rows[1][5]) > 0    # min-memory saves, recomputes
    assert png.stat().st_size > 0
