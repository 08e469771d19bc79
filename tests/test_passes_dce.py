"""Dead code elimination beyond the golden cases (golden/dce/dce.ir): loop carries,
renumbering, calls."""
from __future__ import annotations

from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.passes import run_pipeline
from adcompiler.passes.dce import DCE


def dce(body: str, args: str = "%x: f32[3], %w: f32[3]", result: str = "f32[3]",
        extra: str = "") -> str:
    text = f"{extra}func @f({args}) -> ({result}) {{\n{body}}}\n"
    m = parse_module(text)
    out = run_pipeline(m, "dce{fn=f}", verify=True)
    assert print_module(m) == text
    lines = print_module(out).splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("func @f("))
    return "\n".join(lines[start + 1:-1]) + "\n"


LOOP = """\
  %c0 = neg(%x) : f32[3]
  %h, %g, %k, %ys, %zs = for(%x, %c0, %w, %xs) {n = 4, n_carry = 3, reverse = false} : f32[3], f32[3], f32[3], f32[4, 3], f32[4] {
  ^(%i: i64[], %h.1: f32[3], %g.1: f32[3], %k.1: f32[3], %row: f32[3]):
    %a = mul(%h.1, %w) : f32[3]
    %b = add(%a, %g.1) : f32[3]
    %gg = exp(%g.1) : f32[3]
    %kk = mul(%k.1, %row) : f32[3]
    %s = sum(%kk) {axis = none, keepdims = false} : f32[]
    yield(%b, %gg, %kk, %a, %s)
  }
"""
LOOP_ARGS = "%x: f32[3], %w: f32[3], %xs: f32[4, 3]"


def test_a_stacked_output_keeps_the_carries_it_reads():
    out = parse_module("func @f(" + LOOP_ARGS + ") -> (f32[4, 3]) {\n" + dce(
        LOOP + "  return(%ys)\n", args=LOOP_ARGS, result="f32[4, 3]") + "}\n")
    neg, loop, _ = out["f"].body.ops
    assert loop.name == "for" and loop.attrs["n_carry"] == 2
    assert [r.type.shape for r in loop.results] == [(3,), (3,), (4, 3)]
    assert [op.name for op in loop.regions[0].ops] == ["mul", "add", "exp", "yield"]
    assert len(loop.regions[0].args) == 3 and loop.operands == [out["f"].arg("x"), neg.result]


def test_arg_and_result_indices_are_renumbered():
    m = parse_module("func @f(" + LOOP_ARGS + ") -> (f32[4]) {\n" + LOOP
                     + "  return(%zs)\n}\n")
    out = run_pipeline(m, "dce")
    loop = out["f"].body.ops[0]
    assert [r.index for r in loop.results] == [0, 1]
    assert [a.index for a in loop.regions[0].args] == [0, 1, 2]


def test_unused_calls_to_pure_functions_are_removed_unknown_ones_kept():
    extra = ("func @g(%x: f32[3]) -> (f32[3]) {\n  %0 = exp(%x) : f32[3]\n"
             "  return(%0)\n}\n\n")
    body = ('  %a = call(%x) {callee = "g"} : f32[3]\n'
            '  %b = call(%x) {callee = "missing"} : f32[3]\n  return(%x)\n')
    m = parse_module(f"{extra}func @f(%x: f32[3]) -> (f32[3]) {{\n{body}}}\n")
    out = "\n".join(print_module(DCE()(m)).splitlines()[-3:-1]) + "\n"
    assert out == '  %b = call(%x) {callee = "missing"} : f32[3]\n  return(%x)\n'


def test_dead_ops_inside_live_loops_are_removed():
    body = ("  %r = for(%x) {n = 2, n_carry = 1, reverse = false} : f32[3] {\n"
            "  ^(%i: i64[], %h: f32[3]):\n"
            "    %dead = exp(%w) : f32[3]\n    %m = mul(%h, %w) : f32[3]\n"
            "    yield(%m)\n  }\n  return(%r)\n")
    assert "%dead" not in dce(body) and "%m = mul(%h, %w)" in dce(body)


def test_carry_chains_are_followed_to_a_fixed_point():
    # a reads b, b reads c, c reads itself, d reads only itself; only a is used afterwards
    body = """\
  %a, %b, %c, %d = for(%x, %x, %x, %x) {n = 3, n_carry = 4, reverse = false} : f32[3], f32[3], f32[3], f32[3] {
  ^(%i: i64[], %a.1: f32[3], %b.1: f32[3], %c.1: f32[3], %d.1: f32[3]):
    %a.2 = add(%a.1, %b.1) : f32[3]
    %b.2 = mul(%b.1, %c.1) : f32[3]
    %c.2 = exp(%c.1) : f32[3]
    %d.2 = exp(%d.1) : f32[3]
    yield(%a.2, %b.2, %c.2, %d.2)
  }
  return(%a)
"""
    out = dce(body)
    assert "n_carry = 3" in out and "%d" not in out
    assert "yield(%a.2, %b.2, %c.2)" in out
