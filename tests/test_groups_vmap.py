"""`vmap`'s in_axes as a tree over parameter groups: a prefix of the inputs' tree (an int or
None for a whole subtree), lists for the layers of a stacked group, per-example gradients
returned in the params' tree, and the errors of a tree that does not match."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc

SRC = """
group Layer { W: f64[D, D], c: f64[D] }
group M { blocks: Layer[3], E: f64[D] }
def loss(x: f64[D], param m: M) -> f64 {
    h = x + m.E
    for l in range(3) {
        p = m.blocks[l]
        h = tanh(h @ p.W + p.c)
    }
    return sum(h)
}
"""
RNG = np.random.default_rng(0)


def _params():
    return {"blocks": [{"W": RNG.normal(size=(4, 4)) / 2, "c": RNG.normal(size=4)}
                       for _ in range(3)], "E": RNG.normal(size=4)}


def test_per_example_gradients_in_the_params_tree():
    params, X = _params(), RNG.normal(size=(5, 4))
    g = adc.grad(SRC)
    for axes in ({"x": 0, "m": None}, {"x": 0}, {"x": 0, "m": {"blocks": None, "E": None}},
                 {"x": 0, "m": {"blocks": [None] * 3, "E": None}}):
        per = adc.vmap(g, in_axes=axes)({"m": params}, x=X)
        assert len(per["m"]["blocks"]) == 3 and per["m"]["E"].shape == (5, 4)
        for i in (0, 4):
            one = g({"m": params}, x=X[i])
            for k in range(3):
                np.testing.assert_allclose(per["m"]["blocks"][k]["W"][i],
                                           one["m"]["blocks"][k]["W"], rtol=1e-12)
            np.testing.assert_allclose(per["m"]["E"][i], one["m"]["E"], rtol=1e-12)


def test_a_batch_of_models_batched_per_layer_leaf():
    params, x = _params(), RNG.normal(size=4)
    scale = np.array([1.0, 0.5])
    batched = {"blocks": [{"W": np.stack([b["W"] * s for s in scale]), "c": b["c"]}
                          for b in params["blocks"]], "E": params["E"]}
    f = adc.function(SRC)
    for axes in ({"m": {"blocks": {"W": 0, "c": None}}},              # a dict for every layer
                 {"m": {"blocks": [{"W": 0, "c": None}] * 3}},        # a list, one per layer
                 {"m.blocks.W": 0}):                                  # a dotted path
        out = adc.vmap(SRC, in_axes=axes)({"m": batched}, x=x)
        for i, s in enumerate(scale):
            one = {"blocks": [{"W": b["W"] * s, "c": b["c"]} for b in params["blocks"]],
                   "E": params["E"]}
            np.testing.assert_allclose(out[i], f({"m": one}, x=x), rtol=1e-12)
    # an axis of one layer's array: axis 1 of a layer's W is axis 2 of the stacked input
    moved = {**batched, "blocks": [{**b, "W": np.moveaxis(b["W"], 0, 1)}
                                   for b in batched["blocks"]]}
    out = adc.vmap(SRC, in_axes={"m": {"blocks": {"W": 1, "c": None}}})({"m": moved}, x=x)
    np.testing.assert_allclose(out, adc.vmap(SRC, in_axes={"m.blocks.W": 0})(
        {"m": batched}, x=x), rtol=1e-12)


@pytest.mark.parametrize("axes,message", [
    ({"m": {"l3": 0}}, r"'m\.l3' is not an input \(inputs: x, m\.blocks\.<i>\.W"),
    ({"m": {"blocks": [0, 0]}}, r"in_axes\['m\.blocks'\] has 2 entries for the 3 layers"),
    ({"m": {"blocks": [0, None, 0]}},
     r"input 'm\.blocks\.W' different axes \('m\.blocks\.0' is 0, 'm\.blocks\.1' is None"),
    ({"x": [0]}, r"in_axes\['x'\] is a list, but 'x' is not a stacked group"),
    ({"m": {"blocks": "a"}}, r"in_axes\['m\.blocks'\] must be an int, None"),
    ({"m": {"blocks": [{"W": 0}, 0, 0.5]}}, r"in_axes\['m\.blocks\.2'\] must be an int"),
    ({"m": {"blocks": {"9": 0}}}, r"'m\.blocks\.9' is not an input"),
])
def test_a_tree_that_does_not_match_names_the_path(axes, message):
    with pytest.raises(TypeError, match=message):
        adc.vmap(SRC, in_axes=axes)


def loss(params, x, y):
    h = np.tanh(x @ params["layers"][0]["W"]) @ params["layers"][1]["W"] + params["b"]
    return np.mean((h - y) ** 2)


def test_python_functions_take_a_prefix_tree():
    params = {"layers": [{"W": RNG.normal(size=(3, 3))} for _ in range(2)],
              "b": RNG.normal(size=3)}
    x, y = RNG.normal(size=(6, 3)), RNG.normal(size=(6, 3))
    g = adc.grad(loss)
    per = adc.vmap(g, in_axes=({"layers": None, "b": None}, 0, 0))(params, x, y)
    same = adc.vmap(g, in_axes=(None, 0, 0))(params, x, y)
    for i in (0, 5):
        one = g(params, x[i], y[i])
        np.testing.assert_allclose(per["layers"][1]["W"][i], one["layers"][1]["W"],
                                   rtol=1e-10)
        np.testing.assert_allclose(same["b"][i], one["b"], rtol=1e-10)
    for bad, message in [(({"layers": None}, 0, 0), r"in_axes\[0\] does not match the "
                          r"argument: keys \['b'\] are missing"),
                         (({"layers": [None], "b": None}, 0, 0),
                          r"in_axes\[0\]\['layers'\] has 1 entries, the argument 2"),
                         (({"layers": {"W": 0}, "b": None}, 0, 0),
                          r"in_axes\[0\]\['layers'\] is \{'W': 0\}, but the argument there "
                          "is list")]:
        with pytest.raises(TypeError, match=message):
            adc.vmap(g, in_axes=bad)(params, x, y)
