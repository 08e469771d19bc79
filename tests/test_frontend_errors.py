"""Every user error is an `AdcError` at the right line and column with a useful message.

Each file in tests/frontend/bad/ starts with ``# expect: LINE:COL: MESSAGE FRAGMENT``; the
table below holds more cases inline (``H`` is a common function header on line 1).
"""
import pathlib
import random

import pytest

from adcompiler.diagnostics import AdcError, render
from adcompiler.frontend import compile_file, compile_source

BAD = pathlib.Path(__file__).parent / "frontend" / "bad"


def error_of(src, name="m.tdsl"):
    with pytest.raises(AdcError) as info:
        compile_source(src, name)
    e = info.value
    assert e.loc is not None and e.loc.file == name
    return e


@pytest.mark.parametrize("path", sorted(BAD.glob("*.tdsl")), ids=lambda p: p.stem)
def test_bad_files(path):
    header = path.read_text().splitlines()[0]
    assert header.startswith("# expect: ")
    line, col, fragment = header[len("# expect: "):].split(":", 2)
    with pytest.raises(AdcError) as info:
        compile_file(path)
    e = info.value
    assert (e.loc.file, e.loc.line, e.loc.col) == (str(path), int(line), int(col)), e.message
    assert fragment.strip() in e.message


H = "def f(x: f32[3], y: f32[4], i: i64, n: f32) -> f32[3] {\n"
G2 = "\ndef g(x: f32[3]) -> (f32[3], f32) { return x, sum(x) }"
G1 = "\ndef g(x: f32[3]) -> f32[3] { return x }"
ONE = "def f(x: f32) -> f32 { "

