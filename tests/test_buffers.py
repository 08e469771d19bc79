"""Planned buffers (`adc_runtime.buffers`): values whose ops can write in place live in one
arena per function. Checked here: the plan's offsets on small programs (reuse across
disjoint lifetimes, lifetimes stretched through views, values that leave the function kept
out), and on every sample and on random programs that (1) no planned write touches memory
that a live value uses, (2) results are bit-identical to the run without planning, with the
same SSA peak, and (3) a second call reuses the arena and leaves the first call's outputs
alone."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_property_programs import programs
from adcompiler.cli.compile import build_pipeline, compile_program
from adcompiler.frontend import compile_source
from adcompiler.passes.pipeline import run_pipeline
from adc_runtime.buffers import (ALIGN, alias_sources, plan_block, stacked_in_place,
                                 value_nbytes)
from adc_runtime.executor import Executor, bind_dims, run_function
from adc_runtime.kernels import DTYPES
from sample_inputs import sample_inputs

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
NAMES = sorted(p.stem for p in SAMPLES.glob("*.tdsl"))


class Checking:
    """Asserts, before each planned write, that the target shares no memory with any value
    that is live at that moment (the op's own operands included)."""

    planned_writes = 0

    def run_op(self, op, env):
        if op.results and op.results[0] in self._views:
            out = self._views[op.results[0]]
            for v, a in env.items():
                assert not np.may_share_memory(out, a), (
                    f"{op.name} -> %{op.results[0].name} overwrites live %{v.name}")
            self.planned_writes += 1
        return super().run_op(op, env)


class CheckingExecutor(Checking, Executor):
    pass


def run_checked(module, name, inputs, plan=True):
    fn = module[name]
    arrays = [np.asarray(inputs[a.name], dtype=DTYPES[a.type.dtype]) for a in fn.args]
    ex = CheckingExecutor(module, np, bind_dims(fn, arrays), plan_buffers=plan)
    return ex.call(fn, arrays), ex


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def plan_of(src: str):
    fn = compile_source(src, "<t>")["f"]
    ex = Executor(None, np)
    return fn, plan_block(fn.body, {}, ex.in_place_results)


def named(fn):
    return {r.name: r for op in fn.walk() for r in op.results}


# ---- the plan on small programs ---------------------------------------------------------

def test_values_with_disjoint_lifetimes_share_memory():
    fn, plan = plan_of(
        "def f(x: f32[64], w: f32[64, 64]) -> f32 {\n"
        "    a = exp(x)\n"     # dies at b
        "    b = a @ w\n"      # dies at c
        "    c = tanh(b)\n"    # dies at d
        "    d = c @ w\n"
        "    return sum(d)\n}\n")
    v = named(fn)
    off = {n: plan.offsets[v[n]] for n in "abcd"}
    # a and c are never live together, nor are b and d: two slots of 256 B serve four values
    assert off["a"] == off["c"] and off["b"] == off["d"] and off["a"] != off["b"]
    assert plan.arena_bytes == 2 * ALIGN and plan.planned_bytes == 4 * 256


def test_a_view_keeps_its_base_alive():
    fn, plan = plan_of(
        "def f(x: f32[64], y: f32[64]) -> f32 {\n"
        "    a = exp(x)\n"
        "    t = reshape(a, [8, 8])\n"   # a's last use; t is a view of a
        "    b = exp(y)\n"               # must not take a's memory: t still reads it
        "    return sum(t) + sum(b)\n}\n")
    v = named(fn)
    assert plan.offsets[v["a"]] != plan.offsets[v["b"]]


def test_values_that_leave_the_function_are_not_planned():
    fn, plan = plan_of(
        "def f(x: f32[64]) -> f32[8, 8] {\n"
        "    a = exp(x)\n"
        "    return reshape(tanh(a), [8, 8])\n}\n")
    v = named(fn)
    assert v["a"] in plan.offsets
    tanh = next(op.result for op in fn.walk() if op.name == "tanh")
    assert tanh not in plan.offsets   # returned through a view


def test_operands_of_other_dtypes_are_not_written_in_place():
    fn, plan = plan_of(
        "def f(x: f32[4], n: i32[4]) -> f32 {\n"
        "    return sum(x * n)\n}\n")
    mul = next(op for op in fn.walk() if op.name == "mul")
    assert not Executor(None, np).in_place_results(mul) and mul.result not in plan.offsets


def test_loop_bodies_share_the_function_arena():
    comp = compile_program(str(SAMPLES / "rnn.tdsl"), "reverse")
    fn = comp.module[comp.run_name]
    data = json.loads((SAMPLES / "rnn.json").read_text())
    arrays = [np.asarray(data[a.name], dtype=DTYPES[a.type.dtype]) for a in fn.args]
    dims = bind_dims(fn, arrays)
    plan = plan_block(fn.body, dims, Executor(None, np).in_place_results)
    in_loops = [v for v in plan.offsets
                if v.defining_op is not None and v.defining_op.parent is not fn.body]
    assert in_loops, "the rnn's loop bodies should have planned values"
    assert max(plan.offsets[v] for v in plan.offsets) < plan.arena_bytes


# ---- every sample -----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("name", NAMES)
def test_samples_planned_equal_unplanned(name, mode):
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), mode)
    data = sample_inputs(SAMPLES / f"{name}.tdsl", comp.module[comp.run_name])
    want, plain = run_checked(comp.module, comp.run_name, data, plan=False)
    got, ex = run_checked(comp.module, comp.run_name, data)
    assert ex.planned_writes > 0
    assert all(same(a, b) for a, b in zip(got, want))
    assert ex.peak == plain.peak          # the SSA accounting does not change
    assert 0 < ex.arena_bytes


