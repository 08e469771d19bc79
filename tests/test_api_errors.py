"""One exception hierarchy under `AdcError`, every class exported, and the same input rules
for the library's callables and the ``adc`` command."""
import json
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.cli import main

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "samples" / "mlp.tdsl")
LABELED = """
def f(param x: f64[3], labels: i64[3]) -> f64 {
    return sum(x * cast(labels, f64))
}
"""


@pytest.mark.parametrize("name", ["ShapeError", "VerifyError", "PluginError", "RunError",
                                  "UnboundDimError"])
def test_every_error_is_exported_under_adc_error(name):
    cls = getattr(adc, name)
    assert name in adc.__all__ and issubclass(cls, adc.AdcError) and cls is not adc.AdcError


def test_run_errors_are_adc_errors_with_a_location():
    src = "def f(x: f64[2]) -> f64 {\n    return max(x[0:0])\n}\n"
    with pytest.raises(adc.RunError) as e:
        adc.run(src, x=np.ones(2))
    assert isinstance(e.value, adc.AdcError) and e.value.loc.line == 2


def test_an_unbound_dimension_is_a_named_error():
    src = "def f(param x: f64[3]) -> f64[T] {\n    return zeros([T], dtype=f64) + sum(x)\n}\n"
    for call in (lambda: adc.run(src, x=np.ones(3)), lambda: adc.function(src)(np.ones(3))):
        with pytest.raises(adc.UnboundDimError, match="dimension 'T' is not bound") as e:
            call()
        assert isinstance(e.value, adc.AdcError) and e.value.dim == "T"
    np.testing.assert_array_equal(adc.run(src, x=np.ones(3), dims={"T": 2})[0], [3.0, 3.0])


def test_float_labels_are_rejected_not_truncated():
    f = adc.function(LABELED)
    with pytest.raises(adc.RunError, match=r"input 'labels' is declared i64\[3\] but the "
                                           r"data is float64"):
        f(np.ones(3), np.array([0.7, 1.2, 2.9]))
    with pytest.raises(adc.RunError, match="holds non-integer numbers"):
        f(np.ones(3), [0.5, 1.0, 2.0])
    assert f(np.ones(3), [0.0, 1.0, 2.0]) == 3.0          # untyped whole numbers are fine


def test_int32_labels_are_accepted_by_library_and_cli(tmp_path, capsys):
    f = adc.function(LABELED)
    assert f(np.ones(3), np.array([0, 1, 2], np.int32)) == 3.0
    with pytest.raises(adc.RunError, match="does not fit in i32"):
        adc.run("def g(k: i32) -> i32 {\n    return k\n}\n", k=np.int64(2**40))
    data = json.loads((ROOT / "samples" / "mlp.json").read_text())
    arrays = {k: np.asarray(v, dtype=np.int32 if k == "labels" else np.float32)
              for k, v in data.items()}
    np.savez(tmp_path / "m.npz", **arrays)
    assert main(["run", MLP, "--inputs", str(tmp_path / "m.npz"), "--out",
                 str(tmp_path / "o.npz")]) == 0
    expected = adc.value_and_grad(MLP)(**data)[0]
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["out"], expected, rtol=1e-6)


SHAPED = "def f(x: f64[4], y: f64[B, 2], z: f64[B]) -> f64 {\n" \
         "    return sum(x) + sum(y) + sum(z)\n}\n"


@pytest.mark.parametrize("x,y,z,want", [
    ((3,), (2, 2), (2,), "input 'x' is declared f64[4] but has shape (3,)"),
    ((4, 1), (2, 2), (2,), "input 'x' is declared f64[4] but has shape (4, 1)"),
    ((4,), (2,), (2,), "input 'y' is declared f64[B, 2] but has shape (2,)"),
    ((4,), (2, 3), (2,),
     "input 'y' is declared f64[B, 2] but has shape (2, 3) (expected (2, 2))"),
    ((4,), (2, 2), (3,), "dimension 'B' is 2 from input 'y' but 3 from input 'z'"),
])
def test_shape_messages_are_one_for_library_and_cli(x, y, z, want, tmp_path, capsys):
    """The library's `RunError` and the CLI's error (after the data file's name) say the
    same words for a wrong rank, a wrong fixed size and a dimension two inputs disagree on."""
    arrays = {"x": np.ones(x), "y": np.ones(y), "z": np.ones(z)}
    with pytest.raises(adc.RunError) as e:
        adc.function(SHAPED)(**arrays)
    assert e.value.message == want
    (tmp_path / "f.tdsl").write_text(SHAPED)
    np.savez(tmp_path / "in.npz", **arrays)
    assert main(["run", str(tmp_path / "f.tdsl"), "--mode", "forward", "--inputs",
                 str(tmp_path / "in.npz")]) == 1
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert line.removeprefix("error: ").removeprefix(f"{tmp_path / 'in.npz'}: ") == want


def test_dimension_given_and_from_an_input(tmp_path, capsys):
    """A size given for a dimension (dims=, --bind) that an input contradicts names where it
    came from in each interface's own terms."""
    arrays = {"x": np.ones(4), "y": np.ones((2, 2)), "z": np.ones(2)}
    with pytest.raises(adc.RunError) as e:
        adc.function(SHAPED, dims={"B": 3})(**arrays)
    assert e.value.message == "dimension 'B' is 3 from dims['B'] but 2 from input 'y'"
    (tmp_path / "f.tdsl").write_text(SHAPED)
    np.savez(tmp_path / "in.npz", **arrays)
    assert main(["run", str(tmp_path / "f.tdsl"), "--mode", "forward", "--bind", "B=3",
                 "--inputs", str(tmp_path / "in.npz")]) == 1
    assert "error: dimension 'B' is 3 from --bind but 2 from input 'y'" in \
        capsys.readouterr().err


def test_shape_errors_read_as_the_cli_s(tmp_path, capsys):
    src = "def f(param x: f64[4], y: f64[B, 2]) -> f64 {\n    return sum(x) + sum(y)\n}\n"
    f = adc.function(src)
    with pytest.raises(adc.RunError, match=r"input 'x' is declared f64\[4\] but has shape "
                                           r"\(3,\)$"):
        f(np.ones(3), np.ones((2, 2)))
    with pytest.raises(adc.RunError, match=r"input 'y' is declared f64\[B, 2\] but has shape "
                                           r"\(2,\)$"):
        f(np.ones(4), np.ones(2))
    (tmp_path / "f.tdsl").write_text(src)
    np.savez(tmp_path / "in.npz", x=np.ones(3), y=np.ones((2, 2)))
    assert main(["run", str(tmp_path / "f.tdsl"), "--inputs", str(tmp_path / "in.npz")]) == 1
    assert "input 'x' is declared f64[4] but has shape (3,)" in capsys.readouterr().err
