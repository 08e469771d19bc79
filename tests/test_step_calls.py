"""Repeated calls of `adc.train_step`: a call on the arrays the last one returned skips
work (the donated buffers are set once), yet every check of a first call still refuses bad
input, and arrays that alternate between calls get the results of separate steps."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.training.setup import anomaly_runner
from adc_runtime.errors import RunError

MLP = "samples/mlp.tdsl"


def mlp_data(rows=16, seed=0):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.normal(size=(4, 8)).astype("f4"),
              "b1": (rng.normal(size=8) * 0.1).astype("f4"),
              "W2": rng.normal(size=(8, 3)).astype("f4"), "b2": np.zeros(3, "f4")}
    batch = {"x": rng.normal(size=(rows, 4)).astype("f4"), "labels": rng.integers(0, 3, rows)}
    return params, batch


def warm(step, params, batch, n=3):
    """`n` calls, each on the arrays the one before returned."""
    p, s = params, step.init(params)
    for _ in range(n):
        p, s, _ = step(p, s, batch)
    return p, s


def test_bad_input_after_repeated_calls_is_still_refused():
    params, batch = mlp_data()
    step = adc.train_step(MLP, adc.optim.adam(1e-2))
    p, s = warm(step, params, batch)
    with pytest.raises(RunError, match="'W1'"):      # a new array of the wrong shape
        step({**p, "W1": np.zeros((5, 8), "f4")}, s, batch)
    with pytest.raises(RunError, match="'exp_avg_b2'"):
        step(p, {**s, "exp_avg_b2": np.zeros(4, "f4")}, batch)
    with pytest.raises(RunError, match="'x'"):
        step(p, s, {**batch, "x": np.zeros((16, 5), "f4")})
    with pytest.raises(RunError, match="'labels'"):  # rows that disagree with x's
        step(p, s, {**batch, "labels": batch["labels"][:8]})
    p["W1"].shape = (8, 4)  # the array the last call returned, reshaped in place
    with pytest.raises(RunError, match="'W1'"):
        step(p, s, batch)
    p["W1"].shape = (4, 8)
    with pytest.raises(TypeError, match="unknown 'y'"):
        step(p, s, {**batch, "y": batch["x"]})
    p, s = warm(step, params, batch)
    with pytest.raises(RunError, match=r"class labels outside \[0, 3\) \(found 0 to 3\)"):
        step(p, s, {**batch, "labels": np.where(batch["labels"] == 1, 3, batch["labels"])})
    batch["labels"][5] = -1  # the batch array of the earlier calls, written over
    with pytest.raises(RunError, match=r"class labels outside \[0, 3\) \(found -1 to 2\)"):
        step(p, s, batch)


def test_refused_calls_leave_the_step_as_it_was():
    params, batch = mlp_data()
    a, b = adc.train_step(MLP, adc.optim.adam(1e-2)), adc.train_step(MLP, adc.optim.adam(1e-2))
    pa, sa = warm(a, params, batch)
    pb, sb = warm(b, params, batch)
    bad = {**batch, "labels": np.full(16, 7)}
    with pytest.raises(RunError, match="class labels"):
        a(pa, sa, bad)
    pa, sa, ma = a(pa, sa, batch)
    pb, sb, mb = b(pb, sb, batch)
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k])
    np.testing.assert_array_equal(ma["loss"], mb["loss"])


def test_read_only_arrays_are_copied_not_written():
    params, batch = mlp_data()
    step = adc.train_step(MLP, adc.optim.adam(1e-2))
    p, s = warm(step, params, batch)
    p["W1"].flags.writeable = False
    before = p["W1"].copy()
    p2, _, _ = step(p, s, batch)
    np.testing.assert_array_equal(p["W1"], before)
    assert p2["W1"] is not p["W1"] and not np.array_equal(p2["W1"], before)


@pytest.mark.parametrize("interpreter", [False, True])
def test_alternating_arrays_give_the_results_of_separate_steps(interpreter):
    """Two runs taking turns through one step: each call donates other arrays than the last,
    so the buffers written in place are set again (the interpreter reads them from its
    planned views; the compiled code from its arguments)."""
    params, batch = mlp_data()
    other = {k: v + np.float32(0.5) for k, v in params.items()}

    def make():
        step = adc.train_step(MLP, adc.optim.adam(1e-2))
        if interpreter:
            step._runner = anomaly_runner(step.module, step.fn_name, "cpu", donate=True)
        return step

    shared, one, two = make(), make(), make()
    runs = {"a": (params, shared.init(params)), "b": (other, shared.init(other))}
    alone = {"a": (params, one.init(params), one), "b": (other, two.init(other), two)}
    for _ in range(3):
        for key in ("a", "b"):
            p, s = runs[key]
            p, s, m = shared(p, s, batch)
            runs[key] = (p, s)
            q, t, step = alone[key]
            q, t, n = step(q, t, batch)
            alone[key] = (q, t, step)
            for k in p:
                np.testing.assert_array_equal(p[k], q[k])
            for k in s:
                np.testing.assert_array_equal(s[k], t[k])
            np.testing.assert_array_equal(m["loss"], n["loss"])
    assert not np.array_equal(runs["a"][0]["W1"], runs["b"][0]["W1"])