def deep_mlp_gradient():
    """The deep_mlp sample's gradient program, its inputs, and a checking executor."""
    comp = compile_program(str(SAMPLES / "deep_mlp.tdsl"), "reverse")
    fn = comp.module[comp.run_name]
    data = json.loads((SAMPLES / "deep_mlp.json").read_text())
    arrays = [np.asarray(data[a.name], dtype=DTYPES[a.type.dtype]) for a in fn.args]
    return comp, fn, data, arrays, CheckingExecutor(comp.module, np, bind_dims(fn, arrays))


def test_arena_is_reused_across_calls_and_outputs_survive():
    comp, fn, data, arrays, ex = deep_mlp_gradient()
    first = [a.copy() for a in ex.call(fn, arrays)]
    kept = ex.call(fn, arrays)
    arena, nbytes = ex._arenas[id(fn)], ex.arena_bytes
    other = ex.call(fn, [2.0 * a for a in arrays])
    assert ex._arenas[id(fn)] is arena and ex.arena_bytes == nbytes   # allocated once
    assert all(same(a, b) for a, b in zip(kept, first))   # the next call left them alone
    assert not all(same(a, b) for a, b in zip(other, first))
    # the two residual stacks (64 x B x 8 floats each) are planned, and smaller values share
    plan = plan_block(fn.body, ex.dims, ex.in_place_results)
    stacks = [v for v in plan.offsets if v.defining_op.name == "for"]
    assert len(stacks) == 2 and plan.arena_bytes < plan.planned_bytes


# ---- random programs --------------------------------------------------------------------

@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_planned_equal_unplanned(program, data_seed):
    text, shapes = program
    m = run_pipeline(compile_source(text, "<random>"),
                     build_pipeline("reverse", "f", list(shapes), None))
    rng = np.random.default_rng(data_seed)
    inputs = {name: 0.5 * rng.standard_normal(shape) for name, shape in shapes.items()}
    inputs["ids"] = np.array([0, -1, 0])
    for name in ("f", "f_grad"):
        with np.errstate(all="ignore"):
            want, _ = run_function(m, name, inputs, plan_buffers=False)
            got, _ = run_checked(m, name, inputs)
        assert all(same(a, b) for a, b in zip(got, want)), (name, text)


def test_fresh_ops_are_registered_ops():
    from adcompiler.ops import registry
    from adc_runtime.kernels import KERNELS
    assert {n for n, d in registry.REGISTRY.items() if d.fresh} <= set(KERNELS)


