"""Loop schedules emitted compactly: long runs of equal segments become nested loops and
long one-slot chains a loop around a ``repeat``, so the scheduled program has the same size
for any trip count; every executor (NumPy, compiled, emitted Python, the CUDA backend on a
stand-in) gives the gradients of storing everything bit for bit, with the measured peak equal
to the predicted one; zero-, one-trip and nested loops under every policy. Small programs
lower the length from which runs are compacted (`loop_pieces.MIN_RUN`) to exercise that form."""
import numpy as np
import pytest

from adcompiler.emit.cuda import ensure_fused, kernel_specs
from adcompiler.emit.python import emit_python
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.memory import predict_peak
from adcompiler.remat import loop_pieces
from adcompiler.remat.binomial import advances, binomial_plan, sqrt_plan
from adcompiler.remat.schedule import schedule
from adc_runtime import cuda as backend
from adc_runtime.compiled import CompiledExecutor
from adc_runtime.executor import Runner, run_function
from test_remat_programs import adjoint, mlp_inputs, nested, residual_mlp, scan_with_outputs

POLICIES = ["sqrt", "revolve:1", "revolve:2", "revolve:64", "budget:64KiB", "min-memory"]


@pytest.fixture
def compact(monkeypatch):
    monkeypatch.setattr(loop_pieces, "MIN_RUN", 3)


def ops(module, fn="f_grad") -> int:
    return sum(1 for _ in module[fn].walk())


def loops_at_top(module, fn="f_grad") -> int:
    return sum(op.name == "for" for op in module[fn].body.ops)


def scan_inputs(n, seed=2):
    return {"xs": 0.5 * np.random.default_rng(seed).standard_normal((n, 3)),
            "c0": np.array([0.3, -0.2, 0.9])}


@pytest.mark.parametrize("build", [lambda n: adjoint(residual_mlp(n, 2, 2), ["x", "W", "b"]),
                                   lambda n: adjoint(scan_with_outputs(n), ["xs", "c0"])])
def test_sqrt_schedule_size_does_not_grow_with_the_trip_count(build, compact):
    sizes = {n: ops(schedule(build(n), "sqrt").module) for n in (300, 1200, 4800)}
    assert len(set(sizes.values())) == 1, sizes
    # the unrolled form had a loop per segment: 2 * sqrt(4800) ~ 139 loops at the top level
    assert loops_at_top(schedule(build(4800), "sqrt").module) <= 12


def test_segment_plans_become_two_nested_loops_in_the_printed_ir(compact):
    m = adjoint(residual_mlp(49, 2, 2), ["W", "b"])
    out = schedule(m, "sqrt").module
    verify(out)
    text = print_module(out)
    assert print_module(parse_module(text)) == text
    top = [op for op in out["f_grad"].body.ops if op.name == "for"]
    # forward: the 6 segments before the last as one loop of loops, then the last segment;
    # reverse: the last segment, then one reverse loop over the 6 checkpoints
    assert [(op.attrs["n"], op.attrs["reverse"]) for op in top] == \
        [(6, False), (7, False), (7, True), (6, True)]
    seg_fwd, _, _, seg_rev = top
    inner = [op for op in seg_fwd.regions[0].ops if op.name == "for"]
    assert [op.attrs["n"] for op in inner] == [7]
    assert seg_fwd.results[1].type.shape[0] == 6          # the stacked checkpoints
    inner = [op for op in seg_rev.regions[0].ops if op.name == "for"]
    assert [(op.attrs["n"], op.attrs["reverse"], bool(op.attrs.get("recompute")))
            for op in inner] == [(7, False, True), (7, True, False)]


