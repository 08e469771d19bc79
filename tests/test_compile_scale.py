"""Compilation stays linear in the program's size: counters of the work done grow with
the number of ops (not its square), and programs of tens of thousands of ops compile in
the default suite. Timings are left to benchmarks/compile_scale.py."""
from __future__ import annotations

import random

import numpy as np
import pytest

from adcompiler.frontend import compile_source
from adcompiler.ir import core
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function
from adcompiler.ir.printer import Namer, print_module
from adcompiler.ir.types import TensorType
from adcompiler.passes import run_pipeline
from adcompiler.passes.canonicalize import canonicalize_function
from adc_runtime.buffers import ALIGN, _pack, plan_block
from adc_runtime.executor import Executor

F32 = TensorType("f32", (3,))


def nested_negations(n: int) -> Function:
    """``-(-(...(x)))`` with `n` negations, each followed by ``+ 0``."""
    body = Block([F32], ["x"])
    b = Builder(body)
    v = body.args[0]
    for _ in range(n):
        v = b.emit("add", b.emit("neg", v), b.const(0.0, "f32"))
    b.ret([v])
    return Function("f", body, [F32])


def test_canonicalize_work_grows_linearly(monkeypatch):
    walks = []
    original = core.Block.walk

    def counting_walk(self):
        walks.append(self)
        return original(self)

    monkeypatch.setattr(core.Block, "walk", counting_walk)
    stats = {}
    for n in (500, 2000):
        walks.clear()
        fn = nested_negations(n)
        driver = canonicalize_function(fn)
        stats[n] = (driver.folds, driver.visits, len(walks))
        # every neg pair and every + 0 folds: x, or -x for an odd count
        assert [op.name for op in fn.body.ops] == ["return"]
    for n, (folds, visits, n_walks) in stats.items():
        assert folds == n + n // 2              # n adds, n // 2 neg pairs
        assert visits <= 3 * n + 1             # each op matched once (a const, a neg, an add)
        assert n_walks <= 2                    # use lists, not a walk per fold


def test_printer_names_repeated_hints_in_order_and_never_twice():
    namer = Namer()
    values = [core.Value(F32, "h") for _ in range(20000)]
    names = [namer(v) for v in values]
    assert names[:3] == ["%h", "%h.1", "%h.2"] and names[-1] == "%h.19999"
    # hints that look like another value's name: numbers, suffixes, quotes
    hints = ["h", "h1", "h.1", "1", "0", "", None, "a b", "a b", '"h"', "h.1", "a b.1", "x_0"]
    more = [namer(core.Value(F32, hint)) for hint in hints * 3]
    assert len(set(names + more)) == len(names) + len(more)
    assert namer(values[0]) == "%h"   # a value keeps its name


def test_printer_suffixes_count_per_hint():
    namer = Namer()
    values = [core.Value(F32, n) for n in ("h", "g", "h", None, "g", "h", None)]
    assert [namer(v) for v in values] == ["%h", "%g", "%h.1", "%0", "%g.1", "%h.2", "%1"]


def _overlapping(items, offsets) -> list:
    """Pairs of items live at a common op whose memory overlaps (a sweep, not all pairs)."""
    bad, live = [], []
    for key, size, start, end in sorted(items, key=lambda it: it[2]):
        live = [it for it in live if it[3] >= start]
        for other in live:
            lo, hi = offsets[key], offsets[key] + size
            if size and other[1] and lo < offsets[other[0]] + other[1] and offsets[other[0]] < hi:
                bad.append((key, other[0]))
        live.append((key, size, start, end))
    return bad


def test_packing_never_overlaps_live_values_and_reuses_freed_ones():
    rng = random.Random(0)
    for trial in range(30):
        items = []
        for k in range(rng.randrange(1, 300)):
            start = rng.randrange(0, 400)
            items.append((k, rng.choice([0, 4, 100, 256, 1000, 4096]), start,
                          start + rng.randrange(0, 60)))
        offsets, arena = _pack(items)
        assert not _overlapping(items, offsets)
        assert all(off % ALIGN == 0 for off in offsets.values())
        assert arena >= max(offsets[k] + s for k, s, _, _ in items)
    # a chain: each value dies at the next op, two slots suffice however long it is
    chain = [(k, 1024, k, k + 1) for k in range(50000)]
    offsets, arena = _pack(chain)
    assert arena == 2 * 1024 and not _overlapping(chain, offsets)


CHAIN_FORMS = ("h = tanh(h)", "h = h * w", "h = sin(h)", "h = h + w", "h = -h")


def chain_source(n: int) -> str:
    lines = ["def chain(x: f32[8], param w: f32[8]) -> f32 {", "    h = x"]
    lines += ["    " + CHAIN_FORMS[k % len(CHAIN_FORMS)] for k in range(n)]
    return "\n".join(lines + ["    return sum(h)", "}"]) + "\n"


