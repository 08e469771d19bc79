"""Lowering TDSL to IR: op sequences, locations, weak literals, symbolic dims, calls,
loops, multi-result functions and custom-derivative rules; values checked by running."""
import numpy as np
import pytest

from adcompiler.diagnostics import Loc
from adcompiler.frontend import compile_source
from adcompiler.ir.types import TensorType
from adcompiler.ir.verifier import verify
from adc_runtime.executor import run_function


def compile_ok(src, name="m.tdsl"):
    m = compile_source(src, name)
    verify(m)
    return m


def run(m, fn, **inputs):
    outs, _ = run_function(m, fn, inputs)
    return outs


def op_names(fn):
    return [op.name for op in fn.walk()]


def one(expr, args="x: f32[3], y: f32[3]", result="f32[3]"):
    return compile_ok(f"def f({args}) -> {result} {{\n  z = {expr}\n  return z\n}}\n")["f"]


# ---- operators and precedence --------------------------------------------------------

@pytest.mark.parametrize("expr, ops", [
    ("-x**2", ["const", "pow", "neg"]),
    ("x - y - x", ["sub", "sub"]),
    ("x * y + x", ["mul", "add"]),
    ("x + y * x", ["mul", "add"]),
    ("exp(-x) * 2", ["neg", "exp", "const", "mul"]),
    ("x / y ** 2", ["const", "pow", "div"]),
])
def test_operator_lowering_order(expr, ops):
    assert op_names(one(expr)) == ops + ["return"]


def test_matmul_binds_like_mul():
    f = one("x @ y * x", args="x: f32[3, 3], y: f32[3, 3]", result="f32[3, 3]")
    assert op_names(f) == ["matmul", "mul", "return"]
    ops = list(f.walk())
    assert ops[1].operands[0] is ops[0].result


def test_sub_is_left_associative():
    f = one("x - y - x")
    first, second, _ = f.body.ops
    assert second.operands == [first.result, f.arg("x")]
    assert first.operands == [f.arg("x"), f.arg("y")]


def test_neg_pow_values():
    m = compile_ok("def f(x: f64[3]) -> f64[3] { return -x**2 + 3 - 1 }")
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(run(m, "f", x=x)[0], -x**2 + 2)


def test_locations_point_at_operator_and_callee():
    f = one("(x +\n    exp(y))")
    add = next(op for op in f.walk() if op.name == "add")
    exp = next(op for op in f.walk() if op.name == "exp")
    assert add.loc == Loc("m.tdsl", 2, 10)
    assert exp.loc == Loc("m.tdsl", 3, 5)
    assert f.body.ops[-1].loc == Loc("m.tdsl", 4, 3)
    assert f.loc == Loc("m.tdsl", 1, 1)


def test_comparisons_give_bool():
    m = compile_ok("def f(x: f32[3], y: f32[3]) -> bool[3] { return x < y }")
    assert op_names(m["f"]) == ["lt", "return"]
    for sym, name in [("<=", "le"), (">", "gt"), (">=", "ge"), ("==", "eq"), ("!=", "ne")]:
        f = compile_ok(f"def f(x: f32[3]) -> bool[3] {{ return x {sym} 1 }}")["f"]
        assert op_names(f) == ["const", name, "return"]


# ---- weak literals --------------------------------------------------------------------

def test_literal_takes_tensor_dtype():
    for dt in ("f16", "f32", "f64", "i32", "i64"):
        f = compile_ok(f"def f(x: {dt}[2]) -> {dt}[2] {{ return x * 2 }}")["f"]
        const = f.body.ops[0]
        assert const.name == "const" and const.attrs["dtype"] == dt
        assert const.result.type == TensorType(dt, ())
        assert isinstance(const.attrs["value"], float if dt[0] == "f" else int)


def test_literal_defaults_and_folding():
    f = compile_ok("def f() -> f32 { return exp(2 * 3 - 5.5) }")["f"]
    const = f.body.ops[0]
    assert const.attrs == {"value": 0.5, "dtype": "f32"}
    f = compile_ok("def f() -> i64 { a = 7; return sum(a) }")["f"]
    assert f.body.ops[0].attrs == {"value": 7, "dtype": "i64"}


def test_float_literal_meets_int_tensor():
    f = compile_ok("def f(i: i64) -> f32 { return i * 0.5 }")["f"]
    assert f.body.ops[0].attrs == {"value": 0.5, "dtype": "f32"}
    assert f.body.ops[1].result.type.dtype == "f32"


def test_literal_result_takes_declared_type():
    m = compile_ok("def f(x: f64[2]) -> (f64, f64[2]) { return 1 / 4, 0 }")
    out = run(m, "f", x=np.zeros(2))
    assert out[0] == 0.25 and out[0].dtype == np.float64
    np.testing.assert_array_equal(out[1], np.zeros(2))


