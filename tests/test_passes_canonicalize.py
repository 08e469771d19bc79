"""Canonicalization beyond the golden cases (golden/canonicalize/canonicalize.ir): the type
guard, broadcasting, folding, the fixed point and the pattern table."""
from __future__ import annotations

import numpy as np
import pytest

from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ops.registry import REGISTRY
from adcompiler.passes import run_pipeline
from adcompiler.ops.patterns import P, Pattern, all_patterns, bound
from adcompiler.passes.canonicalize import pattern_table


def needs(*ops):
    missing = [o for o in ops if o not in REGISTRY]
    return pytest.mark.skipif(bool(missing), reason=f"ops not registered: {missing}")


def canon(body: str, args: str = "%x: f32[3]", result: str = "f32[3]") -> str:
    """Canonicalize ``@f(args) -> (result) {body}`` and return the printed body."""
    text = f"func @f({args}) -> ({result}) {{\n{body}}}\n"
    m = parse_module(text)
    out = run_pipeline(m, "canonicalize", verify=True)
    assert print_module(m) == text  # the input is untouched
    lines = print_module(out).splitlines()
    return "\n".join(lines[1:-1]) + "\n"


ZERO = '  %z = const() {value = 0.0, dtype = "f32"} : f32[]\n'
ONE = '  %o = const() {value = 1.0, dtype = "f32"} : f32[]\n'


def test_a_zero_that_broadcasts_x_is_kept():
    body = ('  %z = zeros() {shape = [2, 3], dtype = "f32"} : f32[2, 3]\n'
            "  %y = add(%x, %z) : f32[2, 3]\n  return(%y)\n")
    assert canon(body, result="f32[2, 3]") == body


def test_a_one_that_changes_the_dtype_is_kept():
    body = ('  %o = const() {value = 1.0, dtype = "f32"} : f32[]\n'
            "  %y = mul(%x, %o) : f32[3]\n  return(%y)\n")
    assert canon(body, args="%x: i64[3]") == body


def test_x_times_zero_is_not_folded():
    body = ZERO + "  %y = mul(%x, %z) : f32[3]\n  return(%y)\n"
    assert canon(body) == body


def test_double_negation_and_fixed_point():
    body = (ZERO + ONE + "  %a = neg(%x) : f32[3]\n  %b = neg(%a) : f32[3]\n"
            "  %c = add(%b, %z) : f32[3]\n  %d = mul(%o, %c) : f32[3]\n"
            "  %e = exp(%d) : f32[3]\n  return(%e)\n")
    assert canon(body) == "  %e = exp(%x) : f32[3]\n  return(%e)\n"


def test_shape_ops_to_the_same_shape_fold():
    body = ('  %a = reshape(%x) {shape = [3]} : f32[3]\n'
            '  %b = broadcast_to(%a) {shape = [3]} : f32[3]\n'
            '  %c = sum_to(%b) {shape = [3]} : f32[3]\n  return(%c)\n')
    assert canon(body) == "  return(%x)\n"


def test_reshape_of_reshape_becomes_one_reshape():
    body = ('  %a = reshape(%x) {shape = [-1, 1]} : f32[6, 1]\n'
            '  %b = reshape(%a) {shape = [2, 3]} : f32[2, 3]\n  return(%b)\n')
    out = canon(body, args="%x: f32[6]", result="f32[2, 3]")
    assert out == '  %0 = reshape(%x) {shape = [2, 3]} : f32[2, 3]\n  return(%0)\n'


def test_broadcast_of_broadcast_and_sum_to_of_sum_to_collapse():
    body = ('  %a = broadcast_to(%x) {shape = [2, 3]} : f32[2, 3]\n'
            '  %b = broadcast_to(%a) {shape = [4, 2, 3]} : f32[4, 2, 3]\n'
            '  %c = sum_to(%b) {shape = [2, 3]} : f32[2, 3]\n'
            '  %d = sum_to(%c) {shape = [3]} : f32[3]\n  return(%d)\n')
    out = canon(body)
    assert out == ('  %0 = broadcast_to(%x) {shape = [4, 2, 3]} : f32[4, 2, 3]\n'
                   '  %1 = sum_to(%0) {shape = [3]} : f32[3]\n  return(%1)\n')


