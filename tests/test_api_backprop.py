"""Acceptance: the seed's 2-2-1 network built with the Builder (no TDSL), differentiated
with the pass API, gives the seed's loss and nine gradients, and agrees with the TDSL
sample samples/backprop_tiny.tdsl."""
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "backprop_tiny.tdsl"
PARAMS = ("W1", "b1", "v", "b3")
INPUTS = {
    "x": np.array([1.0, 0.5]), "y": np.array(1.0),
    "W1": np.array([[0.3, 0.7], [-0.2, 0.5]]),   # row j = hidden unit j
    "b1": np.array([0.1, 0.0]), "v": np.array([0.6, -0.4]), "b3": np.array(0.1),
}
SEED = {  # the worked example's numbers, to 4 decimals
    "L": 0.4629,
    "W1": [[-0.2223, -0.1112], [0.1482, 0.0741]],
    "b1": [-0.2223, 0.1482],
    "v": [-0.2779, -0.0185],
    "b3": -0.3705,
}


def build_network(dtype: str = "f32") -> adc.Module:
    """h = relu(W1 @ x + b1); p = sigmoid(v @ h + b3); L = bce(p, y), op by op."""
    t = lambda *shape: adc.TensorType(dtype, shape)  # noqa: E731
    body = adc.Block([t(2), t(), t(2, 2), t(2), t(2), t()], ["x", "y", *PARAMS])
    x, y, W1, b1, v, b3 = body.args
    b = adc.Builder(body)
    h = b.emit("relu", b.emit("add", b.emit("matmul", W1, x), b1))
    p = b.emit("sigmoid", b.emit("add", b.emit("matmul", v, h), b3))
    loss = b.emit("bce", p, y)
    b.ret([loss])
    module = adc.Module()
    module.add(adc.Function("tiny", body, [loss.type], params=set(PARAMS)))
    adc.verify(module)
    return module


def check_seed(loss, grads, decimal=4):
    assert round(float(loss), decimal) == SEED["L"]
    for name, got in zip(PARAMS, grads):
        np.testing.assert_array_equal(np.round(np.asarray(got, np.float64), decimal),
                                      SEED[name], err_msg=name)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_builder_network_with_pass_objects(dtype):
    module = build_network(dtype)
    pipeline = [adc.Inline(), adc.Canonicalize(), adc.CSE(),
                adc.Reverse(wrt=PARAMS, fn="tiny"), adc.CSE(), adc.DCE()]
    adjoint = adc.run_pipeline(module, pipeline, verify=True)
    assert adjoint["tiny_grad"].attrs["wrt"] == PARAMS
    outs = adc.run(adjoint, "tiny_grad", INPUTS)
    assert [o.dtype for o in outs] == [np.dtype({"f32": "float32", "f64": "float64"}[dtype])] * 5
    assert [o.shape for o in outs] == [(), (2, 2), (2,), (2,), ()]
    check_seed(outs[0], outs[1:])
    # the input module is left untouched by the passes
    assert list(module.functions) == ["tiny"]


def test_builder_network_with_pipeline_string_and_printing():
    adjoint = adc.run_pipeline(build_network(), "inline,cse,reverse{wrt=W1,b1,v,b3},dce")
    text = adc.print_module(adjoint)
    assert "func @tiny_grad(" in text
    reparsed = adc.parse_ir(text)
    assert adc.print_module(reparsed) == text
    outs = adc.run(reparsed, "tiny_grad", INPUTS)
    check_seed(outs[0], outs[1:])


def test_builder_network_default_wrt_is_params():
    loss, grads = adc.value_and_grad(build_network())(**INPUTS)
    check_seed(loss, grads)


def test_builder_network_matches_tdsl_sample():
    builder_outs = adc.run(adc.run_pipeline(build_network("f64"), "reverse"), "tiny_grad",
                           INPUTS)
    tdsl = adc.compile_file(SAMPLE)
    fn = tdsl.main.name
    adc.verify(tdsl)
    assert [a.name for a in tdsl.main.args] == ["x", "y", *PARAMS]
    assert tdsl.main.params == set(PARAMS)
    loss, grads = adc.value_and_grad(tdsl, fn)(**INPUTS)
    check_seed(loss, grads)
    # the two programs agree to float32 rounding (the sample declares f32 inputs)
    np.testing.assert_allclose(loss, builder_outs[0], rtol=1e-6)
    for got, want in zip(grads, builder_outs[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
