"""cross_entropy's labels as inputs, through ``adc run`` and the library with one set of
rules and messages: float (probability) labels are data like any other input; integer labels
(i32 or i64 data, any width whose values fit) must lie in [0, C); float data where integer
labels are declared is refused, never truncated. Values against PyTorch in float64."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.cli import main

PROBS = """def f(param z: f64[4, 3], y: f64[4, 3]) -> f64 {
    return mean(cross_entropy(z, y))
}
"""
INTS = """def f(param z: f64[4, 3], y: {dtype}[4]) -> f64 {{
    return mean(cross_entropy(z, y))
}}
"""
MODES = ["forward", "reverse", "jvp", "hvp"]


def cli(tmp_path, capsys, src: str, inputs: dict, mode: str = "reverse"):
    """``adc run --mode MODE --inputs IN.npz --out OUT.npz``: (exit status, stderr, OUT)."""
    (tmp_path / "p.tdsl").write_text(src)
    np.savez(tmp_path / "in.npz", **inputs)
    out = tmp_path / "out.npz"
    if out.exists():
        out.unlink()
    rc = main(["run", str(tmp_path / "p.tdsl"), "--mode", mode, "--inputs",
               str(tmp_path / "in.npz"), "--out", str(out)])
    err = capsys.readouterr().err
    got = dict(np.load(out)) if rc == 0 else None
    return rc, err, got


def logits(rows: int = 4):
    return np.random.default_rng(0).standard_normal((rows, 3))


@pytest.mark.parametrize("mode", MODES)
def test_probability_labels_any_reals(tmp_path, capsys, mode):
    torch = pytest.importorskip("torch")
    y = np.random.default_rng(1).standard_normal((4, 3))  # not probabilities: still data
    rc, err, got = cli(tmp_path, capsys, PROBS, {"z": logits(), "y": y}, mode)
    assert rc == 0, err
    zt = torch.tensor(logits(), requires_grad=True)
    want = torch.nn.functional.cross_entropy(zt, torch.tensor(y))
    np.testing.assert_allclose(got["out"], want.item(), rtol=1e-12)
    if mode == "reverse":
        (g,) = torch.autograd.grad(want, zt)
        np.testing.assert_allclose(got["grad_z"], g.numpy(), rtol=1e-10, atol=1e-14)
    value, grad = adc.value_and_grad(PROBS)(logits(), y)
    np.testing.assert_allclose(value, want.item(), rtol=1e-12)


def test_probability_labels_random_inputs(capsys, tmp_path):
    (tmp_path / "p.tdsl").write_text(PROBS)
    assert main(["run", str(tmp_path / "p.tdsl")]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("declared,data", [("i32", np.int32), ("i32", np.int64),
                                           ("i64", np.int32), ("i64", np.int64)])
def test_integer_labels_of_either_width(tmp_path, capsys, declared, data):
    torch = pytest.importorskip("torch")
    src = INTS.format(dtype=declared)
    y = np.array([0, 2, 1, 2], dtype=data)
    rc, err, got = cli(tmp_path, capsys, src, {"z": logits(), "y": y})
    assert rc == 0, err
    want = torch.nn.functional.cross_entropy(torch.tensor(logits()), torch.tensor(y).long())
    np.testing.assert_allclose(got["out"], want.item(), rtol=1e-12)
    value, _ = adc.value_and_grad(src)(logits(), y)
    np.testing.assert_allclose(value, want.item(), rtol=1e-12)


def same_error(tmp_path, capsys, src, inputs, message, modes=MODES):
    """Every mode of ``adc run`` and the library fail with `message`, the CLI naming the
    inputs file first."""
    for mode in modes:
        rc, err, _ = cli(tmp_path, capsys, src, inputs, mode)
        assert rc == 1 and f"{tmp_path / 'in.npz'}: {message}" in err, (mode, err)
        assert "Traceback" not in err
    for call in (adc.function(src), adc.value_and_grad(src)):
        with pytest.raises(adc.RunError) as e:
            call(**inputs)
        assert str(e.value) == message


@pytest.mark.parametrize("labels,found", [([0, -1, 2, 0], "-1 to 2"),
                                          ([0, 1, 3, 0], "0 to 3"),
                                          # past labels.SMALL: checked by a NumPy reduction
                                          ([1] * 39 + [-1], "-1 to 1"),
                                          ([2] * 39 + [3], "2 to 3")])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_labels_out_of_range(tmp_path, capsys, labels, found, dtype):
    same_error(tmp_path, capsys, INTS.format(dtype="i32").replace("[4", f"[{len(labels)}"),
               {"z": logits(len(labels)), "y": np.array(labels, dtype)},
               f"input 'y' holds class labels outside [0, 3) (found {found})")


def test_float_data_for_integer_labels_is_refused(tmp_path, capsys):
    same_error(tmp_path, capsys, INTS.format(dtype="i32"),
               {"z": logits(), "y": np.array([0.0, 1.7, 2.2, 0.0])},
               "input 'y' is declared i32[4] but the data is float64")


def test_int64_labels_that_do_not_fit(tmp_path, capsys):
    same_error(tmp_path, capsys, INTS.format(dtype="i32"),
               {"z": logits(), "y": np.array([0, 1, 2**40, 0])},
               "input 'y' does not fit in i32", modes=["reverse"])


def test_computed_labels_out_of_range_are_located(tmp_path, capsys):
    src = """def f(param z: f64[4, 3], y: i32[4]) -> f64 {
    return mean(cross_entropy(z, y + 2))
}
"""
    rc, err, _ = cli(tmp_path, capsys, src, {"z": logits(), "y": np.array([0, 1, 0, 0], np.int32)})
    assert rc == 1 and "p.tdsl:2:" in err and "class labels outside [0, 3) (found 2 to 3)" in err
    with pytest.raises(adc.RunError, match=r"class labels outside \[0, 3\)") as e:
        adc.function(src)(logits(), np.array([0, 1, 0, 0], np.int32))
    assert e.value.loc is not None and e.value.loc.line == 2
