"""The samples: their published numbers, `adc check` on each, and the emitted Python and the
IR text giving the same numbers as `adc run`."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
NAMES = ["backprop_tiny", "autograd_intro", "chain_rule", "mlp", "attention", "rnn"]


def sample(name):
    return str(SAMPLES / f"{name}.tdsl"), str(SAMPLES / f"{name}.json")


def run_out(capsys, tmp_path, name, *extra):
    tdsl, data = sample(name)
    out = tmp_path / f"{name}.npz"
    code = cli.main(["run", tdsl, "--mode", "reverse", "--inputs", data, "--out", str(out),
                     *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def test_every_sample_has_inputs():
    for name in NAMES:
        assert all(Path(p).exists() for p in sample(name)), name


def test_backprop_tiny_seed_numbers(capsys, tmp_path):
    z = run_out(capsys, tmp_path, "backprop_tiny")
    assert round(float(z["out"]), 4) == 0.4629
    expect = {"grad_W1": [[-0.2223, -0.1112], [0.1482, 0.0741]],   # w11 w12 | w21 w22
              "grad_b1": [-0.2223, 0.1482],                         # b1 b2
              "grad_v": [-0.2779, -0.0185],                         # v1 v2
              "grad_b3": -0.3705}
    for key, want in expect.items():
        np.testing.assert_array_equal(np.round(z[key].astype(np.float64), 4), want, key)


def test_autograd_intro_numbers(capsys, tmp_path):
    z = run_out(capsys, tmp_path, "autograd_intro")
    assert float(z["out"]) == 27.0
    np.testing.assert_array_equal(z["grad_x"], np.full((2, 2), 4.5, np.float32))


def test_chain_rule_matches_the_closed_form(capsys, tmp_path):
    z = run_out(capsys, tmp_path, "chain_rule", "--dtype", "f64")
    x, W1, W2 = np.array([1.5]), np.array([[0.5], [-1.0]]), np.array([[0.8, -0.3]])
    a = 1 / (1 + np.exp(-(W1 @ x)))
    s = (W2 @ a)[0]
    np.testing.assert_allclose(z["out"], s ** 2, rtol=1e-12)
    np.testing.assert_allclose(z["grad_W2"], 2 * s * a[None, :], rtol=1e-12)
    np.testing.assert_allclose(z["grad_W1"], (2 * s * W2[0] * a * (1 - a))[:, None] * x,
                               rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_sample_passes_check(capsys, name):
    tdsl, data = sample(name)
    code = cli.main(["check", tdsl, "--inputs", data])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "gradient check passed" in out


def test_check_fails_on_a_wrong_grad_rule(capsys, tmp_path):
    path = tmp_path / "wrong.tdsl"
    path.write_text("def sq(x: f32[3]) -> f32[3] {\n    return x * x\n}\n"
                    "grad sq(x, y, dy) {\n    return dy * x\n}\n"      # should be 2 * dy * x
                    "def f(param x: f32[3]) -> f32 {\n    return sum(sq(x))\n}\n")
    code = cli.main(["check", str(path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in out and "gradient check FAILED for x" in out


@pytest.mark.parametrize("name", NAMES)
def test_emitted_python_gives_the_same_numbers(capsys, tmp_path, name):
    tdsl, data = sample(name)
    want = run_out(capsys, tmp_path, name)
    prog = tmp_path / "prog.py"
    assert cli.main(["compile", tdsl, "--mode", "reverse", "--emit", "python",
                     "-o", str(prog)]) == 0
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **{k: np.asarray(v) for k, v in _json(data).items()})
    out = tmp_path / "emitted.npz"
    proc = subprocess.run([sys.executable, str(prog), str(inputs), str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as got:
        assert sorted(got.files) == sorted(want)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], k)
    src = prog.read_text()
    assert f"# {name}.tdsl:" in src                        # provenance comments


def _json(path):
    import json
    return json.loads(Path(path).read_text())


@pytest.mark.parametrize("name", ["backprop_tiny", "rnn"])
def test_ir_file_runs_like_the_source(capsys, tmp_path, name):
    tdsl, data = sample(name)
    ir = tmp_path / f"{name}.ir"
    assert cli.main(["compile", tdsl, "--mode", "forward", "--emit", "ir", "-o", str(ir)]) == 0
    capsys.readouterr()
    want = run_out(capsys, tmp_path, name)
    out = tmp_path / "ir.npz"
    assert cli.main(["run", str(ir), "--inputs", data, "--out", str(out)]) == 0
    with np.load(out) as got:
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], k)


def test_compile_outputs(capsys, tmp_path):
    tdsl, _ = sample("rnn")
    code = cli.main(["compile", tdsl, "--emit", "ir", "--print-ir-after-all"])
    captured = capsys.readouterr()
    assert code == 0
    assert "func @rnn_grad(" in captured.out
    assert "// ----- IR after inline -----" in captured.err
    assert "reverse = true" in captured.out              # the reverse sweep is a loop
    code = cli.main(["compile", tdsl, "--emit", "dot", "--wrt", "wo"])
    dot = capsys.readouterr().out
    assert code == 0 and dot.startswith('digraph "rnn_grad" {')
    assert dot.count("subgraph cluster_") == 2 and dot.count("{") == dot.count("}")


def test_compile_forward_with_bind_and_dtype(capsys):
    tdsl, _ = sample("mlp")
    code = cli.main(["compile", tdsl, "--mode", "forward", "--bind", "B=32", "--dtype", "f64"])
    text = capsys.readouterr().out
    assert code == 0
    assert "f64[32, 4]" in text and "f32" not in text and "mlp_grad" not in text


def test_compile_pipeline_option(capsys):
    tdsl, _ = sample("mlp")
    code = cli.main(["compile", tdsl, "--mode", "forward", "--pipeline", ""])
    text = capsys.readouterr().out
    assert code == 0 and "call(%x, %W1, %b1, %W2, %b2) {callee = \"classify\"}" in text
    code = cli.main(["compile", tdsl, "--mode", "reverse", "--pipeline",
                     "inline,reverse{wrt=b2 fn=mlp},dce"])
    text = capsys.readouterr().out
    assert code == 0 and "func @mlp_grad(" in text
    code = cli.main(["compile", tdsl, "--pipeline", "inline,nosuchpass"])
    err = capsys.readouterr().err
    assert code == 1 and "unknown pass 'nosuchpass'" in err
