"""The recursive-descent parser against lark's: on every program lark parses, the same tree
(every node, value and span); on every text lark rejects, no tree (lark's error is then the
one reported). Inputs: the samples, the conformance programs, long chains, and mutations of
them by the fuzz target's mutator."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from adcompiler.diagnostics import AdcError, normalize_newlines
from adcompiler.frontend.tdsl import ast, descent
from adcompiler.frontend.tdsl.parse import parse_lark

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
from mutate import SOURCES, Mutator  # noqa: E402  (the fuzz target's mutator)


def same(a, b, path="tree") -> None:
    """Assert two syntax trees are equal field by field (nodes compare by identity)."""
    assert type(a) is type(b), (path, a, b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), (path, a, b)
        for k, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{k}]")
    elif dataclasses.is_dataclass(a) and not isinstance(a, ast.Span):
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    else:
        assert a == b, (path, a, b)


def outcome(text: str) -> str:
    """"both", "neither" or "lark only"; fails when descent parses what lark does not, or
    parses it differently."""
    text = normalize_newlines(text)
    try:
        expected = parse_lark(text)
    except AdcError:
        expected = None
    try:
        got = descent.parse(text)
    except (descent.Unsupported, RecursionError, AdcError):
        got = None
    except Exception as e:  # TreeError: lark must have rejected the text too
        assert expected is None, (e, text)
        got = None
    if got is None:
        return "neither" if expected is None else "lark only"
    assert expected is not None, f"descent parsed what lark rejects:\n{text}"
    same(got, expected)
    return "both"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_programs(path):
    assert outcome(path.read_text(encoding="utf-8")) == "both"


@pytest.mark.parametrize("text", [
    "",
    "\n\n;",
    "def f(x: f32, param w: f32[B, 3,],) -> (f32, f32[],)\n\n{ ;\n y, z = f(w[:, ::-1, 1:, :2:], "
    "x, axis=[0, 1,], keepdims=true,); return -y ** -2 @ z, x <= (y)[0] }",
    "grad f(x, dy,)\n{\n}\ntangent g() { return \"a\\\"b\\n\" }",
    "def f(x: f32) -> f32 { for i in range(3) { x = x * 2 }; for j in range(T)\n{}; return x }",
    "def f(x: f32) -> f32 { return f(\n x,\n [1.5e3,\n .5, 7.]\n)[\n0\n] } # end",
    "def f(x: f32) -> f32 {\treturn x\f}\n\t ",
])
def test_forms(text):
    assert outcome(text) == "both"


@pytest.mark.parametrize("text", [
    "def f(x: f32) -> f32 { return a < b < c }",
    "def f(x: f32) -> f32 { return range(3) }",
    "def f(x: f32) -> f32 { in = 1 }",
    "def f(x: f32) -> f32 { return f(a=1, 2) }",
    "def f(x: f32) -> f32 { return f(a=1, a=2) }",
    "def f(x: f32[2.5]) -> f32 { return x }",
    "def f(x: f32) -> f32 { return x[1:2:3:4] }",
    "def f(x: f32) -> f32 { return x[] }",
    "def f(x: f32) -> f32 { return (x)(1) }",
    "def f(x: f32) -> f32 { return 1e999 }",
    "def f(x: f32) -> f32 { return x, }",
    "def f(x: f32) -> f32 { a = 1 b = 2 }",
    "def f(x: f32) -> f32 { return x . 5 }",
    "def f(x: f32) -> f32 { for i in range(1.5) {} }",
    "def f(x: f32)\n-> f32 { return x }",
    "def f(x: f32) -> f32 { return \"a }",
])
def test_rejected_alike(text):
    assert outcome(text) == "neither"


def test_deep_nesting_left_to_lark():
    text = "def f(x: f32) -> f32 { return " + "(" * 3000 + "x" + ")" * 3000 + " }"
    assert outcome(text) in ("both", "lark only")


def test_long_chain():
    body = "".join(f"    h = {'tanh(h)' if k % 2 else 'h * w - 1'}\n" for k in range(500))
    assert outcome(f"def f(x: f32, w: f32) -> f32 {{\n    h = x\n{body}    return h\n}}\n") \
        == "both"


def test_mutations():
    m = Mutator(7, sizes=(10, 50))
    counts = {"both": 0, "neither": 0, "lark only": 0}
    for _ in range(600):
        text = m.tdsl_case() if m.rng.random() < 0.85 else m.random_text()
        counts[outcome(text)] += 1
    # lark alone parses only what nests past the Python stack
    assert counts["both"] > 50 and counts["neither"] > 150, counts
    assert counts["lark only"] <= counts["both"] // 10, counts
