"""The verifier accepts well-formed modules and names the op and location of each breakage."""
from __future__ import annotations

import pytest

from adcompiler.diagnostics import AdcError, Loc
from adcompiler.ir.core import Op
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import VerifyError, verify, verify_errors
from test_ir_text import attrs_module, call_module, loop_module, simple_module


@pytest.mark.parametrize("make", [simple_module, loop_module, call_module])
def test_well_formed_modules_pass(make):
    verify(make())
    verify(parse_module(print_module(make())))


def error_of(module) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        verify(module)
    assert isinstance(info.value, AdcError)
    return info.value


def check(body: str, message: str, line: int = 2, header: str = "(%x: f32[2])",
          extra: str = "") -> None:
    """Verify ``@f(header) -> (f32[2])`` with `body`; the first error must be `message`,
    located at `line` of the source file "m" (ops in these tests carry ``loc("m":LINE:1)``)."""
    text = f'func @f{header} -> (f32[2]) loc("m":1:1) {{\n{body}\n}}\n{extra}'
    err = error_of(parse_module(text))
    assert err.message == message
    assert err.loc == Loc("m", line, 1)


L2, L3 = 'loc("m":2:1)', 'loc("m":3:1)'


# ---- registry ops -------------------------------------------------------------------

def test_unknown_op():
    check(f"%y = frob(%x) : f32[2] {L2}\nreturn(%y)", "in @f: 'frob' op is not a registered op")


def test_options_must_be_complete():
    check(f"%s = sum(%x) {{axis = none}} : f32[] {L2}\nreturn(%x)",
          "in @f: 'sum' op lacks the option keepdims (defaults must be filled in)")


def test_unknown_option():
    check(f"%y = neg(%x) {{k = 1}} : f32[2] {L2}\nreturn(%y)",
          "in @f: 'neg' op neg has no option 'k' (options: none)")


def test_annotation_attrs_are_not_options():
    text = f'func @f(%x: f32[2]) -> (f32[2]) {{\n%y = neg(%x) {{recompute = true}} : f32[2]\n' \
           f'return(%y)\n}}'
    verify(parse_module(text))


def test_result_type_must_match_type_rule():
    check(f"%y = add(%x, %x) : f64[2] {L2}\nreturn(%x)",
          "in @f: 'add' op has result types (f64[2]) but its type rule gives (f32[2])")


def test_an_op_like_a_correct_one_before_it_is_still_checked():
    # the second add has the first one's name and operand types, which passed
    check(f"  %a = add(%x, %x) : f32[2] {L2}\n  %b = add(%x, %x) : f64[2] {L3}\n"
          f"  return(%a) {L3}",
          "in @f: 'add' op has result types (f64[2]) but its type rule gives (f32[2])",
          line=3)


def test_ill_typed_op():
    m = parse_module(f"func @f(%x: f32[2], %z: f32[3]) -> (f32[2]) {{\n"
                     f"%y = add(%x, %z) : f32[2] {L2}\nreturn(%x)\n}}")
    err = error_of(m)
    assert err.message.startswith("in @f: 'add' op is ill-typed: ")
    assert err.message.endswith("shapes [2] and [3] cannot be broadcast together")
    assert err.loc == Loc("m", 2, 1)


def test_operand_count():
    check(f"%y = neg(%x, %x) : f32[2] {L2}\nreturn(%y)",
          "in @f: 'neg' op takes 1 operands, got 2")


# ---- terminators and function signature ---------------------------------------------

def test_function_must_end_in_return():
    check(f"%y = neg(%x) : f32[2] {L2}", "in @f: 'neg' op ends a block that must end in 'return'")


def test_empty_bodies():
    m = parse_module('func @f() -> () loc("m":1:1) {\n}\nfunc @g(%x: f32[2]) -> (f32[2]) {\n'
                     '  for() {n = 2, n_carry = 0, reverse = false} loc("m":5:1) {\n  ^(%i: i64[]):'
                     '\n  }\n  return(%x)\n}')
    assert [(e.message, e.loc) for e in verify_errors(m)] == [
        ("in @f: has an empty block; it must end in 'return'", Loc("m", 1, 1)),
        ("in @g: 'for' op has an empty block; it must end in 'yield'", Loc("m", 5, 1))]


def test_return_types_match_result_types():
    check(f"return(%x, %x) {L2}",
          "in @f: 'return' op returns (f32[2], f32[2]) but the function declares (f32[2])")


def test_misplaced_terminators():
    check(f"yield(%x) {L2}\nreturn(%x) {L3}", "in @f: 'yield' op is misplaced: this block must "
          "end in 'return' and have no other terminator")
    check(f"return(%x) {L2}\nreturn(%x) {L3}", "in @f: 'return' op is misplaced: this block "
          "must end in 'return' and have no other terminator")


def test_params_and_rule_links():
    m = simple_module()
    m["f"].params.add("y")
    err = error_of(m)
    assert (err.message, err.loc) == ("in @f: param 'y' is not an input", Loc("model.tdsl", 1, 1))
    m = parse_module('func @f(%x: f32[2]) -> (f32[2]) attributes {grad_of = "g"} '
                     'loc("m":1:1) {\n return(%x)\n}')
    assert error_of(m).message == "in @f: grad_of names unknown function @g"


# ---- loops --------------------------------------------------------------------------

