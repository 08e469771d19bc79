"""Roles declared in the program (``g: f32[D] @gain``): both parsers read them, the IR
keeps them as the function's ``roles`` attribute, initialization takes them over the role
read from the uses, and a role that is unknown, doubled, put where it has no meaning, or
contradicted by a call's parameter is a located error."""
from __future__ import annotations

import numpy as np
import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_source
from adcompiler.frontend.tdsl import descent
from adcompiler.frontend.tdsl.parse import parse_lark
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.training import init
from adcompiler.training.data import draw_params

from test_frontend_descent import same

SRC = """
group Norm(D) { s: f32[D] @gain, t: f32[D] @bias }
group Block { n: Norm(4), W: f32[4, 4] @weight, E: f32[10, 4] @embedding, u: f32[4] }
def f(x: f32[B, 4], param m: Block, param k: f32[4] @gain, param w: f32[4, 4]) -> f32 {
    h = layernorm(x @ m.W, m.n.t, m.n.s)            # the uses say t a gain, s a bias
    return mean(h * k @ w + m.u) + sum(m.E)
}
"""


def test_both_parsers_read_roles_and_the_ir_keeps_them():
    same(descent.parse(SRC), parse_lark(SRC))
    fn = compile_source(SRC)["f"]
    assert fn.attrs["roles"] == {"m.n.s": "gain", "m.n.t": "bias", "m.W": "weight",
                                 "m.E": "embedding", "k": "gain"}
    again = parse_module(print_module(compile_source(SRC)))
    assert again["f"].attrs["roles"] == fn.attrs["roles"]


def test_declared_roles_win_over_the_uses():
    m = compile_source(SRC)
    r = init.roles(m, m["f"], m["f"].arg_names[1:])
    assert r["m.n.s"] == ("gain", None) and r["m.n.t"] == ("bias", None)   # not the uses'
    assert r["m.W"] == ("weight", (4, 4)) and r["m.E"] == ("embedding", None)
    assert r["k"] == ("gain", None) and r["m.u"] == ("bias", None)    # read from its use
    drawn = draw_params(m["f"], m["f"].arg_names[1:], {"B": 2}, "torch", 0, m)
    assert np.all(drawn["m.n.s"] == 1) and np.all(drawn["m.n.t"] == 0)
    assert np.all(drawn["k"] == 1) and drawn["m.E"].std() > 0.5    # N(0, 1)
    # undeclared, the uses decide: t is layernorm's gain
    plain = compile_source(SRC.replace(" @gain", "").replace(" @bias", ""))
    assert init.roles(plain, plain["f"], ["m.n.t"])["m.n.t"] == ("gain", None)


BASE = "group N { g: f32[3] @gain }\ndef one(y: f32) -> f32 { return y }\n"
ERRORS = [
    ("group A { g: f32[3] @gian }", "unknown role '@gian' (roles: @gain, @bias, @weight, "
     "@embedding); did you mean '@gain'?"),
    ("group A { g: f32[3] @gain @bias }", "conflicting roles: '@gain' and '@bias' on one "
     "declaration"),
    ("group A { n: N @gain }", "'@gain': 'n' is a group: declare roles on its tensor fields"),
    ("def f(x: f32[3] @weight) -> f32 { return sum(x) }",
     "'@weight': 'x' is not a param: a role says how a parameter starts"),
    ("def f(state s: f32[3] @bias) -> f32 { return sum(s) }",
     "'@bias': 's' is not a param"),
    ("def f(param p: N @gain) -> f32 { return sum(p.g) }",
     "'@gain': 'p' is a group: declare roles on its tensor fields"),
    ("def f(param w: f32[3]) -> f32 @gain { return sum(w) }",
     "'@gain': a result has no role"),
    ("def g(x: f32[3], param b: f32[3] @bias) -> f32 { return sum(x + b) }\n"
     "def f(x: f32[3], param p: N) -> f32 { return g(x, p.g) }",
     "'p.g' is declared @gain, but 'g' declares its input 'b' @bias"),
    ("def g(x: f32[3], param b: f32[3] @bias) -> f32 { return sum(x + b) }\n"
     "def f(x: f32[3], param k: f32[3] @weight) -> f32 { return g(x, k) }",
     "'k' is declared @weight, but 'g' declares its input 'b' @bias"),
]


@pytest.mark.parametrize("text,message", ERRORS)
def test_a_bad_role_is_a_located_error(text, message):
    for parse in ("descent", "lark"):
        with pytest.raises(AdcError) as e:
            compile_source(BASE + text, "r.tdsl") if parse == "descent" else \
                _lark_compile(BASE + text)
        assert message in e.value.message, parse
        assert e.value.loc is not None and e.value.loc.line >= 2


def _lark_compile(text):
    from adcompiler.frontend.tdsl import lower_module
    return lower_module(parse_lark(text, "r.tdsl"), "r.tdsl")


def test_a_param_passed_to_a_declared_parameter_takes_its_role():
    m = compile_source("""
def scale(x: f32[B, 3], param s: f32[3] @gain) -> f32[B, 3] { return x * s }
def shift(x: f32[B, 3], param t: f32[3] @bias) -> f32[B, 3] { return x + t }
def inner(x: f32[B, 3], k: f32[3]) -> f32[B, 3] { return scale(x, k) }   # a helper
def loss(x: f32[B, 3], param k: f32[3], param c: f32[3], d: f32[3]) -> f32 {
    return sum(shift(inner(x, k), c) + shift(x, d))
}
""")
    # through two calls (a helper's input too); initialization asks for the params only
    assert m["loss"].attrs["roles"] == {"k": "gain", "c": "bias", "d": "bias"}
    assert m["inner"].attrs["roles"] == {"k": "gain"}
    drawn = draw_params(m["loss"], ["k", "c"], {"B": 2}, "torch", 0, m)
    assert np.all(drawn["k"] == 1) and np.all(drawn["c"] == 0)
    with pytest.raises(AdcError, match="'k' takes @gain from 'scale', but 'shift' declares "
                       "its input 't' @bias"):
        compile_source("""
def scale(x: f32[3], param s: f32[3] @gain) -> f32[3] { return x * s }
def shift(x: f32[3], param t: f32[3] @bias) -> f32[3] { return x + t }
def loss(x: f32[3], param k: f32[3]) -> f32 { return sum(shift(scale(x, k), k)) }
""")
