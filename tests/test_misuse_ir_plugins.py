"""IR files and plugins as an attacker or a careless user writes them: attribute values of
the wrong kind (the verifier checks each against its op's declared options), plugin files
whose names clash with others. Errors with a message, never an internal error (exit 3) or
a plugin silently not run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from adcompiler.cli import main
from adcompiler.cli.compile import compile_program
from adcompiler.ir.printer import print_module

SAMPLES = Path(__file__).parent.parent / "samples"


def adc(capsys, *args) -> tuple[int, str]:
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    return rc, err


@pytest.fixture(scope="module")
def ir_texts():
    return {name: print_module(compile_program(str(SAMPLES / f"{name}.tdsl"), "reverse").module)
            for name in ("mlp", "rnn", "deep_mlp")}


@pytest.mark.parametrize("sample, old, new, fragment", [
    ("mlp", "keepdims = false", 'keepdims = "yes"',
     "'mean' op option 'keepdims' must be true or false, got \"yes\""),
    ("rnn", 'n = "T"', 'n = "not a dim"', "'for' op has trip count n = 'not a dim'"),
    ("rnn", 'n = "T"', "n = -3", "'for' op has a negative trip count n = -3"),
    ("rnn", "value = 2.0", 'value = "two"', "'const' op option 'value' must be a number"),
    ("mlp", "axis = -1", "axis = 1.5", "'cross_entropy' op option 'axis' must be an int"),
    ("mlp", 'dtype = "f32"', 'dtype = "f99"', "option 'dtype' must be a dtype"),
    ("mlp", "shape = (1,)", 'shape = ("a b",)', "option 'shape' must be a list of dimensions"),
    ("mlp", "keepdims = false}", "keepdims = false, recompute = 3}",
     "annotation 'recompute' must be true or false"),
    ("mlp", 'adjoint_of = "mlp"', "adjoint_of = 3", "attribute 'adjoint_of' must be a "
                                                    "function name"),
    ("mlp", 'wrt = ("W1", "b1", "W2", "b2")', "wrt = 5", "attribute 'wrt' must be a list"),
])
@pytest.mark.parametrize("emit", ["ir", "python", "cuda"])
def test_an_attribute_of_the_wrong_kind_is_a_located_error(sample, old, new, fragment, emit,
                                                           ir_texts, tmp_path, capsys):
    text = ir_texts[sample]
    assert old in text
    path = tmp_path / "m.ir"
    path.write_text(text.replace(old, new, 1))
    rc, err = adc(capsys, "compile", path, "--emit", emit)
    assert rc == 1 and fragment in err


def test_stacked_of_the_wrong_kind(tmp_path, capsys):
    src = ("group L { W: f32[3, 3] }\ngroup M { layers: L[2] }\n"
           "def f(x: f32[B, 3], param m: M) -> f32 {\n    return mean(x @ m.layers.W[0])\n}\n")
    (tmp_path / "g.tdsl").write_text(src)
    text = print_module(compile_program(str(tmp_path / "g.tdsl"), "forward").module)
    assert 'stacked = {"m.layers": 2}' in text
    (tmp_path / "g.ir").write_text(text.replace('stacked = {"m.layers": 2}',
                                                "stacked = [1.5, 2]"))
    rc, err = adc(capsys, "compile", tmp_path / "g.ir", "--mode", "hvp")
    assert rc == 1 and "attribute 'stacked' must be a map of group paths" in err


# ---- plugins --------------------------------------------------------------------------

PLUGIN = "import adcompiler as adc\nadc.register_op({name!r}, lambda ts, a: ts[0], " \
         "kernel=lambda xp, x: x)\n"


def _run(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adcompiler", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_second_plugin_file_of_the_same_base_name_is_an_error(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "ops.py").write_text(PLUGIN.format(name="op_a"))
    (tmp_path / "b" / "ops.py").write_text(PLUGIN.format(name="op_b"))
    prog = tmp_path / "p.tdsl"
    prog.write_text("def f(x: f32[3]) -> f32 {\n    return sum(op_b(x))\n}\n")
    r = _run("run", prog, "--plugin", "a/ops.py", "--plugin", "b/ops.py", cwd=tmp_path)
    assert r.returncode == 1 and "plugin 'b/ops.py' has the base name of the plugin file" \
        in r.stderr, r.stderr
    r = _run("run", prog, "--plugin", "a/ops.py,a/ops.py,b/ops.py", cwd=tmp_path)
    assert r.returncode == 1 and "has the base name" in r.stderr
    r = _run("run", prog, "--plugin", "b/ops.py", "--plugin", "b/ops.py", "--mode",
             "forward", cwd=tmp_path)
    assert r.returncode == 0, r.stderr   # the same file twice: loaded once


def test_a_plugin_named_like_a_loaded_module_is_an_error(tmp_path):
    (tmp_path / "json.py").write_text(PLUGIN.format(name="op_json"))
    prog = tmp_path / "p.tdsl"
    prog.write_text("def f(x: f32[3]) -> f32 {\n    return sum(op_json(x))\n}\n")
    r = _run("run", prog, "--plugin", tmp_path / "json.py", cwd=tmp_path)
    assert r.returncode == 1 and "is the name of a module already imported" in r.stderr, \
        r.stderr
