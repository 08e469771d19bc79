"""Conformance of `adc` error reporting with the TDSL spec (§7): bad programs exit 1 with
`FILE:LINE:COL: error: MESSAGE`, the source line and a caret; bad data exits 1 naming the
input; a bad command line exits 2; never a traceback."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conformance_cli import PROGRAMS, HERE, adc_out, run_adc

BAD = sorted((HERE / "bad").glob("*.tdsl"))
SUBPROCESS = {"syntax_bad_char", "unknown_name", "mixed_float_dtypes", "non_utf8",
              "recursion_mutual"}


def expectation(path):
    """The `# expect: LINE:COL: FRAGMENT` header of a bad program."""
    m = re.match(rb"# expect: (\d+):(\d+): ?(.*)", path.read_bytes().splitlines()[0])
    return int(m[1]), int(m[2]), m[3].decode()


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_program(path):
    line, col, fragment = expectation(path)
    rc, out, err = run_adc(["run", str(path), "--mode", "reverse"],
                           subprocess_=path.stem in SUBPROCESS)
    assert rc == 1, (rc, err)
    assert "Traceback" not in err and out == ""
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:{line}:{col}: error: "), first
    assert fragment in first, first
    lines = err.splitlines()
    src = path.read_bytes().decode("utf-8", "replace").splitlines()[line - 1]
    caret = lines[2] if len(lines) > 2 else ""
    if path.stem != "non_utf8":
        assert lines[1].strip() == src.strip(), lines
        assert caret.strip() == "^", lines


def test_bad_programs_are_many():
    assert len(BAD) >= 40


@pytest.mark.parametrize("mode", ["jvp", "hvp"])
def test_forward_mode_through_a_grad_only_rule_is_a_compile_error(mode, tmp_path):
    """§6: forward mode through a function with a grad rule and no tangent rule."""
    prog = PROGRAMS / "grad_only.tdsl"
    np.savez(tmp_path / "in.npz", x=np.ones(3, np.float32))
    rc, _, err = run_adc(["run", str(prog), "--mode", mode, "--inputs",
                          str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    assert rc == 1 and "Traceback" not in err
    assert err.startswith(f"{prog}:9:16: error: "), err
    assert "grad rule" in err and "tangent" in err
    assert not (tmp_path / "o.npz").exists()


# ---- data errors ------------------------------------------------------------------------

PROG = PROGRAMS / "multi_function.tdsl"     # x: f32[B, 3], W: f32[3, 2], b: f32[2]
OK = {"x": np.ones((5, 3), np.float32), "W": np.ones((3, 2), np.float32),
      "b": np.ones(2, np.float32)}


def _without(key):
    return {k: v for k, v in OK.items() if k != key}


DATA_ERRORS = [
    ("missing", _without("b"), "b", "missing"),
    ("unknown", {**OK, "bogus": np.ones(1)}, "bogus", "unknown"),
    ("shape", {**OK, "W": np.ones((3, 3), np.float32)}, "W", "shape"),
    ("rank", {**OK, "b": np.ones((2, 1), np.float32)}, "b", "shape"),
    ("int_for_float", {**OK, "W": np.ones((3, 2), np.int64)}, "W", "int64"),
    ("bool_for_float", {**OK, "b": np.ones(2, bool)}, "b", "bool"),
]


@pytest.mark.parametrize("name,data,input_,word", DATA_ERRORS, ids=[d[0] for d in DATA_ERRORS])
def test_data_error_names_the_input(name, data, input_, word, tmp_path):
    np.savez(tmp_path / "in.npz", **data)
    rc, _, err = run_adc(["run", str(PROG), "--inputs", str(tmp_path / "in.npz")])
    assert rc == 1 and "Traceback" not in err, err
    assert f"'{input_}'" in err and word in err, err


def test_inconsistent_symbolic_dim_names_both_inputs(tmp_path):
    prog = PROGRAMS / "cross_entropy_int.tdsl"      # z: f32[B, 4], y: i64[B]
    np.savez(tmp_path / "in.npz", z=np.ones((5, 4), np.float32), y=np.zeros(4, np.int64),
             y2=np.zeros(4, np.int32), W=np.ones((4, 4), np.float32))
    rc, _, err = run_adc(["run", str(prog), "--inputs", str(tmp_path / "in.npz")])
    assert rc == 1 and "Traceback" not in err
    assert "B" in err and "'z'" in err and "'y'" in err


def test_bind_conflicting_with_the_data(tmp_path):
    np.savez(tmp_path / "in.npz", **OK)
    rc, _, err = run_adc(["run", str(PROG), "--inputs", str(tmp_path / "in.npz"),
                          "--bind", "B=4"])
    assert rc == 1 and "'x'" in err and "B" in err and "Traceback" not in err


def test_float_data_for_an_integer_input(tmp_path):
    prog = PROGRAMS / "mlp_classifier.tdsl"
    np.savez(tmp_path / "in.npz", x=np.ones((2, 4), np.float32), labels=np.zeros(2),
             W1=np.ones((4, 8), np.float32), b1=np.ones(8, np.float32),
             W2=np.ones((8, 3), np.float32), b2=np.ones(3, np.float32))
    rc, _, err = run_adc(["run", str(prog), "--inputs", str(tmp_path / "in.npz")])
    assert rc == 1 and "'labels'" in err and "Traceback" not in err


@pytest.mark.parametrize("text,input_", [
    ('{"m": [[1, 2], [3]], "v": [1, 2], "k": [0, 1], "s": 2}', "m"),
    ('{"m": [[1, 2], [3, 4]], "v": [1, 2], "k": [0.5, 1], "s": 2}', "k"),
    ('{"m": [[1, 2], [3, 4]], "v": [1, 2], "k": [0, 1], "s": [2]}', "s"),
    ('{"m": [[1, 2], [3, 4]], "v": [1, 2], "k": [0, 1]}', "s"),
], ids=["ragged", "float_for_int", "scalar_shape", "missing"])
def test_json_data_errors(text, input_, tmp_path):
    (tmp_path / "in.json").write_text(text)
    rc, _, err = run_adc(["run", str(PROGRAMS / "json_inputs.tdsl"), "--inputs",
                          str(tmp_path / "in.json")])
    assert rc == 1 and f"'{input_}'" in err and "Traceback" not in err, err


def test_invalid_json_is_located(tmp_path):
    (tmp_path / "in.json").write_text('{"m": [[1, 2]],\n "v": }')
    rc, _, err = run_adc(["run", str(PROGRAMS / "json_inputs.tdsl"), "--inputs",
                          str(tmp_path / "in.json")])
    assert rc == 1 and err.startswith(f"{tmp_path / 'in.json'}:2:") and "Traceback" not in err


def test_tangent_of_the_wrong_shape_names_it(tmp_path):
    np.savez(tmp_path / "in.npz", **OK)
    np.savez(tmp_path / "t.npz", W=np.ones((2, 2)), b=np.ones(2))
    rc, _, err = run_adc(["run", str(PROG), "--mode", "jvp", "--inputs",
                          str(tmp_path / "in.npz"), "--tangents", str(tmp_path / "t.npz")])
    assert rc == 1 and "'W'" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["--wrt", "nope"], ["--wrt", "b,nope"],
])
def test_wrt_naming_no_input(argv, tmp_path):
    np.savez(tmp_path / "in.npz", **OK)
    rc, _, err = run_adc(["run", str(PROG), "--inputs", str(tmp_path / "in.npz"), *argv])
    assert rc in (1, 2) and "nope" in err and "Traceback" not in err


def test_missing_files(tmp_path):
    rc, _, err = run_adc(["run", str(tmp_path / "none.tdsl")])
    assert rc == 1 and "none.tdsl" in err and "Traceback" not in err
    rc, _, err = run_adc(["run", str(PROG), "--inputs", str(tmp_path / "none.npz")])
    assert rc == 1 and "none.npz" in err and "Traceback" not in err


# ---- bad command lines -------------------------------------------------------------------

BAD_ARGV = [
    [], ["run"], ["frobnicate", str(PROG)],
    ["run", str(PROG), "--mode", "sideways"],
    ["run", str(PROG), "--dtype", "f8"],
    ["run", str(PROG), "--bind", "B"],
    ["run", str(PROG), "--bind", "B=x"],
    ["run", str(PROG), "--bind", "B=3", "--bind", "B=4"],
    ["run", str(PROG), "--wrt", "1a"],
    ["run", str(PROG), "--device", "tpu"],
    ["run", str(PROG), "--remat", "bogus"],
    ["run", str(PROG), "--remat", "revolve:0"],
    ["run", str(PROG), "--bogus"],
    ["run", str(PROG), "--seed", "x"],
]


@pytest.mark.parametrize("argv", BAD_ARGV, ids=[" ".join(a[2:] or a[:1]) or "none"
                                                for a in BAD_ARGV])
def test_bad_command_line_exits_2(argv):
    rc, _, err = run_adc(argv)
    assert rc == 2, (rc, err)
    assert "Traceback" not in err and "error" in err


def test_bad_command_line_exits_2_in_a_subprocess():
    rc, _, err = run_adc(["run", str(PROG), "--mode", "sideways"], subprocess_=True)
    assert rc == 2 and "Traceback" not in err


# ---- running: forward mode, inputs files, remat ---------------------------------------

def test_forward_mode_writes_only_values(tmp_path):
    got = adc_out(tmp_path, PROGRAMS / "two_results.tdsl", "forward",
                  {"x": np.ones((3, 2), np.float32), "y": np.arange(2, dtype=np.float32)})
    assert sorted(got) == ["out0", "out1"]
    np.testing.assert_array_equal(got["out0"], [1, 1, 1])
    assert got["out1"] == 1 and got["out0"].dtype == np.float32


def test_json_inputs_match_npz(tmp_path):
    data = {"m": [[1.0, 2.0], [3.0, -1.5]], "v": [0.5, 2], "k": [1, 1], "s": 0.5}
    (tmp_path / "in.json").write_text(json.dumps(data))
    got = adc_out(tmp_path, PROGRAMS / "json_inputs.tdsl", "reverse", tmp_path / "in.json")
    m, v, s = np.array(data["m"]), np.array(data["v"]), 0.5
    rows = m[[1, 1]]
    assert got["out"].dtype == np.float32
    np.testing.assert_allclose(got["out"], (rows @ v).sum() * s + s ** 2, rtol=1e-6)
    np.testing.assert_allclose(got["grad_s"], (rows @ v).sum() + 2 * s, rtol=1e-6)
    np.testing.assert_allclose(got["grad_m"], [[0, 0], 2 * s * v], rtol=1e-6)
    assert sorted(got) == ["grad_m", "grad_s", "out"]


def test_f64_data_is_converted_to_declared_f32(tmp_path):
    data = {k: v.astype(np.float64) * 0.5 for k, v in OK.items()}
    got = adc_out(tmp_path, PROG, "reverse", data)
    ref = adc_out(tmp_path, PROG, "reverse", {k: v.astype(np.float32) for k, v in data.items()})
    for k in ref:
        assert got[k].dtype == np.float32
        np.testing.assert_array_equal(got[k], ref[k])


@pytest.mark.parametrize("policy", ["sqrt", "revolve:2", "budget:1KiB", "min-memory"])
def test_remat_policies_give_bit_identical_gradients(policy, tmp_path):
    rng = np.random.default_rng(1)
    data = {"xs": rng.standard_normal((6, 3)), "ys": rng.standard_normal(6),
            "Wx": rng.standard_normal((3, 4)), "Wh": rng.standard_normal((4, 4)) * 0.5,
            "b": rng.standard_normal(4), "wo": rng.standard_normal(4)}
    prog = PROGRAMS / "rnn_symbolic.tdsl"
    base = adc_out(tmp_path, prog, "reverse", data, extra=["--remat", "none"])
    got = adc_out(tmp_path, prog, "reverse", data, extra=["--remat", policy])
    assert sorted(got) == sorted(base)
    for k in base:
        np.testing.assert_array_equal(got[k], base[k])


def test_device_cpu_and_seeded_random_inputs(tmp_path):
    a = adc_out(tmp_path, PROG, "reverse", {**OK}, extra=["--device", "cpu"])
    b = adc_out(tmp_path, PROG, "reverse", {**OK})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