def test_sum_of_a_scalar_is_the_scalar_but_a_real_sum_stays():
    body = ('  %s = sum(%x) {axis = none, keepdims = false} : f32[]\n'
            '  %t = sum(%s) {axis = none, keepdims = false} : f32[]\n  return(%t)\n')
    assert canon(body, result="f32[]") == (
        '  %s = sum(%x) {axis = none, keepdims = false} : f32[]\n  return(%s)\n')


def test_constant_folding_in_the_result_dtype():
    body = ('  %a = const() {value = 0.1, dtype = "f32"} : f32[]\n'
            '  %b = const() {value = 0.2, dtype = "f32"} : f32[]\n'
            "  %c = add(%a, %b) : f32[]\n  %d = neg(%c) : f32[]\n"
            "  %e = mul(%d, %a) : f32[]\n  return(%e)\n")
    out = parse_module(f"func @f() -> (f32[]) {{\n{canon(body, args='', result='f32[]')}}}\n")
    (const, ret) = out["f"].body.ops
    expected = -(np.float32(0.1) + np.float32(0.2)) * np.float32(0.1)
    assert const.name == "const" and const.attrs["dtype"] == "f32"
    assert const.attrs["value"] == float(expected)
    assert ret.operands == const.results


def test_integer_folding_stays_integer():
    body = ('  %a = const() {value = 7, dtype = "i64"} : i64[]\n'
            '  %b = const() {value = 3, dtype = "i64"} : i64[]\n'
            "  %c = mul(%a, %b) : i64[]\n  return(%c)\n")
    assert canon(body, args="", result="i64[]") == (
        '  %0 = const() {value = 21, dtype = "i64"} : i64[]\n  return(%0)\n')


@needs("div")
@pytest.mark.parametrize("a, b, dtype", [(1.0, 0.0, "f32"), (0.0, 0.0, "f64")])
def test_division_with_a_non_finite_result_is_not_folded(a, b, dtype):
    body = (f'  %a = const() {{value = {a}, dtype = "{dtype}"}} : {dtype}[]\n'
            f'  %b = const() {{value = {b}, dtype = "{dtype}"}} : {dtype}[]\n'
            f"  %c = div(%a, %b) : {dtype}[]\n  return(%c)\n")
    assert canon(body, args="", result=f"{dtype}[]") == body


def test_rewrites_apply_inside_loop_bodies_and_keep_the_root_loc():
    body = ('  %r = for(%x) {n = 2, n_carry = 1, reverse = false} : f32[3] {\n'
            '  ^(%i: i64[], %h: f32[3]):\n'
            '    %a = reshape(%h) {shape = [3, 1]} : f32[3, 1] loc("m":3:1)\n'
            '    %b = reshape(%a) {shape = [1, 3]} : f32[1, 3] loc("m":4:1)\n'
            '    %c = reshape(%b) {shape = [3]} : f32[3] loc("m":5:1)\n'
            '    %e = exp(%c) : f32[3]\n    yield(%e)\n  }\n  return(%r)\n')
    out = canon(body)
    assert "reshape" not in out and "%e = exp(%h) : f32[3]" in out


def test_table_skips_patterns_for_unregistered_ops():
    fake = Pattern(P("no_such_op", "x"), bound("x"), "never available")
    table = pattern_table(all_patterns() + [fake])
    assert "no_such_op" not in table
    assert {"add", "mul", "neg", "reshape"} <= set(table)
    assert all(p.available() for ps in table.values() for p in ps)


def test_a_plugin_op_brings_its_own_rewrites():
    from adcompiler.plugins import register_op, unregister_op
    try:
        register_op("plug_id", lambda types, attrs: types[0], kernel=lambda xp, x: x,
                    traits=("linear",), rewrites=(Pattern(P("plug_id", "x"), bound("x"),
                                                          "plug_id(x) -> x"),))
        body = "  %y = plug_id(%x) : f32[3]\n  %e = exp(%y) : f32[3]\n  return(%e)\n"
        assert canon(body) == "  %e = exp(%x) : f32[3]\n  return(%e)\n"
    finally:
        unregister_op("plug_id")


def test_a_rewrite_must_be_rooted_at_its_op():
    from adcompiler.ops.registry import register
    with pytest.raises(ValueError, match="at its root"):
        register("not_rooted", lambda types, attrs: types[0],
                 rewrites=(Pattern(P("neg", "x"), bound("x"), "elsewhere"),))
    assert "not_rooted" not in REGISTRY
