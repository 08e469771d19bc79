"""`adc.jacfwd`, `jacrev`, `auto_jacobian`, `hessian` and `check_grads`, against PyTorch's
`torch.autograd.functional` and against a broken rule that the check must catch."""
import numpy as np
import pytest

import adcompiler as adc

TWO_OUT = """
def f(param a: f64[3], param w: f64[2, 3]) -> (f64[2], f64) {
    h = tanh(w @ a)
    return h * h, sum(exp(a) * a)
}
"""
SCALAR = """
def s(param a: f64[3], param w: f64[2, 3]) -> f64 {
    return sum(tanh(w @ a) ** 3) + sum(a * a * a)
}
"""
RNG = np.random.default_rng(1)
A, W = RNG.standard_normal(3), RNG.standard_normal((2, 3))


def torch_f(a, w):
    import torch
    h = torch.tanh(w @ a)
    return h * h, torch.sum(torch.exp(a) * a)


def torch_s(a, w):
    import torch
    return torch.sum(torch.tanh(w @ a) ** 3) + torch.sum(a * a * a)


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobians_match_torch(jac):
    torch = pytest.importorskip("torch")
    ref = torch.autograd.functional.jacobian(torch_f, (torch.tensor(A), torch.tensor(W)))
    got = getattr(adc, jac)(TWO_OUT)(A, W)       # results outer, inputs inner
    for k in range(2):
        for i in range(2):
            np.testing.assert_allclose(got[k][i], ref[k][i].numpy(), rtol=1e-12, atol=1e-14)
    single = getattr(adc, jac)(TWO_OUT, wrt="a")(A, W)
    np.testing.assert_allclose(single[0], ref[0][0].numpy(), rtol=1e-12)
    assert single[1].shape == (3,)                # d(scalar)/da: () + (3,)


def test_jacobian_chooses_the_mode_by_size():
    fewer_outputs = adc.auto_jacobian(SCALAR, inputs={"a": A, "w": W})
    assert fewer_outputs.mode == "reverse"        # 1 output element < 9 input elements
    fewer_inputs = adc.auto_jacobian(TWO_OUT, wrt="a", inputs={"a": A, "w": W})
    assert fewer_inputs.mode == "forward"         # 3 input elements <= 3 output elements
    np.testing.assert_allclose(fewer_inputs(A, W)[0], adc.jacrev(TWO_OUT, wrt="a")(A, W)[0],
                               rtol=1e-12)


def test_hessian_matches_torch():
    torch = pytest.importorskip("torch")
    ref = torch.autograd.functional.hessian(torch_s, (torch.tensor(A), torch.tensor(W)))
    got = adc.hessian(SCALAR)(A, W)
    for i in range(2):
        for j in range(2):
            assert got[i][j].shape == ref[i][j].shape
            np.testing.assert_allclose(got[i][j], ref[i][j].numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(adc.hessian(SCALAR, argnums=0)(A, W), ref[0][0].numpy(),
                               rtol=1e-10)


def test_empty_inputs_give_empty_blocks():
    src = "def e(param x: f64[0], param y: f64[2]) -> f64[2] {\n    return y * sum(x)\n}\n"
    for jac in (adc.jacfwd, adc.jacrev):
        jx, jy = jac(src)(np.zeros(0), np.ones(2))
        assert jx.shape == (2, 0) and jy.shape == (2, 2)
        np.testing.assert_array_equal(jy, np.zeros((2, 2)))


def test_check_grads_passes_and_catches_a_wrong_rule():
    inputs = {"a": A, "w": W}
    errors = adc.check_grads(TWO_OUT, inputs)
    assert set(errors) == {"jvp", "vjp", "dot product"}
    assert adc.check_grads(SCALAR, inputs, order=2)["hvp"] < 1e-6
    wrong = """
def sq(x: f64[3]) -> f64[3] {
    return x * x
}
grad sq(x, y, dy) {
    return 3 * x * dy
}
tangent sq(x, dx) {
    return 2 * x * dx
}
def loss(param a: f64[3]) -> f64 {
    return sum(sq(a))
}
"""
    with pytest.raises(AssertionError, match=r"vjp relative error .*, dot product relative"):
        adc.check_grads(wrong, {"a": A})


CUSTOM = """
def clip_grad(x: f64[N]) -> f64[N] {
    return x * x
}
grad clip_grad(x, y, dy) {
    return clip(dy, -1.0, 1.0) * 2 * x
}
def loss(param a: f64[3]) -> f64 {
    return sum(3 * clip_grad(a))
}
"""


def test_custom_rules_in_second_order_and_errors_in_the_users_names():
    a = np.array([0.3, -0.5, 1.2])
    # the rule clips the cotangent 3 to 1: 2 a, not 6 a; the Hessian differentiates the rule
    np.testing.assert_allclose(adc.grad(CUSTOM, wrt="a")(a), 2 * a, rtol=1e-12)
    np.testing.assert_allclose(adc.hessian(CUSTOM, wrt="a")(a), 2 * np.eye(3), rtol=1e-12)
    with pytest.raises(adc.AdcError, match=r"call to 'clip_grad': it has a grad rule but no "
                                           r"tangent rule; add a rule 'tangent clip_grad\("):
        adc.jvp(CUSTOM, wrt="a")
    two_calls = CUSTOM.replace("sum(3 * clip_grad(a))", "sum(clip_grad(a) * clip_grad(a))")
    with pytest.raises(adc.AdcError, match=r"call to 'clip_grad':"):
        adc.hvp(two_calls, wrt="a")      # the forward sweep calls it: no forward rule
    exact = CUSTOM.replace("clip(dy, -1.0, 1.0)", "dy")
    errors = adc.check_grads(exact, {"a": a}, order=2)
    assert "jvp" not in errors and errors["hvp"] < 1e-6          # no tangent rule: no jvp
    with_tangent = exact.replace(
        "def loss", "tangent clip_grad(x, dx) {\n    return 2 * x * dx\n}\ndef loss")
    assert set(adc.check_grads(with_tangent, {"a": a}, order=2)) == {
        "vjp", "jvp", "dot product", "hvp"}
