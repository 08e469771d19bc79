"""Hessian-vector products: forward-over-reverse against central differences of the
gradient and against reverse-over-forward, on programs with loops, broadcasting, reductions
and custom rules."""
from pathlib import Path

import numpy as np
import pytest

from gradcheck import run
from adcompiler.passes.to_dtype import to_dtype
from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_file, compile_source
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.passes.jvp import JVP
from adcompiler.passes.hvp import HVP, forward_over_reverse, reverse_over_forward
from adcompiler.passes.train_mode import set_training
from sample_inputs import sample_inputs

RNG = np.random.default_rng(11)


def check_hvp(src: str, inputs: dict, wrt: list[str], fn: str = "f", eps: float = 1e-5,
              rtol: float = 1e-6, atol: float = 1e-8):
    """Assert ``f_hvp`` = d/de grad(x + e v) (central differences) = ``f_rof``."""
    m = compile_source(src)
    hm = forward_over_reverse(m, fn, wrt)
    rm = reverse_over_forward(m, fn, wrt)
    for mod in (hm, rm):
        verify(mod)
        text = print_module(mod)
        assert print_module(parse_module(text)) == text
    v = {w: RNG.standard_normal(np.shape(inputs[w])) for w in wrt}
    tv = {f"t_{w}": v[w] for w in wrt}
    outs = run(hm, f"{fn}_hvp", {**inputs, **tv})
    n = len(m[fn].result_types)
    grads, hvps = outs[n:n + len(wrt)], outs[n + len(wrt):]
    base = run(hm, f"{fn}_grad", inputs)
    for g, want in zip(grads, base[n:]):
        np.testing.assert_array_equal(g, want)
    plus = run(hm, f"{fn}_grad", {**inputs, **{w: inputs[w] + eps * v[w] for w in wrt}})
    minus = run(hm, f"{fn}_grad", {**inputs, **{w: inputs[w] - eps * v[w] for w in wrt}})
    rof = run(rm, f"{fn}_rof", {**inputs, **tv})[n:]
    for k, w in enumerate(wrt):
        fd = (plus[n + k] - minus[n + k]) / (2 * eps)
        np.testing.assert_allclose(hvps[k], fd, rtol=rtol, atol=atol, err_msg=f"hvp {w}")
        np.testing.assert_allclose(rof[k], hvps[k], rtol=1e-10, atol=1e-12,
                                   err_msg=f"reverse-over-forward {w}")
    return hvps


def test_quadratic_form_has_exact_hessian():
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    src = "def f(param x: f64[2], a: f64[2, 2]) -> f64 { return sum(x * sum(a * x, axis=1)) }"
    m = compile_source(src)
    hm = forward_over_reverse(m, "f", ["x"])
    x, v = np.array([0.3, -1.0]), np.array([1.0, 2.0])
    *_, hv = run(hm, "f_hvp", {"x": x, "a": a, "t_x": v})
    np.testing.assert_allclose(hv, (a + a.T) @ v, rtol=1e-15)


def test_elementwise_and_reductions():
    src = """
def f(param x: f64[3, 4], param w: f64[4]) -> f64 {
    y = sigmoid(x * w) + softplus(x) - log1p(x * x)
    return logsumexp(y, axis=1)[0] + var(y) + mean(tanh(y) ** 2.0) + max(y * w)
}"""
    check_hvp(src, {"x": RNG.standard_normal((3, 4)), "w": RNG.standard_normal(4)},
              ["x", "w"])


def test_loop_with_captures_and_scan():
    src = """
def f(xs: f64[T, 3], param h0: f64[3], param w: f64[3]) -> f64 {
    h = h0
    loss = zeros([], dtype=f64)
    for i in range(T) {
        h = tanh(h * w + xs[i])
        loss = loss + sum((h - xs[i]) ** 2.0)
    }
    return loss
}"""
    check_hvp(src, {"xs": 0.5 * RNG.standard_normal((4, 3)), "h0": RNG.standard_normal(3),
                    "w": RNG.standard_normal(3)}, ["h0", "w"])


def test_vector_result_is_seeded_with_ones():
    src = "def f(param x: f64[3]) -> f64[3] { return x * x * x }"
    m = compile_source(src)
    x, v = np.array([1.0, 2.0, -1.0]), np.array([1.0, 0.5, 2.0])
    *_, hv = run(forward_over_reverse(m, "f", ["x"]), "f_hvp", {"x": x, "t_x": v})
    np.testing.assert_allclose(hv, 6 * x * v, rtol=1e-15)


