"""Activity analysis: varied and useful values, integer values, loops, calls."""
from __future__ import annotations

import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.ir.parser import parse_module
from adcompiler.ops.registry import REGISTRY
from adcompiler.passes import analyze_activity
from adcompiler.passes.activity import useful_values, varied_values


def fn_of(body: str, args: str, result: str = "f32[]", extra: str = ""):
    return parse_module(f"{extra}func @f({args}) -> ({result}) {{\n{body}}}\n")["f"]


def names(values) -> set[str]:
    return {v.name for v in values}


STRAIGHT = """\
  %h = mul(%x, %w) : f32[3]
  %e = exp(%x) : f32[3]
  %u = exp(%w) : f32[3]
  %f = add(%k, %h) : f32[3]
  %g = mul(%f, %e) : f32[3]
  %s = sum(%g) {axis = none, keepdims = false} : f32[]
  return(%s)
"""
STRAIGHT_ARGS = "%x: f32[3], %w: f32[3], %k: i64[3]"


def test_active_is_varied_and_useful():
    f = fn_of(STRAIGHT, STRAIGHT_ARGS)
    assert names(varied_values(f, ["w"])) == {"w", "h", "u", "f", "g", "s"}
    assert names(useful_values(f)) == {"x", "w", "h", "e", "f", "g", "s"}
    assert names(analyze_activity(f, ["w"])) == {"w", "h", "f", "g", "s"}
    assert names(analyze_activity(f, ["x", "w"])) == {"x", "w", "h", "e", "f", "g", "s"}


def test_integer_values_are_never_active():
    f = fn_of(STRAIGHT, STRAIGHT_ARGS)
    assert "k" not in names(analyze_activity(f, ["x", "w", "k"]))


@pytest.mark.skipif("lt" not in REGISTRY or "where" not in REGISTRY, reason="needs lt, where")
def test_no_grad_ops_stop_varied_values():
    body = ("  %c = lt(%w, %x) : bool[3]\n  %y = where(%c, %x, %x) : f32[3]\n"
            "  %s = sum(%y) {axis = none, keepdims = false} : f32[]\n  return(%s)\n")
    f = fn_of(body, "%x: f32[3], %w: f32[3]")
    assert analyze_activity(f, ["w"]) == set()
    assert names(analyze_activity(f, ["x"])) == {"x", "y", "s"}


@pytest.mark.skipif("stop_gradient" not in REGISTRY, reason="needs stop_gradient")
def test_stop_gradient_blocks_activity():
    body = ("  %a = stop_gradient(%w) : f32[3]\n  %y = mul(%a, %x) : f32[3]\n"
            "  %s = sum(%y) {axis = none, keepdims = false} : f32[]\n  return(%s)\n")
    f = fn_of(body, "%x: f32[3], %w: f32[3]")
    assert analyze_activity(f, ["w"]) == set()


LOOP = """\
  %a, %b, %c, %g, %ys = for(%x, %x, %x, %x) {n = 3, n_carry = 4, reverse = false} : f32[3], f32[3], f32[3], f32[3], f32[3, 3] {
  ^(%i: i64[], %a_in: f32[3], %b_in: f32[3], %c_in: f32[3], %g_in: f32[3]):
    %a_new = add(%a_in, %b_in) : f32[3]
    %b_new = mul(%x, %w) : f32[3]
    %c_new = mul(%c_in, %w) : f32[3]
    %g_new = exp(%g_in) : f32[3]
    %y = mul(%g_in, %c_in) : f32[3]
    yield(%a_new, %b_new, %c_new, %g_new, %y)
  }
  %r = add(%a, %g) : f32[3]
  %s = sum(%r) {axis = none, keepdims = false} : f32[]
  return(%s)
"""


