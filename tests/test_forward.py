"""Forward mode on whole programs: fan-out, broadcasting, loops (carries, captures, scans,
nesting, reverse loops), symbolic zeros, custom tangent rules and their errors."""
import numpy as np
import pytest

from gradcheck import run
from test_forward_ops import check_jvp
from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_source
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import TensorType
from adcompiler.passes.jvp import JVP
from adcompiler.passes.reverse import Reverse

RNG = np.random.default_rng(7)


def randn(*shape, scale=0.5):
    return scale * RNG.standard_normal(shape)


def ops_of(module, fn):
    return [op for op in module[fn].walk()]


def test_fan_out_and_broadcasting():
    m = compile_source("""
def f(param x: f64[3], param c: f64[2, 1]) -> (f64[2, 3], f64) {
    y = x * x + exp(x)
    return y * c - x, sum(y / (c + 3.0))
}""")
    check_jvp(m, {"x": randn(3), "c": randn(2, 1)}, ["x", "c"], roundtrip=True)


def test_values_are_exact_derivative_of_a_quadratic():
    m = compile_source("def f(param x: f64[3]) -> f64 { return sum(3.0 * x * x) }")
    jm = JVP(wrt=("x",), fn="f")(m)
    x, t = np.array([1.0, -2.0, 0.5]), np.array([0.1, 1.0, -2.0])
    val, tan = run(jm, "f_jvp", {"x": x, "t_x": t})
    assert val == 3 * np.sum(x * x)
    assert tan == pytest.approx(np.dot(6 * x, t), rel=1e-15)


def test_inactive_input_gets_no_tangent_work():
    m = compile_source("""
def f(param a: f64[2], k: f64[2]) -> f64 {
    h = k
    for i in range(3) { h = exp(h * k) }
    return sum(a * a) + sum(h)
}""")
    jm = JVP(wrt=("a",), fn="f")(m)
    loops = [op for op in ops_of(jm, "f_jvp") if op.name == "for"]
    assert len(loops) == 1 and loops[0].attrs["n_carry"] == 1   # no tangent carry
    assert not any(op.name == "exp" for op in loops[0].walk() if op.operands and
                   op.operands[0].name and op.operands[0].name.startswith("t_"))
    _, tan = run(jm, "f_jvp", {"a": np.array([1.0, 2.0]), "k": np.ones(2),
                               "t_a": np.array([1.0, 1.0])})
    assert tan == 6.0


def test_unused_tangent_is_symbolic_zero():
    m = compile_source("def f(param a: f64[2], param b: f64[2]) -> f64 { return sum(exp(a)) }")
    jm = JVP(wrt=("b",), fn="f")(m)
    fn = jm["f_jvp"]
    assert [op.name for op in fn.body.ops] == ["exp", "sum", "zeros", "return"]
    assert run(jm, "f_jvp", {"a": np.ones(2), "b": np.ones(2), "t_b": np.ones(2)})[1] == 0.0


def test_loop_carry_captures_and_scan():
    m = compile_source("""
def f(xs: f64[T, 3], param h0: f64[3], param w: f64[3], param b: f64[3]) -> (f64, f64[3]) {
    h = h0
    acc = zeros([], dtype=f64)
    for i in range(T) {
        h = tanh(h * w + xs[i]) + b
        acc = acc + sum(h * xs[i])
    }
    return acc, h
}""")
    inputs = {"xs": randn(5, 3), "h0": randn(3), "w": randn(3), "b": randn(3)}
    check_jvp(m, inputs, ["xs", "h0", "w", "b"], roundtrip=True)
    jm = JVP(wrt=("h0", "w", "b"), fn="f")(m)
    loops = [op for op in ops_of(jm, "f_jvp") if op.name == "for"]
    assert len(loops) == 1   # one loop carries primal and tangent


def _scan_module():
    """A builder-made scan: carries c, slices xs, stacks ys (per-iteration outputs)."""
    t = lambda *s: TensorType("f64", s)  # noqa: E731
    body = Block([t("T", 2), t(2)], ["xs", "c0"])
    b = Builder(body)
    xs, c0 = body.args
    lb = Block([TensorType("i64"), t(2), t(2)], ["i", "c", "x"])
    _, c, x = lb.args
    with b.inside(lb):
        cn = b.emit("mul", c, b.emit("exp", x))
        b.yield_([cn, b.emit("mul", cn, x)])
    loop = b.for_("T", lb, [c0], [xs])
    b.ret([loop.results[0], b.emit("sin", loop.results[1])])
    return Module({"f": Function("f", body, [t(2), t("T", 2)], params={"xs", "c0"})})


@pytest.mark.parametrize("wrt", [["xs", "c0"], ["xs"], ["c0"]])
def test_scan_inputs_and_outputs(wrt):
    check_jvp(_scan_module(), {"xs": randn(4, 2), "c0": randn(2)}, wrt, roundtrip=True)


