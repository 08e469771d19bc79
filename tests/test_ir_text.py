"""The textual IR: round trips of Builder-built modules, golden text and parse errors.

The sample modules and `assert_same_module` are shared with `test_verifier`."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from adcompiler.diagnostics import AdcError, Loc
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module, Op
from adcompiler.ir.parser import parse_function, parse_module
from adcompiler.ir.printer import format_attr, print_function, print_module, print_op
from adcompiler.ir.types import TensorType

GOLDEN = Path(__file__).parent / "golden" / "ir"

F = "model.tdsl"


def t(dtype, *shape):
    return TensorType(dtype, tuple(shape))


def simple_module() -> Module:
    """f(x: f32[B, 3], param W: f32[3]) -> f32[B, 1] with symbolic dims in shape attrs."""
    body = Block([t("f32", "B", 3), t("f32", 3)], ["x", "W"])
    f = Function("f", body, [t("f32", "B", 1)], params={"W"}, loc=Loc(F, 1, 1))
    b = Builder(body, Loc(F, 2, 5))
    x, W = body.args
    h = b.emit("mul", x, W)
    h.name = "h"
    h2 = b.emit("add", h, b.const(1.0, "f32"))
    h2.name = "h"  # a rebinding of `h`: printed as %h.1
    with b.at(Loc(F, 3, 9)):
        s = b.emit("sum", b.emit("exp", h2), axis=(1,), keepdims=False)
    r = b.emit("reshape", s, shape=["B", 1])
    b.ret([r])
    m = Module()
    m.add(f)
    return m


def loop_module() -> Module:
    """Nested scan loops: an outer loop over T rows of xs with an inner loop of 3 steps."""
    body = Block([t("f32", 4), t("f32", "T", 4)], ["h0", "xs"])
    f = Function("rnn", body, [t("f32", 4), t("f32", "T", 4)], params={"h0"})
    b = Builder(body, Loc(F, 10, 3))
    h0, xs = body.args
    outer = Block([t("i64"), t("f32", 4), t("f32", 4)], ["i", "h", "x"])
    with b.inside(outer), b.at(Loc(F, 11, 5)):
        _, h, x = outer.args
        inner = Block([t("i64"), t("f32", 4)], ["j", "h"])
        with b.inside(inner), b.at(Loc(F, 12, 7)):
            g = b.emit("add", inner.args[1], x)  # captures x from the outer body
            g.name = "h"
            b.yield_([g])
        (h2,) = b.for_(3, inner, [h], result_names=["h"]).results
        y = b.emit("neg", h2)
        y.name = "y"
        b.yield_([h2, y])
    hT, ys = b.for_("T", outer, [h0], [xs], result_names=["h", "ys"]).results
    b.ret([hT, ys])
    m = Module()
    m.add(f)
    return m


def call_module() -> Module:
    """A two-result function, a caller, and a grad rule for the callee."""
    m = Module()
    body = Block([t("f64", "N")], ["x"])
    pair = m.add(Function("pair", body, [t("f64", "N"), t("f64")], loc=Loc(F, 1, 1)))
    b = Builder(body, Loc(F, 2, 5))
    e = b.emit("exp", body.args[0])
    b.ret([e, b.emit("sum", e)])

    body = Block([t("f64", "N"), t("f64", "N"), t("f64"), t("f64", "N"), t("f64")],
                 ["x", "e", "s", "de", "ds"])
    m.add(Function("pair_grad", body, [t("f64", "N")], attrs={"grad_of": "pair"},
                   loc=Loc(F, 4, 1)))
    b = Builder(body, Loc(F, 5, 5))
    x, e, s, de, ds = body.args
    b.ret([b.emit("add", de, b.emit("mul", ds, e))])

    body = Block([t("f64", "N")], ["x"])
    m.add(Function("main", body, [t("f64")], params={"x"}))
    b = Builder(body, Loc(F, 8, 5))
    e, s = b.call(pair, [body.args[0]])
    e.name, s.name = "e", "s"
    b.ret([b.emit("add", s, b.emit("sum", e))])
    return m


EVERY_ATTR = {
    "i": 3, "neg": -7, "big": 2**70, "f": 0.1, "whole": 2.0, "tiny": 5e-324, "huge": 1e300,
    "inf": math.inf, "ninf": -math.inf, "nan": math.nan, "negzero": -0.0,
    "t": True, "no": False, "none": None, "s": "a \"quoted\"\nline\\ é", "dtype": "f16",
    "empty_list": [], "empty_tuple": (), "one": (0,), "shape": ["B", 3, "2*B*T"],
    "idx": (1, [None, -1, 2], "?", [0, None, None]), "nested": [[(1, 2.5)], ({"k": [None]},)],
}


def attrs_module() -> Module:
    """Ops the registry does not know, with every kind of attribute value and odd names."""
    body = Block([t("f32", 2, "B"), t("i64")], ["x", "3"])
    f = Function("attrs", body, [t("f32", 2, "B")], attrs={"tangent_of": "attrs", "k": (1, "x")})
    op = body.append(Op("index", [body.args[0], body.args[1]], [t("f32", "B")],
                        dict(EVERY_ATTR), loc=Loc("dir/a b.tdsl", 7, 12),
                        result_names=["x y"]))
    multi = body.append(Op("my.pair", [op.result], [t("bool", "B"), t("i32")],
                           {"recompute": True}))
    body.append(Op("sink", list(multi.results), [], {}))
    body.append(Op("return", [body.args[0]], []))
    m = Module()
    m.add(f)
    return m


ALL = [simple_module, loop_module, call_module, attrs_module]


# ---- structural comparison ----------------------------------------------------------

def same_const(a, b) -> bool:
    """Equal values of the same Python types, recursively (nan equals nan)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                     math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_const(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_const(a[k], b[k]) for k in a)
    return a == b


