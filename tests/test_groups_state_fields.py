"""State fields of groups (``state mean: f32[C]`` in a group): they are state inputs, not
params; a body assigns them by path (``p.mean = ...``) and a call passing a group by its
path rebinds them; the results equal the program written with state inputs; training
threads, saves and returns them by path; misuse is a located error."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_source
from adcompiler.frontend.tdsl import descent
from adcompiler.frontend.tdsl.parse import parse_lark

from test_frontend_descent import same

GROUPED = """
group BatchNorm(C) {
    g: f64[C] @gain, b: f64[C] @bias
    state mean: f64[C], state var: f64[C] = 1
}
group Net { W: f64[4, 3], bn: BatchNorm(3), v: f64[3] }

def batchnorm(h: f64[B, C], p: BatchNorm(C)) -> f64[B, C] {
    h, p.mean, p.var = batchnorm_running(h, p.g, p.b, p.mean, p.var)
    return h
}

def loss(x: f64[B, 4], y: f64[B], param m: Net) -> f64 {
    h = relu(batchnorm(x @ m.W, m.bn))
    return mean((h @ m.v - y) ** 2) + 0.0 * sum(m.bn.mean)   # reads the new mean
}
"""

FLAT = """
def loss(x: f64[B, 4], y: f64[B], param W: f64[4, 3], param g: f64[3], param b: f64[3],
         param v: f64[3], state mean: f64[3], state var: f64[3] = 1) -> f64 {
    h, mean, var = batchnorm_running(x @ W, g, b, mean, var)
    return mean((relu(h) @ v - y) ** 2) + 0.0 * sum(mean)
}
"""
RNG = np.random.default_rng(0)


def _inputs():
    return {"W": RNG.normal(size=(4, 3)), "g": RNG.uniform(0.5, 1.5, 3),
            "b": RNG.normal(size=3), "v": RNG.normal(size=3), "mean": 0.1 * RNG.normal(size=3),
            "var": RNG.uniform(0.5, 1.5, 3)}


PATH = {"W": "m.W", "g": "m.bn.g", "b": "m.bn.b", "v": "m.v", "mean": "m.bn.mean",
        "var": "m.bn.var"}


def test_state_fields_are_state_inputs_and_match_the_flat_program():
    same(descent.parse(GROUPED), parse_lark(GROUPED))
    fn = compile_source(GROUPED)["loss"]
    assert fn.attrs["state"] == ("m.bn.mean", "m.bn.var")
    assert fn.attrs["state_init"] == {"m.bn.mean": 0.0, "m.bn.var": 1}
    assert fn.params == {"m.W", "m.bn.g", "m.bn.b", "m.v"}
    p, x, y = _inputs(), RNG.normal(size=(6, 4)), RNG.normal(size=6)
    for training in (False, True):
        want = adc.function(FLAT, "loss", training=training)(x=x, y=y, **p)
        got = adc.function(GROUPED, "loss", training=training)(
            x=x, y=y, **{PATH[k]: v for k, v in p.items()})
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    (w, *ws), wg = adc.value_and_grad(FLAT, "loss", has_aux=True)(x=x, y=y, **p)
    (g, *gs), gg = adc.value_and_grad(GROUPED, "loss", has_aux=True)(
        x=x, y=y, **{PATH[k]: v for k, v in p.items()})
    assert g == w and all(np.array_equal(a, b) for a, b in zip(gs + list(gg), ws + list(wg)))


def test_training_threads_saves_and_returns_the_state_by_path(tmp_path):
    p = _inputs()
    data = {"x": RNG.normal(size=(16, 4)), "y": RNG.normal(size=16)}
    nested = {"m": {"W": p["W"], "v": p["v"], "bn": {"g": p["g"], "b": p["b"],
                                                     "mean": p["mean"], "var": p["var"]}}}
    got = adc.train(GROUPED, data, "sgd:lr=0.1", params=nested, steps=3, batch=8, seed=0)
    want = adc.train(FLAT, data, "sgd:lr=0.1", params=dict(p), steps=3, batch=8, seed=0)
    np.testing.assert_array_equal(got.params["m"]["bn"]["g"], want.params["g"])
    np.testing.assert_array_equal(got.state["model"]["m"]["bn"]["var"], want.state["var"])
    assert not np.array_equal(want.state["var"], p["var"])
    step = adc.train_step(GROUPED, "adam:lr=0.1")
    params = {"m": {"W": p["W"], "v": p["v"], "bn": {"g": p["g"], "b": p["b"]}}}
    state = step.init(params)
    assert set(state) == {"step", "exp_avg", "exp_avg_sq", "model"}
    assert np.all(state["model"]["m"]["bn"]["var"] == 1)
    _, state, _ = step(params, state, {"x": data["x"][:8], "y": data["y"][:8]})
    assert not np.all(state["model"]["m"]["bn"]["var"] == 1)


BASE = """
group BN { g: f32[3], state mean: f32[3] }
group Two { a: BN, b: BN }
def use(h: f32[3], p: BN) -> f32 {
    p.mean = 0.9 * p.mean + 0.1 * h
    return sum(h * p.g)
}
"""
ERRORS = [
    ("def f(h: f32[3], param p: BN) -> f32 {\n    p.g = h\n    return sum(h)\n}",
     "'p.g = ...': 'g' is a field of group BN but not one of its state fields (mean)"),
    ("def f(h: f32[3], param p: BN) -> f32 {\n    p.z = h\n    return sum(h)\n}",
     "'z' is not a field of group BN"),
    ("def f(h: f32[3], param p: BN) -> f32 {\n    q = p\n    q.mean = h\n    return sum(h)\n}",
     "'q' is 'p' bound under another name; name the state field by its path from the input "
     "('p.mean')"),
    ("def f(h: f32[3], param p: BN) -> f32 {\n    for i in range(2) { p.mean = h }\n"
     "    return sum(h)\n}", "a state field is not assigned in a loop body"),
    ("def f(h: f32[3], param p: BN) -> f32 {\n    p.mean = sum(h)\n    return sum(h)\n}",
     "state field 'p.mean' is f32[3], got f32[]"),
    ("def f(h: f32[3], param p: BN) -> f32 {\n    h.mean = h\n    return sum(h)\n}",
     "'h' is not a group"),
    ("def f(h: f32[3], param p: BN[2]) -> f32 {\n    return sum(h)\n}",
     "a stack of BN cannot be declared: it has state fields (mean)"),
    ("group S { state n: BN }\ndef f(h: f32[3]) -> f32 {\n    return sum(h)\n}",
     "state field 'n' must be a tensor, not a group"),
    ("group S { state n: f32[3] @gain }\ndef f(h: f32[3]) -> f32 {\n    return sum(h)\n}",
     "'@gain': 'n' is a state field"),
    ("def f(h: f32[3], param t: Two) -> f32 {\n    q = t.a\n    return use(h, q)\n}",
     "'q' is 't.a' bound under another name"),
    ("def f(h: f32[3], param t: Two) -> f32 {\n    return use(h, t.a) + use(h, t.b)\n}", None),
]


@pytest.mark.parametrize("text,message", ERRORS)
def test_misuse_of_state_fields_is_a_located_error(text, message):
    if message is None:   # the control: two groups passed by path, each updated
        fn = compile_source(BASE + text)["f"]
        assert fn.attrs["state"] == ("t.a.mean", "t.b.mean")
        return
    with pytest.raises(AdcError) as e:
        compile_source(BASE + text, "s.tdsl")
    assert message in e.value.message
    assert e.value.loc is not None and e.value.loc.line > 2
