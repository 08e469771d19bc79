"""The corpus of Python functions (`pyfront_corpus`), each compiled by adc and checked in
float64: its value against NumPy running the function itself, its gradient, JVP and HVP
against central differences of that NumPy run, and, where installed, against JAX and HIPS
autograd running the same source."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.frontend.python import pytree

sys.path.insert(0, str(Path(__file__).parent))
import pyfront_corpus as corpus  # noqa: E402

IDS = [f.__name__ for f, _, _ in corpus.CASES]


def make(maker, rng):
    if isinstance(maker, corpus.S):
        return maker.value
    if isinstance(maker, dict):
        return {k: make(v, rng) for k, v in maker.items()}
    if isinstance(maker, list):
        return [make(v, rng) for v in maker]
    if isinstance(maker, tuple) and maker and not all(isinstance(d, int) for d in maker):
        return tuple(make(v, rng) for v in maker)
    return rng.standard_normal(maker)


def setup(k):
    f, makers, argnums = corpus.CASES[k]
    rng = np.random.default_rng(k)
    args = [make(m, rng) for m in makers]
    nums = [argnums] if isinstance(argnums, int) else list(argnums)
    direction = [pytree.tree_map(lambda a: rng.standard_normal(np.shape(a)), args[i])
                 for i in nums]
    return f, args, argnums, nums, direction


def static_positions(k):
    return tuple(i for i, m in enumerate(corpus.CASES[k][1]) if isinstance(m, corpus.S))


def shifted(args, nums, direction, t):
    out = list(args)
    for i, d in zip(nums, direction):
        out[i] = pytree.tree_map(lambda a, b: a + t * b, args[i], d)
    return out


def central(fun, args, nums, direction, eps=1e-6):
    return (np.asarray(fun(*shifted(args, nums, direction, eps))) -
            np.asarray(fun(*shifted(args, nums, direction, -eps)))) / (2 * eps)


def numeric_grad(fun, args, nums, eps=1e-6):
    """The gradient by central differences, element by element, in the arguments' shape."""
    grads = []
    for i in nums:
        leaves, tree = pytree.flatten(args[i])
        out = []
        for j, leaf in enumerate(leaves):
            g = np.zeros_like(leaf)
            for idx in np.ndindex(leaf.shape):
                e = np.zeros_like(leaf)
                e[idx] = 1.0
                basis = pytree.unflatten(tree, [e if m == j else np.zeros_like(x)
                                                for m, x in enumerate(leaves)])
                g[idx] = central(fun, args, [i], [basis], eps)
            out.append(g)
        grads.append(pytree.unflatten(tree, out))
    return grads


def pack(grads, argnums):
    return grads[0] if isinstance(argnums, int) else tuple(grads)


def close(actual, expected, rtol, atol):
    """Equal pytrees of close arrays (dicts compared by key, as JAX sorts them)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected)
        for k in expected:
            close(actual[k], expected[k], rtol, atol)
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            close(a, e, rtol, atol)
    else:
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol,
                                   atol=atol)


def test_corpus_is_large_enough():
    assert len(corpus.CASES) >= 60
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("k", range(len(corpus.CASES)), ids=IDS)
def test_value_gradient_jvp_hvp(k):
    f, args, argnums, nums, direction = setup(k)
    ref = corpus.NUMPY_VERSION.get(f, f)
    # value: NumPy runs the function itself
    close(adc.jit(f)(*args), ref(*args), 1e-10, 1e-12)
    # gradient: central differences of the NumPy run
    value, grads = adc.value_and_grad(f, argnums=argnums)(*args)
    np.testing.assert_allclose(value, ref(*args), rtol=1e-10)
    close(grads, pack(numeric_grad(ref, args, nums), argnums), 1e-6, 1e-7)
    # jvp: the directional derivative
    primal, tangent = adc.jvp(f, argnums=argnums)(*args, *direction)
    np.testing.assert_allclose(primal, ref(*args), rtol=1e-10)
    np.testing.assert_allclose(tangent, central(ref, args, nums, direction), rtol=1e-6,
                               atol=1e-7)
    # hvp: central differences of the (numeric) gradient along the direction
    hv = adc.hvp(f, argnums=argnums)(*args, *direction)

    def numeric_grad_at(*a):
        return numeric_grad(ref, list(a), nums, eps=1e-5)
    eps = 1e-4
    plus = numeric_grad_at(*shifted(args, nums, direction, eps))
    minus = numeric_grad_at(*shifted(args, nums, direction, -eps))
    expected = [pytree.tree_map(lambda p, m: (p - m) / (2 * eps), p, m)
                for p, m in zip(plus, minus)]
    close(hv, pack(expected, argnums), 1e-4, 1e-5)


def reference_module(np_like):
    """The corpus run by another NumPy-like module (its functions read the global `np`)."""
    spec = importlib.util.spec_from_file_location("pyfront_corpus_ref", corpus.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.np = np_like
    return mod


@pytest.fixture(scope="module")
def jax_corpus():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jax, reference_module(jnp)


# JAX's derivatives of the whole corpus take over a minute: a sample runs by default
SAMPLE = {"mlp_layers", "loop_rnn", "softmax_cross_entropy", "slice_steps", "sum_axis_tuple",
          "call_tuple_result", "loop_two_carries", "einsum_matmul"}
JAX_CASES = [pytest.param(k, marks=() if name in SAMPLE else pytest.mark.slow, id=name)
             for k, name in enumerate(IDS)]


@pytest.mark.parametrize("k", JAX_CASES)
def test_against_jax(k, jax_corpus):
    jax, ref = jax_corpus
    f, args, argnums, nums, direction = setup(k)
    if f in corpus.NO_REFERENCE:
        pytest.skip("calls adc.ops")
    g = getattr(ref, f.__name__)
    jf = g  # eager: a jit compile per function costs more than the checks
    close(adc.grad(f, argnums=argnums)(*args),
          jax.grad(jf, argnums=argnums)(*args), 1e-9, 1e-11)
    hv = adc.hvp(f, argnums=argnums)(*args, *direction)

    def grad_along(t):
        return jax.grad(jf, argnums=argnums)(*shifted(args, nums, direction, t))
    _, expected = jax.jvp(grad_along, (0.0,), (1.0,))
    close(hv, expected, 1e-8, 1e-10)


@pytest.mark.parametrize("k", range(len(corpus.CASES)), ids=IDS)
def test_against_autograd(k):
    autograd = pytest.importorskip("autograd")
    import autograd.numpy as anp
    ref = reference_module(anp)
    f, args, argnums, nums, direction = setup(k)
    if f in corpus.NO_REFERENCE:
        pytest.skip("calls adc.ops")
    g = getattr(ref, f.__name__)
    expected = [autograd.grad(g, i)(*args) for i in nums]
    close(adc.grad(f, argnums=argnums)(*args), pack(expected, argnums), 1e-9, 1e-11)
