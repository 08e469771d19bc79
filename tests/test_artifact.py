"""Programs as artifacts: IR text as the str of a module, compiled callables saved, loaded
and pickled as IR text plus JSON metadata, output names kept through IR files, and
``adc run`` on an already-derived function."""
import json
import pickle
import pickletools
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.cli import main

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "samples" / "backprop_tiny.tdsl")
INPUTS = json.loads((ROOT / "samples" / "backprop_tiny.json").read_text())
AUX = """
def f(param a: f64[3], x: f64[3]) -> (f64, f64[3]) {
    y = tanh(a * x)
    return sum(y * y), y
}
"""
A, X = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.3, -0.7])


def test_str_of_a_module_is_its_ir_text():
    m = adc.load(TINY)
    assert str(m) == adc.print_module(m) and str(m).startswith("func @backprop_tiny(")
    assert str(m.main) == adc.print_function(m.main)
    assert m._repr_html_().startswith("<pre>func @backprop_tiny(")
    again = pickle.loads(pickle.dumps(m))
    assert str(again) == str(m)


def _globals(data: bytes) -> set:
    """The callables a pickle would import and call, by name."""
    out, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if isinstance(arg, str):
            strings.append(arg)
        if op.name == "STACK_GLOBAL":
            out.add(" ".join(strings[-2:]))
        elif op.name == "GLOBAL":
            out.add(arg)
    return out


CASES = [
    (lambda: adc.grad(TINY, wrt=("W1", "b3")), INPUTS),
    (lambda: adc.value_and_grad(AUX, has_aux=True), {"a": A, "x": X}),
    (lambda: adc.function(AUX), {"a": A, "x": X}),
    (lambda: adc.jvp(AUX, wrt="a"), {"a": A, "x": X, "t_a": X}),
    (lambda: adc.hvp(AUX.replace("(f64, f64[3])", "f64").replace(", y\n", "\n")),
     {"a": A, "x": X, "t_a": X}),
    (lambda: adc.vmap(adc.grad(AUX, has_aux=True), in_axes={"x": 0}),
     {"a": A, "x": np.stack([X, -X])}),
]


def _same(a, b):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make,inputs", CASES, ids=range(len(CASES)))
def test_compiled_saves_loads_and_pickles(make, inputs, tmp_path):
    c = make()
    want = c(**inputs)
    path = tmp_path / "c.ir"
    c.save(path)
    loaded = adc.load_compiled(path)
    assert loaded.outputs == c.outputs and loaded.inputs == c.inputs
    _same(loaded(**inputs), want)
    data = pickle.dumps(c)
    assert _globals(data) == {"adcompiler.api.compiled compiled_from_text"}
    _same(pickle.loads(data)(**inputs), want)
    assert str(adc.load(path)) == str(c.module)    # an IR file like any other


def test_dict_params_still_work_after_loading(tmp_path):
    g = adc.grad(AUX, has_aux=True)
    g.save(tmp_path / "g.ir")
    grads, aux = adc.load_compiled(tmp_path / "g.ir")({"a": A}, x=X)
    np.testing.assert_allclose(grads["a"], g({"a": A}, x=X)[0]["a"])


def test_output_names_and_refusals(tmp_path):
    assert adc.grad(TINY, wrt=("W1", "b3")).outputs == ["out", "grad_W1", "grad_b3"]
    assert adc.hvp(TINY, wrt="b3").outputs == ["out", "grad_b3", "hvp_b3"]
    assert adc.jvp(AUX, wrt="a").outputs == ["out0", "out1", "tangent_out0", "tangent_out1"]
    with pytest.raises(TypeError, match="pullback"):
        pickle.dumps(adc.vjp(AUX))
    (tmp_path / "plain.ir").write_text(str(adc.load(TINY)))
    with pytest.raises(adc.AdcError, match="not a saved adc program"):
        adc.load_compiled(tmp_path / "plain.ir")


def test_adc_run_runs_a_derived_function_as_it_is(tmp_path, capsys):
    ir = tmp_path / "tiny_grad.ir"
    assert main(["compile", TINY, "-o", str(ir)]) == 0
    inputs = str(ROOT / "samples" / "backprop_tiny.json")
    assert main(["run", str(ir), "--fn", "backprop_tiny_grad", "--inputs", inputs,
                 "--out", str(tmp_path / "o.npz")]) == 0
    captured = capsys.readouterr()
    assert "running it as it is" in captured.err
    out = np.load(tmp_path / "o.npz")
    assert sorted(out.files) == ["grad_W1", "grad_b1", "grad_b3", "grad_v", "out"]
    direct = adc.grad(TINY)(**INPUTS)
    for name, g in zip(("W1", "b1", "v", "b3"), direct):
        np.testing.assert_array_equal(out[f"grad_{name}"], g)
    assert main(["run", str(ir), "--fn", "backprop_tiny_grad", "--inputs", inputs,
                 "--mode", "reverse", "--wrt", "b3", "--seed-output", "out1"]) == 0
    assert "grad_b3" in capsys.readouterr().out     # differentiated again, as asked
