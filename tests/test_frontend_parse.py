"""TDSL parsing: statement forms, spans, precedence and lexical rules."""
import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.frontend.tdsl import ast
from adcompiler.frontend.tdsl.parse import parse


def fn_body(src):
    return parse(src).defs[0].body


def expr_of(text):
    """The expression of ``y = TEXT`` inside a one-line function."""
    return fn_body(f"def f(x: f32) -> f32 {{ y = {text}; return y }}")[0].value


def show(e):
    """A compact s-expression of an expression tree."""
    if isinstance(e, ast.Number):
        return str(e.value)
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Neg):
        return f"(neg {show(e.operand)})"
    if isinstance(e, ast.Binary):
        return f"({e.op} {show(e.left)} {show(e.right)})"
    if isinstance(e, ast.Call):
        args = [show(a) for a in e.args] + [f"{k.name}={show(k.value)}" for k in e.kwargs]
        return f"({e.func} {' '.join(args)})"
    if isinstance(e, ast.Index):
        return f"([] {show(e.value)} {' '.join(show(s) for s in e.subscripts)})"
    if isinstance(e, ast.Slice):
        return ":".join("" if p is None else show(p) for p in (e.start, e.stop, e.step))
    if isinstance(e, ast.ListExpr):
        return "[" + " ".join(show(x) for x in e.items) + "]"
    if isinstance(e, (ast.String, ast.Bool)):
        return repr(e.value)
    raise TypeError(e)


@pytest.mark.parametrize("text, tree", [
    ("-x**2", "(neg (** x 2))"),
    ("a - b - c", "(- (- a b) c)"),
    ("a @ b * c", "(* (@ a b) c)"),
    ("a + b * c", "(+ a (* b c))"),
    ("a ** b ** c", "(** a (** b c))"),
    ("a ** -b", "(** a (neg b))"),
    ("-a * b", "(* (neg a) b)"),
    ("- - a", "(neg (neg a))"),
    ("a / b / c", "(/ (/ a b) c)"),
    ("a + b < c * d", "(< (+ a b) (* c d))"),
    ("(a < b) == c", "(== (< a b) c)"),
    ("x -1", "(- x 1)"),
    ("x-1e-3", "(- x 0.001)"),
    ("2.5E+4 * .5", "(* 25000.0 0.5)"),
    ("f(x)[0] ** 2", "(** ([] (f x) 0) 2)"),
    ("-W[i]", "(neg ([] W i))"),
    ("x[:, 1:3, ::2, -1, i]", "([] x :: 1:3: ::2 (neg 1) i)"),
    ("sum(x, axis=[0, 1], keepdims=true)", "(sum x axis=[0 1] keepdims=True)"),
    ('einsum("ij,jk->ik", a, b)', "(einsum 'ij,jk->ik' a b)"),
    ("cast(x, f16)", "(cast x f16)"),
    ("concat([a, b,], axis=0)", "(concat [a b] axis=0)"),
])
def test_precedence_and_forms(text, tree):
    assert show(expr_of(text)) == tree


def test_number_kinds():
    assert expr_of("3").value == 3 and isinstance(expr_of("3").value, int)
    assert isinstance(expr_of("3.").value, float)
    assert expr_of("1e3").value == 1000.0 and isinstance(expr_of("1e3").value, float)


def test_statement_forms_and_spans():
    src = ("def f(param x: f32[B, 3], n: i64) -> (f32, f32[]) {\n"
           "    a, b = g(x)   # comment\n"
           "    for i in range(B) { s = a; t = b }\n"
           "    return a, b\n"
           "}\n")
    (d,) = parse(src, "m.tdsl").defs
    assert isinstance(d, ast.FuncDef) and d.name == "f"
    assert [(p.name, p.is_param, p.type.dtype, p.type.shape) for p in d.params] == [
        ("x", True, "f32", ("B", 3)), ("n", False, "i64", ())]
    assert [(t.dtype, t.shape) for t in d.results] == [("f32", ()), ("f32", ())]
    assign, loop, ret = d.body
    assert [t.name for t in assign.targets] == ["a", "b"]
    assert (assign.span.line, assign.span.col) == (2, 5)
    assert assign.value.op_span.col == 12
    assert loop.var.name == "i" and loop.count == "B" and len(loop.body) == 2
    assert (loop.span.line, loop.span.col, loop.close_span.col) == (3, 5, 38)
    assert [v.id for v in ret.values] == ["a", "b"] and ret.span.col == 5
    assert (d.close_span.line, d.close_span.col) == (5, 1)


def test_newlines_inside_brackets_are_ignored():
    src = ("def f(x: f32[\n  3],\n  y: f32) -> (\n f32,\n f32) {\n"
           "  z = sum(x,\n   axis=0\n  ) + [1,\n 2][0]\n"
           "  return z,\n y\n}\n")
    with pytest.raises(AdcError):
        parse(src)  # `return z,` then a newline outside brackets ends the statement
    src = src.replace("return z,\n y", "return (z), (\ny)")
    d = parse(src).defs[0]
    assert len(d.body) == 2 and len(d.body[1].values) == 2


def test_semicolons_and_blank_lines():
    src = "\n\n# top\ndef f(x: f32) -> f32 {;; y = x ;\n\n z = y; return z ;}\n;\n"
    body = parse(src).defs[0].body
    assert [type(s).__name__ for s in body] == ["Assign", "Assign", "Return"]


def test_rules_and_loop_literal_count():
    src = ("def f(x: f32) -> f32 { for k in range(4) { x = x * 2 }; return x }\n"
           "grad f(x, y, dy) { return dy }\ntangent f(x, dx) { return dx }")
    f, g, t = parse(src).defs
    assert f.body[0].count == 4
    assert (g.kind, g.name, [p.name for p in g.params]) == ("grad", "f", ["x", "y", "dy"])
    assert (t.kind, [p.name for p in t.params]) == ("tangent", ["x", "dx"])


def test_brace_on_next_line():
    src = "def f(x: f32) -> f32\n{\n  for i in range(2)\n  {\n    x = x + 1\n  }\n  return x\n}"
    assert len(parse(src).defs[0].body) == 2


def test_string_escapes():
    e = expr_of(r'einsum("a\"b\\c", x)')
    assert e.args[0].value == 'a"b\\c'


def test_scalar_type_forms():
    d = parse("def f(a: f32, b: f32[], c: bool[2]) -> f32 { return a }").defs[0]
    assert [p.type.shape for p in d.params] == [(), (), (2,)]
