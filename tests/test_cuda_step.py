"""Generated step code on the GPU (``adc_runtime.cuda_step``) under the host stand-in
(tests/cuda_host.py, tests/cuda_raw_host.py: the exact kernel sources run by g++): the
samples' forward and adjoint programs and a training step give the bits of the CUDA
interpreter (the same kernels on the same operands) and NumPy's results within rounding;
the optimizer update is one multi-tensor launch whose bits are those of one kernel per
parameter; the launches it counts are those the stand-in ran; captured segments replay
the same results, and run eagerly when their inputs moved. Skipped without g++."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cuda_host import GXX, HostKernels, host_cupy

if GXX is None:
    pytest.skip("g++ is not installed: the kernels cannot be built for the host",
                allow_module_level=True)

import adcompiler as adc  # noqa: E402
from adcompiler.cli.compile import compile_program  # noqa: E402
from adcompiler.emit.cuda import ensure_fused, kernel_specs  # noqa: E402
from adc_runtime import cuda as backend, cuda_multi, cuda_step  # noqa: E402
from adc_runtime.executor import Runner, run_function  # noqa: E402
from cuda_raw_host import with_graphs, with_raw_modules  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
NAMES = ["mlp", "attention", "transformer_stack", "rnn", "digits_mlp"]


@pytest.fixture(scope="module")
def cache(request, tmp_path_factory):
    c = getattr(request.config, "cache", None)
    return c.mkdir("cuda-host") if c is not None else tmp_path_factory.mktemp("h")


def stand_in(cache, graphs=False):
    launches: list = []
    cp = with_raw_modules(host_cupy(HostKernels(cache), launches), cache, launches)
    cp.launches = launches
    backend._KERNELS.clear()  # kernels of another stand-in are cached by source
    return with_graphs(cp) if graphs else cp


def interpreted(module, name, inputs, specs, cp):
    return backend.run_function(module, name, dict(inputs), specs, cupy=cp)[0]


@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("name", NAMES)
def test_step_code_matches_the_interpreter_and_numpy(cache, name, mode):
    comp = compile_program(str(SAMPLES / f"{name}.tdsl"), mode)
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    fused = ensure_fused(comp.module)
    specs = kernel_specs(fused)
    with np.errstate(all="ignore"):
        want = run_function(comp.module, comp.run_name, dict(data))[0]
        cp = stand_in(cache)
        same = interpreted(fused, comp.run_name, data, specs, cp)
        before = len(cp.launches)
        run = cuda_step.runner(fused, comp.run_name, specs, cupy=cp)
        got, _ = run(dict(data))
    ex = next(iter(run._executors.values()))
    assert ex.launches["adc"] == len(cp.launches) - before > 0
    for g, s, w in zip(got, same, want):
        np.testing.assert_array_equal(g, s)
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-4, atol=1e-6)
    source = ex._programs[(id(fused.functions[comp.run_name]), frozenset())].source
    assert source.startswith("def program(") and "return [" in source


def train_inputs(fn, batch=6, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for a in fn.args:
        shape = tuple(batch if isinstance(d, str) else d for d in a.type.shape)
        if a.type.dtype.startswith("i"):
            out[a.name] = rng.integers(0, 3, shape).astype(np.int64)
        else:
            out[a.name] = np.abs(rng.standard_normal(shape)).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def adam_step():
    step = adc.train_step(str(SAMPLES / "mlp.tdsl"), adc.optim.adam(1e-3), clip=1.0)
    name = next(f for f in step.module.functions if f.endswith("_step"))
    fused = ensure_fused(step.module)
    return step.module, fused, kernel_specs(fused), name


def test_update_is_one_multi_tensor_launch_with_the_bits_of_one_kernel_each(cache, adam_step):
    module, fused, specs, name = adam_step
    runs = cuda_multi.batches(list(fused.functions[name].body.ops), specs)
    assert [len(r) for r in runs] == [4]  # Adam's update of the 4 parameters
    inputs = train_inputs(module.functions[name])
    cp = stand_in(cache)
    each = interpreted(fused, name, inputs, specs, cp)
    before = len(cp.launches)
    got, stats = cuda_step.run_function(fused, name, dict(inputs), specs, cupy=cp)
    multi = [n for n, kind in cp.launches[before:] if n.endswith("_multi")]
    assert len(multi) == 1 and stats["launches"]["adc"] == len(cp.launches) - before
    for g, e in zip(got, each):
        np.testing.assert_array_equal(g, e)
    want = run_function(module, name, dict(inputs))[0]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-5, atol=1e-7)


def test_dependent_groups_of_one_text_are_not_batched():
    """Groups of one kernel text run as one launch only where none reads another's result
    (a launch runs its tensors in no order)."""
    from adcompiler.emit.cuda import KernelSpec

    class NS:  # an IR object by duck typing, hashed by identity
        def __init__(self, **kw):
            self.__dict__.update(kw)
    t = NS(shape=(4,), dtype="f32")
    v = lambda: NS(type=t)  # noqa: E731
    spec = KernelSpec("k", "float32 x0", "float32 y0", "y0 = x0 * 2;")
    x, y = v(), v()
    a = NS(name="fused", operands=[x], results=[v()])
    b = NS(name="fused", operands=[y], results=[v()])
    c = NS(name="fused", operands=[a.results[0]], results=[v()])   # reads a's result
    specs = {a: spec, b: spec, c: spec}
    assert cuda_multi.batches([a, b], specs) == [[a, b]]
    assert cuda_multi.batches([a, c], specs) == []
    assert cuda_multi.batches([a, b, c], specs) == [[a, b]]


def test_captured_segments_replay_and_fall_back_when_inputs_move(cache):
    comp = compile_program(str(SAMPLES / "attention.tdsl"), "reverse")
    data = json.loads((SAMPLES / "attention.json").read_text())
    fused = ensure_fused(comp.module)
    specs = kernel_specs(fused)
    cp = stand_in(cache, graphs=True)
    fn = fused.functions[comp.run_name]
    run = Runner(fused, comp.run_name, cp, lambda dims: cuda_step.CudaStepExecutor(
        fused, cp, dims, specs, graphs=True))
    arrays = [np.asarray(data[a.name], dtype={"f32": np.float32, "f64": np.float64,
                                               "i64": np.int64, "i32": np.int32}[a.type.dtype])
              for a in fn.args]
    eager = [np.array(o) for o in run.run(list(arrays))[0]]
    ex = next(iter(run._executors.values()))
    eager_launches = ex.launches["adc"]
    segments = [g for p in ex._programs.values() for g in p.__globals__.values()
                if isinstance(g, cuda_step.Segment)]
    assert segments, "the adjoint has runs of generated kernels"
    counts = []
    for _ in range(3):
        ex.launches.update(adc=0, library=0)
        outs = run.run(list(arrays))[0]
        counts.append(ex.launches["adc"])
        for o, e in zip(outs, eager):
            np.testing.assert_array_equal(o, e)
    assert all(s.graph is not None for s in segments)
    assert counts[1] == counts[2] < eager_launches  # one launch per replayed run
    moved = [a.copy() for a in arrays]
    outs = run.run(moved)[0]
    for o, e in zip(outs, eager):
        np.testing.assert_array_equal(o, e)
    assert any(s.fallbacks for s in segments)


@pytest.mark.cuda
@pytest.mark.parametrize("graphs", [False, True])
def test_step_code_on_the_gpu(adam_step, graphs):
    """The training step by generated code on a CUDA device, three calls on the same arrays
    (captured from the second with `graphs`), against the NumPy executor."""
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA GPU")
    except Exception as e:
        pytest.skip(f"no usable CUDA GPU ({e})")
    module, fused, specs, name = adam_step
    inputs = train_inputs(module.functions[name])
    want = run_function(module, name, dict(inputs))[0]
    backend._KERNELS.clear()
    run = Runner(fused, name, cupy, lambda dims: cuda_step.CudaStepExecutor(
        fused, cupy, dims, specs, graphs=graphs))
    arrays = [cupy.asarray(inputs[a.name]) for a in fused.functions[name].args]
    for _ in range(3):
        got = run.run(list(arrays))[0]
        for g, w in zip(got, want):
            np.testing.assert_allclose(cupy.asnumpy(g).astype(np.float64), w, rtol=1e-5,
                                       atol=1e-6)


def test_benchmark_prints_the_stand_in_launches(capsys):
    import importlib.util
    import sys
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"
    spec = importlib.util.spec_from_file_location("bench_gpu", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu"] = bench
    try:
        spec.loader.exec_module(bench)
        assert bench.main(["--launches", "--models", "mlp"]) == 0
    finally:
        del sys.modules["bench_gpu"]
    out = capsys.readouterr().out
    assert out.startswith("mlp: adc launches per gradient step on the host stand-in: {'adc': ")


def test_donated_arrays_that_move_remake_the_step_code(cache, adam_step):
    """A training step donates its parameters and state: the step code writes the updates
    into the arrays it was given. Called again with other arrays, it writes into those, not
    into the first call's (the code, which binds the buffers when made, is made again)."""
    module, fused, specs, name = adam_step
    inputs = train_inputs(module.functions[name])
    want = run_function(module, name, dict(inputs))[0]
    cp = stand_in(cache)
    run = cuda_step.runner(fused, name, specs, cupy=cp)
    run.donate = True
    first = {k: v.copy() for k, v in inputs.items()}
    got1, _ = run(dict(first))
    kept = [np.array(g) for g in got1]
    second = {k: v.copy() for k, v in inputs.items()}
    got2, _ = run(dict(second))
    def into(got, given):
        return [j for j, g in enumerate(got) if any(g is a for a in given.values())]
    # the updates went into each call's own arrays, none into the other call's
    assert len(into(got1, first)) >= 4 and into(got2, second) == into(got1, first)
    assert not into(got2, first)
    for g1, g2, k, w in zip(got1, got2, kept, want):
        np.testing.assert_array_equal(g1, k)     # the first call's results stay as they were
        np.testing.assert_array_equal(g2, k)
        np.testing.assert_allclose(np.asarray(g2, np.float64), w, rtol=1e-5, atol=1e-7)
