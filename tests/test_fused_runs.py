"""Runs of elementwise ops compiled into one numba loop (`adc_runtime.fused_runs`): a
training step with them gives the bits of the same step run one NumPy call per op
(``ADC_FUSE=0``), for every optimizer and option, f32 and f64, 0-d, empty and size-1
parameters; and the loop is only used where it is safe."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import fused_runs

pytest.importorskip("numba")

# a 0-d, an empty, a size-1 and an ordinary parameter
SRC = """
def f(x: f32[B, 3], param W: f32[3, 4], param s: f32, param e: f32[0, 2], param u: f32[1, 1],
      param c: f32[4]) -> f32 {
    y = (x @ W + c) * s
    return mean(y * y) + sum(e * e) + sum(u * u)
}
"""

OPTIMIZERS = [
    adc.optim.adam(1e-2), adc.optim.adam(1e-2, weight_decay=0.1, eps=1e-6),
    adc.optim.adamw(1e-2), adc.optim.adamw(adc.optim.cosine(1e-2, steps=5, warmup=2),
                                           weight_decay=0.0),
    adc.optim.sgd(0.1), adc.optim.sgd(0.1, momentum=0.9),
    adc.optim.sgd(0.1, momentum=0.9, dampening=0.3, weight_decay=0.01),
    adc.optim.sgd(0.1, momentum=0.9, nesterov=True),
]


def data(dtype, seed=0, rows=6):
    rng = np.random.default_rng(seed)
    params = {"W": rng.normal(size=(3, 4)), "s": np.array(1.5), "e": np.zeros((0, 2)),
              "u": np.array([[0.7]]), "c": rng.normal(size=4)}
    batches = [{"x": rng.normal(size=(rows, 3)).astype(dtype)} for _ in range(4)]
    return {k: v.astype(dtype) for k, v in params.items()}, batches


def train(monkeypatch, fuse: bool, opt, dtype, clip=None, accumulate=1, extra=None):
    monkeypatch.setenv("ADC_FUSE", "1" if fuse else "0")
    step = adc.train_step(SRC, opt, clip=clip, accumulate=accumulate,
                          dtype=None if dtype == "float32" else "f64", fuse=True)
    params, batches = data(dtype)
    if extra is not None:
        params = extra(params)
    p, state = params, step.init(params)
    history = []
    for b in batches:
        p, state, m = step(p, state, b)
        history.append({**{k: v.copy() for k, v in p.items()},
                        **{k: v.copy() for k, v in state.items()}, **m})
    return step, history


def fused_calls(step) -> int:
    """The fused loops in the step's generated code that update parameters (guarded by
    the contiguity of the arrays they write over; one call may run several,
    `adc_runtime.step_fusion`)."""
    count = 0
    for ex in step._runner._executors.values():
        for prog in ex._programs.values():
            for line in prog.source.splitlines():
                if line.lstrip().startswith("if k"):
                    name = line.split("if ", 1)[1].split("(", 1)[0]
                    count += getattr(prog.__globals__[name], "runs", 1)
    return count


def assert_same_bits(a, b):
    """The same bits, but a NaN's sign and payload (LLVM may swap the operands of a
    commutative operation, and x86 hands on the first NaN operand)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
            nan = np.isnan(x[k]) if x[k].dtype.kind == "f" else np.zeros(x[k].shape, bool)
            assert np.array_equal(nan, np.isnan(y[k]) if nan.any() else nan), k
            assert x[k][~nan].tobytes() == y[k][~nan].tobytes(), k


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{o.kind}-{o.momentum}-"
                         f"{o.dampening}-{o.nesterov}-{o.weight_decay}-{o.lr.kind}")
def test_fused_step_has_the_bits_of_numpy(monkeypatch, opt, dtype):
    step, fused = train(monkeypatch, True, opt, dtype)
    _, plain = train(monkeypatch, False, opt, dtype)
    assert_same_bits(fused, plain)
    # plain SGD is two ops a parameter (below MIN_OPS); every other update is fused, but
    # the 0-d parameter's (its values may be NumPy scalars)
    assert fused_calls(step) == (0 if opt.kind == "sgd" and not opt.momentum else 4)


