"""Deep copies of blocks, functions and modules."""
from __future__ import annotations

from adcompiler.diagnostics import Loc
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import NO_ATTRS, Block, Function, Module
from adcompiler.ir.printer import print_module
from adcompiler.ir.types import TensorType
from adcompiler.passes.clone import clone_block, clone_function, clone_module

F32_3 = TensorType("f32", (3,))


def loop_function() -> Function:
    """f(x, w): a loop whose body captures `w` and has a shape attribute to deep-copy."""
    body = Block([F32_3, F32_3], ["x", "w"])
    x, w = body.args
    b = Builder(body, Loc("m.tdsl", 2, 1))
    lb = Block([TensorType("i64"), F32_3], ["i", "h"])
    with b.inside(lb), b.at(Loc("m.tdsl", 3, 5)):
        h = b.emit("mul", lb.args[1], w)
        h.name = "h"
        b.yield_([b.emit("broadcast_to", h, shape=[3])])
    loop = b.for_(4, lb, [x], result_names=["out"])
    b.ret([loop.results[0]])
    return Function("f", body, [F32_3], params={"w"}, attrs={"tags": ["a"]},
                    loc=Loc("m.tdsl", 1, 1))


def test_clone_function_copies_everything_and_shares_nothing():
    f = loop_function()
    g, vmap = clone_function(f)
    assert print_module(Module({"f": g})) == print_module(Module({"f": f}))
    old_ops, new_ops = list(f.walk()), list(g.walk())
    assert len(old_ops) == len(new_ops) == 5
    for o, n in zip(old_ops, new_ops):
        assert o is not n and o.name == n.name and o.loc == n.loc
        # shared only when there are none: ops without attrs share one immutable empty dict
        assert o.attrs == n.attrs and (o.attrs is not n.attrs or o.attrs is NO_ATTRS)
        assert all(vmap[r] is s for r, s in zip(o.results, n.results))
        assert not set(n.operands) & set(f.args)  # nothing points back into `f`
    bshape = next(op for op in g.walk() if op.name == "broadcast_to").attrs["shape"]
    bshape.append(7)  # a deep copy: the original attribute is unaffected
    assert next(op for op in f.walk() if op.name == "broadcast_to").attrs["shape"] == [3]
    assert g.attrs == f.attrs and g.attrs["tags"] is not f.attrs["tags"]
    assert g.params == {"w"} and g.params is not f.params
    assert g.loc == f.loc and g.arg_names == ["x", "w"]


def test_captured_values_are_remapped_when_cloned_too():
    f = loop_function()
    g, vmap = clone_function(f)
    inner_mul = next(op for op in g.walk() if op.name == "mul")
    assert inner_mul.operands[1] is g.arg("w") is vmap[f.arg("w")]
    assert inner_mul.operands[0] is g.body.ops[0].regions[0].args[1]
    assert g.body.ops[0].regions[0].parent is g.body.ops[0]
    assert g.body.ops[0].parent is g.body


def test_cloning_a_body_alone_keeps_outer_captures():
    f = loop_function()
    body = f.body.ops[0].regions[0]
    vmap = {}
    copy = clone_block(body, vmap)
    assert copy.ops[0].operands[1] is f.arg("w")  # not cloned: still the outer value
    assert copy.ops[0].operands[0] is copy.args[1] is vmap[body.args[1]]
    assert [a.name for a in copy.args] == ["i", "h"]


def test_clone_function_renames_and_module_clone_keeps_order():
    f = loop_function()
    g, _ = clone_function(f, "f_copy")
    assert g.name == "f_copy" and f.name == "f"
    m = Module()
    m.add(f)
    m.add(g)
    m2 = clone_module(m)
    assert list(m2.functions) == ["f", "f_copy"]
    assert m2["f"] is not f and print_module(m2) == print_module(m)
