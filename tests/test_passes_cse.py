"""Common subexpression elimination beyond the golden cases (golden/cse/cse.ir): sibling
loops, attrs and types, calls, regions built by hand."""
from __future__ import annotations

from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.types import TensorType
from adcompiler.passes import run_pipeline
from adcompiler.passes.cse import CSE, freeze


def cse(body: str, args: str = "%x: f32[3], %y: f32[3]", result: str = "f32[3]") -> str:
    text = f"func @f({args}) -> ({result}) {{\n{body}}}\n"
    m = parse_module(text)
    out = run_pipeline(m, "cse", verify=True)
    assert print_module(m) == text
    return "\n".join(print_module(out).splitlines()[1:-1]) + "\n"


def test_different_attrs_or_types_are_not_merged():
    body = ('  %a = const() {value = 1.0, dtype = "f32"} : f32[]\n'
            '  %b = const() {value = 1.0, dtype = "f64"} : f64[]\n'
            '  %c = const() {value = 1, dtype = "f32"} : f32[]\n'
            '  %d = const() {value = 1.0, dtype = "f32"} : f32[]\n'
            '  %z = const() {value = 0.0, dtype = "f32"} : f32[]\n'
            '  %n = const() {value = -0.0, dtype = "f32"} : f32[]\n'
            "  %s = add(%a, %d) : f32[]\n  return(%s)\n")
    out = cse(body, args="", result="f32[]")
    assert "%d = const" not in out and "%s = add(%a, %a)" in out
    for name in ("%a", "%b", "%c", "%z", "%n"):
        assert f"  {name} = const" in out
    assert freeze({"shape": [2, "B"]}) == freeze({"shape": [2, "B"]})
    assert freeze([1]) != freeze((1,))


def test_sibling_loops_do_not_share_body_values():
    loop = ("  %{r} = for(%y) {{n = 2, n_carry = 1, reverse = false}} : f32[3] {{\n"
            "  ^(%i{k}: i64[], %h{k}: f32[3]):\n"
            "    %e{k} = exp(%y) : f32[3]\n    %m{k} = mul(%h{k}, %e{k}) : f32[3]\n"
            "    yield(%m{k})\n  }}\n")
    body = (loop.format(r="r1", k="1") + loop.format(r="r2", k="2")
            + "  %s = add(%r1, %r2) : f32[3]\n  return(%s)\n")
    out = cse(body)
    assert out.count("exp(%y)") == 2 and out.count("for(") == 2


def test_calls_and_loops_are_never_merged():
    text = ("func @g(%x: f32[3]) -> (f32[3]) {\n  return(%x)\n}\n\n"
            "func @f(%x: f32[3]) -> (f32[3]) {\n"
            '  %a = call(%x) {callee = "g"} : f32[3]\n'
            '  %b = call(%x) {callee = "g"} : f32[3]\n'
            "  %c = add(%a, %b) : f32[3]\n  return(%c)\n}\n")
    out = CSE()(parse_module(text))
    assert [op.name for op in out["f"].walk()] == ["call", "call", "add", "return"]


def test_results_of_merged_ops_are_replaced_in_nested_regions_built_by_hand():
    f32 = TensorType("f32", (3,))
    body = Block([f32], ["x"])
    b = Builder(body)
    x = body.args[0]
    e1 = b.emit("exp", x)
    e2 = b.emit("exp", x)
    lb = Block([TensorType("i64"), f32])
    with b.inside(lb):
        b.yield_([b.emit("add", lb.args[1], e2)])
    loop = b.for_(3, lb, [e1])
    b.ret([loop.result])
    m = Module({"f": Function("f", body, [f32])})
    out = CSE()(m)
    f = out["f"]
    exp_op, for_op, _ = f.body.ops
    add = for_op.regions[0].ops[0]
    assert add.operands[1] is exp_op.result and for_op.operands == [exp_op.result]
    assert len(m["f"].body.ops) == 4  # the input still has both exps
