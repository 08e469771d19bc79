"""Straight-line remat (the MILP over the adjoint block): hand-computed peaks and FLOPs,
budgets met by the measured peak, bit-identical gradients, and no worse than every
store-or-recompute choice tried by brute force."""
import itertools

import numpy as np
import pytest

from adcompiler.cli.compile import compile_program
from adcompiler.files.inputs import DimBinder, random_inputs
from adcompiler.diagnostics import AdcError
from adcompiler.ir.verifier import verify
from adcompiler.memory import function_flops, predict_peak
from adcompiler.passes.clone import clone_module
from adcompiler.passes.dce import dce_function
from adcompiler.remat.dag import apply_clones, build_problem
from adcompiler.remat.explain import remat_stats
from adcompiler.remat.schedule import schedule
from adc_runtime.executor import run_function

OUTER = """
def f(param a: f64[10, 1], param b: f64[1, 10]) -> f64 {
    return sum(sin(a @ b))
}
"""


def chain(layers, rows=20, width=4):
    """h <- tanh(h @ W_k), unrolled; by default activations (f64[20, 4], 640 B) outweigh
    weights."""
    args = ", ".join(f"param W{k}: f64[{width}, {width}]" for k in range(layers))
    body = "".join(f"    h{k + 1} = tanh(h{k} @ W{k})\n" for k in range(layers))
    return (f"def f(x: f64[{rows}, {width}], {args}) -> f64 {{\n    h0 = x\n{body}"
            f"    return sum(h{layers} * h{layers})\n}}\n")


def compiled(tmp_path, text):
    path = tmp_path / "p.tdsl"
    path.write_text(text)
    comp = compile_program(str(path), "reverse")
    inputs, _ = random_inputs(comp.run_fn, DimBinder({}), 0)
    return comp.module, inputs


def measure(module, inputs):
    outs, stats = run_function(module, "f_grad", inputs)
    return outs, stats["peak_bytes"]


def remat_bench():
    """benchmarks/remat_scale.py as a module (its network generators)."""
    import importlib.util
    import sys
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "remat_scale.py"
    spec = importlib.util.spec_from_file_location("remat_scale_gen", path)
    bench = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    spec.loader.exec_module(bench)
    sys.path[:] = saved
    return bench


def same(outs, ref):
    return len(outs) == len(ref) and all(np.array_equal(a, b) for a, b in zip(outs, ref))


def test_outer_product_by_hand(tmp_path):
    # a, b: 80 B each; z = a @ b, sin(z), cos(z), the seed broadcast, their product: 800 B.
    # Store-all peaks at cos(z): a, b, z, the seed, cos(z) and the 8-byte loss: 2568 B.
    # Only the loss can leave that point: recomputing it costs the whole forward pass,
    # matmul (2*10*10*1) + sin (100) + sum (100) = 400 FLOPs, for a peak of 2560 B.
    m, inputs = compiled(tmp_path, OUTER)
    ref, peak = measure(m, inputs)
    assert peak == 2568
    for policy in ("min-memory", "budget:2564"):
        sched = schedule(m, policy)
        verify(sched.module)
        outs, peak = measure(sched.module, inputs)
        assert same(outs, ref) and peak == 2560
        stats = remat_stats(m, sched)
        assert stats["recompute_flops"] == 400 and stats["peak_bytes_predicted"] == 2560
        assert stats["solver"] == "highs-milp" and stats["optimal"] and stats["gap"] == 0
        marked = [op for op in sched.module["f_grad"].body.ops if op.attrs.get("recompute")]
        assert [op.name for op in marked] == ["matmul", "sin", "sum"]
        primal = {op.name: op.loc for op in m["f"].body.ops}
        assert all(op.loc == primal[op.name] for op in marked)
    stats = remat_stats(m, schedule(m, "budget:2568"))
    assert stats["recompute_flops"] == 0 and stats["solver"] is None
    with pytest.raises(AdcError, match="smallest feasible peak is .*2560 bytes"):
        schedule(m, "budget:2559")


def _first_reverse_clones(prob, chosen):
    """Clone times for recomputing `chosen` (op indices) right before their first reverse
    use, or before a chosen user's clone."""
    times = {}
    for k in sorted(chosen, reverse=True):
        v = prob.ops[k].result
        ts = [t for t in prob.uses[v] if t >= prob.boundary]
        ts += [times[j] for j in chosen if j > k and v in prob.ops[j].operands and j in times]
        if ts:
            times[k] = min(ts)
    clones = {}
    for k, t in times.items():
        clones.setdefault(t, []).append(k)
    return clones


def test_no_worse_than_brute_force(tmp_path):
    m, inputs = compiled(tmp_path, chain(3))
    ref, none_peak = measure(m, inputs)
    prob = build_problem(m, "f_grad", {})
    cand = [k for k in range(prob.boundary) if prob.ops[k].result in prob.clone_times
            and prob.ops[k].name in ("matmul", "tanh")]
    tried = []     # (measured peak, recomputed FLOPs) of every subset, cloned once each
    for r in range(len(cand) + 1):
        for chosen in itertools.combinations(cand, r):
            out = clone_module(m)
            p = build_problem(out, "f_grad", {})
            apply_clones(out["f_grad"], _first_reverse_clones(p, chosen))
            dce_function(out["f_grad"], out)
            outs, peak = measure(out, inputs)
            assert same(outs, ref)
            tried.append((peak, function_flops(out["f_grad"], {}, out, only_recompute=True)))
    floor = min(p for p, _ in tried)
    assert floor < none_peak
    for budget in sorted({p for p, _ in tried}):
        sched = schedule(m, f"budget:{budget}")
        outs, peak = measure(sched.module, inputs)
        assert same(outs, ref) and peak <= budget
        best = min(f for p, f in tried if p <= budget)
        assert remat_stats(m, sched)["recompute_flops"] <= best
    assert measure(schedule(m, "min-memory").module, inputs)[1] <= floor


def test_budget_sweep_on_a_chain(tmp_path):
    m, inputs = compiled(tmp_path, chain(5))
    ref, none_peak = measure(m, inputs)
    lo = schedule(m, "min-memory")
    floor = measure(lo.module, inputs)[1]
    assert floor < none_peak
    last = None
    for k in range(5):
        budget = floor + (none_peak - floor) * k // 4
        sched = schedule(m, f"budget:{budget}")
        outs, peak = measure(sched.module, inputs)
        assert same(outs, ref)
        assert peak == predict_peak(sched.module, "f_grad").peak_bytes <= budget
        flops = remat_stats(m, sched)["recompute_flops"]
        assert last is None or flops <= last
        last = flops
    assert last == 0
