"""adc import and adc.from_onnx: readable, stable output; every bad model a named error
with nothing written; symbolic dims; a model that trains after importing."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import adcompiler as adc  # noqa: E402
from adcompiler.diagnostics import AdcError  # noqa: E402


def mlp(opset: int = 17, op: str = "Relu", name: str = "fc1"):
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "fc/W")
    b = numpy_helper.from_array(np.zeros(3, np.float32), "fc.b")
    g = helper.make_graph([helper.make_node("Gemm", ["x", "fc/W", "fc.b"], ["h"], name=name),
                           helper.make_node(op, ["h"], ["y"], name="act")],
                          "g", [x], [y], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def adc_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "adcompiler", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_readable_source_with_symbolic_batch_and_sanitized_names():
    imp = adc.from_onnx(mlp())
    assert "x: f32[batch, 4]" in imp.source
    assert "param fc_W: f32[4, 3],  # fc/W" in imp.source
    # a dotted initializer name is a module path: the leaf `b` of the group `fc`
    assert "# fc\ngroup Fc {\n    b: f32[3]\n}" in imp.source
    assert "    param fc: Fc,  # fc\n" in imp.source
    assert "h = x @ fc_W + fc.b  # fc1 (Gemm)" in imp.source
    assert imp.inputs == ["x"] and imp.outputs == ["y"] and sorted(imp.params) == ["fc.b", "fc_W"]
    assert imp.paths == {"fc/W": "fc_W", "fc.b": "fc.b"}
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    (out,) = adc.run(imp.module, imp.fn, {**imp.params, "x": x})
    ref = np.maximum(x @ imp.params["fc_W"] + imp.params["fc.b"], 0)
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_import_print_reparse_is_stable(tmp_path):
    a, b = adc.from_onnx(mlp(), loss="mse"), adc.from_onnx(mlp(), loss="mse")
    assert a.source == b.source
    path, npz = a.save(tmp_path / "m.tdsl")
    assert os.path.basename(npz) == "m.params.npz"
    assert open(path, encoding="utf-8").read() == a.source
    again = adc.compile_file(path)
    assert adc.print_module(again) == adc.print_module(adc.compile_source(a.source, path))
    assert adc.print_module(a.module).replace('"<model>.tdsl"', f'"{path}"') == \
        adc.print_module(again)
    with np.load(npz) as z:
        assert sorted(z.files) == sorted(a.params)


def test_a_node_name_cannot_escape_its_comment():
    imp = adc.from_onnx(mlp(name="evil\nW = 1\r\u2028"))
    line = [ln for ln in imp.source.splitlines() if "Gemm" in ln][0]
    assert line.endswith("# evil\\nW = 1\\r\\u2028 (Gemm)")
    assert "W = 1\n" not in imp.source


def test_adc_import_then_train(tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx")
    r = adc_cli("import", "m.onnx", "-o", "m.tdsl", "--loss", "cross_entropy", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((32, 4)).astype(np.float32),
             target=rng.integers(0, 3, 32))
    r = adc_cli("train", "m.tdsl", "--fn", "loss", "--init", "m.params.npz", "--data", "d.npz",
                "--batch", "8", "--steps", "5", "--save", "out.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.npz").exists()


def _refused(tmp_path, model_bytes, *extra):
    (tmp_path / "bad.onnx").write_bytes(model_bytes)
    r = adc_cli("import", "bad.onnx", "-o", "bad.tdsl", *extra, cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.onnx"]
    return r.stderr.strip()


def test_unsupported_op_is_named_and_nothing_is_written(tmp_path):
    err = _refused(tmp_path, mlp(op="Hardmax").SerializeToString())
    assert err.startswith("error: bad.onnx: node 'act' (Hardmax): error: ") or \
        err.startswith("bad.onnx: node 'act' (Hardmax): error: op type 'Hardmax' is not "
                       "supported (supported: "), err


def test_bad_files_are_named_errors(tmp_path):
    data = mlp().SerializeToString()
    assert "not an ONNX model" in _refused(tmp_path, b"hello, not a model\n")
    (tmp_path / "bad.onnx").unlink()
    assert "truncated" in _refused(tmp_path, data[: len(data) // 2])
    (tmp_path / "bad.onnx").unlink()
    assert "opset 99 is newer than the newest supported" in \
        _refused(tmp_path, mlp(opset=99).SerializeToString())
    (tmp_path / "bad.onnx").unlink()
    assert "more than --max-memory" in _refused(tmp_path, data, "--max-memory", "16")


def test_missing_and_escaping_external_data(tmp_path):
    m = mlp()
    from onnx.external_data_helper import convert_model_to_external_data
    convert_model_to_external_data(m, location="w.bin", size_threshold=0)
    onnx.save(m, tmp_path / "ext.onnx")
    assert adc.from_onnx(tmp_path / "ext.onnx").params["fc_W"].shape == (4, 3)
    os.remove(tmp_path / "w.bin")
    with pytest.raises(AdcError, match="missing external data of tensor 'fc/W'"):
        adc.from_onnx(tmp_path / "ext.onnx")
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../../etc/passwd"
    onnx.save(m, tmp_path / "esc.onnx")
    with pytest.raises(AdcError, match="outside the model's folder"):
        adc.from_onnx(tmp_path / "esc.onnx")


def test_refused_options_are_never_approximated():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(AdcError, match="dilations other than 1 are not supported"):
        adc.from_onnx(m)


def _one_node(node, x_shape, y_shape, inits=(), opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))
    g = helper.make_graph([node], "g", [x], [y], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_asymmetric_max_pool_padding_is_exact_without_warnings():
    """Padding a max pool cannot make symmetric is -inf around the input, set through a
    constant: nothing computes an infinity (or a log of zero) at run time."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3],
                            pads=[0, 1, 2, 2], strides=[1, 2])
    imp = adc.from_onnx(_one_node(node, (2, 1, 5, 5), (2, 1, 5, 3)))
    assert "log(" not in imp.source and "where(" in imp.source
    x = -np.abs(np.random.default_rng(2).standard_normal((2, 1, 5, 5)))   # all below 0
    padded = np.pad(x, ((0, 0), (0, 0), (0, 2), (1, 2)), constant_values=-np.inf)
    want = np.array([[[[padded[n, 0, i:i + 3, 2 * j:2 * j + 3].max() for j in range(3)]
                       for i in range(5)]] for n in range(2)])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (out,) = adc.run(imp.module, imp.fn, {**imp.params, "x": x.astype(np.float32)})
        errs = adc.check_grads(imp.module, {**imp.params, "x": x}, fn=imp.fn, wrt=["x"],
                               rtol=1e-6)
    np.testing.assert_array_equal(out, want.astype(np.float32))
    assert max(errs.values()) < 1e-6


def test_training_mode_dropout_is_the_dropout_op():
    """Dropout with a constant training_mode=true: adc's dropout (dropping in training,
    the identity in evaluation); its random stream is adc's, so what is checked is the
    rate and the scale of the kept elements."""
    inits = [numpy_helper.from_array(np.array(0.25, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "train")]
    node = helper.make_node("Dropout", ["x", "ratio", "train"], ["y"])
    imp = adc.from_onnx(_one_node(node, (40, 50), (40, 50), inits))
    assert "y = dropout(x, 0.25)" in imp.source
    x = np.random.default_rng(3).standard_normal((40, 50)).astype(np.float32)
    np.testing.assert_array_equal(adc.function(imp.module, imp.fn)(x=x, **imp.params), x)
    y = adc.function(imp.module, imp.fn, training=True, seed=4)(x=x, **imp.params)
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    assert abs((1 - kept.mean()) - 0.25) < 4.5 * np.sqrt(0.25 * 0.75 / x.size)
    with pytest.raises(AdcError, match="the mask output of Dropout"):
        node = helper.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"])
        m = _one_node(node, (4, 5), (4, 5), inits)
        m.graph.output.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [4, 5]))
        adc.from_onnx(m)