def test_nested_loops():
    m = compile_source("""
def f(param h0: f64[2], param w: f64[2]) -> f64 {
    h = h0
    for i in range(3) {
        g = h
        for j in range(2) { g = exp(g * w) * 0.5 }
        h = g + h
    }
    return sum(h)
}""")
    check_jvp(m, {"h0": randn(2), "w": randn(2)}, ["h0", "w"], roundtrip=True)


def test_reverse_loops_of_an_adjoint_program():
    """The adjoint program runs its loops backwards; forward mode keeps the direction."""
    m = Reverse(wrt=("xs", "c0"), fn="f")(_scan_module())
    inputs = {"xs": randn(3, 2), "c0": randn(2)}
    check_jvp(m, inputs, ["xs", "c0"], fn="f_grad")
    jm = JVP(wrt=("xs",), fn="f_grad")(m)
    assert any(op.name == "for" and op.attrs["reverse"] for op in ops_of(jm, "f_grad_jvp"))


CUSTOM = """
def ste_round(x: f64[N]) -> f64[N] {
    return round(x)
}
grad ste_round(x, y, dy) { return dy }
%s
def f(param x: f64[N]) -> f64 { return sum(ste_round(x) * x) }
"""


def test_call_uses_the_tangent_rule():
    m = compile_source(CUSTOM % "tangent ste_round(x, dx) { return dx * 2.0 }")
    jm = JVP(wrt=("x",), fn="f")(m)
    x, t = np.array([0.4, 1.7, -2.2]), np.array([1.0, -1.0, 0.5])
    val, tan = run(jm, "f_jvp", {"x": x, "t_x": t})
    assert val == np.sum(np.round(x) * x)
    # d(r(x) x) = r'(x) x dx + r(x) dx with the rule's r'(x) dx = 2 dx
    np.testing.assert_allclose(tan, np.sum(2 * t * x + np.round(x) * t), rtol=1e-14)
    assert any(op.name == "call" and op.attrs["callee"] == "ste_round.tangent"
               for op in ops_of(jm, "f_jvp"))


def test_grad_rule_without_tangent_rule_is_an_error():
    m = compile_source(CUSTOM % "", "model.tdsl")
    with pytest.raises(AdcError) as e:
        JVP(wrt=("x",), fn="f")(m)
    assert "'ste_round'" in e.value.message and "add a rule 'tangent ste_round" in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 7


def test_calls_without_rules_are_inlined():
    m = compile_source("""
def g(a: f64[2], b: f64[2]) -> (f64[2], f64[2]) { return a * b, sin(a) }
def f(param x: f64[2], param y: f64[2]) -> f64 {
    p, q = g(x, y)
    r, s = g(p, q)
    return sum(r) + sum(s)
}""")
    check_jvp(m, {"x": randn(2), "y": randn(2)}, ["x", "y"])


def test_tangent_names_avoid_input_names():
    m = compile_source("def f(param x: f64[2], t_x: f64[2]) -> f64 { return sum(x * t_x) }")
    jm = JVP(wrt=("x",), fn="f")(m)
    assert jm["f_jvp"].arg_names == ["x", "t_x", "_t_x"]
    _, tan = run(jm, "f_jvp", {"x": np.ones(2), "t_x": np.array([2.0, 3.0]),
                               "_t_x": np.array([1.0, 10.0])})
    assert tan == 32.0


def test_integer_result_gets_zero_tangent_and_f32_stays_f32():
    m = compile_source("""
def f(param x: f32[3]) -> (f32, i64) { return sum(x * x), sum(x > 0.0) }""")
    jm = JVP(wrt=("x",), fn="f")(m)
    outs = run(jm, "f_jvp", {"x": np.array([1, -2, 3], np.float32),
                             "t_x": np.ones(3, np.float32)})
    assert outs[2].dtype == np.float32 and outs[2] == 4.0
    assert outs[3].dtype == np.int64 and outs[3] == 0


def test_default_wrt_and_errors():
    m = compile_source("def f(param x: f64[2], y: f64[2], n: i64) -> f64 { return sum(x * y) }")
    assert JVP()(m)["f_jvp"].arg_names == ["x", "y", "n", "t_x"]
    with pytest.raises(AdcError, match="'z' is not an input"):
        JVP(wrt=("z",))(m)
    with pytest.raises(AdcError, match="integer type"):
        JVP(wrt=("n",))(m)


def test_pipeline_name():
    from adcompiler.passes.pipeline import run_pipeline
    m = compile_source("def f(param x: f64[2]) -> f64 { return sum(exp(x)) }")
    out = run_pipeline(m, "inline,jvp{wrt=x fn=f},dce", verify=True)
    assert "f_jvp" in out.functions
