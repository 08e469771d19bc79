"""Explicit gradient semantics (a scalar result, `has_aux`, `vjp` for the rest), JAX-like
calling (`argnums`, dicts of parameters) and the CLI's stated seeding convention."""
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.cli import main

ROOT = Path(__file__).resolve().parent.parent
LOSS_AND_LOGITS = """
def model(x: f64[4, 3], labels: i64[4],
          param W: f64[3, 2], param b: f64[2]) -> (f64, f64[4, 2]) {
    logits = x @ W + b
    loss = mean(cross_entropy(logits, labels))
    return loss, logits
}
"""
VECTOR = "def v(param x: f64[3]) -> f64[3] {\n    return x * x\n}\n"
SCALAR = "def s(param x: f64[3]) -> f64 {\n    return sum(x)\n}\n"
RNG = np.random.default_rng(0)
X, LABELS = RNG.standard_normal((4, 3)), np.array([0, 1, 1, 0])
W, B = RNG.standard_normal((3, 2)), RNG.standard_normal(2)


def reference(x, labels, w, b):
    """Loss, logits and the loss's gradients, by hand: d loss/d logits = (p - onehot) / n."""
    logits = x @ w + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    loss = -np.mean(np.log(p[np.arange(len(labels)), labels]))
    d = (p - np.eye(2)[labels]) / len(labels)
    return loss, logits, x.T @ d, d.sum(0)


def test_non_scalar_results_are_errors_naming_the_result():
    with pytest.raises(adc.AdcError, match=r"its result of 'v' is f64\[3\]; use vjp"):
        adc.grad(VECTOR)
    with pytest.raises(adc.AdcError, match=r"'model' returns 2 \('loss': f64\[\], "
                                           r"'logits': f64\[4, 2\]\); pass has_aux=True"):
        adc.value_and_grad(LOSS_AND_LOGITS)
    with pytest.raises(adc.AdcError, match=r"'k2' of 'i' is i64\[\]"):
        adc.grad("def i(param x: f64[2], k: i64) -> i64 {\n    k2 = k + 1\n    return k2\n}\n",
                 wrt="x")
    with pytest.raises(adc.AdcError, match="hvp needs a scalar float result"):
        adc.hvp(VECTOR)
    with pytest.raises(adc.AdcError, match=r"has_aux=True\) needs 'v' to return"):
        adc.grad(VECTOR, has_aux=True)


def test_has_aux_returns_the_rest_undifferentiated():
    loss, logits, dw, db = reference(X, LABELS, W, B)
    (value, aux), (gw, gb) = adc.value_and_grad(LOSS_AND_LOGITS, has_aux=True)(X, LABELS, W, B)
    assert value == pytest.approx(loss)
    np.testing.assert_allclose(aux, logits)
    np.testing.assert_allclose(gw, dw, rtol=1e-12)
    np.testing.assert_allclose(gb, db, rtol=1e-12)
    g, aux = adc.grad(LOSS_AND_LOGITS, has_aux=True, wrt="W")(X, LABELS, W, B)
    np.testing.assert_allclose(g, dw, rtol=1e-12)
    np.testing.assert_allclose(aux, logits)


def test_vjp_differentiates_non_scalar_results():
    x = np.array([1.0, -2.0, 3.0])
    y, pullback = adc.vjp(VECTOR)(x)
    np.testing.assert_allclose(y, x * x)
    (g,) = pullback(np.array([1.0, 0.0, 2.0]))
    np.testing.assert_allclose(g, [2.0, 0.0, 12.0])


def test_argnums_pick_inputs_by_position():
    _, _, dw, db = reference(X, LABELS, W, B)
    gw = adc.grad(LOSS_AND_LOGITS, argnums=2, has_aux=True)(X, LABELS, W, B)[0]
    np.testing.assert_allclose(gw, dw, rtol=1e-12)
    (gb, gw2), _ = adc.grad(LOSS_AND_LOGITS, argnums=(3, -2), has_aux=True)(X, LABELS, W, B)
    np.testing.assert_allclose(gb, db, rtol=1e-12)
    np.testing.assert_allclose(gw2, dw, rtol=1e-12)
    with pytest.raises(TypeError, match="not an input position"):
        adc.grad(SCALAR, argnums=1)
    with pytest.raises(TypeError, match="not both"):
        adc.grad(SCALAR, wrt="x", argnums=0)


def test_a_dict_of_params_gives_a_dict_of_gradients():
    _, _, dw, db = reference(X, LABELS, W, B)
    g = adc.grad(LOSS_AND_LOGITS, has_aux=True)
    grads, _ = g(params={"W": W, "b": B}, x=X, labels=LABELS)
    assert set(grads) == {"W", "b"}
    np.testing.assert_allclose(grads["W"], dw, rtol=1e-12)
    np.testing.assert_allclose(grads["b"], db, rtol=1e-12)
    only_b, _ = g({"b": B}, X, LABELS, W=W)           # a dict first, the rest in order
    assert list(only_b) == ["b"]
    np.testing.assert_allclose(only_b["b"], db, rtol=1e-12)
    (value, _), grads = adc.value_and_grad(LOSS_AND_LOGITS, has_aux=True)(
        {"W": W, "b": B}, X, LABELS)
    assert value == pytest.approx(reference(X, LABELS, W, B)[0])
    np.testing.assert_allclose(grads["W"], dw, rtol=1e-12)


