"""Reverse mode on whole programs: fan-out, loops (carries, captures, scans, nesting)."""
import numpy as np
import pytest

from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import TensorType
from adcompiler.passes.reverse import Reverse
from gradcheck import finite_difference, run

F64 = "f64"


def t(*shape):
    return TensorType(F64, shape)


def module_of(body, result, params):
    fn = Function("f", body, [result.type], params=set(params))
    return Module({"f": fn})


def check(module, inputs, wrt):
    adj = Reverse(wrt=tuple(wrt), fn="f")(module)
    outs = run(adj, "f_grad", inputs)
    np.testing.assert_allclose(outs[0], run(module, "f", inputs)[0], rtol=1e-12)
    for name, got in zip(wrt, outs[1:]):
        want = finite_difference(module, inputs, name)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8, err_msg=name)
    return adj


def test_fan_out_accumulates():
    body = Block([t(3)], ["x"])
    b = Builder(body)
    x = body.args[0]
    y = b.emit("mul", x, x)                 # x used twice by one op
    z = b.emit("add", b.emit("exp", x), y)  # and again by another
    s = b.emit("sum", z)
    b.ret([s])
    x0 = np.array([0.1, -0.4, 0.7])
    adj = Reverse(wrt=("x",), fn="f")(module_of(body, s, ["x"]))
    _, g = run(adj, "f_grad", {"x": x0})
    np.testing.assert_allclose(g, np.exp(x0) + 2 * x0, rtol=1e-14)


def test_broadcast_operand_is_unbroadcast():
    body = Block([t(2, 3), t(3)], ["a", "c"])
    b = Builder(body)
    s = b.emit("sum", b.emit("mul", *body.args))
    b.ret([s])
    a0, c0 = np.arange(6.0).reshape(2, 3), np.array([1.0, 2.0, 3.0])
    adj = Reverse(wrt=("a", "c"), fn="f")(module_of(body, s, ["a", "c"]))
    _, ga, gc = run(adj, "f_grad", {"a": a0, "c": c0})
    np.testing.assert_array_equal(ga, np.broadcast_to(c0, (2, 3)))
    np.testing.assert_array_equal(gc, a0.sum(0))


def _loop_module(n=4):
    """h <- exp(h * w) + b over n steps (w, b captured), L = sum(h)."""
    body = Block([t(3), t(3), t(3)], ["h0", "w", "b"])
    b = Builder(body)
    h0, w, bias = body.args
    lb = Block([TensorType("i64")], ["i"])
    h = lb.add_arg(t(3), "h")
    with b.inside(lb):
        hn = b.emit("add", b.emit("exp", b.emit("mul", h, w)), bias)
        b.yield_([hn])
    loop = b.for_(n, lb, [h0])
    s = b.emit("sum", loop.results[0])
    b.ret([s])
    return module_of(body, s, ["h0", "w", "b"])


def test_loop_carry_and_captures():
    rng = np.random.default_rng(1)
    inputs = {k: 0.3 * rng.standard_normal(3) for k in ("h0", "w", "b")}
    adj = check(_loop_module(), inputs, ["h0", "w", "b"])
    rev = [op for op in adj["f_grad"].walk() if op.name == "for" and op.attrs["reverse"]]
    assert len(rev) == 1
    assert rev[0].attrs["n"] == 4


def test_loop_with_symbolic_trip_count_and_scan_outputs():
    # ys: per-iteration outputs stacked; xs: a scanned input
    body = Block([t("T", 2), t(2)], ["xs", "c0"])
    b = Builder(body)
    xs, c0 = body.args
    lb = Block([TensorType("i64"), t(2), t(2)], ["i", "c", "x"])
    _, c, x = lb.args
    with b.inside(lb):
        cn = b.emit("mul", c, b.emit("exp", x))
        y = b.emit("mul", cn, x)
        b.yield_([cn, y])
    loop = b.for_("T", lb, [c0], [xs])
    s = b.emit("add", b.emit("sum", loop.results[0]), b.emit("sum", b.emit("exp", loop.results[1])))
    b.ret([s])
    rng = np.random.default_rng(2)
    inputs = {"xs": 0.3 * rng.standard_normal((5, 2)), "c0": rng.standard_normal(2)}
    check(module_of(body, s, ["xs", "c0"]), inputs, ["xs", "c0"])


def test_nested_loops():
    body = Block([t(2), t(2)], ["h0", "w"])
    b = Builder(body)
    h0, w = body.args
    outer = Block([TensorType("i64"), t(2)], ["i", "h"])
    with b.inside(outer):
        inner = Block([TensorType("i64"), t(2)], ["j", "g"])
        with b.inside(inner):
            b.yield_([b.emit("exp", b.emit("mul", inner.args[1], w))])
        il = b.for_(2, inner, [outer.args[1]])
        b.yield_([b.emit("add", il.results[0], outer.args[1])])
    loop = b.for_(3, outer, [h0])
    s = b.emit("sum", loop.results[0])
    b.ret([s])
    inputs = {"h0": np.array([0.1, -0.2]), "w": np.array([0.3, 0.2])}
    check(module_of(body, s, ["h0", "w"]), inputs, ["h0", "w"])


def test_inactive_input_gets_zero_gradient_and_no_reverse_loop():
    body = Block([t(2), t(2)], ["a", "k"])
    b = Builder(body)
    a, k = body.args
    lb = Block([TensorType("i64"), t(2)], ["i", "c"])
    with b.inside(lb):
        b.yield_([b.emit("exp", b.emit("mul", lb.args[1], k))])
    loop = b.for_(3, lb, [k])       # depends only on k
    s = b.emit("add", b.emit("sum", a), b.emit("sum", loop.results[0]))
    b.ret([s])
    adj = Reverse(wrt=("a",), fn="f")(module_of(body, s, ["a"]))
    assert not any(op.name == "for" and op.attrs["reverse"] for op in adj["f_grad"].walk())
    _, ga = run(adj, "f_grad", {"a": np.ones(2), "k": np.ones(2)})
    np.testing.assert_array_equal(ga, [1.0, 1.0])


def test_wrt_must_name_a_float_input():
    from adcompiler.diagnostics import AdcError
    with pytest.raises(AdcError, match="'z' is not an input"):
        Reverse(wrt=("z",), fn="f")(_loop_module())


def test_mean_over_symbolic_dims_divides_by_the_bound_size():
    # the count of a mean over B x 4 elements is dim_value("4*B"), not a sum over ones
    from adcompiler.frontend import compile_source
    from adc_runtime.executor import run_function
    m = compile_source("def f(param x: f32[B, 4]) -> f32 {\n"
                       "    return sum(mean(x, axis=0))\n}\n", "<t>")
    g = Reverse(wrt=("x",), fn="f")(m)["f_grad"]
    ops = [op.name for op in g.walk()]
    assert "dim_value" in ops
    assert not [op for op in g.walk() if op.name == "ones" and op.result.type.shape]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (_, dx), _ = run_function(Reverse(wrt=("x",), fn="f")(m), "f_grad", {"x": x})
    np.testing.assert_array_equal(dx, np.full((3, 4), 1 / 3, np.float32))
