"""The `adc` command line: options, OUT.npz, data-file errors, exit codes, diagnostics."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli
from adcompiler.diagnostics import AdcError

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
TINY = str(SAMPLES / "backprop_tiny.tdsl")
TINY_JSON = str(SAMPLES / "backprop_tiny.json")
MLP = str(SAMPLES / "mlp.tdsl")


def adc(*args, cwd=None):
    """Run `python -m adcompiler ARGS` in a subprocess; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "adcompiler", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or ROOT)


def run_main(capsys, *args):
    """`cli.main` in-process; returns (status, stdout, stderr)."""
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def tiny_data(**changes):
    data = json.loads(Path(TINY_JSON).read_text())
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


# ---- help and command-line errors -----------------------------------------------------

def test_help_for_every_command_and_option():
    top = adc("--help")
    assert top.returncode == 0
    for command in ("compile", "run", "check"):
        assert command in top.stdout
    options = {
        "compile": ["--mode", "--fn", "--wrt", "--emit", "--output", "--pipeline",
                    "--print-ir-after-all", "--bind", "--dtype", "--debug"],
        "run": ["--mode", "--fn", "--inputs", "--wrt", "--bind", "--dtype", "--device",
                "--out", "--seed", "--debug"],
        "check": ["--fn", "--wrt", "--inputs", "--eps", "--rtol", "--max-points", "--bind",
                  "--seed", "--debug"],
    }
    for command, opts in options.items():
        proc = adc(command, "--help")
        assert proc.returncode == 0
        for opt in opts:
            assert opt in proc.stdout, (command, opt)


@pytest.mark.parametrize("argv", [
    [],                                              # no command
    ["frobnicate", TINY],                            # unknown command
    ["run"],                                         # no FILE
    ["run", TINY, "--mode", "sideways"],             # bad choice
    ["run", TINY, "--bind", "B"],                    # malformed --bind
    ["run", TINY, "--bind", "B=1", "--bind", "B=2"],  # contradictory --bind
    ["run", TINY, "--wrt", "a,,b"],                  # malformed --wrt
    ["compile", TINY, "--emit", "pdf"],
    ["check", TINY, "--eps", "tiny"],
])
def test_bad_command_line_exits_2(argv):
    proc = adc(*argv)
    assert proc.returncode == 2
    assert "usage: adc" in proc.stderr and "Traceback" not in proc.stderr


# ---- adc run --------------------------------------------------------------------------

def test_run_reverse_prints_a_summary_and_writes_out_npz(tmp_path):
    out = tmp_path / "out.npz"
    proc = adc("run", TINY, "--mode", "reverse", "--inputs", TINY_JSON, "--out", out)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["name", "shape", "dtype", "norm", "value"]
    rows = {ln.split()[0]: ln for ln in lines[2:] if ln.strip() and not ln.startswith("peak")}
    assert list(rows) == ["out", "grad_W1", "grad_b1", "grad_v", "grad_b3"]
    assert "0.462856" in rows["out"] and "float32" in rows["out"]
    assert "(2, 2)" in rows["grad_W1"] and "[[-0.2223, -0.1112]," in rows["grad_W1"]
    assert "peak live memory:" in proc.stdout
    with np.load(out) as z:
        assert sorted(z.files) == ["grad_W1", "grad_b1", "grad_b3", "grad_v", "out"]
        assert z["grad_W1"].dtype == np.float32
        np.testing.assert_allclose(z["out"], 0.46286, atol=1e-5)