CASES = [
    # names, ops, arity and options
    (H + "  return z\n}", "2:10", "unknown name 'z'"),
    (H + "  return x + y\n}", "2:12", "operator '+': shapes [3] and [4] cannot be broadcast"),
    (H + "  return foo(x)\n}", "2:10", "unknown function or op 'foo'"),
    (H + "  return exp(x, y)\n}", "2:17", "exp(x) takes at most 1 positional argument, got 2"),
    (H + "  return add(x)\n}", "2:10", "add needs 2 operands (a, b), got 1"),
    (H + "  return sum(x, axs=0)\n}", "2:17", "sum has no option 'axs' (options: axis, keepdims)"),
    (H + "  return sum(x, axis=1.5)\n}", "2:22",
     "option 'axis' of sum expects an integer or a list of integers, got 1.5"),
    (H + "  return sum(x, axis=n)\n}", "2:22", "'n' is a tensor value; an option must be a"),
    (H + "  return cast(x, f17)\n}", "2:18", "option 'dtype' of cast expects a dtype"),
    (H + "  return reshape(x, [n])\n}", "2:22", "'n' is a tensor value"),
    (H + '  return zeros([3], dtype="f32")\n}', "2:27", 'got the string "f32"'),
    (ONE + "return sum(x, 0, false, 1) }", "1:48", "takes at most 3 positional arguments"),
    (ONE + "return sum(x, axis=0, axis=1) }", "1:46", "keyword argument 'axis' is repeated"),
    (ONE + "return sum(x, 0, axis=0) }", "1:41", "argument 'axis' of sum is given twice"),
    (ONE + "return leaky_relu(x, slope=x) }", "1:51", "an option must be a constant"),
    (ONE + "return reshape(x) }", "1:31", "reshape needs the option 'shape'"),
    (ONE + "return exp(x, axis=1) }", "1:38", "exp has no option 'axis' (options: none)"),
    (ONE + "return exp(i) }", "1:35", "unknown name 'i'"),
    ("def f(x: f32[B]) -> f32 { return exp(B) }", "1:38", "'B' is a symbolic dimension"),
    ("def f(xs: f32) -> f32 { return exp(x) }", "1:36", "unknown name 'x'; did you mean 'xs'?"),
    # types and shapes
    (H + "  return sum(x)\n}", "2:10", "return value 1 has type f32[], but function 'f' must "
                                       "return f32[3]"),
    ("def f(x: f32, y: f64) -> f32 { return x + y }", "1:41",
     "operator '+': mixed float dtypes f32 and f64; use cast"),
    ("def f(x: f32) -> f32 { return x < 1 }", "1:31", "has type bool[]"),
    ("def f(x: f32[B]) -> f32[B] { return reshape(x, [C]) }", "1:37", "cannot reshape f32[B]"),
    ("def f(x: f33) -> f32 { return x }", "1:10", "unknown dtype 'f33'"),
    # statements and returns
    (H + "  return x, x\n}", "2:3", "function 'f' declares 1 result, but the return gives 2"),
    (H + "  return x\n  y = x\n}", "3:3", "statement after return"),
    (H + "  z = x\n}", "3:1", "missing return at the end of function 'f'"),
    (H + "  a, b = x\n  return a\n}", "2:10", "2 names are assigned, but the right side gives"),
    (H + "  a, a = g(x)\n  return a\n}" + G2, "2:6", "'a' is assigned twice"),
    (H + "  a = g(x)\n  return a\n}" + G2, "2:7", "'g' returns 2 values; unpack them"),
    (H + "  a, b, c = g(x)\n  return a\n}" + G2, "2:13", "'g' returns 2 values, but 3 names"),
    # loops
    (H + "  for i in range(3) { x = x }\n  return x\n}", "2:7", "loop index 'i' is already "
                                                             "bound"),
    (H + "  for k in range(3) { k = 1 }\n  return x\n}", "2:23", "cannot rebind the loop index"),
    (H + "  for k in range(3) { t = x }\n  return t\n}", "3:10", "'t' is local to the body of "
                                                            "the loop at line 2"),
    (H + "  for k in range(3) { x = sum(x) }\n  return x\n}", "2:23",
     "loop-carried 'x' is f32[3] before the loop but f32[] after an iteration"),
    (H + "  for k in range(n) { x = x }\n  return x\n}", "2:18", "range() needs an integer "
                                                             "literal or a symbolic dimension"),
    (H + "  for k in range(3) { return x }\n  return x\n}", "2:23", "return inside a loop"),
    # indexing
    (H + "  return x[0.5]\n}", "2:12", "an index must be an integer, got 0.5"),
    (H + "  return x[n]\n}", "2:12", "an index must be an integer scalar, got f32[]"),
    (H + "  return x[1, 2]\n}", "2:11", "too many indices"),
    (H + "  return x[i:]\n}", "2:12", "a slice bound must be an integer constant"),
    (H + "  return x[::0]\n}", "2:14", "a slice step cannot be zero"),
    (H + "  return 1[0]\n}", "2:11", "a number cannot be indexed"),
    # values that are not tensors
    (H + "  return x * [1, 2]\n}", "2:14", "a list is not a tensor"),
    (H + '  return x * "s"\n}', "2:14", "strings are only op options"),
    (H + "  return true\n}", "2:10", "must return f32[3]"),
    # calls, recursion, duplicates
    (H + "  return g(y)\n}" + G1, "2:12", "argument 'x' of 'g' must be f32[3], got f32[4]"),
    (H + "  return g(x, x)\n}" + G1, "2:10", "function 'g' takes 1 argument, got 2"),
    (H + "  return g(x=x)\n}" + G1, "2:12", "function 'g' takes no keyword arguments"),
    ("def f(x: f32) -> f32 { return f(x) }", "1:31", "recursive call f -> f"),
    ("def f(x: f32) -> f32 { return x }\ndef f(x: f32) -> f32 { return x }", "2:5",
     "function 'f' is already defined at line 1"),
    ("def f(x: f32, x: f32) -> f32 { return x }", "1:15", "duplicate parameter 'x'"),
    # custom rules
    ("grad g(x, y, dy) { return dy }\ndef f(x: f32) -> f32 { return x }", "1:6",
     "grad rule for unknown function 'g'"),
    ("def f(x: f32) -> f32 { return x }\ngrad f(x, y, dy) { return dy, dy }", "2:20",
     "grad rule for 'f' must return 1 cotangent (one per input of 'f'), got 2"),
    ("def f(x: f32) -> f32 { return x }\ngrad f(x, y, dy) { return dy }\n"
     "grad f(x, y, dy) { return dy }", "3:6", "function 'f' already has a grad rule (line 2)"),
    ("def f(x: f32) -> f32 { return x }\ntangent f(x, dx, z) { return dx }", "2:9",
     "tangent rule for 'f' takes 2 parameters (1 input, 1 input tangent), got 3"),
    ("def f(x: f32) -> f32 { return x }\ntangent f(x, dx) { return dx, 1 }", "2:20",
     "tangent rule for 'f' must return 1 tangent (one per result of 'f'), got 2"),
    ("def f(x: f32[2]) -> f32 { return sum(x) }\ngrad f(x, y, dy) { return dy }", "2:27",
     "return value 1 has type f32[], but grad rule for 'f' must return f32[2]"),
    # modules and constants
    ("", "1:1", "the file defines no function"),
    ("grad f(x) { return x }", "1:1", "the file defines no function"),
    (ONE + "return 1e400 }", "1:31", "number 1e400 is too large"),
    (ONE + "return 1 / 0 }", "1:33", "division by zero"),
    (ONE + "return 10 ** 10 ** 10 }", "1:34", "the constant is too large"),
    ("def f(x: f16) -> f16 { return x * 70000 }", "1:35", "70000 is out of range for f16"),
    ("def f(x: i32) -> i32 { return x * 3000000000 }", "1:35", "out of range for i32"),
    # syntax
    (ONE + "return x +\n}", "1:34", "unexpected end of line; expected an expression"),
    (ONE + "y = 1 z = 2 }", "1:30", "unexpected name 'z'; expected an operator, ';', '}' or "
                                  "a newline"),
    ("x = 3", "1:1", "unexpected name 'x'; expected ';', 'def', 'grad', 'group', 'tangent'"),
    (ONE + "y < 2 }", "1:26", "unexpected '<'; expected ',', '.' or '='"),
    (ONE + "return }", "1:31", "unexpected '}'; expected an expression"),
    (ONE + "y = x[1:2:3:4] }", "1:35", "unexpected ':'; expected ',' or ']'"),
    (ONE + "for i in range(x+1) {} }", "1:40", "unexpected '+'; expected ')'"),
    ("def f(x: f32) f32 {}", "1:15", "unexpected name 'f32'; expected '->'"),
    (ONE + "y = f(a=1, b) }", "1:35", "positional argument after keyword arguments"),
    (ONE + "y = 1" + "0" * 500 + " }", "1:28", "integer literal is too large"),
    (ONE + "y = \x00 }", "1:28", "unexpected character '\\x00'"),
    (ONE + "y = x é }", "1:30", "unexpected character 'é'"),
    ("def f(x: f32) -> f32 {\n  y = (x\n  + 1\n}", "4:1", "unexpected '}'; expected ')'"),
    ("def f(x: f32) -> f32 {\r\n  y = x\r\n  return q\r\n}", "3:10", "unknown name 'q'"),
    ("def f(x: f32) -> f32 {\r  y = x\r  return q }", "3:10", "unknown name 'q'"),
    ("def for(x: f32) -> f32 { return x }", "1:5", "unexpected keyword 'for'; expected a name"),
]


