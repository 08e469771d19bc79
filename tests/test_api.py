"""The public surface of `adcompiler`: names, loading, building, running and the
convenience layer (grad, value_and_grad, vjp, function)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc

ROOT = Path(__file__).resolve().parent.parent
POLY = """
def poly(param a: f64[3], b: f64[3], k: i64) -> f64 {
    return sum(a * a * b) + 2 * sum(b)
}
"""
TWO = """
def two(param x: f64[2, 3]) -> (f64[2], f64) {
    return sum(x * x, axis=1), sum(exp(x))
}
"""
A, B = np.array([1.0, -2.0, 0.5]), np.array([3.0, 0.25, -1.0])


def test_every_public_name_resolves():
    for name in adc.__all__:
        assert getattr(adc, name) is not None, name
    for cls in ("Inline", "Canonicalize", "CSE", "DCE", "Activity", "Reverse", "Forward",
                "HVP", "Remat"):
        assert adc.get_pass(adc.pass_spec(getattr(adc, cls)())) is getattr(adc, cls)
    with pytest.raises(AttributeError):
        adc.NoSuchPass


def test_import_is_light():
    code = ("import sys, adcompiler; heavy = {'lark', 'cupy', 'adcompiler.frontend', "
            "'adcompiler.passes', 'adc_runtime'}; print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_load_accepts_modules_paths_and_text(tmp_path):
    m = adc.load(POLY)
    assert adc.load(m) is m
    text = adc.print_module(m)
    assert adc.print_module(adc.load(text)) == text          # IR text
    (tmp_path / "p.tdsl").write_text(POLY)
    (tmp_path / "p.ir").write_text(text)
    assert adc.print_module(adc.load(tmp_path / "p.ir")) == text
    assert list(adc.load(str(tmp_path / "p.tdsl")).functions) == ["poly"]
    assert list(adc.parse_tdsl(POLY).functions) == ["poly"]
    with pytest.raises(adc.AdcError, match="cannot read"):
        adc.load(str(tmp_path / "missing.tdsl"))


def test_tensor_type_and_function_builder():
    assert adc.tensor_type("f32[B, 3]") == adc.TensorType("f32", ("B", 3))
    assert adc.tensor_type("i64") == adc.TensorType("i64", ())
    with pytest.raises(ValueError):
        adc.tensor_type("float[3]")
    m = adc.Module()
    fb = adc.FunctionBuilder("dot", {"x": "f64[N]", "w": "f64[N]"}, params=["w"])
    fn = fb.finish(fb.emit("sum", fb.emit("mul", fb["x"], fb["w"])), module=m)
    adc.verify(m)
    assert fn.params == {"w"} and fn.result_types == [adc.TensorType("f64", ())]
    assert adc.run(m, inputs={"x": [1.0, 2.0], "w": [3.0, 4.0]})[0] == 11.0
    # symbolic N binds from the shapes; the gradient wrt w is x
    np.testing.assert_array_equal(adc.grad(m, wrt="w")(x=[1.0, 2.0, 5.0], w=[0, 0, 0]),
                                  [1.0, 2.0, 5.0])


def test_run_takes_named_inputs_and_converts_dtypes():
    m = adc.compile_source(POLY)
    (out,) = adc.run(m, "poly", {"a": A, "b": B}, k=np.int64(0))
    assert out.dtype == np.float64 and out.shape == ()
    assert out == pytest.approx(np.sum(A * A * B) + 2 * np.sum(B))
    with pytest.raises(Exception, match="missing input 'b'"):
        adc.run(m, a=A, k=0)
    with pytest.raises(ValueError, match="device"):
        adc.run(m, a=A, b=B, k=0, device="tpu")


def test_grad_value_and_grad_function():
    m = adc.compile_source(POLY)
    da, db = adc.grad(m, wrt=("a", "b"))(A, B, 0)
    np.testing.assert_allclose(da, 2 * A * B)
    np.testing.assert_allclose(db, A * A + 2)
    (only_a,) = adc.grad(m)(a=A, b=B, k=0)          # default: the param inputs
    np.testing.assert_allclose(only_a, 2 * A * B)
    value, grad_b = adc.value_and_grad(m, wrt="b")(A, b=B, k=0)
    assert value == pytest.approx(np.sum(A * A * B) + 2 * np.sum(B))
    np.testing.assert_allclose(grad_b, A * A + 2)
    f = adc.function(POLY)
    assert f(A, B, 1) == pytest.approx(value)
    with pytest.raises(adc.AdcError, match="integer type"):
        adc.grad(m, wrt="k")
    with pytest.raises(adc.AdcError, match="not an input"):
        adc.grad(m, wrt="z")


def test_compiled_once_and_reusable(monkeypatch):
    g = adc.grad(POLY, wrt="a")
    assert "poly_grad" in g.module and g.fn_name == "poly_grad"
    assert g.inputs == ["a", "b", "k"]
    import adcompiler.passes.pipeline as pipeline

    def fail(*args, **kwargs):
        raise AssertionError("recompiled")
    monkeypatch.setattr(pipeline, "run_pipeline", fail)
    for scale in (1.0, 2.0, -3.0):
        np.testing.assert_allclose(g(scale * A, B, 0), 2 * scale * A * B)


def test_call_errors_read_like_python():
    g = adc.grad(POLY, wrt="a")
    with pytest.raises(TypeError, match="missing input 'k'"):
        g(A, B)
    with pytest.raises(TypeError, match="no input 'c'"):
        g(A, B, 0, c=1)
    with pytest.raises(TypeError, match="'a' twice"):
        g(A, B, 0, a=A)
    with pytest.raises(TypeError, match="takes 3 inputs"):
        g(A, B, 0, 1)


def test_multiple_results_need_has_aux():
    x = np.arange(6.0).reshape(2, 3) / 10
    with pytest.raises(adc.AdcError, match=r"returns 2 \(result 0: f64\[2\], result 1: f64"):
        adc.value_and_grad(TWO)
    swapped = TWO.replace("(f64[2], f64)", "(f64, f64[2])").replace(
        "sum(x * x, axis=1), sum(exp(x))", "sum(exp(x)), sum(x * x, axis=1)")
    (total, rows), (dx,) = adc.value_and_grad(swapped, has_aux=True)(x)  # wrt: a tuple
    np.testing.assert_allclose(rows, np.sum(x * x, axis=1))
    assert total == pytest.approx(np.exp(x).sum())
    np.testing.assert_allclose(dx, np.exp(x))  # the first result alone; the other is aux


def test_vjp_pulls_back_arbitrary_cotangents():
    x = np.arange(6.0).reshape(2, 3) / 10
    f_vjp = adc.vjp(TWO, wrt="x")
    (rows, total), pullback = f_vjp(x)
    np.testing.assert_allclose(rows, np.sum(x * x, axis=1))
    ct_rows, ct_total = np.array([2.0, -1.0]), np.array(0.5)
    np.testing.assert_allclose(pullback(ct_rows, ct_total),
                               2 * x * ct_rows[:, None] + np.exp(x) * ct_total)
    np.testing.assert_allclose(pullback(np.zeros(2), np.array(1.0)), np.exp(x))
    with pytest.raises(TypeError, match="2 cotangent"):
        pullback(ct_rows)


def test_vjp_of_scalar_function_with_name_clash():
    src = "def f(param ct: f64[2]) -> f64 {\n  return sum(sin(ct))\n}\n"
    value, pullback = adc.vjp(src)(np.array([0.0, 1.0]))
    assert value == pytest.approx(np.sin(1.0))
    (g,) = pullback(np.array(3.0))
    np.testing.assert_allclose(g, 3 * np.cos([0.0, 1.0]))


def test_run_pipeline_on_the_sample_and_emitters():
    m = adc.compile_file(ROOT / "samples" / "backprop_tiny.tdsl")
    adjoint = adc.run_pipeline(m, adc.parse_pipeline("inline,cse,reverse{wrt=W1,b1},dce"))
    assert adjoint["backprop_tiny_grad"].attrs["wrt"] == ("W1", "b1")
    src = adc.emit_python(adjoint, "backprop_tiny_grad")
    compile(src, "emitted.py", "exec")
    assert adc.emit_dot(adjoint, "backprop_tiny_grad").startswith("digraph")


def test_jvp_and_hvp():
    src = "def f(param a: f64[3], b: f64[3]) -> f64 {\n  return sum(a * a * a * b)\n}\n"
    j = adc.jvp(src, wrt="a")
    assert j.inputs == ["a", "b", "t_a"]
    direction = np.array([1.0, 0.5, -2.0])
    value, tangent = j(A, B, direction)
    assert value == pytest.approx(np.sum(A ** 3 * B))
    assert tangent == pytest.approx(np.sum(3 * A * A * B * direction))
    h = adc.hvp(src, wrt=("a", "b"))
    assert h.inputs == ["a", "b", "t_a", "t_b"]
    ha, hb = h(A, B, t_a=direction, t_b=np.zeros(3))
    np.testing.assert_allclose(ha, 6 * A * B * direction)   # d2f/da2 t_a
    np.testing.assert_allclose(hb, 3 * A * A * direction)   # d2f/db da t_a


@pytest.mark.cuda
def test_device_cuda_matches_numpy(cupy):
    da_cpu, db_cpu = adc.grad(POLY, wrt=("a", "b"))(A, B, 0)
    da, db = adc.grad(POLY, wrt=("a", "b"), device="cuda")(A, B, 0)
    assert isinstance(da, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(da), da_cpu, rtol=1e-12)
    np.testing.assert_allclose(cupy.asnumpy(db), db_cpu, rtol=1e-12)