def test_run_forward_writes_only_results(tmp_path):
    out = tmp_path / "f.npz"
    proc = adc("run", TINY, "--mode", "forward", "--inputs", TINY_JSON, "--out", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as z:
        assert z.files == ["out"]
        np.testing.assert_allclose(z["out"], 0.46286, atol=1e-5)


def test_run_wrt_selects_gradients(capsys, tmp_path):
    out = tmp_path / "o.npz"
    code, _, err = run_main(capsys, "run", TINY, "--inputs", TINY_JSON, "--wrt", "b3,x",
                            "--out", out)
    assert code == 0, err
    with np.load(out) as z:
        assert sorted(z.files) == ["grad_b3", "grad_x", "out"]   # input order: x, then b3
        np.testing.assert_allclose(z["grad_b3"], -0.3705, atol=1e-4)


@pytest.mark.parametrize("wrt, message", [
    ("nope", "--wrt: 'nope' is not an input of 'backprop_tiny'"),
])
def test_run_bad_wrt(capsys, wrt, message):
    code, _, err = run_main(capsys, "run", TINY, "--inputs", TINY_JSON, "--wrt", wrt)
    assert code == 1 and message in err


def test_run_dtype_f64(tmp_path):
    out = tmp_path / "o.npz"
    proc = adc("run", TINY, "--inputs", TINY_JSON, "--dtype", "f64", "--out", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as z:
        assert z["out"].dtype == np.float64 and z["grad_W1"].dtype == np.float64
        np.testing.assert_allclose(z["out"], 0.46285625355038446, rtol=1e-12)


def test_run_npz_inputs_match_json(tmp_path):
    data = {k: np.asarray(v, dtype=np.float32) for k, v in tiny_data().items()}
    np.savez(tmp_path / "in.npz", **data)
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert adc("run", TINY, "--inputs", tmp_path / "in.npz", "--out", a).returncode == 0
    assert adc("run", TINY, "--inputs", TINY_JSON, "--out", b).returncode == 0
    with np.load(a) as za, np.load(b) as zb:
        for k in za.files:
            np.testing.assert_array_equal(za[k], zb[k])


def test_float64_data_is_converted_to_the_declared_width(tmp_path):
    data = {k: np.asarray(v, dtype=np.float64) for k, v in tiny_data().items()}
    np.savez(tmp_path / "in.npz", **data)
    out = tmp_path / "o.npz"
    proc = adc("run", TINY, "--inputs", tmp_path / "in.npz", "--out", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as z:
        assert z["out"].dtype == np.float32


def test_random_inputs_are_seeded_and_announced(capsys, tmp_path):
    outs = []
    for seed in ("0", "0", "1"):
        out = tmp_path / f"o{len(outs)}.npz"
        code, _, err = run_main(capsys, "run", TINY, "--seed", seed, "--out", out)
        assert code == 0
        assert f"random inputs (seed {seed})" in err
        with np.load(out) as z:
            outs.append(z["grad_W1"])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])


def test_random_inputs_bind_unbound_dims_and_labels_in_class_range(capsys, tmp_path):
    from adcompiler.cli.compile import compile_program
    from adcompiler.files.inputs import DimBinder, random_inputs
    comp = compile_program(MLP, "reverse")
    binder = DimBinder({"B": 50})
    inputs, notes = random_inputs(comp.run_fn, binder, seed=3)
    assert notes == [] and inputs["x"].shape == (50, 4) and inputs["x"].dtype == np.float32
    assert inputs["labels"].dtype == np.int64 and set(inputs["labels"]) == {0, 1, 2}
    code, out, err = run_main(capsys, "run", MLP)
    assert code == 0, err
    assert "B=4" in err                                  # the default size, announced


def test_bind_conflicting_with_an_input(capsys):
    code, _, err = run_main(capsys, "run", MLP, "--inputs", SAMPLES / "mlp.json",
                            "--bind", "B=5")
    assert code == 1
    assert "dimension 'B' is 5 from --bind but 6 from input 'x'" in err


def test_inconsistent_dims_between_inputs(capsys, tmp_path):
    data = json.loads((SAMPLES / "mlp.json").read_text())
    data["labels"] = data["labels"][:4]
    path = write(tmp_path / "in.json", json.dumps(data))
    code, _, err = run_main(capsys, "run", MLP, "--inputs", path)
    assert code == 1
    assert "dimension 'B' is 6 from input 'x' but 4 from input 'labels'" in err


# ---- data-file errors: each names the input, exit 1, no traceback ----------------------

def _bad_npz(tmp_path, **arrays):
    data = {k: np.asarray(v, dtype=np.float32) for k, v in tiny_data().items()}
    data.update(arrays)
    data = {k: v for k, v in data.items() if v is not None}
    np.savez(tmp_path / "bad.npz", **data)
    return tmp_path / "bad.npz"


@pytest.mark.parametrize("make, message", [
    (lambda p: write(p / "a.json", json.dumps(tiny_data(b3=None))),
     "missing input 'b3'"),
    (lambda p: write(p / "a.json", json.dumps(tiny_data(bias=[1.0]))),
     "unknown input 'bias'"),
    (lambda p: write(p / "a.json", json.dumps(tiny_data(W1=[1.0, 2.0]))),
     "input 'W1' is declared f32[2, 2] but has shape (2,)"),
    (lambda p: write(p / "a.json", json.dumps(tiny_data(x=[[1.0, 2.0], [3.0]]))),
     "input 'x' is not a rectangular array"),
    (lambda p: write(p / "a.json", json.dumps(tiny_data(x=["a", "b"]))),
     "input 'x' must be a number or nested lists of numbers"),
    (lambda p: _bad_npz(p, v=np.array([1, 2], dtype=np.int64)),
     "input 'v' is declared f32[2] but the data is int64"),
    (lambda p: _bad_npz(p, b1=np.zeros(3, dtype=np.float32)),
     "input 'b1' is declared f32[2] but has shape (3,)"),
    (lambda p: _bad_npz(p, y=None),
     "missing input 'y'"),
])
def test_data_file_errors_name_the_input(tmp_path, make, message):
    proc = adc("run", TINY, "--inputs", make(tmp_path))
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_integer_input_rejects_fractions_and_floats(capsys, tmp_path):
    data = json.loads((SAMPLES / "mlp.json").read_text())
    data["labels"] = [0.5] * 6
    code, _, err = run_main(capsys, "run", MLP, "--inputs",
                            write(tmp_path / "m.json", json.dumps(data)))
    assert code == 1 and "input 'labels' is declared i64[B] but holds non-integer" in err
    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in data.items()}
    np.savez(tmp_path / "m.npz", **arrays)
    code, _, err = run_main(capsys, "run", MLP, "--inputs", tmp_path / "m.npz")
    assert code == 1 and "input 'labels' is declared i64[B] but the data is float32" in err


