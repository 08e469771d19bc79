"""Parameter groups in TDSL: declarations, field access, stacked groups indexed in loops, calls
that take groups; their IR (one input per leaf, named by its path; the ``stacked``
attribute), derivatives equal to the same model written with one input per array, and the
located errors of misuse."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_source
from adcompiler.frontend.tdsl import descent
from adcompiler.frontend.tdsl.parse import parse_lark
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module

from test_frontend_descent import same

GROUPED = """
group Norm { g: f32[D], b: f32[D] }
group Layer {
    W: f32[D, D]
    c: f32[D]
    norm: Norm
}
group Model { embed: f32[D, D]; layers: Layer[L] }

def layer(h: f32[T, D], p: Layer) -> f32[T, D] {
    return layernorm(h + tanh(h @ p.W + p.c), p.norm.g, p.norm.b)
}

def loss(x: f32[T, D], param m: Model) -> f32 {
    h = x @ m.embed
    for i in range(L) {
        h = layer(h, m.layers[i])
    }
    return mean(h ** 2) + 0.1 * sum(m.layers.c)
}
"""

FLAT = """
def loss(x: f32[T, D], param embed: f32[D, D], param W: f32[L, D, D], param c: f32[L, D],
         param g: f32[L, D], param b: f32[L, D]) -> f32 {
    h = x @ embed
    for i in range(L) {
        h = layernorm(h + tanh(h @ W[i] + c[i]), g[i], b[i])
    }
    return mean(h ** 2) + 0.1 * sum(c)
}
"""


def test_both_parsers_build_the_same_tree():
    same(descent.parse(GROUPED), parse_lark(GROUPED))


def test_inputs_are_leaves_named_by_path():
    fn = compile_source(GROUPED)["loss"]
    assert fn.arg_names == ["x", "m.embed", "m.layers.W", "m.layers.c", "m.layers.norm.g",
                            "m.layers.norm.b"]
    assert str(fn.arg("m.layers.W").type) == "f32[L, D, D]"
    assert fn.params == set(fn.arg_names[1:])
    assert fn.attrs["stacked"] == {"m.layers": "L"}
    assert compile_source(GROUPED)["layer"].arg_names == ["h", "p.W", "p.c", "p.norm.g",
                                                         "p.norm.b"]


def test_ir_text_round_trips_and_the_loop_stays_a_loop():
    module = compile_source(GROUPED)
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    assert '%"m.layers.W": f32[L, D, D] {param}' in text
    assert 'attributes {stacked = {"m.layers": "L"}}' in text
    assert any(op.name == "for" for op in module["loss"].body.ops)


def test_gradients_equal_those_of_the_flat_program():
    rng = np.random.default_rng(0)
    L, T, D = 3, 4, 5
    arrays = {"x": rng.normal(size=(T, D)), "embed": rng.normal(size=(D, D)) / 2,
              "W": rng.normal(size=(L, D, D)) / 2, "c": rng.normal(size=(L, D)),
              "g": 1 + rng.normal(size=(L, D)) / 4, "b": rng.normal(size=(L, D))}
    flat = adc.value_and_grad(FLAT, wrt=["embed", "W", "c", "g", "b"], dtype="f64")
    v1, g1 = flat(**arrays)
    names = {"embed": "m.embed", "W": "m.layers.W", "c": "m.layers.c",
             "g": "m.layers.norm.g", "b": "m.layers.norm.b"}
    grouped = adc.value_and_grad(GROUPED, fn="loss", wrt=list(names.values()), dtype="f64")
    v2, g2 = grouped(**{names.get(k, k): a for k, a in arrays.items()})
    assert v1 == v2
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)


def test_a_constant_index_and_a_stacked_field_read_whole():
    src = GROUPED.replace("return mean(h ** 2) + 0.1 * sum(m.layers.c)",
                          "return mean(h ** 2) + sum(m.layers[1].norm.g) + sum(m.layers.W)")
    fn = compile_source(src)["loss"]
    assert fn.arg_names[2] == "m.layers.W"


def test_a_group_of_data_inputs_is_not_a_param():
    src = """
group Batch { x: f32[B, 3], y: f32[B] }
def f(d: Batch, param w: f32[3]) -> f32 { return mean((d.x @ w - d.y) ** 2) }
"""
    fn = compile_source(src)["f"]
    assert fn.arg_names == ["d.x", "d.y", "w"] and fn.params == {"w"}
    assert "stacked" not in fn.attrs


def test_a_group_generic_in_its_dims():
    src = """