CASES = {
    "scanned weights": (lambda n: adjoint(residual_mlp(n, 3, 2), ["x", "W", "b"]),
                        lambda n: mlp_inputs(n, 3, 2)),
    "primal outputs": (lambda n: adjoint(scan_with_outputs(n), ["xs", "c0"]), scan_inputs),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("policy", ["sqrt", "revolve:40", "revolve:1"])
def test_compact_schedules_on_every_executor(case, policy, compact):
    """revolve with a slot per step is a checkpoint at every step: one run of 39 segments;
    with one slot, a chain of 39 blocks advanced from the start."""
    build, inputs = CASES[case]
    n = 40
    m, data = build(n), inputs(n)
    ref, _ = run_function(m, "f_grad", data)
    sched = schedule(m, policy)
    out = sched.module
    verify(out)
    assert loops_at_top(out) <= 8
    want = advances(sqrt_plan(n) if policy == "sqrt" else binomial_plan(n, int(policy[8:])))
    assert sum(r.recomputed_steps for r in sched.rewrites) == want
    check_every_executor(out, data, ref)


def check_every_executor(out, data, ref, fn="f_grad"):
    """Bits on the interpreter, the compiled executor, emitted Python and the CUDA backend
    (NumPy dressed as CuPy); the predicted peak measured by both executors."""
    got, stats = run_function(out, fn, data)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))
    assert stats["peak_bytes"] == predict_peak(out, fn).peak_bytes
    compiled = Runner(out, fn, make_executor=lambda d: CompiledExecutor(out, np, d))
    got, cstats = compiled(data)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))
    assert cstats["peak_bytes"] == stats["peak_bytes"]
    ns: dict = {}
    exec(compile(emit_python(out, fn), "emitted.py", "exec"), ns)
    got = ns[fn](*[data[a.name] for a in out[fn].args])
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))
    from test_cuda_runtime import fake_cupy
    fused = ensure_fused(out)
    specs = kernel_specs(fused)
    cp = fake_cupy({s.name: op for op, s in specs.items()}, [])
    backend._KERNELS.clear()
    got, _ = backend.run_function(fused, fn, data, specs, cupy=cp)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))


EDGE = {
    "zero trips": (lambda: adjoint(residual_mlp(0, 3, 2), ["x", "W", "b"]),
                   lambda: mlp_inputs(0, 3, 2)),
    "one trip": (lambda: adjoint(residual_mlp(1, 3, 2), ["x", "W", "b"]),
                 lambda: mlp_inputs(1, 3, 2)),
    "two trips": (lambda: adjoint(scan_with_outputs(2), ["xs", "c0"]), lambda: scan_inputs(2)),
    "nested": (lambda: adjoint(nested(12, 3), ["h0", "w"]),
               lambda: {"h0": np.array([0.4, -0.7]), "w": np.array([1.1, 0.6])}),
    "long": (lambda: adjoint(scan_with_outputs(30), ["xs", "c0"]), lambda: scan_inputs(30)),
}


@pytest.mark.parametrize("case", sorted(EDGE))
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("form", ["a loop per piece", "compact runs", "shared parts"])
def test_edge_trip_counts_under_every_policy(case, policy, form, monkeypatch):
    """Each form from the first piece: runs and chains as nested loops (`MIN_RUN`), parts
    of the plan as functions (`parts.MIN_PIECES`, as `loop_pieces` reads it)."""
    monkeypatch.setattr(loop_pieces, "MIN_RUN",
                        3 if form == "compact runs" else loop_pieces.MIN_RUN)
    monkeypatch.setattr(loop_pieces, "MIN_PIECES",
                        1 if form == "shared parts" else loop_pieces.MIN_PIECES)
    build, inputs = EDGE[case]
    m, data = build(), inputs()
    ref, _ = run_function(m, "f_grad", data)
    out = schedule(m, policy).module
    verify(out)
    got, stats = run_function(out, "f_grad", data)
    assert len(got) == len(ref)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))
    assert stats["peak_bytes"] == predict_peak(out, "f_grad").peak_bytes


def test_long_loops_are_compact_by_default():
    """From `MIN_RUN` blocks on: a revolve:1 chain of 150 steps runs bit-identically with the
    predicted peak and keeps its size up to 160,000 steps; so do √n runs of 200 and 400
    segments."""
    n = 150
    m, data = adjoint(scan_with_outputs(n), ["xs", "c0"]), scan_inputs(n)
    ref, _ = run_function(m, "f_grad", data)
    sched = schedule(m, "revolve:1")
    out = sched.module
    assert any(op.name == "repeat" for op in out["f_grad"].walk())
    got, stats = run_function(out, "f_grad", data)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))
    assert stats["peak_bytes"] == predict_peak(out, "f_grad").peak_bytes
    assert sum(r.recomputed_steps for r in sched.rewrites) == n * (n - 1) // 2
    for policy, lengths in (("revolve:1", (n, 40_000, 160_000)), ("sqrt", (40_000, 160_000))):
        sizes = {k: ops(schedule(adjoint(scan_with_outputs(k), ["xs", "c0"]), policy).module)
                 for k in lengths}
        assert len(set(sizes.values())) == 1, (policy, sizes)