def assert_same_module(m1: Module, m2: Module) -> None:
    assert list(m1.functions) == list(m2.functions)
    for f1, f2 in zip(m1.functions.values(), m2.functions.values()):
        assert (f1.name, f1.result_types, f1.params, f1.loc) == \
               (f2.name, f2.result_types, f2.params, f2.loc)
        assert same_const(f1.attrs, f2.attrs)
        _same_block(f1.body, f2.body, {})


def _same_block(b1: Block, b2: Block, env: dict) -> None:
    assert [(a.type, a.name) for a in b1.args] == [(a.type, a.name) for a in b2.args]
    env.update(zip(b1.args, b2.args))
    assert [op.name for op in b1.ops] == [op.name for op in b2.ops]
    for o1, o2 in zip(b1.ops, b2.ops):
        assert o2.parent is b2
        assert same_const(o1.attrs, o2.attrs), (o1.attrs, o2.attrs)
        assert o1.loc == o2.loc
        assert [env[v] for v in o1.operands] == o2.operands
        assert len(o1.regions) == len(o2.regions)
        for r1, r2 in zip(o1.regions, o2.regions):
            assert r2.parent is o2
            _same_block(r1, r2, env)
        assert [(r.type, r.name) for r in o1.results] == [(r.type, r.name) for r in o2.results]
        env.update(zip(o1.results, o2.results))


# ---- round trips --------------------------------------------------------------------

@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_round_trip_is_exact(make):
    m = make()
    text = print_module(m)
    parsed = parse_module(text)
    assert print_module(parsed) == text
    assert_same_module(m, parsed)


def test_every_attr_keeps_its_python_type():
    op = parse_module(print_module(attrs_module()))["attrs"].body.ops[0]
    assert same_const(op.attrs, EVERY_ATTR)
    assert type(op.attrs["whole"]) is float and type(op.attrs["i"]) is int
    assert op.attrs["shape"] == ["B", 3, "2*B*T"] and isinstance(op.attrs["one"], tuple)
    assert math.copysign(1, op.attrs["negzero"]) == -1