@pytest.mark.parametrize("body", ["h = e[i]", "h = reshape(e[i] , [2, 4])[0:2]"])
def test_a_loop_carry_that_is_a_view_keeps_the_scanned_value_alive(body):
    shape = "f32[8]" if body == "h = e[i]" else "f32[2, 4]"
    init = "zeros([8])" if body == "h = e[i]" else "zeros([2, 4])"
    src = (f"def f(x: f32[4, 8]) -> f32 {{\n"
           f"    e = exp(x)\n"
           f"    h = {init}\n"
           f"    for i in range(4) {{\n        {body}\n    }}\n"
           f"    a = tanh(x) * 2.0\n"      # planned after e's last use (the loop)
           f"    return sum(h) + sum(a)\n}}\n")
    m = compile_source(src, "<t>")
    x = np.linspace(-1, 1, 32).reshape(4, 8)
    got, ex = run_checked(m, "f", {"x": x})
    want, _ = run_checked(m, "f", {"x": x}, plan=False)
    assert ex.planned_writes >= 2 and same(got[0], want[0])
    fn = m["f"]
    plan = plan_block(fn.body, ex.dims, ex.in_place_results)
    e = next(op.result for op in fn.body.ops if op.name == "exp")
    loop = next(op for op in fn.body.ops if op.name == "for")
    assert alias_sources(loop, ex.in_place_results)[loop.results[0]] >= {e}
    if e in plan.offsets:   # e's memory is held while h, a view of it, is live
        a = next(op.result for op in fn.body.ops if op.name == "mul")
        assert a not in plan.offsets or plan.offsets[a] != plan.offsets[e]


# ---- the CUDA backend's plan, on the CuPy stand-in ----------------------------------------

@pytest.mark.parametrize("name", ["mlp", "rnn", "transformer_stack"])
def test_fused_kernels_write_planned_buffers(name):
    from test_cuda_runtime import fake_cupy
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime import cuda as backend

    class CheckingCuda(Checking, backend.CudaExecutor):
        pass

    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), "reverse")
    module = ensure_fused(comp.module)
    specs = kernel_specs(module)
    cp = fake_cupy({s.name: op for op, s in specs.items()}, [])
    backend._KERNELS.clear()
    fn = module[comp.run_name]
    data = sample_inputs(SAMPLES / f"{name}.tdsl", fn)
    arrays = [np.asarray(data[a.name], dtype=DTYPES[a.type.dtype]) for a in fn.args]
    ex = CheckingCuda(module, cp, bind_dims(fn, arrays), specs)
    want, _ = run_function(comp.module, comp.run_name, data, plan_buffers=False)
    for _ in range(2):
        got = ex.call(fn, arrays)
        assert all(same(a, b) for a, b in zip(got, want))
    fused_planned = [op for op in fn.walk() if op.name == "fused" and op.results[0] in ex._views]
    assert fused_planned and ex.planned_writes > 0


@pytest.mark.parametrize("model", ["mlp", "transformer_block", "deep_mlp"])
def test_benchmark_models_on_the_cuda_backend_stand_in(model):
    """The benchmark's programs at small sizes, fused with generated kernels and planned
    buffers on the CuPy stand-in, against NumPy without fusion or planning."""
    import sys
    from test_cuda_runtime import fake_cupy
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime import cuda as backend
    sys.path.insert(0, str(SAMPLES.parent / "benchmarks"))
    import bench_gpu

    class CheckingCuda(Checking, backend.CudaExecutor):
        pass

    sizes = bench_gpu.SMALL[model]
    comp = bench_gpu.load(model, sizes, "reverse")
    inputs = bench_gpu.make_inputs(bench_gpu.load(model, sizes, "forward").primal, sizes)
    module = ensure_fused(comp.module)
    specs = kernel_specs(module)
    assert any(getattr(s, "kind", "") == "reduction" for s in specs.values()) or \
        model == "deep_mlp"
    cp = fake_cupy({s.name: op for op, s in specs.items()}, [])
    backend._KERNELS.clear()
    fn = module[comp.run_name]
    ex = CheckingCuda(module, cp, {}, specs)
    want, _ = run_function(comp.module, comp.run_name, inputs, plan_buffers=False)
    for _ in range(2):
        got = ex.call(fn, [inputs[a.name] for a in fn.args])
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert ex.planned_writes > 0