def test_cli_says_how_it_seeds_and_seeds_one_output(tmp_path, capsys):
    path = tmp_path / "m.tdsl"
    path.write_text(LOSS_AND_LOGITS)
    np.savez(tmp_path / "in.npz", x=X, labels=LABELS, W=W, b=B)
    args = ["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--out",
            str(tmp_path / "o.npz")]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "seeded with ones" in err and "--seed-output" in err
    logits_sum_grad = X.T @ np.ones((4, 2))
    loss, _, dw, _ = reference(X, LABELS, W, B)
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["grad_W"], dw + logits_sum_grad,
                               rtol=1e-5)
    assert main(args + ["--seed-output", "out0"]) == 0
    assert "seeded with ones" not in capsys.readouterr().err
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["grad_W"], dw, rtol=1e-5)
    assert main(args + ["--seed-output", "out1"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["grad_W"], logits_sum_grad,
                               rtol=1e-5)
    assert main(args + ["--seed-output", "logits"]) == 1
    assert "--seed-output: no result 'logits' (results: out0, out1)" in capsys.readouterr().err


def test_dtype_option_on_transforms():
    import json
    data = json.loads((ROOT / "samples" / "mlp.json").read_text())
    mlp = str(ROOT / "samples" / "mlp.tdsl")
    g32 = adc.grad(mlp, wrt="W1")(**data)
    g64 = adc.grad(mlp, wrt="W1", dtype="f64")(**data)
    assert g32.dtype == np.float32 and g64.dtype == np.float64
    np.testing.assert_allclose(g64, g32, rtol=1e-5, atol=1e-7)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x_bf16 = np.asarray(data["x"], np.float32).astype(ml_dtypes.bfloat16)
    gb = adc.grad(mlp, wrt="W1", dtype="bf16")(**{**data, "x": x_bf16})
    assert gb.dtype == ml_dtypes.bfloat16
    ref = adc.grad(mlp, wrt="W1")(**{**data, "x": x_bf16.astype(np.float32)})  # f32 compute
    np.testing.assert_array_equal(gb, ref.astype(ml_dtypes.bfloat16))
    with pytest.raises(adc.AdcError, match="dtype must be one of"):
        adc.grad(mlp, dtype="f8")


def test_remat_option_keeps_the_gradients():
    import json
    rnn = str(ROOT / "samples" / "rnn.tdsl")
    data = json.loads((ROOT / "samples" / "rnn.json").read_text())
    plain = adc.grad(rnn)
    loops = sum(op.name == "for" for op in plain.module[plain.fn_name].walk())
    plain = plain(**data)
    for policy in ("sqrt", "revolve:2"):
        g = adc.grad(rnn, remat=policy, dims={"T": np.shape(data["xs"])[0]})
        assert sum(op.name == "for" for op in g.module[g.fn_name].walk()) > loops
        for a, b in zip(g(**data), plain):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(adc.AdcError, match="remat= applies to"):
        adc.jvp(rnn, remat="sqrt")
    t = {"t_Wh": np.ones((4, 4))}
    plain = adc.hvp(rnn, wrt="Wh")
    loops = sum(op.name == "for" for op in plain.module[plain.fn_name].walk())
    h = adc.hvp(rnn, wrt="Wh", remat="sqrt", dims={"T": np.shape(data["xs"])[0]})
    assert sum(op.name == "for" for op in h.module[h.fn_name].walk()) > loops
    np.testing.assert_array_equal(h(**data, **t), plain(**data, **t))


def test_gelu_approximations_match_torch_in_every_mode():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    x = np.linspace(-6.0, 6.0, 25)
    t = np.linspace(1.0, -1.0, 25)
    for approximate in ("none", "tanh"):
        option = "" if approximate == "none" else ', approximate="tanh"'
        src = f"def g(param x: f64[25]) -> f64 {{\n    return sum(gelu(x{option}) ** 2)\n}}\n"
        xt = torch.tensor(x, requires_grad=True)
        loss = torch.sum(F.gelu(xt, approximate=approximate) ** 2)
        (gt,) = torch.autograd.grad(loss, xt, create_graph=True)
        (ht,) = torch.autograd.grad(gt, xt, torch.tensor(t))
        value, g = adc.value_and_grad(src, wrt="x")(x)
        assert value == pytest.approx(loss.item(), rel=1e-12)
        np.testing.assert_allclose(g, gt.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(adc.hvp(src, wrt="x")(x, t), ht.numpy(), rtol=1e-9,
                                   atol=1e-12)
        _, tangent = adc.jvp(src, wrt="x")(x, t)
        assert tangent == pytest.approx(float(gt.detach().numpy() @ t), rel=1e-10)
    with pytest.raises(adc.AdcError, match='approximate must be "none"'):
        adc.load('def g(x: f64) -> f64 {\n    return gelu(x, approximate="erf")\n}\n')