group Linear(I, O) { W: f32[I, O], b: f32[O] }
group MLP(H) { l1: Linear(64, H), l2: Linear(H, 10) }
def linear(x: f32[B, I], p: Linear(I, O)) -> f32[B, O] { return x @ p.W + p.b }
def loss(x: f32[B, 64], y: i64[B], param m: MLP(32)) -> f32 {
    return mean(cross_entropy(linear(relu(linear(x, m.l1)), m.l2), y))
}
"""
    same(descent.parse(src), parse_lark(src))
    fn = compile_source(src)["loss"]
    assert [str(a.type) for a in fn.args[2:]] == ["f32[64, 32]", "f32[32]", "f32[32, 10]",
                                                  "f32[10]"]
    assert fn.arg_names[2:] == ["m.l1.W", "m.l1.b", "m.l2.W", "m.l2.b"]


BASE = """
group Attn { Wq: f32[D, D], Wk: f32[D, D] }
group Block { attn: Attn, g: f32[D] }
def blk(x: f32[T, D], b: Block) -> f32[T, D] { return x @ b.attn.Wq }
"""

ERRORS = [
    ("def f(x: f32[T, D], param p: Block[L]) -> f32 { return sum(p.attn.Wqx) }",
     "group Attn has no field 'Wqx' (in 'p.attn.Wqx'; its fields: Wq, Wk); did you mean "
     "'Wq'?"),
    ("def f(x: f32[T, D], param p: Block[L]) -> f32 { return sum(p.attn) }",
     "'p.attn' is a group (Attn[L]), not a tensor; use one of its fields (Wq, Wk)"),
    ("def f(x: f32[T, D], param p: Block) -> f32 { return sum(blk(x, p.attn)) }",
     "argument 'b' of 'blk' must be group Block, got 'p.attn', group Attn"),
    ("def f(x: f32[T, D], param p: Block[L]) -> f32 { return sum(blk(x, p)) }",
     "argument 'b' of 'blk' must be group Block, got 'p', group Block[L]"),
    ("def f(x: f32[T, D], param p: Block) -> f32 { return sum(blk(x, x)) }",
     "argument 'b' of 'blk' must be group Block, got a tensor (f32[T, D])"),
    ("def f(x: f32[T, 3], param p: Block) -> f32 { return sum(blk(x, p)) }",
     "argument 'b' of 'blk' must be group Block: its field 'attn.Wq' must be f32[D, D], "
     "with D = 3 (from argument 'x'), but 'p.attn.Wq' is f32[D, D]"),
    ("def f(x: f32[T, D], param p: Block) -> f32 { return sum(x.W) }",
     "'.W': 'x' is a tensor (f32[T, D]), not a group; only groups have fields"),
    ("def f(x: f32[T, D], param p: Block) -> f32 { return sum(p[0].g) }",
     "'p' is one group (Block), not a stack of them: it cannot be indexed"),
    ("def f(x: f32[T, D], param p: Block[3]) -> f32 { return sum(p[3].g) }",
     "index 3 is out of range for 'p', a stack of 3"),
    ("def f(x: f32[T, D], param p: Block[L]) -> f32 { return sum(p[0:1].g) }",
     "a stack of groups ('p': Block[L]) takes one index, an integer"),
    ("def f(x: f32[T, D], param p: Blok) -> f32 { return sum(x) }",
     "unknown dtype 'Blok'"),
    ("def f(x: f32[T, D], param p: Block) -> Block { return p }",
     "a function returns tensors, not a group (Block)"),
    ("group Block { x: f32 }\ndef f(x: f32) -> f32 { return x }",
     "group 'Block' is already defined at line 3"),
    ("group C { c: C }\ndef f(x: f32) -> f32 { return x }",
     "group 'C' contains itself (C -> C)"),
    ("group E { }\ndef f(x: f32) -> f32 { return x }", "group 'E' has no fields"),
    ("group F { a: f32, a: f32 }\ndef f(x: f32) -> f32 { return x }",
     "group 'F' has two fields named 'a'"),
    ("group S { a: Attn[2, 3] }\ndef f(x: f32) -> f32 { return x }",
     "a stack of groups has one length"),
    ("group U { a: Atn }\ndef f(x: f32) -> f32 { return x }",
     "unknown type 'Atn' (dtypes: f16, f32, f64, i32, i64, bool; groups: Attn, Block, U); "
     "did you mean 'Attn'?"),
    ("group Lin(I, O) { W: f32[I, O] }\ndef f(param p: Lin(3)) -> f32 { return sum(p.W) }",
     "group Lin takes 2 (I, O) dims in parentheses, got 1"),
    ("def f(x: f32(3)) -> f32 { return sum(x) }",
     "'f32' is not a group: only groups take dims in parentheses"),
    ("def f(x: f32[T, D], param p: Block[L]) -> f32 {\n q = p[0]\n"
     " for i in range(L) { q = p[i] }\n return sum(q.g) }",
     "'q' is a group (Block) and the loop rebinds it; a group cannot be loop-carried"),
    ("def f(x: f32[T, D], param p: Block) -> f32 { return sum(x) }\n"
     "grad blk(x, b, y, dy) { return dy, dy }",
     "grad rule for 'blk': a function with group inputs cannot have a custom derivative "
     "rule"),
]


@pytest.mark.parametrize("text,message", ERRORS)
def test_misuse_is_a_located_error(text, message):
    with pytest.raises(AdcError) as e:
        compile_source(BASE + text, "m.tdsl")
    assert message in e.value.message
    assert e.value.loc is not None and e.value.loc.file == "m.tdsl" and e.value.loc.line > 1