def test_loops_reach_a_fixed_point_over_carries():
    f = fn_of(LOOP, "%x: f32[3], %w: f32[3]")
    loop = f.body.ops[0]
    active = analyze_activity(f, ["w"])
    # %a is varied only through %b, whose update reads %w: known after a second round
    assert {"a", "a_in", "a_new", "b_in", "b_new", "w", "r", "s"} <= names(active)
    # %c is varied but only feeds the unused stacked output; %g is useful but not varied
    assert not {"c", "c_in", "c_new", "ys", "y", "g", "g_in", "g_new"} & names(active)
    assert loop.regions[0].args[0] not in active  # the loop index
    assert loop.results[0] in active and loop.results[1] not in active  # %b is unused


def test_useful_flows_back_through_carries_and_captures():
    f = fn_of(LOOP.replace("return(%s)", "return(%s, %ys)"), "%x: f32[3], %w: f32[3]",
              result="f32[], f32[3, 3]")
    active = names(analyze_activity(f, ["w"]))
    assert {"c_in", "c_new", "y", "ys"} <= active
    assert names(analyze_activity(f, ["x"])) >= {"x", "g_in", "g_new", "g", "c_in", "y"}


def test_calls_are_conservative():
    extra = ("func @h(%p: f32[3], %q: f32[3]) -> (f32[3]) {\n  return(%p)\n}\n\n")
    body = ('  %y = call(%x, %w) {callee = "h"} : f32[3]\n'
            "  %s = sum(%y) {axis = none, keepdims = false} : f32[]\n  return(%s)\n")
    f = fn_of(body, "%x: f32[3], %w: f32[3]", extra=extra)
    assert names(analyze_activity(f, ["w"])) == {"w", "y", "s"}


def test_explicit_results_for_a_detached_return():
    f = fn_of(STRAIGHT, STRAIGHT_ARGS)
    ret = f.body.ops.pop()
    e = next(op.result for op in f.body.ops if op.result.name == "e")
    assert names(analyze_activity(f, ["x"], [e])) == {"x", "e"}
    with pytest.raises(ValueError, match="no return op"):
        analyze_activity(f, ["x"])
    f.body.append(ret)


def test_unknown_wrt_is_an_error():
    with pytest.raises(AdcError, match="'v' is not an input of 'f' \\(inputs: x, w, k\\)"):
        analyze_activity(fn_of(STRAIGHT, STRAIGHT_ARGS), ["v"])


def _graph_reference(fn, wrt, results):
    """Activity from the whole function's graph (`_graph`/`_reach`), without the sweep."""
    from adcompiler.passes.activity import _graph, _reach
    varied = _reach([fn.arg(w) for w in wrt], _graph(fn.body.ops, {}, forward=True))
    return varied & _reach(results, _graph(fn.body.ops, {}, forward=False))


@pytest.mark.parametrize("sample", ["rnn", "char_rnn", "attention", "mlp", "chain_rule"])
def test_the_sweep_agrees_with_the_whole_graph(sample):
    from pathlib import Path

    from adcompiler.frontend import compile_source
    from adcompiler.passes.inline import Inline
    path = Path(__file__).parent.parent / "samples" / f"{sample}.tdsl"
    module = Inline()(compile_source(path.read_text(), str(path)))
    fn = module.main
    wrt = [a for a in fn.arg_names if a in fn.params]
    results = list(fn.body.ops[-1].operands)
    active = analyze_activity(fn, wrt)
    assert active and active == _graph_reference(fn, wrt, results)


def test_the_sweep_agrees_with_the_whole_graph_around_loops():
    body = ("  %p = mul(%x, %w) : f32[3]\n" + LOOP.replace("for(%x, %x, %x, %x)", "for(%p, %x, %p, %x)")
            .replace("%r = add(%a, %g)", "%q = exp(%c) : f32[3]\n  %r = add(%a, %q)"))
    f = fn_of(body, "%x: f32[3], %w: f32[3]")
    results = list(f.body.ops[-1].operands)
    for wrt in (["w"], ["x"], ["x", "w"]):
        assert analyze_activity(f, wrt) == _graph_reference(f, wrt, results)