@pytest.mark.parametrize("value, text", [
    (1, "1"), (1.0, "1.0"), (True, "true"), (None, "none"), ("B", '"B"'), ((0,), "(0,)"),
    ([0], "[0]"), (0.1, "0.1"), (1e-05, "1e-05"), (-math.inf, "-inf"), (math.nan, "nan"),
    ([None, 2, 1], "[none, 2, 1]"), ({"a": ()}, '{"a": ()}'),
])
def test_attr_syntax(value, text):
    assert format_attr(value) == text


def test_numpy_scalars_print_as_python_constants():
    assert [format_attr(v) for v in (np.int64(3), np.bool_(True), np.float32(0.5))] == \
        ["3", "true", "0.5"]
    with pytest.raises(TypeError):
        format_attr(object())


def test_symbolic_dims_in_types_and_attrs():
    f = parse_module(print_module(loop_module()))["rnn"]
    assert f.result_types == [t("f32", 4), t("f32", "T", 4)]
    loop = f.body.ops[0]
    assert loop.attrs == {"n": "T", "n_carry": 1, "reverse": False}
    assert loop.regions[0].ops[0].attrs["n"] == 3


def test_value_names_keep_hints_and_are_unique():
    text = print_module(simple_module())
    assert "%h = mul(%x, %W)" in text and "%h.1 = add(%h, %0)" in text
    f = parse_module(text)["f"]
    assert [op.results[0].name for op in f.body.ops[:3]] == ["h", None, "h"]
    odd = print_module(attrs_module())
    assert '%"x y" = index(%x, %"3")' in odd and "%0, %1 = my.pair(" in odd


def test_print_function_and_print_op():
    m = call_module()
    assert print_module(m) == "\n".join(print_function(f) for f in m.functions.values())
    assert print_function(m["pair_grad"]).startswith(
        'func @pair_grad(%x: f64[N], %e: f64[N], %s: f64[], %de: f64[N], %ds: f64[]) -> (f64[N]) '
        'attributes {grad_of = "pair"} loc("model.tdsl":4:1) {\n')
    f = parse_function(print_function(m["pair"]))
    assert f.name == "pair" and f.loc == Loc(F, 1, 1)
    op = m["main"].body.ops[0]
    assert print_op(op) == ('%e, %s = call(%x) {callee = "pair"} : f64[N], f64[] '
                            'loc("model.tdsl":8:5)')


# ---- golden text --------------------------------------------------------------------

def test_golden_simple():
    assert print_module(simple_module()) == """\
func @f(%x: f32[B, 3], %W: f32[3] {param}) -> (f32[B, 1]) loc("model.tdsl":1:1) {
  %h = mul(%x, %W) : f32[B, 3] loc("model.tdsl":2:5)
  %0 = const() {value = 1.0, dtype = "f32"} : f32[] loc("model.tdsl":2:5)
  %h.1 = add(%h, %0) : f32[B, 3] loc("model.tdsl":2:5)
  %1 = exp(%h.1) : f32[B, 3] loc("model.tdsl":3:9)
  %2 = sum(%1) {axis = (1,), keepdims = false} : f32[B] loc("model.tdsl":3:9)
  %3 = reshape(%2) {shape = ["B", 1]} : f32[B, 1] loc("model.tdsl":2:5)
  return(%3) loc("model.tdsl":2:5)
}
"""


def test_golden_nested_loops():
    expected = (GOLDEN / "nested_loops.ir").read_text()
    assert print_module(loop_module()) == expected
    assert print_module(parse_module(expected)) == expected


def test_comments_and_whitespace_are_ignored():
    text = """// a comment
    func @g(%a: f32[]) -> (f32[]) {   // trailing
      %b = neg(%a)
        : f32[]
      return(%b) }"""
    f = parse_module(text)["g"]
    assert [op.name for op in f.body.ops] == ["neg", "return"]
    assert f.body.ops[1].operands == f.body.ops[0].results


# ---- errors -------------------------------------------------------------------------

def _error(text: str) -> AdcError:
    with pytest.raises(AdcError) as info:
        parse_module(text, filename="m.ir")
    return info.value