@pytest.mark.parametrize("clip,accumulate", [(0.05, 1), (None, 2), (0.5, 3)])
def test_clipping_and_accumulation(monkeypatch, clip, accumulate):
    opt = adc.optim.adamw(1e-2)
    step, fused = train(monkeypatch, True, opt, "float32", clip=clip, accumulate=accumulate)
    _, plain = train(monkeypatch, False, opt, "float32", clip=clip, accumulate=accumulate)
    assert_same_bits(fused, plain)
    assert fused_calls(step) == 4


def test_infinities_and_nans_match(monkeypatch):
    def bad(params):
        params["c"][0] = np.inf
        params["W"][1, 2] = np.nan
        return params
    opt = adc.optim.adam(1e-2, weight_decay=0.1)
    with np.errstate(all="ignore"):
        _, fused = train(monkeypatch, True, opt, "float32", extra=bad)
        _, plain = train(monkeypatch, False, opt, "float32", extra=bad)
    assert_same_bits(fused, plain)
    assert np.isnan(fused[-1]["W"]).any()


def test_fused_step_matches_many_elements(monkeypatch):
    """Long loops (vectorized by LLVM, with a remainder) keep the bits."""
    src = ("def f(x: f32[B, 300], param W: f32[300, 37]) -> f32 {\n"
           "    y = x @ W\n    return mean(y * y)\n}\n")
    rng = np.random.default_rng(3)
    params = {"W": rng.normal(size=(300, 37)).astype("float32")}
    batch = {"x": rng.normal(size=(8, 300)).astype("float32")}
    out = {}
    for fuse in (True, False):
        monkeypatch.setenv("ADC_FUSE", "1" if fuse else "0")
        step = adc.train_step(src, adc.optim.adam(1e-3, weight_decay=1e-4), clip=1.0,
                              fuse=True)
        p, state = params, step.init(params)
        for _ in range(3):
            p, state, _ = step(p, state, batch)
        out[fuse] = [p["W"].copy(), state["exp_avg_W"].copy(), state["exp_avg_sq_W"].copy()]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(out[True], out[False]))


def test_arrays_not_contiguous_run_one_op_at_a_time(monkeypatch):
    """A donated array that is not C-contiguous takes the ops' own path, with their bits."""
    from adcompiler.api.program import runner
    monkeypatch.setenv("ADC_FUSE", "1")
    step = adc.train_step(SRC, adc.optim.adam(1e-2), dtype="f64")
    params, batches = data("float64")
    state = step.init(params)
    named = {**params, **state, **batches[0]}
    results = []
    for fortran in (False, True):
        arrays = {k: (np.asfortranarray(v) if fortran and v.ndim > 1 else v.copy())
                  for k, v in named.items()}
        r = runner(step.module, step.fn_name, donate=True, fuse=True)
        outs, _ = r(arrays)
        results.append([np.ascontiguousarray(o) for o in outs])
        assert arrays["W"].flags.f_contiguous == fortran
        # the parameter's own array holds the update, in both paths
        assert arrays["W"].tobytes(order="C") == results[-1][1].tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(*results))


@pytest.mark.parametrize("fuse,after,fused", [(None, 0.0, True), (None, 1e9, False),
                                              (False, 0.0, False), (True, 1e9, True)])
def test_a_step_fuses_once_its_calls_took_long_enough(monkeypatch, fuse, after, fused):
    """By default the first calls run the ops one by one and the calls after
    `FUSE_AFTER_S` seconds the fused loops, with the same bits throughout."""
    from adcompiler.training import step as compiled_step
    monkeypatch.setenv("ADC_FUSE", "1")
    monkeypatch.setattr(compiled_step, "FUSE_AFTER_S", after)
    opt = adc.optim.adam(1e-2)
    step = adc.train_step(SRC, opt, fuse=fuse)
    params, batches = data("float32")
    p, state = params, step.init(params)
    history = []
    for b in batches:
        p, state, m = step(p, state, b)
        history.append({**{k: v.copy() for k, v in p.items()},
                        **{k: v.copy() for k, v in state.items()}, **m})
    assert (fused_calls(step) == 4) == fused
    _, plain = train(monkeypatch, False, opt, "float32")
    assert_same_bits(history, plain)


