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
    assert set(errors) == {"jvp", "vjp (dot product)"}
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
    with pytest.raises(AssertionError, match=r"vjp \(dot product\) relative error"):
        adc.check_grads(wrong, {"a": A})
