"""Every transform takes a Python function: compiled once per signature, pytrees in and
out, and the same numbers as PyTorch (where installed) and central differences."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc

sys.path.insert(0, str(Path(__file__).parent))
import pyfront_models as m  # noqa: E402

RNG = np.random.default_rng(0)
PARAMS = {"W1": RNG.standard_normal((3, 4)), "b1": RNG.standard_normal(4),
          "W2": RNG.standard_normal((4, 2))}
X, Y = RNG.standard_normal((6, 3)), RNG.standard_normal((6, 2))


def torch_mlp_grads(params, x, y):
    torch = pytest.importorskip("torch")
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    h = torch.tanh(torch.tensor(x) @ tp["W1"] + tp["b1"])
    loss = torch.mean((h @ tp["W2"] - torch.tensor(y)) ** 2)
    loss.backward()
    return float(loss), {k: t.grad.numpy() for k, t in tp.items()}


def test_jit_compiles_once_per_signature():
    f = adc.jit(m.powered)
    assert f(np.ones(3) * 2.0, 2) == pytest.approx(24.0)
    f(np.ones(3), 2)
    assert len(f.cache) == 1                # same shapes and n: no new compilation
    assert f(np.ones(3) * 2.0, 3) == pytest.approx(48.0)
    f(np.ones(4), 3)
    assert len(f.cache) == 3                # a new int value and a new shape compile again


def test_grad_of_a_dict_of_params_matches_torch():
    loss, expected = torch_mlp_grads(PARAMS, X, Y)
    value, grads = adc.value_and_grad(m.mlp_loss)(PARAMS, X, Y)
    assert value == pytest.approx(loss, rel=1e-12)
    assert set(grads) == set(PARAMS)
    for k in PARAMS:
        np.testing.assert_allclose(grads[k], expected[k], rtol=1e-10, atol=1e-12)


def test_argnums_tuple_and_has_aux():
    w, x = RNG.standard_normal(3), RNG.standard_normal((4, 3))
    (value, aux), g = adc.value_and_grad(m.with_aux, has_aux=True)(w, x)
    assert value == pytest.approx(np.sum((x @ w) ** 2))
    np.testing.assert_allclose(aux["pred"], x @ w)
    np.testing.assert_allclose(g, 2 * x.T @ (x @ w))
    gw, gx = adc.grad(lambda w, x: np.sum(np.sin(x @ w)), argnums=(0, 1))(w, x)
    np.testing.assert_allclose(gw, x.T @ np.cos(x @ w))
    np.testing.assert_allclose(gx, np.outer(np.cos(x @ w), w))


def test_vjp_with_several_results():
    x = RNG.standard_normal(4)
    (a, b), pullback = adc.vjp(m.two_outputs)(x)
    np.testing.assert_allclose(a, np.sin(x) * 2.0)
    ct = (RNG.standard_normal(4), 1.5)
    np.testing.assert_allclose(pullback(ct), 2.0 * np.cos(x) * ct[0] + 1.5 * 3 * x ** 2)


def test_vmap_of_grad_gives_per_example_gradients():
    per_example = adc.vmap(adc.grad(m.mlp_loss), in_axes=(None, 0, 0))
    grads = per_example(PARAMS, X, Y)
    for i in range(X.shape[0]):
        one = adc.grad(m.mlp_loss)(PARAMS, X[i:i + 1], Y[i:i + 1])
        for k in PARAMS:
            np.testing.assert_allclose(grads[k][i], one[k], rtol=1e-10, atol=1e-12)


def test_jacobians_and_hessian():
    x = RNG.standard_normal(3)
    expected = np.diag(1 - np.tanh(x) ** 2) * x + np.diag(np.tanh(x))
    np.testing.assert_allclose(adc.jacfwd(m.elementwise)(x), expected, rtol=1e-10)
    np.testing.assert_allclose(adc.jacrev(m.elementwise)(x), expected, rtol=1e-10)
    h = adc.hessian(lambda v: np.sum(v ** 3))(x)
    np.testing.assert_allclose(h, np.diag(6 * x), rtol=1e-10)


def test_check_grads_of_a_python_function():
    errors = adc.check_grads(m.mlp_loss, (PARAMS, X, Y), order=2)
    assert set(errors) >= {"vjp", "jvp", "hvp"}


def test_train_step_of_a_python_loss_matches_torch_adam():
    torch = pytest.importorskip("torch")
    step = adc.train_step(m.mlp_loss, adc.optim.adam(1e-2))
    params, state = dict(PARAMS), None
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in PARAMS.items()}
    opt = torch.optim.Adam(tp.values(), lr=1e-2)
    for _ in range(3):
        params, state, metrics = step(params, state, X, Y)
        opt.zero_grad()
        h = torch.tanh(torch.tensor(X) @ tp["W1"] + tp["b1"])
        torch.mean((h @ tp["W2"] - torch.tensor(Y)) ** 2).backward()
        opt.step()
    for k in PARAMS:
        np.testing.assert_allclose(params[k], tp[k].detach().numpy(), rtol=1e-9, atol=1e-12)


def test_show_quotes_the_users_lines():
    out = io.StringIO()
    adc.show(m.mlp_loss, PARAMS, X, Y, mode="reverse", file=out)
    text = out.getvalue()
    lines = Path(m.__file__).read_text().splitlines()
    row = next(i for i, ln in enumerate(lines) if "h = np.tanh(" in ln) + 1
    assert f"# pyfront_models.py:{row}  h = np.tanh(x @ params[\"W1\"] + params[\"b1\"])" \
        in text
    assert "def mlp_loss_grad(" in text
    for mode, name in (("jvp", "mlp_loss_jvp"), ("hvp", "mlp_loss_hvp")):
        out = io.StringIO()
        adc.show(m.mlp_loss, PARAMS, X, Y, mode=mode, file=out)
        assert f"def {name}(" in out.getvalue()
    ns: dict = {}
    exec(compile(text, "shown.py", "exec"), ns)   # the source runs: the same gradient
    grads = adc.grad(m.mlp_loss)(PARAMS, X, Y)
    outs = ns["mlp_loss_grad"](PARAMS["W1"], PARAMS["b1"], PARAMS["W2"], X, Y)
    np.testing.assert_allclose(outs[1], grads["W1"], rtol=1e-12)
