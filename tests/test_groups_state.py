"""The optimizer state as a tree mirroring the params' (as optax keeps it): what
`train_step` and `adc.train` take and return for nested params, checkpoints holding that
tree and resuming from it, and checkpoints written keyed by input name still loading."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.diagnostics import AdcError
from adcompiler.training import loop

from test_groups_training import STACK  # a stack of 3 layernorm layers


def _params(seed=3):
    rng = np.random.default_rng(seed)
    return {"layers": [{"W": (rng.normal(size=(4, 4)) / 2).astype("f4"),
                        "c": np.zeros(4, "f4"), "g": np.ones(4, "f4"),
                        "b": np.zeros(4, "f4")} for _ in range(3)]}


def _data(rows=16):
    rng = np.random.default_rng(0)
    return {"x": rng.normal(size=(rows, 4)).astype("f4"),
            "y": rng.normal(size=(rows, 4)).astype("f4")}


def test_adam_state_mirrors_the_params_tree():
    params, batch = _params(), _data(5)
    step = adc.train_step(STACK, "adam:lr=0.1")
    state = step.init(params)
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"} and state["step"] == 0
    assert [sorted(p) for p in state["exp_avg"]["layers"]] == [["W", "b", "c", "g"]] * 3
    new, state, _ = step(params, state, batch)
    # the same step on the flat state keyed by input name
    flat_step = adc.train_step(STACK, "adam:lr=0.1")
    flat = {f"layers.{k}": np.stack([p[k] for p in params["layers"]]) for k in "Wcgb"}
    fnew, fstate, _ = flat_step(flat, flat_step.init(flat), batch)
    assert int(state["step"]) == int(fstate["step"]) == 1
    for i in range(3):
        np.testing.assert_array_equal(state["exp_avg_sq"]["layers"][i]["W"],
                                      fstate["exp_avg_sq_layers.W"][i])
        np.testing.assert_array_equal(new["layers"][i]["g"], fnew["layers.g"][i])
    again, state2, _ = step(new, state, batch)   # the tree goes back in
    assert int(state2["step"]) == 2 and not np.array_equal(again["layers"][0]["W"],
                                                          new["layers"][0]["W"])
    assert set(step.state_flat(state2)) == set(fstate)


def test_a_state_tree_that_does_not_fit_is_a_named_error():
    params, batch = _params(), _data(5)
    step = adc.train_step(STACK, "sgd:lr=0.1,momentum=0.9")
    state = step.init(params)
    assert set(state) == {"step", "momentum_buffer"}
    bad = {**state, "momentum_buffer": {"layers": state["momentum_buffer"]["layers"][:2]}}
    with pytest.raises(AdcError, match=r"momentum_buffer'.*missing 'layers\.2\.[Wcgb]': "
                       "stacked group 'layers' has 3"):
        step(params, bad, batch)
    with pytest.raises(AdcError, match="must be a tree of dicts"):
        step(params, {**state, "momentum_buffer": 1.0}, batch)


def test_train_returns_the_tree_and_checkpoints_round_trip(tmp_path):
    data, ck = _data(), tmp_path / "c.npz"
    whole = adc.train(STACK, data, adc.optim.adam(1e-2), params=_params(), steps=4, batch=4)
    assert set(whole.state) == {"step", "exp_avg", "exp_avg_sq"}
    adc.train(STACK, data, adc.optim.adam(1e-2), params=_params(), steps=2, batch=4,
              checkpoint=str(ck))
    with np.load(ck) as z:
        assert "state/exp_avg/layers/2/W" in z.files and "state/step" in z.files
    resumed = adc.train(STACK, data, adc.optim.adam(1e-2), steps=4, batch=4,
                        resume=str(ck))   # params from the checkpoint: returned by name
    for i in range(3):
        np.testing.assert_array_equal(resumed.params["layers.W"][i],
                                      whole.params["layers"][i]["W"])
        np.testing.assert_array_equal(resumed.state["exp_avg_layers.W"][i],
                                      whole.state["exp_avg"]["layers"][i]["W"])


def test_checkpoints_keyed_by_input_name_still_load(tmp_path, monkeypatch):
    data, ck = _data(), tmp_path / "old.npz"
    whole = adc.train(STACK, data, adc.optim.adam(1e-2), params=_params(), steps=4, batch=4)
    with monkeypatch.context() as m:   # written as checkpoints were: state by input name
        m.setattr(loop, "state_as_tree", lambda step, state, fn: dict(state))
        adc.train(STACK, data, adc.optim.adam(1e-2), params=_params(), steps=2, batch=4,
                  checkpoint=str(ck))
    with np.load(ck) as z:
        assert "state/exp_avg_layers.W" in z.files
    resumed = adc.train(STACK, data, adc.optim.adam(1e-2), steps=4, batch=4, resume=str(ck))
    np.testing.assert_array_equal(resumed.params["layers.W"][1],
                                  whole.params["layers"][1]["W"])
    # a tree saved by another optimizer is refused, naming the entry
    other = tmp_path / "sgd.npz"
    adc.train(STACK, data, adc.optim.sgd(1e-2, momentum=0.9), params=_params(), steps=1,
              batch=4, checkpoint=str(other))
    with pytest.raises(AdcError, match="optimizer"):
        adc.train(STACK, data, adc.optim.adam(1e-2), steps=4, batch=4, resume=str(other))


def _py_loss(params, x, y):
    h = np.tanh(x @ params["layers"][0]["W"]) @ params["layers"][1]["W"] + params["b"]
    return np.mean((h - y) ** 2) + 0.0 * np.sum(params["ids"])


def test_a_python_loss_state_mirrors_its_params():
    rng = np.random.default_rng(0)
    params = {"layers": [{"W": rng.normal(size=(3, 3))} for _ in range(2)],
              "b": rng.normal(size=3), "ids": np.arange(3)}       # an integer leaf: not trained
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    step = adc.train_step(_py_loss, adc.optim.adam(1e-2))
    state = step.init(params, x, y)
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
    assert state["exp_avg"]["layers"][1]["W"].shape == (3, 3) and state["exp_avg"]["ids"] is None
    p1, s1, _ = step(params, None, x, y)
    b1, m1 = p1["b"].copy(), s1["exp_avg"]["b"].copy()   # (a step writes over what it gave)
    p2, s2, _ = step(p1, s1, x, y)
    p1b, s1b, _ = step(params, state, x, y)
    np.testing.assert_array_equal(p1b["b"], b1)
    assert int(s2["step"]) == 2 and not np.array_equal(s2["exp_avg"]["b"], m1)
    with pytest.raises(AdcError, match="'exp_avg' has 2 arrays where the params have 3"):
        step(p2, {**s2, "exp_avg": {"b": s2["exp_avg"]["b"], "c": s2["exp_avg"]["b"]}}, x, y)
