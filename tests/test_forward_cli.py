"""CLI pieces for forward mode: run --mode jvp|hvp with --tangents and the spec §7 keys,
adc jacobian, and the forward/dot-product columns of adc check."""
import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli.compile import compile_program
from adcompiler.cli.forward import (check_forward, compile_forward, jacobian_main,
                                    run_main)
from adcompiler.diagnostics import AdcError
from adcompiler.ops import registry
from adc_runtime.executor import run_function

SAMPLES = Path(__file__).parent.parent / "samples"
PROGRAM = """
def f(x: f32[3], param w: f32[3], param b: f32) -> (f32[3], f32) {
    y = tanh(x * w + b)
    return y, sum(y * y)
}
"""


def args(**kw):
    base = dict(fn=None, wrt=None, bind={}, inputs=None, seed=0, dtype=None, out=None,
                tangents=None, mode="jvp")
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "p.tdsl"
    path.write_text(PROGRAM)
    x, w, b = np.array([0.5, -1.0, 2.0]), np.array([0.3, 0.2, -0.4]), np.array(0.1)
    np.savez(tmp_path / "in.npz", x=x, w=w, b=b)
    np.savez(tmp_path / "t.npz", w=np.array([1.0, 0.0, -1.0]), b=np.array(2.0))
    return path, (x, w, b)


def test_run_jvp_writes_tangent_out_keys(program, tmp_path, capsys):
    path, (x, w, b) = program
    out = tmp_path / "out.npz"
    assert run_main(args(file=str(path), inputs=str(tmp_path / "in.npz"),
                         tangents=str(tmp_path / "t.npz"), dtype="f64", out=str(out))) == 0
    got = np.load(out)
    assert sorted(got.files) == ["out0", "out1", "tangent_out0", "tangent_out1"]
    y = np.tanh(x * w + b)
    dy = (1 - y * y) * (x * np.array([1.0, 0.0, -1.0]) + 2.0)
    np.testing.assert_allclose(got["out0"], y, rtol=1e-14)
    np.testing.assert_allclose(got["tangent_out0"], dy, rtol=1e-13)
    np.testing.assert_allclose(got["tangent_out1"], np.sum(2 * y * dy), rtol=1e-13)
    assert "tangent_out0" in capsys.readouterr().out


