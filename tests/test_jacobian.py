"""Jacobians: the mode chosen by counting, blocks against analytic Jacobians and central
differences, both modes agreeing, loops and symbolic dimensions, and the pullback."""
import numpy as np
import pytest

from gradcheck import run
from adcompiler.frontend import compile_source
from adcompiler.api.jacobian import build_pullback, choose_mode, jacobian

RNG = np.random.default_rng(5)

TALL = """
def f(param x: f64[2]) -> f64[3, 2] {
    return sin(x) * ones([3, 2], dtype=f64) + x * x
}"""
WIDE = """
def f(param x: f64[3], param w: f64[2, 3], n: i64) -> (f64[2], f64, i64) {
    return tanh(w @ x), sum(x * x), n
}"""


def fd_jacobian(module, inputs, key, w, fn="f", eps=1e-6):
    n = len(module[fn].result_types)
    k = 0 if key == "out" else int(key[3:])
    x = np.asarray(inputs[w], dtype=np.float64)
    out = np.asarray(run(module, fn, inputs)[k])
    jac = np.zeros(out.shape + x.shape)
    for i in np.ndindex(x.shape):
        p, m = x.copy(), x.copy()
        p[i] += eps
        m[i] -= eps
        hi = run(module, fn, {**inputs, w: p})[k]
        lo = run(module, fn, {**inputs, w: m})[k]
        jac[(...,) + i] = (np.asarray(hi) - np.asarray(lo)) / (2 * eps)
    assert n >= 1
    return jac


def test_choose_mode_counts():
    assert choose_mode(3, 10)[0] == "forward"
    assert choose_mode(4, 4)[0] == "forward"
    mode, why = choose_mode(100, 1)
    assert mode == "reverse" and "1 output element < 100" in why and "1 VJP instead of 100 JVPs" in why


def test_tall_function_uses_forward_mode():
    m = compile_source(TALL)
    x = np.array([0.3, -1.2])
    jac = jacobian(m, "f", {"x": x})
    assert jac.mode == "forward" and jac.runs == 2
    assert "2 differentiated input elements <= 6 output elements" in jac.reason
    want = np.zeros((3, 2, 2))
    for i in range(3):
        want[i] = np.diag(np.cos(x) + 2 * x)
    np.testing.assert_allclose(jac.blocks["jac_out_x"], want, rtol=1e-14)


def test_wide_function_uses_reverse_mode_and_skips_integer_results():
    m = compile_source(WIDE)
    ins = {"x": RNG.standard_normal(3), "w": RNG.standard_normal((2, 3)), "n": np.array(4)}
    jac = jacobian(m, "f", ins)
    assert jac.mode == "reverse" and jac.runs == 3
    assert set(jac.blocks) == {"jac_out0_x", "jac_out0_w", "jac_out1_x", "jac_out1_w"}
    y = np.tanh(ins["w"] @ ins["x"])
    np.testing.assert_allclose(jac.blocks["jac_out0_x"], (1 - y * y)[:, None] * ins["w"],
                               rtol=1e-13)
    np.testing.assert_allclose(jac.blocks["jac_out1_x"], 2 * ins["x"], rtol=1e-14)
    np.testing.assert_array_equal(jac.blocks["jac_out1_w"], np.zeros((2, 3)))
    for key in jac.blocks:
        _, out, w = key.split("_")
        np.testing.assert_allclose(jac.blocks[key], fd_jacobian(m, ins, out, w),
                                   rtol=1e-6, atol=1e-8, err_msg=key)


@pytest.mark.parametrize("src,inputs", [
    (WIDE, {"x": RNG.standard_normal(3), "w": RNG.standard_normal((2, 3)), "n": np.array(1)}),
    ("""
def f(param h0: f64[B, 2], param w: f64[2, 2]) -> f64[B, 2] {
    h = h0
    for i in range(3) { h = tanh(h @ w) + h }
    return h
}""", {"h0": RNG.standard_normal((3, 2)), "w": RNG.standard_normal((2, 2))}),
])
def test_modes_agree(src, inputs):
    m = compile_source(src)
    fwd = jacobian(m, "f", inputs, mode="forward")
    rev = jacobian(m, "f", inputs, mode="reverse")
    forced = fwd if jacobian(m, "f", inputs).mode == "reverse" else rev
    assert "as asked" in forced.reason
    for key in fwd.blocks:
        np.testing.assert_allclose(fwd.blocks[key], rev.blocks[key], rtol=1e-12, atol=1e-14)


def test_pullback_names_and_values():
    m = compile_source("""
def f(param x: f64[2], ct_out0: f64) -> (f64[2], f64) { return x * ct_out0, sum(x) }""")
    pm, names = build_pullback(m, "f", ["x"])
    assert names == ["_ct_out0", "ct_out1"]
    x = np.array([1.0, 2.0])
    total, gx = run(pm, "f_pullback_grad", {"x": x, "ct_out0": np.array(3.0),
                                            "_ct_out0": np.array([1.0, 10.0]),
                                            "ct_out1": np.array(2.0)})
    assert total == 3 * 1 + 60 + 2 * 3
    np.testing.assert_array_equal(gx, [3 + 2, 30 + 2])