def test_literal_argument_of_op_takes_other_operand_dtype():
    f = compile_ok("def f(x: f64[3]) -> f64[3] { return x + exp(x) * 0.5 }")["f"]
    assert [op.attrs.get("dtype") for op in f.body.ops if op.name == "const"] == ["f64"]


# ---- symbolic dims, ops with options --------------------------------------------------

def test_symbolic_dims_flow_through_ops():
    m = compile_ok("def f(x: f32[B, 3], b: f32[3]) -> f32[B] {\n"
                   "  return sum(x + b, axis=1)\n}")
    assert m["f"].body.ops[0].result.type == TensorType("f32", ("B", 3))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones(3, np.float32)
    np.testing.assert_allclose(run(m, "f", x=x, b=b)[0], (x + b).sum(1))


def test_shape_options_take_symbols_and_ints():
    m = compile_ok("def f(x: f32[B, 3]) -> f32[B, 3] {\n"
                   "  y = reshape(x, [-1])\n"
                   "  z = broadcast_to(reshape(sum(x, axis=0, keepdims=true), [1, 3]), [B, 3])\n"
                   "  return reshape(y, [B, 3]) + z + zeros([B, 3])\n}")
    ops = {op.name: op for op in m["f"].walk()}
    assert ops["broadcast_to"].attrs["shape"] == ("B", 3)
    assert ops["zeros"].attrs == {"shape": ("B", 3), "dtype": "f32"}
    assert ops["sum"].attrs == {"axis": 0, "keepdims": True}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(run(m, "f", x=x)[0], x + x.sum(0))


def test_positional_options_and_lists():
    f = compile_ok("def f(x: f32[2, 3]) -> f32 { return sum(sum(x, [0, 1], false)) }")["f"]
    assert f.body.ops[0].attrs == {"axis": (0, 1), "keepdims": False}
    f = compile_ok("def f(x: f32[2]) -> f16[2] { return cast(x, f16) }")["f"]
    assert f.body.ops[0].attrs == {"dtype": "f16"}


# ---- indexing -------------------------------------------------------------------------

def test_static_index_and_slices():
    m = compile_ok("def f(x: f64[4, 5]) -> (f64[2], f64[4, 2], f64) {\n"
                   "  return x[1, 1:5:2], x[:, -2:], x[-1, 0]\n}")
    idx = [op.attrs["idx"] for op in m["f"].walk() if op.name == "index"]
    assert idx == [(1, (1, 5, 2)), ((None, None, None), (-2, None, None)), (-1, 0)]
    x = np.arange(20.0).reshape(4, 5)
    a, b, c = run(m, "f", x=x)
    np.testing.assert_array_equal(a, x[1, 1:5:2])
    np.testing.assert_array_equal(b, x[:, -2:])
    assert c == x[-1, 0]


# ---- calls and multiple results -------------------------------------------------------

MULTI = """
def stats(x: f64[N]) -> (f64, f64) {
  m = sum(x) / 4
  return m, sum((x - m) ** 2)
}
def main(x: f64[N]) -> f64 {
  mu, ss = stats(x)
  a = stats(x * 2)   # a call result may feed a tuple assign only
  return mu + ss
}
"""


def test_multi_result_call():
    src = MULTI.replace("  a = stats(x * 2)   # a call result may feed a tuple assign only\n",
                        "")
    m = compile_ok(src)
    call = next(op for op in m["main"].walk() if op.name == "call")
    assert call.attrs == {"callee": "stats"} and len(call.results) == 2
    assert [r.name for r in call.results] == ["mu", "ss"]
    x = np.array([1.0, 2.0, 3.0, 6.0])
    assert run(m, "main", x=x)[0] == pytest.approx(3.0 + ((x - 3) ** 2).sum())
    assert m.main.name == "main"


def test_functions_can_call_later_functions_and_params_are_recorded():
    m = compile_ok("def a(param w: f32, b: f32) -> f32 { return c(w) * b }\n"
                   "def c(v: f32) -> f32 { return v + 1 }")
    assert m["a"].params == {"w"} and list(m.functions) == ["a", "c"]
    assert run(m, "a", w=np.float32(2), b=np.float32(3))[0] == 9


# ---- loops ----------------------------------------------------------------------------

LOOP = """
def rnn(W: f64[T, 3, 3], h0: f64[3], c: f64) -> (f64[3], f64) {
  h = h0
  acc = 0
  for t in range(T) {
    pre = W[t] @ h        # local to one iteration
    h = tanh(pre) * c     # c is captured
    acc = acc + sum(h)
  }
  return h, acc
}
"""


