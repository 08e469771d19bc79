"""Lowering calls to every op family through the generic signature mapping, checked
against NumPy by running the compiled function."""
import pathlib

import numpy as np
import pytest

from adcompiler.frontend import compile_file, compile_source
from adcompiler.ir.verifier import verify
from adc_runtime.executor import run_function

SAMPLES = pathlib.Path(__file__).resolve().parent.parent / "samples"
RNG = np.random.default_rng(7)
A = RNG.normal(size=(2, 3))
B = RNG.normal(size=(3, 4))


def run1(src, **inputs):
    m = compile_source(src)
    verify(m)
    outs, _ = run_function(m, m.main.name, inputs)
    return outs[0] if len(outs) == 1 else outs, m


def ops_of(m):
    return [op.name for op in m.main.walk()]


@pytest.mark.parametrize("expr, want", [
    ("relu(a) + sigmoid(a)", np.maximum(A, 0) + 1 / (1 + np.exp(-A))),
    ("maximum(a, 0.5)", np.maximum(A, 0.5)),
    ("where(a > 0, a, 0)", np.where(A > 0, A, 0)),
    ("clip(a, -0.5, 0.5)", np.clip(A, -0.5, 0.5)),
    ("leaky_relu(a, 0.1)", np.where(A > 0, A, 0.1 * A)),
    ("leaky_relu(a, slope=0.2)", np.where(A > 0, A, 0.2 * A)),
    ("softmax(a)", np.exp(A) / np.exp(A).sum(-1, keepdims=True)),
    ("transpose(transpose(a, [1, 0]))", A),
    ("a * mean(a, axis=1, keepdims=true)", A * A.mean(1, keepdims=True)),
    ("expand_dims(sum(a, axis=0), 0) + a", A.sum(0)[None] + A),
    ("a ** 2 / 4 - a", A ** 2 / 4 - A),
])
def test_elementwise_and_friends(expr, want):
    got, _ = run1(f"def f(a: f64[2, 3]) -> f64[2, 3] {{ return {expr} }}", a=A)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_matmul_and_einsum_variadic_operands():
    got, m = run1("def f(a: f64[2, 3], b: f64[3, 4]) -> (f64[2, 4], f64[2, 4]) {\n"
                  '  return a @ b, einsum("ij,jk->ik", a, b)\n}', a=A, b=B)
    np.testing.assert_allclose(got[0], A @ B)
    np.testing.assert_allclose(got[1], A @ B)
    ein = next(op for op in m.main.walk() if op.name == "einsum")
    assert ein.attrs == {"spec": "ij,jk->ik"} and len(ein.operands) == 2


def test_concat_and_stack_take_a_list():
    got, m = run1("def f(a: f64[2, 3]) -> (f64[4, 3], f64[2, 2, 3]) {\n"
                  "  return concat([a, a * 2], axis=0), stack([a, -a])\n}", a=A)
    np.testing.assert_allclose(got[0], np.concatenate([A, 2 * A]))
    np.testing.assert_allclose(got[1], np.stack([A, -A]))
    cat = next(op for op in m.main.walk() if op.name == "concat")
    assert len(cat.operands) == 2 and cat.attrs == {"axis": 0}


def test_constructors_with_symbolic_sizes():
    got, m = run1("def f(x: f64[N]) -> f64[N] {\n"
                  "  return x + full([N], 2.5, dtype=f64) + cast(arange(N), f64)\n}",
                  x=np.zeros(3))
    np.testing.assert_allclose(got, [2.5, 3.5, 4.5])
    full = next(op for op in m.main.walk() if op.name == "full")
    assert full.attrs == {"shape": ("N",), "value": 2.5, "dtype": "f64"}
    arange = next(op for op in m.main.walk() if op.name == "arange")
    assert arange.attrs["n"] == "N"


def test_nn_ops_with_integer_labels():
    logits = RNG.normal(size=(4, 3))
    labels = np.array([0, 2, 1, 2])
    got, _ = run1("def f(z: f64[B, 3], y: i64[B]) -> (f64[B], f64[B, 3]) {\n"
                  "  return cross_entropy(z, y), one_hot(y, 3, dtype=f64)\n}",
                  z=logits, y=labels)
    lse = np.log(np.exp(logits).sum(1))
    np.testing.assert_allclose(got[0], lse - logits[np.arange(4), labels])
    np.testing.assert_array_equal(got[1], np.eye(3)[labels])


def test_take_and_dynamic_index():
    table = RNG.normal(size=(5, 2))
    got, m = run1("def f(t: f64[5, 2], k: i64[3], j: i64) -> (f64[3, 2], f64[2]) {\n"
                  "  return take(t, k), t[j + 1]\n}", t=table, k=np.array([4, 0, 4]),
                  j=np.int64(2))
    np.testing.assert_allclose(got[0], table[[4, 0, 4]])
    np.testing.assert_allclose(got[1], table[3])
    idx = next(op for op in m.main.walk() if op.name == "index")
    assert idx.attrs["idx"] == ("?",)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.tdsl")), ids=lambda p: p.stem)
def test_samples_compile_and_verify(path):
    m = compile_file(path)
    verify(m)
    assert m.main is not None