@pytest.mark.parametrize("text, line, col, message", [
    ("func @f(%x: f32[2]) -> (f32[2]) {\n  return(%y)\n}", 2, 10,
     "use of undefined value %y"),
    ("func @f(%x: f32[2]) -> (f32[2]) {\n  %x = neg(%x) : f32[2]\n  return(%x)\n}", 2, 3,
     "value %x is already defined"),
    ("func @f(%x: f32[2]) -> (f32[2]) {\n  %y = neg(%x) f32[2]\n}", 2, 19,
     "unexpected '['; expected '('"),
    ("func @f(%x: f33[2]) -> () {\n}", 1, 13, "unexpected 'f33'; expected a type"),
    ("func @f() -> () {\n  return() loc(\"a\":1)\n}", 2, 21, "unexpected ')'; expected ':'"),
    ("func @f() -> () {\n  %a, %b = g() : f32[]\n  return()\n}", 2, 12,
     "'g' defines 2 values but lists 1 result types"),
    ("func @f() -> () {\n  g() {a = 1, a = 2}\n  return()\n}", 2, 15,
     "attribute 'a' is given twice"),
    ("func @f() -> () {\n  return() $\n}", 2, 12, "unexpected character '$'"),
    ("func @f() -> () {\n  return() {a = \"x\\q\"}\n}", 2, 17, 'bad string "x\\q"'),
    ("func @f() -> () {\n  return()\n", 3, 1, "unexpected end of input"),
    ("func @f() -> () {\n return()\n}\nfunc @f() -> () {\n return()\n}", 4, 6,
     "function @f is already defined"),
])
def test_parse_errors_are_located(text, line, col, message):
    err = _error(text)
    assert (err.loc.file, err.loc.line, err.loc.col) == ("m.ir", line, col)
    assert err.message == message


def test_values_of_a_region_are_dead_after_it():
    text = """func @f(%a: f32[]) -> (f32[]) {
  for() {n = 2, n_carry = 0, reverse = false} {
  ^(%i: i64[]):
    %b = neg(%a) : f32[]
    yield()
  }
  return(%b)
}"""
    err = _error(text)
    assert (err.loc.line, err.loc.col, err.message) == (7, 10, "use of undefined value %b")


def test_unknown_ops_parse_without_type_inference():
    f = parse_module("""func @f(%a: f32[3]) -> (f32[3]) {
  %b = frobnicate(%a) {k = 1} : i32[7, K]
  %c = add(%b, %b) : f64[]
  return(%a)
}""")["f"]
    assert f.body.ops[0].results[0].type == t("i32", 7, "K")
    assert f.body.ops[1].results[0].type == t("f64")


# ---- property: any attribute value and any name hint round-trips ----------------------

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_attr_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
    | st.lists(inner, max_size=3).map(tuple) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=2),
    max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(attrs=st.dictionaries(st.text(min_size=1, max_size=6), _attr_values, max_size=4),
       hints=st.lists(st.none() | st.text(min_size=1, max_size=5), min_size=3, max_size=3))
def test_random_attrs_and_hints_round_trip(attrs, hints):
    body = Block([t("f32", "N")], [hints[0]])
    f = Function("p", body, [t("f32", "N")], attrs=dict(attrs))
    op = body.append(Op("probe", [body.args[0]], [t("f32", "N"), t("i64")], attrs,
                        result_names=hints[1:]))
    body.append(Op("return", [op.results[0]], []))
    m = Module({"p": f})
    text = print_module(m)
    parsed = parse_module(text)
    assert print_module(parsed) == text
    assert_same_module(m, parsed)


@pytest.mark.parametrize("make, fn, wrt", [(simple_module, "f", ("W", "x")),
                                           (loop_module, "rnn", ("h0", "xs"))])
def test_derivative_programs_round_trip_and_verify(make, fn, wrt):
    from adcompiler.ir.verifier import verify
    from adcompiler.passes.reverse import Reverse
    adj = Reverse(wrt=wrt, fn=fn)(make())
    text = print_module(adj)
    parsed = parse_module(text)
    assert print_module(parsed) == text
    assert_same_module(adj, parsed)
    verify(parsed)
    grad = parsed[f"{fn}_grad"]
    assert grad.result_types[-len(wrt):] == [grad.arg(name).type for name in wrt]