def test_run_hvp_writes_grad_and_hvp_keys(program, tmp_path):
    path, (x, w, b) = program
    out = tmp_path / "out.npz"
    np.savez(tmp_path / "tw.npz", w=np.array([1.0, 0.0, -1.0]))
    run_main(args(file=str(path), mode="hvp", inputs=str(tmp_path / "in.npz"),
                  tangents=str(tmp_path / "tw.npz"), dtype="f64", out=str(out)))
    got = np.load(out)
    assert sorted(got.files) == ["grad_w", "hvp_w", "out0", "out1"]

    def grad(wv):   # d/dw of sum(out0) + out1, by hand
        y = np.tanh(x * wv + b)
        return (1 + 2 * y) * (1 - y * y) * x

    v = np.array([1.0, 0.0, -1.0])
    np.testing.assert_allclose(got["grad_w"], grad(w), rtol=1e-13)
    fd = (grad(w + 1e-6 * v) - grad(w - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(got["hvp_w"], fd, rtol=1e-7)


def test_json_tangents_and_f32_width(program, tmp_path):
    path, _ = program
    (tmp_path / "t.json").write_text(json.dumps({"w": [1, 2, 3], "b": 0.5}))
    out = tmp_path / "out.npz"
    run_main(args(file=str(path), tangents=str(tmp_path / "t.json"), out=str(out)))
    assert np.load(out)["tangent_out1"].dtype == np.float32


@pytest.mark.parametrize("data,wrt,message", [
    ({"w": np.ones(3), "b": np.array(1.0), "zz": np.ones(3)}, None, "tangent 'zz' is not an input"),
    ({"w": np.ones(3), "x": np.ones(3)}, ["w"], "tangent 'x' is not differentiated"),
    ({"w": np.ones(3)}, ["w", "b"], "missing input 'b'"),
    ({"w": np.ones(4), "b": np.array(1.0)}, None, "'w'"),
])
def test_bad_tangents_name_the_input(program, tmp_path, data, wrt, message):
    path, _ = program
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(AdcError, match=message):
        run_main(args(file=str(path), tangents=str(tmp_path / "bad.npz"), wrt=wrt))


def test_tangent_file_names_the_differentiated_inputs(program, tmp_path):
    path, (x, w, b) = program
    np.savez(tmp_path / "tx.npz", x=np.array([1.0, 1.0, 1.0]))   # x is not a param
    out = tmp_path / "out.npz"
    run_main(args(file=str(path), inputs=str(tmp_path / "in.npz"), dtype="f64",
                  tangents=str(tmp_path / "tx.npz"), out=str(out)))
    y = np.tanh(x * w + b)
    np.testing.assert_allclose(np.load(out)["tangent_out0"], (1 - y * y) * w, rtol=1e-14)


def test_compile_forward_modes_emit_programs():
    comp = compile_forward(str(SAMPLES / "rnn.tdsl"), "jvp")
    assert comp.run_name == "rnn_jvp" and comp.tangent_inputs == [f"t_{w}" for w in comp.wrt]
    assert any(op.name == "for" for op in comp.run_fn.walk())
    hv = compile_forward(str(SAMPLES / "mlp.tdsl"), "hvp", dtype="f64")
    assert hv.output_names() == ["out"] + [f"grad_{w}" for w in hv.wrt] + \
        [f"hvp_{w}" for w in hv.wrt]


def test_jacobian_command(program, tmp_path, capsys):
    path, (x, w, b) = program
    out = tmp_path / "j.npz"
    jacobian_main(args(file=str(path), inputs=str(tmp_path / "in.npz"), dtype="f64",
                       out=str(out), wrt=["w", "b"], jacobian_mode="auto"))
    text = capsys.readouterr().out
    assert text.startswith("forward mode: 4 differentiated input elements <= 4 output")
    got = np.load(out)
    y = np.tanh(x * w + b)
    np.testing.assert_allclose(got["jac_out0_w"], np.diag((1 - y * y) * x), rtol=1e-14)
    np.testing.assert_allclose(got["jac_out0_b"], 1 - y * y, rtol=1e-14)
    np.testing.assert_allclose(got["jac_out1_b"], np.sum(2 * y * (1 - y * y)), rtol=1e-13)


@pytest.mark.parametrize("sample", ["mlp", "rnn", "attention", "backprop_tiny"])
def test_check_forward_passes_on_samples(sample):
    path = str(SAMPLES / f"{sample}.tdsl")
    rev = compile_program(path, "reverse", dtype="f64")
    fwd = compile_program(path, "forward", rev.primal.name, dtype="f64")
    data = json.loads((SAMPLES / f"{sample}.json").read_text())
    inputs = {a.name: np.asarray(data[a.name], dtype=np.float64 if a.type.is_float
                                 else np.int64) for a in fwd.run_fn.args}
    dims = run_function(fwd.module, fwd.run_name, inputs)[1]["dims"]
    rows = check_forward(fwd, inputs, rev.wrt, dims, eps=1e-6, rtol=1e-5)
    assert [r.name for r in rows] == rev.wrt
    assert all(r.ok for r in rows), rows
    assert max(r.dot_rel for r in rows) < 1e-10


def test_check_forward_catches_a_wrong_rule(monkeypatch):
    path = str(SAMPLES / "chain_rule.tdsl")
    fwd = compile_program(path, "forward", dtype="f64")
    wrong = dataclasses.replace(registry.REGISTRY["sigmoid"],
                                jvp=lambda b, op, t: [b.emit("mul", t[0], op.result)])
    monkeypatch.setitem(registry.REGISTRY, "sigmoid", wrong)
    data = json.loads((SAMPLES / "chain_rule.json").read_text())
    inputs = {k: np.asarray(v, dtype=np.float64) for k, v in data.items()}
    rows = check_forward(fwd, inputs, ["W1", "W2"], {}, eps=1e-6, rtol=1e-5)
    assert [r.ok for r in rows] == [False, True]
    assert rows[0].dot_rel > 1e-3


@pytest.mark.parametrize("mode", ["jvp", "hvp"])
@pytest.mark.parametrize("sample", ["rnn", "mlp", "transformer_stack"])
def test_emitted_python_matches_the_executor(sample, mode):
    from adcompiler.emit.python import emit_python
    comp = compile_forward(str(SAMPLES / f"{sample}.tdsl"), mode, dtype="f64")
    data = json.loads((SAMPLES / f"{sample}.json").read_text())
    inputs = {a.name: np.asarray(data[a.name], dtype=np.float64 if a.type.is_float
                                 else np.int64) for a in comp.primal.args}
    rng = np.random.default_rng(3)
    inputs.update({t: rng.standard_normal(np.shape(inputs[w]))
                   for t, w in zip(comp.tangent_inputs, comp.wrt)})
    want, _ = run_function(comp.module, comp.run_name, inputs)
    ns = {"__name__": "emitted"}
    exec(compile(emit_python(comp.module, comp.run_name, comp.output_names()), "<emitted>",
                 "exec"), ns)
    got = ns[comp.run_name](*(inputs[a] for a in comp.run_fn.arg_names))
    assert len(got) == len(want) == len(comp.output_names())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_integer_input_tangents_are_ignored_with_a_note(tmp_path, capsys):
    path = tmp_path / "c.tdsl"
    path.write_text("def f(x: f64[2], n: i64[2]) -> f64 { return sum(x * x * n) }")
    np.savez(tmp_path / "in.npz", x=np.array([1.0, 2.0]), n=np.array([3, 4]))
    np.savez(tmp_path / "t.npz", x=np.array([1.0, -1.0]), n=np.array([0, 0]))
    out = tmp_path / "out.npz"
    run_main(args(file=str(path), inputs=str(tmp_path / "in.npz"),
                  tangents=str(tmp_path / "t.npz"), out=str(out)))
    assert np.load(out)["tangent_out"] == 2 * 1 * 3 - 2 * 2 * 4
    assert "ignoring the tangent of 'n'" in capsys.readouterr().err
