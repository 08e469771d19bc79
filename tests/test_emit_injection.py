"""Strings from a program reach generated source only as data: file names of ``.tdsl``
programs, locations, function and value names of IR text, and source lines quoted in
comments, with line breaks of every kind, quotes, backslashes, NUL, U+2028 and undecodable
bytes. The emitted Python (and the CUDA module's Python) must compile, hold nothing but the
expected definitions, run nothing when imported, and compute what ``adc run`` computes."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli import main
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module

PAYLOAD = "__import__('pathlib').Path('PWNED').touch()"
# file names: each tries to end the comment that quotes it and start a statement
NAMES = {
    "newline": f"a\n{PAYLOAD}\n#.tdsl",
    "carriage return": f"b\r{PAYLOAD}\r#.tdsl",
    "quotes and backslash": "c\"\"\"'''\\\\.tdsl",
    "form feed, vertical tab, NEL": f"d\x0c{PAYLOAD}\x0b\x85.tdsl",
    "U+2028 and U+2029": f"e\u2028{PAYLOAD}\u2029.tdsl",
}
# comments holding NUL, a line separator, a form feed (only LF, CR LF and CR end a line)
SOURCE = (f"def f(param x: f32[3], param w: f32[3]) -> f32 {{  # NUL \x00 FF \x0c{PAYLOAD}\n"
          f"    h = x * w  # U+2028 \u2028{PAYLOAD}\n"
          "    for i in range(2) {\n"
          "        h = tanh(h) * w\n"
          "    }\n"
          "    return sum(h * x)\n"
          "}\n")
INPUTS = {"x": np.array([0.3, -0.2, 0.5], np.float32), "w": np.array([1.1, 0.4, -0.7], np.float32)}


def check_module(text: str, allowed=(ast.Import, ast.ImportFrom, ast.FunctionDef, ast.If,
                                     ast.Expr, ast.Assign)) -> ast.Module:
    """`text` is UTF-8 Python whose top level holds only `allowed` statements, and no call
    at the top level except building kernels."""
    text.encode("utf-8")
    tree = ast.parse(text)
    for node in tree.body:
        assert isinstance(node, allowed), ast.dump(node)[:200]
        if isinstance(node, ast.Expr):
            assert isinstance(node.value, ast.Constant), ast.dump(node)[:200]
    return tree


def run_emitted(text: str, fn: str, args: list):
    namespace = {"__name__": "emitted"}
    exec(compile(text, "<emitted>", "exec"), namespace)
    assert not Path("PWNED").exists()
    return namespace[fn](*args)


def compile_to(tmp_path, capsys, prog: str, *options: str) -> str:
    out = tmp_path / "out.txt"
    rc = main(["compile", prog, *options, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    return out.read_text(encoding="utf-8")


def reference(tmp_path, capsys, prog: str) -> dict:
    np.savez(tmp_path / "in.npz", **INPUTS)
    assert main(["run", prog, "--inputs", str(tmp_path / "in.npz"), "--out",
                 str(tmp_path / "ref.npz")]) == 0, capsys.readouterr().err
    return dict(np.load(tmp_path / "ref.npz"))


@pytest.mark.parametrize("kind", sorted(NAMES))
def test_tdsl_file_names_and_comments(tmp_path, capsys, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    prog = tmp_path / NAMES[kind]
    prog.write_text(SOURCE, encoding="utf-8")
    want = reference(tmp_path, capsys, str(prog))
    text = compile_to(tmp_path, capsys, str(prog), "--emit", "python")
    check_module(text)
    value, gx, gw = run_emitted(text, "f_grad", [INPUTS["x"], INPUTS["w"]])
    np.testing.assert_allclose(value, want["out"], rtol=1e-6)
    np.testing.assert_allclose(gw, want["grad_w"], rtol=1e-6)
    assert "return sum(h * x)" in text    # the source line is still quoted
    hvp = compile_to(tmp_path, capsys, str(prog), "--mode", "hvp", "--emit", "python")
    check_module(hvp)
    run_emitted(hvp, "f_hvp", [INPUTS["x"], INPUTS["w"], INPUTS["x"], INPUTS["w"]])
    cuda = compile_to(tmp_path, capsys, str(prog), "--emit", "cuda")
    check_module(cuda)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_undecodable_file_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prog = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xff\xfe.tdsl")
    Path(prog).write_text(SOURCE, encoding="utf-8")
    for emit in ("python", "cuda", "ir"):
        text = compile_to(tmp_path, capsys, prog, "--emit", emit)
        if emit != "ir":
            check_module(text)
    ir = compile_to(tmp_path, capsys, prog, "--emit", "ir")
    assert "\\udcff" in ir                # escaped, and read back as the same name
    assert print_module(parse_module(ir)).rstrip("\n") == ir.rstrip("\n")


EVIL_IR = r"""func @"g\"\"\"\n__import__('os')\n"(%"y\n'''\"": f32[3] {param}) -> (f32[]) loc("m\n__import__('pathlib').Path('PWNED').touch()\n#":1:1) {
  %0 = mul(%"y\n'''\"", %"y\n'''\"") : f32[3] loc("x\r__import__('pathlib').Path('PWNED').touch()\r#\u2028\u0000\u0085":2:15)
  %"ß²\u2028" = sum(%0) {axis = none, keepdims = false} : f32[] loc("/etc/passwd":1:1)
  return(%"ß²\u2028") loc("\"\"\"":6:5)
}
"""


def test_ir_locations_and_names(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prog = tmp_path / "evil.ir"
    prog.write_text(EVIL_IR, encoding="utf-8")
    text = compile_to(tmp_path, capsys, str(prog), "--mode", "forward", "--emit", "python")
    tree = check_module(text)
    fns = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(fns) == 2 and all(n.isascii() and n.isidentifier() for n in fns)
    assert "root:" not in text            # a location names a file: it is not quoted
    (value,) = run_emitted(text, fns[0], [INPUTS["x"]])
    np.testing.assert_allclose(value, np.sum(INPUTS["x"] ** 2), rtol=1e-6)
    check_module(compile_to(tmp_path, capsys, str(prog), "--mode", "forward", "--emit",
                            "cuda"))
    ir = compile_to(tmp_path, capsys, str(prog), "--mode", "forward", "--emit", "ir")
    assert "\u2028" not in ir and "\x00" not in ir and "\x85" not in ir
    again = print_module(parse_module(ir))
    assert again.rstrip("\n") == ir.rstrip("\n")
    assert not (tmp_path / "PWNED").exists()


def test_names_that_python_reserves(tmp_path, capsys):
    """TDSL names that are Python keywords or the builtins the emitted code calls."""
    prog = tmp_path / "kw.tdsl"
    prog.write_text("def print(str: f32[lambda], float: f32[lambda]) -> f32 {\n"
                    "    np = str * float\n"
                    "    ValueError = np[1:]\n"
                    "    K = ValueError\n"
                    "    for dims in range(2) {\n"
                    "        K = K * 1.0\n"
                    "    }\n"
                    "    return sum(K)\n"
                    "}\n")
    text = compile_to(tmp_path, capsys, str(prog), "--mode", "forward", "--emit", "python")
    tree = check_module(text)
    (fn,) = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name != "_main"]
    assert fn != "print"
    a, b = np.arange(4.0, dtype=np.float32), np.ones(4, np.float32)
    (value,) = run_emitted(text, fn, [a, b])
    assert value == 6.0


def test_dot_strings_hold_no_control_characters(tmp_path, capsys):
    prog = tmp_path / "evil.ir"
    prog.write_text(EVIL_IR, encoding="utf-8")
    text = compile_to(tmp_path, capsys, str(prog), "--mode", "forward", "--emit", "dot")
    assert not any(c in text for c in "\x00\r\x85\u2028")
    assert text.startswith('digraph "g\\"\\"\\"\\n__import__(\'os\')\\n" {\n')
