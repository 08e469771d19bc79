"""The CNNs shipped in the onnx wheel (onnx/backend/test/data/light/): each imports, its
forward matches onnxruntime and the output the wheel ships, and a training step runs.

The light models compute their weights with ConstantOfShape (every weight one number, so
the shipped output is a uniform softmax); the forward is also compared with onnxruntime
after replacing those weights by seeded random ones in both (on a random input), which a wrong layer would
not survive."""
from __future__ import annotations

import glob
import re
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import adcompiler as adc  # noqa: E402
from adcompiler.diagnostics import AdcError  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = sorted(os.path.basename(p)[6:-5] for p in glob.glob(os.path.join(LIGHT, "*.onnx")))
FAST = {"squeezenet"}
REFUSED: dict[str, str] = {}   # model -> the error it must give (none today)


def _input(model, name):
    from onnx.backend.test.runner import Runner
    inits = {t.name for t in model.graph.initializer}
    x = [i for i in model.graph.input if i.name not in inits][0]
    return x.name, Runner.generate_dummy_data(x, seed=0, name=f"test_{name}", random=False)


def _randomized(model, imp, seed=0):
    """The model with each weight the importer made a parameter replaced by a seeded random
    initializer (in the model and in `imp.params` alike)."""
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    params, by_source = dict(imp.params), {}
    for name, value in imp.params.items():
        if value.dtype.kind == "f" and name not in imp.constants:
            # weights at half the He scale, vectors (biases, scales) small: deep random
            # nets neither overflow nor flatten out
            scale = 0.5 * np.sqrt(2 / max(int(np.prod(value.shape[1:])), 1)) \
                if value.ndim > 1 else 0.1
            new = ((value.ndim == 1) + scale * rng.standard_normal(value.shape)) \
                .astype(value.dtype)
            params[name] = new
            by_source[imp.sources[name]] = new
    keep = [n for n in m.graph.node if not set(n.output) & set(by_source)]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    inits = [t for t in m.graph.initializer if t.name not in by_source]
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits + [onnx.numpy_helper.from_array(v, k)
                                        for k, v in by_source.items()])
    return m, params


def _check(name):
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    model = onnx.load(path)
    if name in REFUSED:
        with pytest.raises(AdcError, match=re.escape(REFUSED[name])):
            adc.from_onnx(path)
        return
    imp = adc.from_onnx(path, loss="cross_entropy")
    xname, x = _input(model, name)
    feed = {**imp.params, imp.inputs[0]: x}
    (out,) = adc.run(imp.module, imp.fn, feed)
    shipped = onnx.numpy_helper.to_array(onnx.load_tensor(path[:-5] + "_output_0.pb"))
    np.testing.assert_allclose(out, shipped, rtol=1e-3, atol=1e-6)
    rmodel, params = _randomized(model, imp)
    xr = np.random.default_rng(1).standard_normal(x.shape).astype(x.dtype)
    (out,) = adc.run(imp.module, imp.fn, {**params, imp.inputs[0]: xr})
    (ref,) = ort.InferenceSession(rmodel.SerializeToString()).run(None, {xname: xr})
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-5)
    assert np.std(ref) > 1e-6    # random weights: not a uniform softmax
    trained = [p for p in imp.params if p not in imp.constants]
    step = adc.train_step(imp.module, adc.optim.sgd(0.1), fn="loss", wrt=trained)
    params = imp.params   # the shipped weights: random ones saturate the final softmax
    ps = {k: params[k].copy() for k in trained}   # the step may update in place
    target = imp.module["loss"].arg("target").type.shape
    batch = {imp.inputs[0]: x, "target": np.zeros(target, np.int64),
             **{k: v for k, v in params.items() if k not in trained}}
    ps, _, metrics = step(ps, step.init(ps), batch)
    assert np.isfinite(float(metrics["loss"]))
    assert any(not np.array_equal(ps[k], params[k]) for k in trained)   # it learns


def test_the_wheel_ships_the_light_models():
    assert len(MODELS) >= 9, MODELS


@pytest.mark.parametrize("name", sorted(FAST | set(REFUSED)))
def test_light_model(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(MODELS) - FAST - set(REFUSED)))
def test_light_model_large(name):
    _check(name)