def test_labels_out_of_range(capsys, tmp_path):
    data = json.loads((SAMPLES / "mlp.json").read_text())
    data["labels"] = [0, 1, 2, 3, 0, 1]
    path = write(tmp_path / "m.json", json.dumps(data))
    code, _, err = run_main(capsys, "run", MLP, "--inputs", path)
    assert code == 1
    assert f"{path}: input 'labels' holds class labels outside [0, 3) (found 0 to 3)" in err


def test_invalid_json_is_located(capsys, tmp_path):
    path = write(tmp_path / "bad.json", '{\n  "x": [1.0, 0.5],\n  "y": 1.0,,\n}\n')
    code, _, err = run_main(capsys, "run", TINY, "--inputs", path)
    assert code == 1
    assert f"{path}:3:12: error: invalid JSON" in err
    assert '  "y": 1.0,,' in err and "^" in err


@pytest.mark.parametrize("name, message", [
    ("nothere.json", "inputs file '{}' does not exist"),
    ("inputs.csv", "inputs file '{}' must end in .npz or .json"),
])
def test_inputs_file_problems(capsys, tmp_path, name, message):
    path = tmp_path / name
    if name.endswith(".csv"):
        path.write_text("x,y\n")
    code, _, err = run_main(capsys, "run", TINY, "--inputs", path)
    assert code == 1 and message.format(path) in err


# ---- atomic --out ---------------------------------------------------------------------

def test_out_is_replaced_atomically_and_kept_on_failure(tmp_path):
    out = tmp_path / "out.npz"
    out.write_bytes(b"previous contents")
    bad = write(tmp_path / "bad.json", json.dumps(tiny_data(b3=None)))
    assert adc("run", TINY, "--inputs", bad, "--out", out).returncode == 1
    assert out.read_bytes() == b"previous contents"
    assert adc("run", TINY, "--inputs", TINY_JSON, "--out", out).returncode == 0
    with np.load(out) as z:
        assert "grad_W1" in z.files
    assert sorted(os.listdir(tmp_path)) == ["bad.json", "out.npz"]   # no temporary files


def test_out_into_a_missing_folder(capsys, tmp_path):
    code, _, err = run_main(capsys, "run", TINY, "--inputs", TINY_JSON, "--out",
                            tmp_path / "no" / "o.npz")
    assert code == 1 and "does not exist" in err


def test_save_npz_failure_leaves_no_temporary(tmp_path, monkeypatch):
    from adcompiler.files import write as cli_output
    from adcompiler.diagnostics import AdcError

    def boom(f, **arrays):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(AdcError, match="cannot write .*o.npz.*disk full"):
        cli_output.save_npz(str(tmp_path / "o.npz"), {"out": np.zeros(2)})
    assert os.listdir(tmp_path) == []


# ---- program errors, internal errors, devices ------------------------------------------

def test_program_error_is_rendered_with_location(tmp_path):
    path = write(tmp_path / "bad.tdsl",
                 "def f(param x: f32[2]) -> f32 {\n    y = x +* 2\n    return sum(y)\n}\n")
    proc = adc("run", path)
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"{path}:2:") and ": error: " in first
    assert "    y = x +* 2" in proc.stderr and "^" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_file_and_unknown_function(capsys, tmp_path):
    code, _, err = run_main(capsys, "run", tmp_path / "none.tdsl")
    assert code == 1 and "no such file" in err
    code, _, err = run_main(capsys, "run", TINY, "--fn", "nope")
    assert code == 1 and "--fn: no function 'nope' (functions: backprop_tiny)" in err