def test_loop_carried_local_captured():
    m = compile_ok(LOOP)
    fn = m["rnn"]
    loop = next(op for op in fn.body.ops if op.name == "for")
    assert loop.attrs == {"n": "T", "n_carry": 2, "reverse": False}
    body = loop.regions[0]
    assert [a.name for a in body.args] == ["i" if False else "t", "h", "acc"]
    assert [a.type for a in body.args] == [TensorType("i64", ()), TensorType("f64", (3,)),
                                           TensorType("f64", ())]
    assert loop.operands[0] is fn.arg("h0")
    assert loop.operands[1].defining_op.attrs == {"value": 0.0, "dtype": "f64"}
    assert body.ops[-1].name == "yield"
    assert fn.body.ops[-1].operands == loop.results
    assert any(fn.arg("c") in op.operands for op in body.ops)   # implicit capture
    index = body.ops[0]
    assert index.name == "index" and index.attrs["idx"] == ("?",)
    assert index.operands == [fn.arg("W"), body.args[0]]

    rng = np.random.default_rng(0)
    W, h0 = rng.normal(size=(4, 3, 3)), rng.normal(size=3)
    h, acc = h0, 0.0
    for t in range(4):
        h = np.tanh(W[t] @ h) * 0.5
        acc += h.sum()
    got_h, got_acc = run(m, "rnn", W=W, h0=h0, c=np.float64(0.5))
    np.testing.assert_allclose(got_h, h)
    assert got_acc == pytest.approx(acc)


def test_literal_carry_takes_shape_from_body():
    m = compile_ok("def f(x: f32[N, 3]) -> f32[3] {\n"
                   "  s = 0\n  for i in range(N) { s = s + x[i] }\n  return s\n}")
    loop = next(op for op in m["f"].body.ops if op.name == "for")
    assert loop.results[0].type == TensorType("f32", (3,))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(run(m, "f", x=x)[0], x.sum(0))


def test_nested_loops_and_literal_count():
    m = compile_ok("def f(x: f64) -> f64 {\n  y = x\n"
                   "  for i in range(3) { for j in range(2) { y = y * 2 } }\n  return y\n}")
    outer = next(op for op in m["f"].body.ops if op.name == "for")
    inner = next(op for op in outer.regions[0].ops if op.name == "for")
    assert outer.attrs["n"] == 3 and inner.attrs["n"] == 2
    assert run(m, "f", x=np.float64(1.5))[0] == 1.5 * 64


def test_loop_index_in_arithmetic():
    m = compile_ok("def f(x: f64) -> f64 {\n  s = x\n"
                   "  for i in range(4) { s = s + cast(i, f64) }\n  return s\n}")
    assert run(m, "f", x=np.float64(1))[0] == 7.0


# ---- custom derivative rules ----------------------------------------------------------

RULES = """
grad ste(x, y, dy) { return dy }
def ste(x: f32[N]) -> f32[N] { return floor(x) }
tangent ste(x, dx) { return dx * 1 }
def two(a: f32, b: f32[2]) -> (f32[2], f32) { return a * b, a }
grad two(a, b, p, q, dp, dq) { return sum(dp * b) + dq, dp * a }
"""


def test_grad_and_tangent_rules():
    m = compile_ok(RULES)
    assert list(m.functions) == ["ste.grad", "ste", "ste.tangent", "two", "two.grad"]
    g = m.rule_for("ste", "grad")
    assert g.name == "ste.grad" and g.attrs == {"grad_of": "ste"}
    assert [a.type for a in g.args] == [TensorType("f32", ("N",))] * 3
    assert g.result_types == [TensorType("f32", ("N",))]
    t = m.rule_for("ste", "tangent")
    assert t.attrs == {"tangent_of": "ste"} and [a.name for a in t.args] == ["x", "dx"]
    g2 = m["two.grad"]
    assert [str(a.type) for a in g2.args] == ["f32[]", "f32[2]", "f32[2]", "f32[]", "f32[2]",
                                               "f32[]"]
    assert [str(r) for r in g2.result_types] == ["f32[]", "f32[2]"]
    assert m.main.name == "two"
    outs = run(m, "two.grad", a=np.float32(2), b=np.float32([1, 3]), p=np.zeros(2, np.float32),
               q=np.float32(0), dp=np.float32([1, 1]), dq=np.float32(5))
    assert outs[0] == 9 and list(outs[1]) == [2, 2]


def test_true_and_false_are_bool_scalars():
    from adcompiler.frontend import compile_source
    from adc_runtime.executor import run_function
    import numpy as np
    m = compile_source("def f(x: f32[3]) -> f32[3] {\n"
                       "    return where(x > 0, true, false) * x\n}\n")
    consts = [op for op in m["f"].walk() if op.name == "const"]
    assert {(op.attrs["value"], op.attrs["dtype"]) for op in consts} >= {(True, "bool"),
                                                                          (False, "bool")}
    out, _ = run_function(m, "f", {"x": np.array([1.0, -2.0, 3.0], np.float32)})
    np.testing.assert_array_equal(out[0], [1.0, 0.0, 3.0])
