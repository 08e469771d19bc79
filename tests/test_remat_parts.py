"""Long binomial plans emitted with shared parts (`remat.parts`): one function per distinct
part of the plan, called with the part's first step, so the program's size follows the
number of distinct parts, not the trip count. Every executor gives the gradients of storing
everything bit for bit, with the measured peak equal to the predicted one, and the plan
recomputes exactly the binomial optimum; small programs lower the size from which parts are
shared (`parts.MIN_PIECES`) to exercise that form on short loops (test_remat_loops: zero,
one and two trips, nested loops, under every policy)."""
import sys

import numpy as np
import pytest

from adcompiler.emit.python import emit_python
from adcompiler.ir.calls import calls_bottom_up
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.memory import predict_peak
from adcompiler.memory.flops import block_flops, function_flops
from adcompiler.remat import parts
from adcompiler.remat.binomial import Split, advances, binomial_plan, min_advances, nodes
from adcompiler.remat.schedule import schedule
from adc_runtime.executor import run_function
from test_remat_loops import CASES, check_every_executor, scan_inputs
from test_remat_programs import adjoint, residual_mlp, scan_with_outputs


def all_ops(module, fn="f_grad") -> int:
    return sum(1 for name in calls_bottom_up(module, fn) for _ in module[name].walk())


def part_functions(module) -> list[str]:
    return [name for name, f in module.functions.items() if f.attrs.get("borrows_args")]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("slots", [2, 3, 7])
def test_shared_parts_on_every_executor(case, slots):
    """120 steps: enough pieces for shared parts by default; the stacked outputs (the
    cotangents of the scanned weights, the per-step outputs) are joined in step order."""
    build, inputs = CASES[case]
    n = 120
    m, data = build(n), inputs(n)
    ref, _ = run_function(m, "f_grad", data)
    sched = schedule(m, f"revolve:{slots}")
    out = sched.module
    verify(out)
    text = print_module(out)
    assert print_module(parse_module(text)) == text
    assert len(part_functions(out)) >= 3
    assert sum(r.recomputed_steps for r in sched.rewrites) == \
        advances(binomial_plan(n, slots)) == min_advances(n, slots)
    check_every_executor(out, data, ref)


def test_recomputed_flops_are_the_optimum_times_a_step():
    """Counted from the IR (calls of part functions multiplied out), not from the plan: a
    recomputed step costs its body's FLOPs, plus one where it adds its offset to the index."""
    n, slots = 300, 3
    m = adjoint(residual_mlp(n, 2, 2), ["x", "W", "b"])
    out = schedule(m, f"revolve:{slots}").module
    assert part_functions(out)
    body = next(op for op in m["f_grad"].body.ops if op.name == "for").regions[0]
    step = block_flops(body, {}, m)
    rec = function_flops(out["f_grad"], {}, out, only_recompute=True)
    assert step > 0
    assert min_advances(n, slots) * step <= rec <= min_advances(n, slots) * (step + 1)


def test_program_size_follows_distinct_parts_not_steps():
    """10^4 and 10^5 steps with 4 slots: the plan has thousands of splits at 10^5 steps, the
    program one function per distinct one (fewer than 200) and a few ops each."""
    sizes = {}
    for n in (10_000, 100_000):
        m = adjoint(scan_with_outputs(n), ["xs", "c0"])
        plan = binomial_plan(n, 4, runs=True)
        sched = schedule(m, "revolve:4")
        out = sched.module
        fns = part_functions(out)
        keys = parts.part_keys(plan)
        shapes = {keys[id(p)] for p in nodes(plan) if isinstance(p, Split)}
        assert len(fns) <= len(shapes) < 200
        assert sum(r.recomputed_steps for r in sched.rewrites) == min_advances(n, 4)
        sizes[n] = (len(fns), all_ops(out))
        assert all(sum(1 for _ in out[f].walk()) <= 150 for f in fns)
    splits = sum(isinstance(p, Split) for p in nodes(binomial_plan(100_000, 4, runs=True)))
    assert splits > 9000 and sizes[100_000][1] < 8000
    assert sizes[100_000][1] < 2.5 * sizes[10_000][1]


def test_deep_chains_of_calls_run_and_are_predicted_without_recursion(monkeypatch):
    """Two slots over 2,000 steps: parts call each other 60 deep; the executor makes room
    for them above a low recursion limit, and the memory model walks no chain at all."""
    n = 2000
    m, data = adjoint(scan_with_outputs(n), ["xs", "c0"]), scan_inputs(n)
    out = schedule(m, "revolve:2").module
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(200)
        pred = predict_peak(out, "f_grad").peak_bytes
        ref, _ = run_function(m, "f_grad", data)
        got, stats = run_function(out, "f_grad", data)
    finally:
        sys.setrecursionlimit(limit)
    assert stats["peak_bytes"] == pred
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))


def test_a_function_that_borrows_its_arguments_returns_none_of_them():
    text = """func @g(%x: f64[2]) -> (f64[2]) attributes {borrows_args = true} {
  return(%x)
}"""
    with pytest.raises(Exception, match="returns an argument of a function that borrows"):
        verify(parse_module(text))


def test_a_chain_of_calls_deeper_than_python_allows_by_default(monkeypatch):
    """1,200 functions each calling the next: the memory model, the FLOP count, the
    interpreter and the emitted Python all get through it at Python's default limit."""
    from adcompiler.ir.builder import Builder
    from adcompiler.ir.core import Block, Function, Module
    from adcompiler.ir.types import TensorType
    from adcompiler.memory.flops import function_flops
    t = TensorType("f64", (2,))
    module, depth = Module(), 1200
    for k in reversed(range(depth)):
        body = Block([t], ["x"])
        b = Builder(body)
        y = b.emit("neg", body.args[0]) if k == depth - 1 else \
            b.call(module[f"f{k + 1}"], [body.args[0]])[0]
        b.ret([y])
        module.add(Function(f"f{k}", body, [t]))
    verify(module)
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(1000)
        assert predict_peak(module, "f0").peak_bytes == 16 * (depth + 1)
        assert function_flops(module["f0"], {}, module) == 2
        got, stats = run_function(module, "f0", {"x": np.array([1.0, -2.0])})
        assert stats["peak_bytes"] == 16 * (depth + 1)
        sys.setrecursionlimit(1000)
        ns: dict = {}
        exec(compile(emit_python(module, "f0"), "emitted.py", "exec"), ns)
        emitted = ns["f0"](np.array([1.0, -2.0]))
    finally:
        sys.setrecursionlimit(limit)
    assert np.array_equal(got[0], [-1.0, 2.0]) and np.array_equal(emitted[0], [-1.0, 2.0])