def test_custom_rules_in_both_orders():
    src = """
def cube(x: f64[N]) -> f64[N] { return x * x * x }
grad cube(x, y, dy) { return 3.0 * x * x * dy }
tangent cube(x, dx) { return 3.0 * x * x * dx }
def f(param x: f64[N]) -> f64 { return sum(cube(x) * x) }
"""
    x = np.array([0.5, -1.5, 2.0])
    hv = check_hvp(src, {"x": x}, ["x"])
    assert hv[0].shape == (3,)


def test_grad_rule_without_tangent_rule_is_an_error():
    src = """
def g(x: f64[2]) -> f64[2] { return x * x }
grad g(x, y, dy) { return 2.0 * x * dy }
def f(param x: f64[2]) -> f64 { return sum(g(x) * g(x)) }
"""
    # the gradient reads g's result, so its tangent is needed and only g's body could give it
    with pytest.raises(AdcError, match="'g'.*tangent"):
        forward_over_reverse(compile_source(src), "f", ["x"])


def test_hvp_pass_with_check():
    m = compile_source("def f(param x: f64[2], param y: f64[2]) -> f64 { return sum(x * y * y) }")
    out = HVP(fn="f", check=True)(m)
    assert {"f_grad", "f_hvp", "f_jvp", "f_rof"} <= set(out.functions)
    assert out["f_hvp"].arg_names == ["x", "y", "t_x", "t_y"]
    x, y = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    tx, ty = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    outs = run(out, "f_hvp", {"x": x, "y": y, "t_x": tx, "t_y": ty})
    # H = [[0, 2y], [2y, 2x]] (diagonal blocks)
    np.testing.assert_allclose(outs[3], 2 * y * ty)
    np.testing.assert_allclose(outs[4], 2 * y * tx + 2 * x * ty)


SAMPLES = sorted(p.stem for p in (Path(__file__).parent.parent / "samples").glob("*.tdsl"))


@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_in_float64(sample):
    """On every sample: jvp against directional differences, hvp against differences of
    the gradient, and both orders of composition against each other."""
    root = Path(__file__).parent.parent / "samples"
    m = compile_file(str(root / f"{sample}.tdsl"))
    to_dtype(m, "f64")
    set_training(m)   # differences taken in the mode derivatives are (dropout's same masks)
    fn = m.main
    inputs = {k: np.asarray(a, np.float64) if a.dtype.kind == "f" else a
              for k, a in sample_inputs(root / f"{sample}.tdsl", fn).items()}
    wrt = [a for a in fn.arg_names if a in fn.params]
    v = {w: RNG.standard_normal(np.shape(inputs[w])) for w in wrt}
    tv = {f"t_{w}": v[w] for w in wrt}
    n, eps = len(fn.result_types), 1e-6
    # the new values of state inputs come last and carry no derivative
    differentiated = n - len(fn.attrs.get("state", ()))

    def shifted(sign):
        return {**inputs, **{w: inputs[w] + sign * eps * v[w] for w in wrt}}

    jm = JVP(wrt=tuple(wrt), fn=fn.name)(m)
    tangents = run(jm, f"{fn.name}_jvp", {**inputs, **tv})[n:n + differentiated]
    for t, p, q in zip(tangents, run(m, fn.name, shifted(1)), run(m, fn.name, shifted(-1))):
        fd = (p - q) / (2 * eps)
        np.testing.assert_allclose(t, fd, rtol=1e-5, atol=1e-6 * max(1, np.max(np.abs(fd))))
    hm = forward_over_reverse(m, fn.name, wrt)
    rm = reverse_over_forward(m, fn.name, wrt)
    hv = run(hm, f"{fn.name}_hvp", {**inputs, **tv})[n + len(wrt):]
    rv = run(rm, f"{fn.name}_rof", {**inputs, **tv})[n:]
    gp = run(hm, f"{fn.name}_grad", shifted(1))[n:]
    gq = run(hm, f"{fn.name}_grad", shifted(-1))[n:]
    for w, h, r, p, q in zip(wrt, hv, rv, gp, gq):
        scale = max(1.0, float(np.max(np.abs(h))))
        np.testing.assert_allclose(h, r, rtol=1e-9, atol=1e-12 * scale, err_msg=w)
        np.testing.assert_allclose(h, (p - q) / (2 * eps), rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=w)