def test_kernels_said_to_return_new_arrays_do():
    from adc_runtime.kernels import KERNELS
    x = np.arange(8.0).reshape(1, 8)
    assert not np.may_share_memory(KERNELS["sum_to"](np, x, shape=(1, 8)), x)  # B bound to 1
    a, b = np.ones((3, 4)), np.ones((4,))
    for spec, ops in (("ij,j->ij", (a, b)), ("ij,kj->ik", (a, a)), ("ij,ij->ji", (a, a))):
        got = KERNELS["einsum"](np, *ops, spec=spec)
        assert not any(np.may_share_memory(got, o) for o in ops), spec
    assert np.may_share_memory(KERNELS["einsum"](np, a, spec="ij->ji"), a)  # hence the rule


# ---- loop carries in two alternating buffers --------------------------------------------

def test_loop_carries_alternate_between_two_buffers():
    comp, fn, data, arrays, ex = deep_mlp_gradient()
    plan = plan_block(fn.body, ex.dims, ex.in_place_results)
    loops = [op for op in fn.body.ops if op.name == "for"]
    assert len(loops) == 2 and all(lp.regions[0].ops[-1].operands[0] in plan.pairs
                                   for lp in loops)     # h forward, dh backward
    for v, (a, b) in plan.pairs.items():
        assert abs(a - b) >= value_nbytes(v, ex.dims)     # two separate buffers
    got = ex.call(fn, arrays)
    want, _ = run_function(comp.module, comp.run_name, data, plan_buffers=False)
    assert all(same(a, b) for a, b in zip(got, want))
    # the loop's results were copied out of the body's buffers
    assert all(not np.may_share_memory(buf, g) for bufs in ex._pairs.values() for buf in bufs
               for g in got)


SWAP = """\
def f(x: f32[8], y: f32[8]) -> f32 {
    h = x
    g = y
    for i in range(5) {
        m = tanh(g) * 2.0 + h
        h = g
        g = m
    }
    return sum(h * 3.0) + sum(g)
}
"""


@pytest.mark.parametrize("src", [SWAP, SWAP.replace("h = g", "h = sin(g)")])
def test_a_carry_handed_on_as_another_carry_keeps_its_own_buffer(src):
    m = compile_source(src, "<t>")
    x, y = np.linspace(-1, 1, 8), np.linspace(2, -2, 8)
    got, ex = run_checked(m, "f", {"x": x, "y": y})
    want, _ = run_checked(m, "f", {"x": x, "y": y}, plan=False)
    assert same(got[0], want[0])
    plan = plan_block(m["f"].body, ex.dims, ex.in_place_results)
    assert bool(plan.pairs) == ("sin(g)" in src)   # h = g hands g's argument on: no pairs


# ---- stacked outputs written straight into their stacks ---------------------------------

RESIDUAL = """\
def f(x: f32[N, 8], h0: f32[8], param w: f32[8, 8]) -> f32 {
    h = h0
    for i in range(N) {
        h = h + tanh(h @ w + x[i])
    }
    return sum(h * h)
}
"""
# the carry is a view of tanh's result, which the adjoint keeps: that one is copied
VIEWED = RESIDUAL.replace("h = h + tanh(h @ w + x[i])",
                          "h = reshape(tanh(reshape(h @ w + x[i], [2, 4])), [8])")


class Recording(Checking, Executor):
    """Keeps the arrays of the planned writes."""

    def run_op(self, op, env):
        if op.results and op.results[0] in self._views:
            self.targets.append(self._views[op.results[0]])
        return super().run_op(op, env)


