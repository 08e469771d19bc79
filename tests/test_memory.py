"""The memory model against the runtime's live-byte accounting, with hand-computed peaks that
pin the convention, and the FLOP table."""
import json
from pathlib import Path

import numpy as np
import pytest

from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import TensorType
from adcompiler.memory import function_flops, op_flops, parse_size, predict_peak
from adcompiler.passes.pipeline import run_pipeline
from adc_runtime.executor import run_function

ROOT = Path(__file__).resolve().parent.parent


def t(*shape):
    return TensorType("f64", shape)


def measured(module, fn, inputs):
    return run_function(module, fn, inputs)[1]["peak_bytes"]


def test_straight_line_peak_by_hand():
    # x: 80 B. exp: x and y live together (160); sum: y and z (80 + 8); z returned.
    body = Block([t(10)], ["x"])
    b = Builder(body)
    s = b.emit("sum", b.emit("exp", body.args[0]))
    b.ret([s])
    m = Module({"f": Function("f", body, [s.type])})
    assert predict_peak(m, "f").peak_bytes == 160
    assert measured(m, "f", {"x": np.ones(10)}) == 160


def test_unused_result_is_counted_then_freed():
    # x (80) + unused exp (80) = 160, then neg(x) (80) with x dying: 160 again.
    body = Block([t(10)], ["x"])
    b = Builder(body)
    b.emit("exp", body.args[0])
    y = b.emit("neg", body.args[0])
    b.ret([y])
    m = Module({"f": Function("f", body, [y.type])})
    assert predict_peak(m, "f").peak_bytes == 160
    assert measured(m, "f", {"x": np.ones(10)}) == 160


def _scan_module(n=3):
    """(h_n, stacked h_1..h_n) for h <- exp(h) over n steps, h0: f64[4] (32 B)."""
    body = Block([t(4)], ["x"])
    b = Builder(body)
    lb = Block([TensorType("i64"), t(4)], ["i", "h"])
    with b.inside(lb):
        h2 = b.emit("exp", lb.args[1])
        b.yield_([h2, h2])
    loop = b.for_(n, lb, [body.args[0]])
    b.ret(list(loop.results))
    return Module({"f": Function("f", body, [r.type for r in loop.results])})


def test_loop_peak_by_hand():
    # x 32 + stacked ys 3*32 from the loop's start = 128; body: index 8 + carry 32 -> 168,
    # index unused (freed) -> 160, exp(h) 32 -> 192 (the peak); after: 32 + results 32 + 96.
    m = _scan_module(3)
    assert predict_peak(m, "f").peak_bytes == 192
    assert measured(m, "f", {"x": np.ones(4)}) == 192


def test_live_values_at_the_peak():
    prof = predict_peak(_scan_module(3), "f", detail=True)
    assert sum(nb for _, nb in prof.live_at_peak) == prof.peak_bytes - 96  # + stacked ys
    assert prof.peak_op.name == "exp"


@pytest.mark.parametrize("name", ["mlp", "rnn", "attention", "chain_rule", "deep_mlp",
                                  "transformer_stack"])
def test_samples_predicted_equals_measured(name):
    frontend = pytest.importorskip("adcompiler.frontend")
    m = run_pipeline(frontend.compile_file(ROOT / "samples" / f"{name}.tdsl"),
                     "inline,canonicalize,cse,dce,reverse,dce")
    data = json.loads((ROOT / "samples" / f"{name}.json").read_text())
    fn = next(f for f in m.functions if f.endswith("_grad"))
    outs, stats = run_function(m, fn, {k: np.array(v) for k, v in data.items()})
    assert predict_peak(m, fn, stats["dims"]).peak_bytes == stats["peak_bytes"]


def test_symbolic_dims_are_bound_by_a_dict():
    body = Block([t("B", 3)], ["x"])
    b = Builder(body)
    s = b.emit("sum", b.emit("exp", body.args[0]))
    b.ret([s])
    m = Module({"f": Function("f", body, [s.type])})
    assert predict_peak(m, "f", {"B": 5}).peak_bytes == 2 * 5 * 3 * 8


def test_flops_table():
    body = Block([t(5, 3), t(3, 7), t(4, 5, 3)], ["a", "w", "bx"])
    b = Builder(body)
    a, w, bx = body.args
    mm = b.create("matmul", [a, w])
    bmm = b.create("matmul", [bx, w])
    ex = b.create("exp", [mm.result])
    sm = b.create("sum", [ex.result])
    tr = b.create("transpose", [a])
    assert op_flops(mm, {}) == 2 * 5 * 3 * 7
    assert op_flops(bmm, {}) == 4 * 2 * 5 * 3 * 7
    assert op_flops(ex, {}) == 35
    assert op_flops(sm, {}) == 35
    assert op_flops(tr, {}) == 0
    b.ret([sm.result])


def test_loop_flops_are_n_times_the_body():
    m = _scan_module(6)
    assert function_flops(m["f"], {}) == 6 * 4


@pytest.mark.parametrize("text,want", [("4096", 4096), ("64MiB", 64 * 2**20),
                                       ("1.5KB", 1500), ("2 GiB", 2 * 2**30)])
def test_parse_size(text, want):
    assert parse_size(text) == want
