"""A training step's gradient norms as one call and its parameters' updates as one call
(`adc_runtime.step_fusion`): the bits of the ops run one by one (``ADC_FUSE=0``), for
gradients of every size, clipping included; and the calls are made."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import row_passes

pytest.importorskip("numba")

SRC = """
def f(x: f32[B, 3], param W: f32[3, 40], param c: f32[40], param V: f32[40, 300],
      param e: f32[0, 2]) -> f32 {
    y = (x @ W + c) @ V
    return mean(y * y) + sum(e * e)
}
"""


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
def test_grad_norms_kernel(dtype):
    rng = np.random.default_rng(0)
    # three gradients each time (numba compiles the loop once per count of them)
    for sizes in [(5, 0, 3), (1, 1, 1), (12000, 7, 129), (0, 0, 0)]:
        grads = [(rng.standard_normal(n) * 10.0 ** rng.uniform(-20, 20)).astype(dtype)
                 for n in sizes]
        out = np.empty(len(grads) + 1, dtype)
        row_passes.get("grad_norms")(tuple(grads), out, dtype(0))
        norms = [np.sqrt(np.add.reduce(g * g, axis=None)) for g in grads]
        stacked = np.stack(norms)
        want = norms + [np.sqrt(np.add.reduce(stacked * stacked, axis=None))]
        assert out.tobytes() == np.asarray(want, dtype).tobytes(), sizes


def steps(monkeypatch, fuse, clip, dtype="f32"):
    monkeypatch.setenv("ADC_FUSE", "1" if fuse else "0")
    step = adc.train_step(SRC, adc.optim.adam(1e-2, weight_decay=0.01), clip=clip, fuse=True,
                          dtype=None if dtype == "f32" else dtype)
    rng = np.random.default_rng(1)
    npd = "float32" if dtype == "f32" else "float64"
    p = {"W": rng.normal(size=(3, 40)), "c": rng.normal(size=40),
         "V": rng.normal(size=(40, 300)) / 10, "e": np.zeros((0, 2))}
    p = {k: v.astype(npd) for k, v in p.items()}
    s = step.init(p)
    seen = []
    for j in range(3):
        p, s, m = step(p, s, {"x": rng.normal(size=(4, 3)).astype(npd)})
        seen.append({**{k: v.copy() for k, v in p.items()}, **{k: np.asarray(v).copy()
                     for k, v in s.items()}, **{k: np.asarray(v) for k, v in m.items()}})
    return step, seen


@pytest.mark.parametrize("clip,dtype", [(None, "f32"), (0.1, "f32"),
                                        pytest.param(1e9, "f64", marks=pytest.mark.slow)])
def test_same_bits_and_one_call_each(monkeypatch, clip, dtype):
    step, fused = steps(monkeypatch, True, clip, dtype)
    _, plain = steps(monkeypatch, False, clip, dtype)
    for a, b in zip(fused, plain):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k
    (ex,) = step._runner._executors.values()
    (prog,) = ex._programs.values()
    calls = [line for line in prog.source.splitlines() if line.lstrip().startswith("if k")]
    assert len(calls) == 1   # every parameter's update: one call
    name = calls[0].split("if ", 1)[1].split("(", 1)[0]
    assert prog.__globals__[name].runs == 4
    assert prog.source.count(" is not None:") == 1   # the norms
