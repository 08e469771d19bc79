"""The library's transforms and training given arguments of the wrong kind, or inputs too
large for the machine: a `TypeError` or `AdcError` that says what was expected, never
Python's own words about the code inside ("'float' object is not iterable", "unhashable
type") or NumPy's MemoryError after the allocator gave up."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.memory.limit import set_limit

P = "def f(x: f32[3], W: f32[3, 3]) -> f32 {\n    return sum(tanh(x @ W))\n}\n"
TRAINED = "def f(x: f32[B, 3], param W: f32[3, 3]) -> f32 {\n    return mean(tanh(x @ W))\n}\n"
W = np.ones((3, 3), np.float32)
X = np.ones((4, 3), np.float32)


@pytest.mark.parametrize("kw, message", [
    (dict(argnums=1.0), "argnums must be an input position (an int) or a list or tuple of "
                        "them, got 1.0"),
    (dict(argnums=True), "argnums must be an input position"),
    (dict(argnums=[1.0]), "argnums: 1.0 is not an input position of 'f'"),
    (dict(wrt=1.0), "wrt must be an input's name or a list or tuple of names, got 1.0"),
    (dict(wrt=[W]), "wrt must be an input's name"),
])
def test_argnums_and_wrt_of_the_wrong_kind(kw, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        adc.grad(P, **kw)


def test_params_that_are_not_a_dict():
    g = adc.grad(P)
    with pytest.raises(TypeError, match="params must be a dict of arrays by input name .*"
                                        "got list"):
        g(np.ones(3, np.float32), params=[W])
    step = adc.train_step(TRAINED, "adam")
    with pytest.raises(TypeError, match="params must be a dict of arrays by name .*got list"):
        step.init([W])
    state = step.init({"W": W})
    with pytest.raises(TypeError, match="params must be a dict .*got list"):
        step([W], state, {"x": X})
    with pytest.raises(TypeError, match="batch must be a dict .*got tuple"):
        step({"W": W}, state, (X,))
    with pytest.raises(adc.AdcError, match="params must be a dict .*got list"):
        adc.train(TRAINED, {"x": X}, "adam", params=[W], steps=1)
    with pytest.raises(adc.AdcError, match="data must be a dict .*got list"):
        adc.train(TRAINED, [X], "adam", steps=1)


def test_huge_inputs_are_refused_with_the_predicted_size():
    q = "def f(x: f32[N, 1], y: f32[1, N]) -> f32 {\n    return sum(x @ y)\n}\n"
    n = 300_000   # x @ y: 335 GiB
    vg = adc.value_and_grad(q)
    set_limit("1GiB")
    try:
        with pytest.raises(adc.AdcError, match=r"running 'f_grad' .*would need 335.28 GiB "
                                               r"\(360,003,600,004 bytes\)"):
            vg(np.ones((n, 1), np.float32), np.ones((1, n), np.float32))
        value, _ = vg(np.ones((3, 1), np.float32), np.ones((1, 3), np.float32))
        assert value == 9
    finally:
        set_limit(None)


def test_a_device_as_a_saved_program_is_refused(tmp_path):
    link = tmp_path / "g.ir"
    link.symlink_to("/dev/zero")
    with pytest.raises(adc.AdcError, match="is a device, not a file"):
        adc.load_compiled(link)
    with pytest.raises(adc.AdcError, match="is a device, not a file"):
        adc.load(link)