def test_a_20k_op_program_compiles_prints_and_plans():
    module = compile_source(chain_source(20000), "chain.tdsl")
    out = run_pipeline(module, "inline,canonicalize,cse,dce")
    fn = out["chain"]
    assert sum(1 for _ in fn.walk()) == 20000 + 2
    text = print_module(out)
    assert text.count("\n") == 20000 + 4
    plan = plan_block(fn.body, {}, Executor(out, np).in_place_results)
    assert plan.arena_bytes == 2 * ALIGN   # a chain needs two buffers


def test_a_5k_op_program_compiles_in_reverse_mode_and_runs():
    n = 5000
    module = compile_source(chain_source(n), "chain.tdsl")
    out = run_pipeline(module, "inline,canonicalize,cse,dce,scan-inputs,"
                               "reverse{wrt=w fn=chain},inline,canonicalize,cse,dce")
    grad = out["chain_grad"]
    assert sum(1 for _ in grad.walk()) < 6 * n
    print_module(out)
    small = compile_source(chain_source(10), "chain.tdsl")   # the same forms, run
    from adcompiler.api.transforms import grad as adc_grad
    g = adc_grad(small, wrt="w")
    x, w = np.linspace(-1, 1, 8, dtype=np.float32), np.full(8, 0.5, np.float32)
    assert np.all(np.isfinite(g(x, w)))


def test_a_pipeline_copies_its_input_once_and_leaves_it_untouched(monkeypatch):
    from adcompiler.passes import pipeline
    module = compile_source(chain_source(50), "chain.tdsl")
    before = print_module(module)
    copies = []
    original = pipeline.clone_module
    monkeypatch.setattr(pipeline, "clone_module", lambda m: copies.append(m) or original(m))
    out = run_pipeline(module, "inline,canonicalize,cse,dce,canonicalize,cse,dce")
    assert len(copies) == 1 and copies[0] is module
    assert print_module(module) == before and out is not module
    out2 = run_pipeline(module, "inline,cse,scan-inputs,reverse{wrt=w fn=chain},cse,dce")
    # once in all: reverse, a module pass, inlines in place in the pipeline's copy
    assert len(copies) == 2
    assert print_module(module) == before and "chain_grad" in out2
    # called on its own, a pass copies its input first
    from adcompiler.passes.hvp import HVP
    out3 = HVP(wrt=("w",), fn="chain")(module)
    assert len(copies) == 3 and copies[2] is module
    assert print_module(module) == before and "chain_hvp" in out3


def test_dce_examines_each_callee_once_however_often_it_is_called(monkeypatch):
    calls = 300
    src = ("def g(x: f32[3]) -> f32[3] {\n    return tanh(x) * x\n}\n"
           "def f(x: f32[3]) -> f32[3] {\n"
           + "".join(f"    y{k} = g(x)\n" for k in range(calls)) + "    return g(x)\n}\n")
    module = compile_source(src, "calls.tdsl")
    walked = []
    original = core.Block.walk
    monkeypatch.setattr(core.Block, "walk", lambda self: walked.append(self) or original(self))
    out = run_pipeline(module, "dce")
    # the unused calls are removed (g is pure), the returned one stays
    assert [op.name for op in out["f"].body.ops] == ["call", "return"]
    assert walked.count(out["g"].body) <= 1


def chained_carries(depth: int, carries: int) -> str:
    """Loops nested `depth` deep whose carries feed each other in a chain (``c0 = c1 + x``,
    ...): a fixed point over the carries takes a round per link."""
    names = [f"c{k}" for k in range(carries)]
    lines = ["def f(x: f32, param w: f32) -> f32 {"] + [f"    {n} = x" for n in names]
    for d in range(depth):
        lines.append("    " * (d + 1) + f"for i{d} in range(2) {{")
    pad = "    " * (depth + 1)
    lines += [f"{pad}{names[k]} = {names[k + 1]} + x" for k in range(carries - 1)]
    lines.append(f"{pad}{names[-1]} = {names[-1]} * w")
    lines += ["    " * d + "}" for d in range(depth, 0, -1)]
    return "\n".join(lines + [f"    return {names[0]}", "}"]) + "\n"


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_loop_analyses_visit_each_op_a_bounded_number_of_times(monkeypatch, depth):
    from adcompiler.passes import activity, dce
    calls = []
    for mod in (activity, dce):
        original = mod.has_trait
        monkeypatch.setattr(mod, "has_trait",
                            lambda op, t, f=original: calls.append(op) or f(op, t))
    module = compile_source(chained_carries(depth, 8))
    fn = module["f"]
    n_ops = sum(1 for _ in fn.walk())
    active = activity.analyze_activity(fn, ["w"])
    assert len(calls) <= 6 * n_ops, (len(calls), n_ops)  # a fixed point: about 37 per op
    assert {a.name for a in fn.args if a in active} == {"w"}
    calls.clear()
    dce.dce_function(fn, module)
    assert len(calls) <= 6 * n_ops, (len(calls), n_ops)
    assert sum(op.name == "add" for op in fn.walk()) == 7  # every link reaches c0
