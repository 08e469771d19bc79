"""Inlining beyond the golden cases (golden/inline/inline.ir): custom rules, pruning and
errors."""
from __future__ import annotations

import pytest

from adcompiler.diagnostics import AdcError, Loc
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.passes import run_pipeline
from adcompiler.passes.inline import Inline


def apply(spec: str, text: str) -> str:
    m = parse_module(text)
    out = run_pipeline(m, spec, verify=True)
    assert print_module(m) == text  # passes never mutate their input
    return print_module(out)


NESTED = """\
func @sq(%a: f32[3]) -> (f32[3]) loc("m":1:1) {
  %s = mul(%a, %a) : f32[3] loc("m":2:3)
  return(%s) loc("m":2:3)
}

func @g(%u: f32[3]) -> (f32[3]) loc("m":4:1) {
  %v = call(%u) {callee = "sq"} : f32[3] loc("m":5:3)
  %w = exp(%v) : f32[3] loc("m":6:3)
  return(%w) loc("m":6:3)
}

func @main(%x: f32[3] {param}) -> (f32[]) loc("m":8:1) {
  %y = call(%x) {callee = "g"} : f32[3] loc("m":9:3)
  %z = call(%y) {callee = "sq"} : f32[3] loc("m":10:3)
  %r = sum(%z) {axis = none, keepdims = false} : f32[] loc("m":11:3)
  return(%r) loc("m":11:3)
}
"""


def test_without_fn_every_function_is_inlined_and_all_are_kept():
    out = parse_module(apply("inline", NESTED))
    assert list(out.functions) == ["sq", "g", "main"]
    assert [op.name for op in out["g"].walk()] == ["mul", "exp", "return"]
    assert not any(op.name == "call" for f in out.functions.values() for op in f.walk())


def test_fn_option_leaves_other_functions_alone():
    out = parse_module(apply("inline{fn=main}", NESTED))
    assert [op.name for op in out["g"].walk()] == ["call", "exp", "return"]
    assert [op.name for op in out["main"].walk()] == ["mul", "exp", "mul", "sum", "return"]


CUSTOM = """\
func @pair(%x: f64[N]) -> (f64[N], f64[]) {
  %0 = exp(%x) : f64[N]
  %1 = sum(%0) {axis = none, keepdims = false} : f64[]
  return(%0, %1)
}

func @pair_grad(%x: f64[N], %e: f64[N], %s: f64[], %de: f64[N], %ds: f64[]) -> (f64[N]) attributes {grad_of = "pair"} {
  %0 = mul(%ds, %e) : f64[N]
  %1 = add(%de, %0) : f64[N]
  return(%1)
}

func @unused(%x: f64[N]) -> (f64[N]) {
  return(%x)
}

func @main(%x: f64[N] {param}) -> (f64[]) {
  %e, %s = call(%x) {callee = "pair"} : f64[N], f64[]
  %0 = sum(%e) {axis = none, keepdims = false} : f64[]
  %1 = add(%s, %0) : f64[]
  return(%1)
}
"""


def test_calls_with_a_custom_grad_rule_are_kept_by_default():
    out = parse_module(apply("inline{prune=true}", CUSTOM))
    assert list(out.functions) == ["pair", "pair_grad", "main"]  # `unused` is dropped
    assert [op.name for op in out["main"].walk()] == ["call", "sum", "add", "return"]


def test_keep_custom_false_inlines_them_too():
    out = parse_module(apply("inline{keep_custom=false}", CUSTOM))
    main = out["main"]
    assert [op.name for op in main.walk()] == ["exp", "sum", "sum", "add", "return"]
    exp, s1, s2, add, _ = main.body.ops
    assert s2.operands == exp.results and add.operands == [s1.result, s2.result]


def test_a_callee_returning_its_argument_forwards_the_value():
    text = CUSTOM.replace('callee = "pair"} : f64[N], f64[]',
                          'callee = "unused"} : f64[N]').replace("%e, %s = call", "%e = call")
    text = text.replace("%1 = add(%s, %0)", "%1 = add(%0, %0)")
    out = parse_module(apply("inline{fn=main}", text))
    ops = out["main"].body.ops
    assert [op.name for op in ops] == ["sum", "add", "return"]
    assert ops[0].operands == [out["main"].arg("x")]


def test_recursion_is_reported():
    text = """\
func @f(%x: f32[]) -> (f32[]) loc("m":1:1) {
  %0 = call(%x) {callee = "f"} : f32[]
  return(%0)
}
"""
    with pytest.raises(AdcError) as info:  # the message: golden/inline/inline.ir
        Inline()(parse_module(text))
    assert info.value.loc == Loc("m", 1, 1)


def test_unknown_callee_is_reported():
    text = """\
func @f(%x: f32[]) -> (f32[]) {
  %0 = call(%x) {callee = "nope"} : f32[]
  return(%0)
}
"""
    with pytest.raises(AdcError, match="call to unknown function 'nope'"):
        Inline()(parse_module(text))