@pytest.mark.parametrize("src", [RESIDUAL, VIEWED], ids=["residual", "viewed"])
@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_loops_write_stacked_values_straight_into_their_stacks(src, n):
    m = run_pipeline(compile_source(src, "<t>"), build_pipeline("reverse", "f", ["w"], None))
    rng = np.random.default_rng(n)
    inputs = {"x": rng.standard_normal((n, 8)), "h0": rng.standard_normal(8),
              "w": 0.3 * rng.standard_normal((8, 8))}
    fn = m["f_grad"]
    arrays = [np.asarray(inputs[a.name], dtype=DTYPES[a.type.dtype]) for a in fn.args]
    ex = Recording(m, np, bind_dims(fn, arrays))
    ex.targets = []
    want, _ = run_function(m, "f_grad", inputs, plan_buffers=False)
    for _ in range(2):   # the second call: the body's own buffers after the first
        got = ex.call(fn, arrays)
        assert all(same(a, b) for a, b in zip(got, want))
    loop = next(op for op in fn.body.ops if op.name == "for" and not op.attrs.get("reverse"))
    body = loop.regions[0]
    direct, ahead = stacked_in_place(body, 1, ex.in_place_results)
    tanh = next(op.result for op in body.ops if op.name == "tanh")
    stacked = body.ops[-1].operands[1:]
    if src == RESIDUAL:
        # tanh's result and the carried argument h (the next h written into its slot)
        assert [stacked[k] for k in direct] == [tanh]
        assert [(stacked[k], c) for k, c in ahead] == [(body.args[1], 0)]
    else:
        assert tanh in stacked and stacked.index(tanh) not in direct
    stacks = [ex._views[r] for r in loop.results[1:]]
    into_stacks = [t for t in ex.targets if any(np.may_share_memory(t, s) for s in stacks)]
    assert bool(into_stacks) == (n > 0 and src == RESIDUAL)


def test_a_stacked_value_also_carried_is_copied():
    """A value yielded both as the carry and stacked stays in the carry's buffers."""
    m = run_pipeline(compile_source(RESIDUAL.replace("h = h + tanh(", "h = tanh("), "<t>"),
                     build_pipeline("reverse", "f", ["w"], None))
    loop = next(op for op in m["f_grad"].body.ops if op.name == "for")
    body = loop.regions[0]
    direct, ahead = stacked_in_place(body, 1, Executor(None, np).in_place_results)
    outs = body.ops[-1].operands
    assert outs[0] in outs[1:] and direct == [] and ahead == []
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((4, 8)), "h0": rng.standard_normal(8),
              "w": 0.3 * rng.standard_normal((8, 8))}
    got, _ = run_checked(m, "f_grad", inputs)
    want, _ = run_function(m, "f_grad", inputs, plan_buffers=False)
    assert all(same(a, b) for a, b in zip(got, want))


def test_an_empty_max_is_the_same_run_error_on_both_backends():
    from test_cuda_runtime import fake_cupy
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime import cuda as backend
    from adc_runtime.executor import RunError
    m = ensure_fused(compile_source("def f(x: f32[N, 3]) -> f32 {\n"
                                    "    return sum(max(x * 2.0, axis=0))\n}\n", "e.tdsl"))
    specs = kernel_specs(m)
    assert any(getattr(s, "kind", "") == "reduction" for s in specs.values())
    cp = fake_cupy({s.name: op for op, s in specs.items()}, [])
    backend._KERNELS.clear()
    x = np.zeros((0, 3), np.float32)
    errors = []
    for run in (lambda: run_function(m, "f", {"x": x}),
                lambda: backend.run_function(m, "f", {"x": x}, specs, cupy=cp)):
        with pytest.raises(RunError) as e:
            run()
        errors.append((str(e.value), (e.value.loc.line, e.value.loc.col)))
    assert errors[0] == errors[1] == (
        "max cannot run on these values: zero-size array to reduction operation maximum which "
        "has no identity", (2, 16))


def test_freshness_is_read_from_the_op_definition():
    from adcompiler.ir.core import Op, Value
    from adcompiler.ir.types import TensorType
    from adcompiler.plugins import register_op, unregister_op
    from adc_runtime.buffers import returns_new
    t = TensorType("f32", (2,))
    x = Value(t, "x")
    assert returns_new(Op("exp", [x], [t])) and not returns_new(Op("reshape", [x], [t]))
    # einsum decides per op: one operand may be a view (`ij->ji`)
    assert not returns_new(Op("einsum", [x], [t])) and returns_new(Op("einsum", [x, x], [t]))
    assert not returns_new(Op("no_such_op", [x], [t]))  # unknown: may alias
    try:
        register_op("plug_new", lambda ts, a: ts[0], kernel=lambda xp, v: v + 0, fresh=True)
        register_op("plug_view", lambda ts, a: ts[0], kernel=lambda xp, v: v[...])
        assert returns_new(Op("plug_new", [x], [t]))
        assert not returns_new(Op("plug_view", [x], [t]))
    finally:
        unregister_op("plug_new")
        unregister_op("plug_view")