@pytest.mark.parametrize("src, where, fragment", CASES)
def test_error_table(src, where, fragment):
    e = error_of(src)
    assert f"{e.loc.line}:{e.loc.col}" == where, e.message
    assert fragment in e.message


def test_non_utf8_file_is_located(tmp_path):
    p = tmp_path / "bad.tdsl"
    p.write_bytes(b"def f(x: f32) -> f32 {\n  y = x  # caf\xc3\xa9 \xff\n  return y\n}\n")
    with pytest.raises(AdcError) as info:
        compile_file(p)
    assert (info.value.loc.line, info.value.loc.col) == (2, 17)
    assert "not valid UTF-8" in info.value.message


def test_missing_file():
    with pytest.raises(AdcError, match="cannot read"):
        compile_file("/nonexistent/x.tdsl")


def test_render_shows_caret():
    src = "def f(x: f32) -> f32 {\n  return x + q\n}\n"
    text = render(error_of(src), src)
    assert text.splitlines() == ["m.tdsl:2:14: error: unknown name 'q'",
                                 "  return x + q", "             ^"]


def test_deep_nesting_is_an_error_not_a_crash():
    deep = "def f(x: f32) -> f32 { return " + "exp(" * 2000 + "x" + ")" * 2000 + " }"
    assert "nested too deeply" in error_of(deep).message
    loops = "def f(x: f32) -> f32 {\n" + "".join(f"for i{k} in range(2) {{\n" for k in range(
        300)) + "x = x\n" + "}\n" * 300 + "return x }"
    assert "nested too deeply" in error_of(loops).message
    # long flat chains are fine
    compile_source("def f(x: f32) -> f32 { return " + "x + " * 5000 + "x }")
    compile_source("def f(x: f32) -> f32 { return " + "(" * 3000 + "x" + ")" * 3000 + " }")
    compile_source("def f(x: f32) -> f32 { return " + "-" * 3000 + "x }")


SEED = """
def f(param x: f32[B, 3], y: f32) -> f32[B] {
  z = -x**2 + exp(x) * 2; w = sum(x[0, 1:3]) + sum(x[:, ::2])
  s = 0
  for i in range(B) { s = s + z[i]; t = s * 2.5e-1 }
  r = reshape(broadcast_to(x, [2, B, 3]), [-1, B]) > 1
  return sum(z * y, axis=1) + sum(s) / sum(x, axis=[0, 1], keepdims=false)
}
def g(x: f32[B, 3]) -> (f32[B], f32) {
  a = f(x, 1.5); q, p = h(x)
  return a, sum(a)
}
def h(x: f32[B, 3]) -> (f32, f32) { return sum(x), sum(exp(x)) }
grad f(x, y, out, dout) { return broadcast_to(reshape(dout, [B, 1]), [B, 3]), sum(dout) }
tangent f(x, y, dx, dy) { return sum(dx, axis=1) }
"""
PIECES = ["(", ")", "[", "]", "{", "}", ",", ";", "\n", "=", "-", "**", "@", "<", "for",
          "return", "def", "grad", "x", "i", "B", "0", "1.5", '"s"', "true", "sum(",
          "range(", ":", "f32", "[]", "1e999", "9" * 30, "\x00", "param", "-1", "s"]


def test_mutated_programs_only_raise_adc_errors():
    compile_source(SEED)
    rng = random.Random(1234)
    for _ in range(600):
        s = SEED
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(s))
            r = rng.random()
            if r < 0.3:
                s = s[:k] + s[k + rng.randint(1, 5):]
            elif r < 0.7:
                s = s[:k] + rng.choice(PIECES) + s[k:]
            else:
                j = rng.randrange(len(s))
                s = s[:k] + s[j:j + rng.randint(1, 20)] + s[k:]
        try:
            compile_source(s, "fz.tdsl")
        except AdcError as e:
            assert e.loc is not None and "internal" not in e.message, (e.message, s)