def test_a_runner_set_from_outside_is_kept(monkeypatch):
    """``--detect-anomaly`` swaps in a runner that stops at non-finite values: the switch
    to fused loops leaves it in place."""
    from adcompiler.training import step as compiled_step
    from adcompiler.training.setup import anomaly_runner
    monkeypatch.setenv("ADC_FUSE", "1")
    monkeypatch.setattr(compiled_step, "FUSE_AFTER_S", 0.0)
    step = adc.train_step(SRC, adc.optim.adam(1e-2))
    step._runner = kept = anomaly_runner(step.module, step.fn_name, "cpu", donate=True)
    params, batches = data("float32")
    p, state = params, step.init(params)
    for b in batches[:2]:
        p, state, _ = step(p, state, b)
    assert step._runner is kept


def test_disabled_without_numba_or_by_the_environment(monkeypatch):
    monkeypatch.setenv("ADC_FUSE", "0")
    assert not fused_runs.enabled()
    monkeypatch.setenv("ADC_FUSE", "1")
    assert fused_runs.enabled()
    monkeypatch.setattr(fused_runs, "_numba", False)
    assert not fused_runs.enabled()


def test_kernel_source_holds_generated_names_only():
    """The loop's text is made of our identifiers and the formulas' operators, whatever the
    program names its values; an output that replaces an operand is written into it."""
    step = adc.train_step(SRC, adc.optim.adam(1e-2))
    fn = step.module[step.fn_name]
    ex_runs = fused_runs.plan(fn.body, lambda s: tuple(d if isinstance(d, int) else 6
                                                       for d in s),
                              skip=lambda op: op.name == "const",
                              exclude=lambda op: False,
                              memory=lambda v: ("fresh", None))
    runs = {id(r): r for r in ex_runs.values()}.values()
    run = next(r for r in runs if fn.arg("W") in r.full)
    assert sum(any(a in r.full for a in fn.args[:5]) for r in runs) == 4
    src = fused_runs.kernel_source(run.ops, run.full, run.scalars, run.outputs, {0: 1}, {0})
    import re
    words = set(re.findall(r"[A-Za-z_]\w*", src))
    assert words <= {"def", "kernel", "for", "in", "range", "n", "i", "np", "sqrt", "if",
                     "else", "not", "flags", "c_contiguous", "return", "True", "False",
                     "ravel"} | {w for w in words if re.fullmatch(r"([xo]\d+f?)|([sat]\d+)", w)}
    assert "x1f[i] = " in src and "o0" not in src and "x1.flags.c_contiguous" in src


def test_overlapping_buffers_are_not_fused():
    """An output whose planned buffer overlaps an operand's other than exactly stays a
    sequence of ops; the very same buffer is fine (read before written, element by
    element)."""
    step = adc.train_step(SRC, adc.optim.adam(1e-2))
    fn = step.module[step.fn_name]
    resolve = lambda s: tuple(d if isinstance(d, int) else 6 for d in s)  # noqa: E731
    arena = np.zeros(64, dtype=np.float32)

    def plan(place):
        return fused_runs.plan(fn.body, resolve, skip=lambda op: op.name == "const",
                               exclude=lambda op: False, memory=place)
    W = fn.arg("W")
    by_w = [r for r in {id(r): r for r in plan(lambda v: ("fresh", None)).values()}.values()
            if W in r.full]
    assert len(by_w) == 1
    run = by_w[0]
    out = run.outputs[0]

    def place(shift):
        def memory(v):
            if v is out:
                return "arena", arena[:12].reshape(3, 4)
            if v in run.full and v is not W:
                return "arena", arena[shift:shift + 12].reshape(3, 4)
            return "caller", None
        return memory
    assert any(r is not None and W in r.full for r in plan(place(0)).values())
    assert not any(W in r.full for r in plan(place(4)).values())
    assert not any(W in r.full for r in plan(lambda v: ("unknown", None)).values())