LOOP = """%h, %ys = for(%x, %xs) {{n = {n}, n_carry = 1, reverse = false}} : {res} loc("m":2:1) {{
^({args}):
  %y = neg(%s) : f32[2] loc("m":4:1)
  {term}(%c, %y) loc("m":5:1)
}}
return(%h) loc("m":7:1)"""


def loop(n='"T"', res="f32[2], f32[T, 2]", args="%i: i64[], %c: f32[2], %s: f32[2]",
         term="yield"):
    return LOOP.format(n=n, res=res, args=args, term=term)


def test_good_loop():
    text = f'func @f(%x: f32[2], %xs: f32[T, 2]) -> (f32[2]) {{\n{loop()}\n}}'
    verify(parse_module(text))


@pytest.mark.parametrize("kw, message, line", [
    (dict(n="3"), "scanned operand 1 has type f32[T, 2], whose leading dim is not n = 3", 2),
    (dict(n='"T", extra = 1'), "needs exactly the attrs n (dim), n_carry (int), reverse (bool)",
     2),
    (dict(args="%c: f32[2], %s: f32[2]"), "body arguments (f32[2], f32[2]) should be "
     "(i64[], f32[2], f32[2]) (index, carries, slices)", 2),
    (dict(res="f32[2], f32[2]"), "has result types (f32[2], f32[2]) but its body gives "
     "(f32[2], f32[T, 2])", 2),
    (dict(args="%i: i64[], %c: f64[2], %s: f32[2]"), "body arguments (i64[], f64[2], f32[2]) "
     "should be (i64[], f32[2], f32[2]) (index, carries, slices)", 2),
    (dict(term="return"), "ends a block that must end in 'yield'", 5),
])
def test_broken_loops(kw, message, line):
    op = "for" if line == 2 else "return"
    check(loop(**kw), f"in @f: '{op}' op {message}", line=line,
          header="(%x: f32[2], %xs: f32[T, 2])")


def test_yielded_carry_type():
    body = loop().replace("(%c, %y)", "(%y2, %y)").replace(
        '  %y = neg(%s) : f32[2] loc("m":4:1)',
        '  %y = neg(%s) : f32[2] loc("m":4:1)\n  %y2 = sum(%y) {axis = none, keepdims = false}'
        ' : f32[] loc("m":4:1)')
    check(body, "in @f: 'yield' op yields carries (f32[]) but the loop carries (f32[2])",
          line=5, header="(%x: f32[2], %xs: f32[T, 2])")


# ---- calls --------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    ('%r = call(%x) {callee = "nope"} : f32[2]', "calls unknown function 'nope'"),
    ('%r = call(%x, %x) {callee = "h"} : f32[2]',
     "passes (f32[2], f32[2]) to @h, which takes (f32[2])"),
    ('%r = call(%x) {callee = "h"} : f32[3]', "expects results (f32[3]) but @h returns (f32[2])"),
])
def test_broken_calls(call, message):
    extra = 'func @h(%a: f32[2]) -> (f32[2]) {\n return(%a)\n}\n'
    check(f"{call} {L2}\nreturn(%x)", f"in @f: 'call' op {message}", extra=extra)


# ---- SSA, through the API (the parser cannot express these) --------------------------

def test_use_before_definition():
    m = simple_module()
    ops = m["f"].body.ops
    ops.insert(0, ops.pop(2))  # `add` now uses `%h` before `mul` defines it
    err = error_of(m)
    assert err.message == ("in @f: 'add' op operand 0 (h: f32[B, 3]) is defined later; it "
                           "does not dominate this use")
    assert err.loc == Loc("model.tdsl", 2, 5)


def test_use_of_a_loop_body_value_after_the_loop():
    m = loop_module()
    f = m["rnn"]
    inner_y = f.body.ops[0].regions[0].ops[1].result  # %y of the outer body
    ret = f.body.ops[-1]
    ret.operands[1] = inner_y
    assert error_of(m).message == ("in @rnn: 'return' op operand 1 (y: f32[4]) is defined "
                                   "outside this scope; it does not dominate this use")


def test_value_of_another_function():
    m = call_module()
    m["main"].body.ops[-1].operands[0] = m["pair"].args[0]
    assert error_of(m).message == ("in @main: 'return' op operand 0 (x: f64[N]) is defined "
                                   "outside this scope; it does not dominate this use")


def test_value_defined_twice_and_stale_parent():
    m = simple_module()
    body = m["f"].body
    body.ops.insert(1, body.ops[0])  # the same op (and its result) twice, parent still body
    msgs = [e.message for e in verify_errors(m)]
    assert "in @f: 'mul' op redefines value h: f32[B, 3]" in msgs
    m = simple_module()
    m["f"].body.ops[0].parent = None
    assert error_of(m).message == "in @f: 'mul' op has a stale parent block"


def test_errors_fall_back_to_the_function_location():
    m = simple_module()
    body = m["f"].body
    body.ops.insert(0, Op("frob", [], [], {}))
    body.ops[0].parent = body
    err = error_of(m)
    assert err.message == "in @f: 'frob' op is not a registered op"
    assert err.loc == Loc("model.tdsl", 1, 1)


def test_all_errors_are_collected():
    msgs = [e.message for e in verify_errors(attrs_module())]
    assert [m.split("'")[1] for m in msgs] == ["index", "my.pair", "sink"]