def test_internal_error_exit_3_and_debug_traceback(capsys, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr("adcompiler.cli.compile.compile_program", broken)
    code, _, err = run_main(capsys, "run", TINY)
    assert code == 3
    assert err.strip().count("\n") == 0
    assert "internal error (RuntimeError: kaboom)" in err and "--debug" in err
    with pytest.raises(RuntimeError, match="kaboom"):
        cli.main(["run", TINY, "--debug"])


def test_debug_shows_traceback_for_program_errors(tmp_path):
    path = write(tmp_path / "bad.tdsl", "def f(x: f32) -> f32 {\n    return y\n}\n")
    proc = adc("run", path, "--debug")
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert f"{path}:2:" in proc.stderr


def test_device_cuda_without_a_gpu(capsys):
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a CUDA GPU is present")
    except Exception:
        pass
    code, _, err = run_main(capsys, "run", TINY, "--inputs", TINY_JSON, "--device", "cuda")
    assert code == 1
    assert err.startswith("error: --device cuda needs CuPy and a CUDA GPU")
    assert err.count("\n") == 1


# ---- options of check, --fn, --device cpu ----------------------------------------------

def test_check_options(capsys):
    code, out, _ = run_main(capsys, "check", TINY, "--inputs", TINY_JSON, "--max-points", "3",
                            "--eps", "1e-5", "--rtol", "1e-3")
    assert code == 0
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines()[2:] if ln.strip()}
    assert rows["W1"][:3] == ["W1", "(2,", "2)"] and rows["W1"][3] == "3"
    assert rows["b3"][2] == "1" and "rtol 0.001, eps 1e-05" in out
    code, out, _ = run_main(capsys, "check", TINY, "--inputs", TINY_JSON, "--rtol", "0")
    assert code == 1 and "gradient check FAILED" in out


def test_fn_selects_a_function(capsys, tmp_path):
    out = tmp_path / "o.npz"
    code, _, err = run_main(capsys, "run", MLP, "--fn", "classify", "--mode", "forward",
                            "--bind", "B=7", "--device", "cpu", "--out", out)
    assert code == 0, err
    with np.load(out) as z:
        assert z.files == ["out"] and z["out"].shape == (7, 3)


def test_multiple_results_are_numbered(capsys, tmp_path):
    path = write(tmp_path / "two.tdsl", "def f(param x: f32[3]) -> (f32, f32[3]) {\n"
                                       "    return sum(x * x), 2 * x\n}\n")
    out = tmp_path / "o.npz"
    code, stdout, err = run_main(capsys, "run", path, "--out", out)
    assert code == 0, err
    with np.load(out) as z:
        assert sorted(z.files) == ["grad_x", "out0", "out1"]
        # ones-seeded: d/dx [sum(x * x) + sum(2 * x)] = 2 * x + 2 = out1 + 2
        np.testing.assert_allclose(z["grad_x"], z["out1"] + 2, rtol=1e-6)


# ---- --remat and --stats-json (scheduling lives in adcompiler.remat) ---------------------

def test_remat_keeps_gradients_bit_identical(capsys, tmp_path):
    rnn, data = SAMPLES / "rnn.tdsl", SAMPLES / "rnn.json"
    ref, out, stats = tmp_path / "ref.npz", tmp_path / "o.npz", tmp_path / "stats.json"
    assert run_main(capsys, "run", rnn, "--inputs", data, "--out", ref)[0] == 0
    code, _, err = run_main(capsys, "run", rnn, "--inputs", data, "--out", out, "--remat",
                            "revolve:2", "--stats-json", stats)
    assert code == 0, err
    assert "remat revolve:2 on @rnn_grad" in err
    with np.load(ref) as a, np.load(out) as b:
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], k)
    report = json.loads(stats.read_text())
    assert report["policy"] == "revolve:2" and report["peak_bytes_measured"] > 0


def test_remat_needs_reverse_mode(capsys):
    code, _, err = run_main(capsys, "run", TINY, "--mode", "forward", "--remat", "sqrt")
    assert code == 1 and "--remat and --stats-json apply to --mode reverse" in err
    assert "random inputs" not in err


def test_values_an_op_cannot_take_are_a_located_run_error(tmp_path):
    # max over an empty axis has no value: exit 1 with the op's line and a caret, no traceback
    src = tmp_path / "m.tdsl"
    src.write_text("def f(param x: f32[N, 3]) -> f32 {\n    return sum(max(x, axis=0))\n}\n")
    np.savez(tmp_path / "x.npz", x=np.zeros((0, 3), np.float32))
    proc = adc("run", src, "--inputs", tmp_path / "x.npz")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[-3] == (f"{src}:2:16: error: max cannot run on these values: zero-size array "
                         "to reduction operation maximum which has no identity")
    assert lines[-2:] == ["    return sum(max(x, axis=0))", " " * 15 + "^"]
    assert "Traceback" not in proc.stderr
