"""The ``batch`` pass and `adc.vmap` against a Python loop over the examples: every op
with every choice of batched operands, every sample program (loops included), and
per-example gradients."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import DTYPE_OF_NUMPY, TensorType
from adcompiler.ops import registry
from adcompiler.passes.batch import Batch
from sample_inputs import sample_inputs

ROOT = Path(__file__).resolve().parent.parent
N = 3   # examples per batch
RNG = np.random.default_rng(7)


def f(*shape):
    return lambda: RNG.standard_normal(shape)


def pos(*shape):
    return lambda: np.abs(RNG.standard_normal(shape)) + 0.5


def prob(*shape):
    return lambda: RNG.uniform(0.1, 0.9, shape)


def ints(high, *shape):
    return lambda: RNG.integers(0, high, shape)


def key():
    return lambda: RNG.integers(0, 2 ** 32, (2,))


def flag(*shape):
    return lambda: RNG.standard_normal(shape) > 0


UNARY = [n for n, d in sorted(registry.REGISTRY.items())
         if d.has("elementwise") and d.operands == ("x",) and n != "cast"]
BINARY = [n for n, d in sorted(registry.REGISTRY.items())
          if d.has("elementwise") and d.operands == ("a", "b")]

# (op, operand makers, options): each is run on every non-empty subset of batched operands
CASES = (
    [(n, [pos(2, 3)], {}) for n in UNARY]
    + [("cast", [f(3)], {"dtype": "f32"})]
    + [(n, mk, {}) for n in BINARY for mk in ([pos(3), pos(2, 3)], [pos(2, 1), pos(3)])]
    + [("where", [flag(2, 3), f(3), f(2, 3)], {}), ("clip", [f(2, 3), f(3), pos(2, 3)], {}),
       ("bce", [prob(4), prob(4)], {}), ("bce_with_logits", [f(4), prob(4)], {}),
       ("mse", [f(2, 3), f(3)], {})]
    + [("allreduce_start", [f(2, 3), f(3)], {}), ("allreduce_start", [f(2, 3), f(2, 4)],
                                                   {"lead": 1}),
       ("allreduce_wait", [f(5)], {})]
    + [(r, [f(2, 3, 4)], {"axis": axis, "keepdims": keep})
       for r in ("sum", "mean", "max", "min", "logsumexp", "var")
       for axis, keep in ((None, False), (0, False), (-1, True), ([0, 2], False))]
    + [("var", [f(2, 3, 4)], {"axis": axis, "correction": 1.5}) for axis in (None, [0, 2])]
    + [("sum_to", [f(2, 3, 4)], {"shape": [3, 1]}), ("sum_to", [f(3, 4)], {"shape": [4]})]
    + [("matmul", [f(*a), f(*b)], {}) for a, b in (
        ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
        ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((3,), (5, 3, 4)), ((5, 2, 3), (3,)))]
    + [("transpose", [f(2, 3, 4)], {"perm": None}),
       ("transpose", [f(2, 3, 4)], {"perm": [1, -1, 0]}),
       ("einsum", [f(2, 3), f(3, 4)], {"spec": "ij,jk->ki"}),
       ("einsum", [f(2, 3), f(3)], {"spec": "ij,j->"}),
       ("reshape", [f(2, 3)], {"shape": [3, -1]}),
       ("broadcast_to", [f(3)], {"shape": [2, 3]}),
       ("expand_dims", [f(2, 3)], {"axis": 1}), ("expand_dims", [f(2, 3)], {"axis": -1}),
       ("squeeze", [f(1, 3, 1)], {"axis": None}), ("squeeze", [f(1, 3, 1)], {"axis": -1}),
       ("concat", [f(2, 3), f(1, 3)], {"axis": 0}), ("concat", [f(2, 3), f(2, 1)], {"axis": -1}),
       ("stack", [f(2, 3), f(2, 3)], {"axis": 1}),
       ("split", [f(2, 5)], {"axis": 1, "shape": [2, 3]}),
       ("index", [f(4, 3)], {"idx": [[1, None, 2], -1]}),
       ("index_grad", [f(2)], {"idx": [[1, None, 2], -1], "shape": [4, 3]}),
       ("softmax", [f(2, 3)], {"axis": 0}), ("log_softmax", [f(2, 3)], {"axis": -1}),
       ("cross_entropy", [f(4, 3), ints(3, 4)], {"axis": -1}),
       ("cross_entropy", [f(4, 3), prob(4, 3)], {"axis": 1}),
       ("layernorm", [f(2, 4), f(4), f(4)], {"axis": -1}),
       ("take", [f(5, 3), ints(5, 4)], {"axis": 0}),
       ("take", [f(3, 5), ints(5, 2, 2)], {"axis": 1}),
       ("take_grad", [f(4, 3), ints(5, 4)], {"axis": 0, "shape": [5, 3]}),
       ("take_grad", [f(3, 4), ints(5, 4)], {"axis": 1, "shape": [3, 5]}),
       ("one_hot", [ints(4, 5)], {"n": 4}), ("zeros_like", [f(2)], {}),
       ("ones_like", [f(2)], {}), ("stop_gradient", [f(2)], {})]
    + [("batchnorm", [f(4, 3, 2), f(3), f(3)], {"axis": 1}),
       ("batchnorm", [f(4, 3), f(3), f(3)], {"axis": -1, "eps": 1e-3}),
       ("rmsnorm", [f(2, 4), f(4)], {}), ("rmsnorm", [f(3, 2, 4), f(2)], {"axis": 1}),
       ("attention", [f(3, 4), f(5, 4), f(5, 2)], {"causal": True}),
       ("attention", [f(2, 3, 4), f(5, 4), f(1, 5, 2)], {"scale": 0.3}),
       ("argmax", [f(3, 4)], {}), ("argmin", [f(3, 4)], {"axis": 0}), ("argmax", [f()], {}),
       ("cumsum", [f(3, 4)], {"axis": 0}), ("cumsum", [f(3, 4)], {"axis": -1, "reverse": True}),
       ("cumsum", [f()], {"axis": 0})]
    + [("conv1d", [f(2, 2, 7), f(4, 1, 3)], {"stride": 2, "padding": 1, "groups": 2}),
       ("conv2d", [f(2, 4, 5, 4), f(6, 2, 3, 2)], {"padding": "same", "groups": 2}),
       ("conv_transpose2d", [f(1, 4, 3, 3), f(4, 1, 3, 2)],
        {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
       ("conv1d", [f(2, 7), f(4, 1, 3)], {"stride": 2, "padding": 1, "groups": 2}),
       ("conv2d", [f(4, 5, 4), f(6, 2, 3, 2)], {"padding": 1, "groups": 2}),
       ("conv_transpose2d", [f(4, 3, 3), f(4, 1, 3, 2)],
        {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
       ("conv_input_grad", [f(1, 4, 2, 2), f(4, 1, 3, 2)],
        {"shape": [5, 4], "stride": 2, "padding": [1, 0], "groups": 2}),
       ("conv_weight_grad", [f(2, 2, 5, 4), f(2, 4, 2, 3)],
        {"kernel": [3, 2], "stride": 2, "padding": 1, "groups": 2}),
       ("max_pool2d", [f(1, 2, 5, 5)], {"kernel": 3, "stride": 2, "padding": 1}),
       ("max_pool2d_grad", [f(1, 2, 5, 5), f(1, 2, 3, 3)],
        {"kernel": 3, "stride": 2, "padding": 1}),
       ("max_pool2d_select", [f(1, 2, 4, 4), f(1, 2, 4, 4)], {"kernel": 2}),
       ("max_pool2d", [f(2, 3, 6)], {"kernel": 3, "stride": 2, "padding": 1,
                                     "dilation": [1, 2], "ceil_mode": True}),
       ("max_pool2d_indices", [f(1, 2, 5, 5)], {"kernel": 2, "ceil_mode": True}),
       ("avg_pool2d", [f(2, 5, 5)], {"kernel": 2, "ceil_mode": True,
                                     "count_include_pad": False, "divisor_override": 3}),
       ("avg_pool2d", [f(1, 2, 5, 5)], {"kernel": 3, "stride": 2, "padding": 1}),
       ("avg_pool2d_grad", [f(1, 2, 3, 3)], {"kernel": 3, "stride": 2, "padding": 1,
                                             "shape": [5, 5]}),
       ("pad", [f(2, 3)], {"widths": [1, 0, 2, 1], "value": 3.0})]
    + [("uniform", [key()], {"shape": [2, 3], "site": 5}),
       ("normal", [key()], {"shape": [3], "dtype": "f64", "site": 6}),
       ("bernoulli", [key()], {"p": 0.4, "shape": [4], "site": 7}),
       ("rng_fold", [key(), ints(9)], {"site": 8}),
       ("dropout", [f(4, 3), key()], {"p": 0.5, "site": 9, "training": True}),
       ("dropout", [f(4, 3), key()], {"p": 0.5, "site": 9}),
       ("batchnorm_running", [f(4, 3), f(3), f(3), f(3), pos(3)], {"axis": 1}),
       ("batchnorm_running", [f(4, 3, 2), f(3), f(3), f(3), pos(3)],
        {"axis": 1, "training": True, "momentum": 0.3}),
       ("batchnorm_running", [f(2, 3), f(3), f(3), f(3), pos(3)],
        {"axis": -1, "training": True, "eps": 1e-3})]
)


def declined(op, subset, attrs) -> bool:
    """The operand subsets a rule declines (with an error naming the op)."""
    if op == "layernorm":
        return bool({1, 2} & set(subset))
    if op == "take":
        return set(subset) == {0, 1} and attrs["axis"] != 0
    if op == "take_grad":
        return 1 in subset and attrs["axis"] != 0
    if op in ("conv1d", "conv2d", "conv_transpose2d", "conv_input_grad"):
        return 1 in subset   # weights per example: the groups, for a static batch size
    if op == "conv_weight_grad":
        return True          # (test_ops_conv runs these with a static batch size)
    if op in ("uniform", "normal", "bernoulli", "rng_fold", "dropout"):
        return op == "rng_fold" or (op == "dropout") == (1 in subset)   # a key per example
    return False


def one_op(op, args, attrs) -> Module:
    body = Block([TensorType(DTYPE_OF_NUMPY[a.dtype.name], a.shape) for a in args],
                 [f"a{k}" for k in range(len(args))])
    b = Builder(body)
    outs = b.emit(op, *body.args, **attrs)
    b.ret(outs if isinstance(outs, list) else [outs])
    return Module({"f": Function("f", body, [y.type for y in body.ops[-1].operands])})


def check_against_loop(module, fn, batched: dict, shared: dict, n: int, size: str = "",
                       **tol):
    bm = Batch(fn=fn, inputs=tuple(batched), size=size)(module)
    adc.verify(bm)
    got = adc.run(bm, f"{fn}_batched", {**batched, **shared})
    per = [adc.run(module, fn, {**{k: v[i] for k, v in batched.items()}, **shared})
           for i in range(n)]
    assert len(got) == len(per[0])
    for k, g in enumerate(got):
        want = np.stack([np.asarray(p[k]) for p in per])
        assert g.shape == want.shape and g.dtype == want.dtype, k
        np.testing.assert_allclose(g, want, **(tol or {"rtol": 1e-12, "atol": 1e-12}))


def _subsets(k):
    for r in range(1, k + 1):
        yield from itertools.combinations(range(k), r)


@pytest.mark.parametrize("op,makers,attrs", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_op_against_a_loop(op, makers, attrs):
    module = one_op(op, [m() for m in makers], attrs)
    for subset in _subsets(len(makers)):
        batched = {f"a{k}": np.stack([makers[k]() for _ in range(N)]) for k in subset}
        shared = {f"a{k}": makers[k]() for k in range(len(makers)) if k not in subset}
        if declined(op, subset, attrs):
            with pytest.raises(adc.AdcError, match="batch: " + op):
                Batch(fn="f", inputs=tuple(batched))(module)
            continue
        check_against_loop(module, "f", batched, shared, N)


def test_every_op_with_operands_has_a_batching_rule():
    tested = {c[0] for c in CASES}
    for name, d in registry.REGISTRY.items():
        if d.operands:
            assert d.batch is not None, name
            assert name in tested, name


SAMPLES = sorted(p.stem for p in (ROOT / "samples").glob("*.tdsl"))


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_batched_against_a_loop(name):
    """The data inputs batched (perturbed copies), parameters, state and the random key
    shared, in float64; then per-example gradients: the adjoint program batched."""
    from adcompiler.ops.random import key_input
    from adcompiler.passes.to_dtype import to_dtype
    path = ROOT / "samples" / f"{name}.tdsl"
    module = to_dtype(adc.load(path), "f64")
    fn = module.main
    inputs = sample_inputs(path, fn)
    unbatched = set(fn.params) | set(fn.attrs.get("state", ()))
    if key_input(fn) is not None:
        unbatched.add(key_input(fn).name)
    rng = np.random.default_rng(3)

    def copies(v):
        if v.dtype.kind == "f":
            return np.stack([v + 0.1 * rng.standard_normal(v.shape) for _ in range(N)])
        return np.stack([v] * N)
    names = [a.name for a in fn.args if a.name not in unbatched] or fn.arg_names[:1]
    batched = {k: copies(inputs[k]) for k in names}
    shared = {k: v for k, v in inputs.items() if k not in batched}
    check_against_loop(module, fn.name, batched, shared, N, rtol=1e-10, atol=1e-12)
    grads = adc.run_pipeline(module, f"inline,scan-inputs,reverse{{fn={fn.name}}},cse,dce")
    # a convolution's weight gradient per example needs a static batch size
    size = str(N) if "conv2d" in path.read_text() else ""
    check_against_loop(grads, f"{fn.name}_grad", batched, shared, N, size, rtol=1e-10,
                       atol=1e-12)


def test_loops_batch_their_carries_and_scans():
    src = """
def loop(xs: f64[T, 3], h0: f64[3], param w: f64[3]) -> (f64[3], f64[T]) {
    h = h0
    acc = zeros([], dtype=f64)
    ys = zeros([T], dtype=f64)
    for i in range(T) {
        h = tanh(h * w + xs[i])
        acc = acc + sum(h)
    }
    return h, xs @ w + acc
}
"""
    m = adc.load(src)
    xs, h0, w = RNG.standard_normal((N, 4, 3)), RNG.standard_normal(3), RNG.standard_normal(3)
    check_against_loop(m, "loop", {"xs": xs}, {"h0": h0, "w": w}, N)   # carries grow batched
    check_against_loop(m, "loop", {"h0": np.stack([h0] * N) + RNG.standard_normal((N, 3))},
                       {"xs": xs[0], "w": w}, N)
    zero_trip = {"xs": np.zeros((N, 0, 3))}
    check_against_loop(m, "loop", zero_trip, {"h0": h0, "w": w}, N)


def test_vmap_in_axes_and_per_example_gradients():
    src = """
def loss(x: f64[4], label: i64, param W: f64[4, 3], param b: f64[3]) -> f64 {
    return cross_entropy(x @ W + b, label)
}
"""
    X, labels = RNG.standard_normal((64, 4)), RNG.integers(0, 3, 64)
    W, b = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
    g = adc.grad(src)
    per_example = adc.vmap(g, in_axes={"x": 0, "label": 0})
    gw, gb = per_example(X, labels, W, b)
    assert gw.shape == (64, 4, 3) and gb.shape == (64, 3)
    for i in (0, 17, 63):
        rw, rb = g(X[i], labels[i], W, b)
        np.testing.assert_allclose(gw[i], rw, rtol=1e-12)
        np.testing.assert_allclose(gb[i], rb, rtol=1e-12)
    by_position = adc.vmap(g, in_axes=(1, 0, None, None))(X.T, labels, W, b)
    np.testing.assert_allclose(by_position[0], gw, rtol=1e-12)
    values = adc.vmap(src, in_axes={"x": 0, "label": 0})(X, labels, W, b)
    assert values.shape == (64,)
    with pytest.raises(adc.AdcError, match="pullback"):
        adc.vmap(adc.vjp(src))
    with pytest.raises(TypeError, match="not an input"):
        adc.vmap(g, in_axes={"y": 0})


def test_batch_pass_from_a_pipeline():
    m = adc.load("def f(x: f64[3], param w: f64[3]) -> f64 {\n    return sum(x * w)\n}\n")
    out = adc.run_pipeline(m, "batch{inputs=x axis=1 size=K}")
    assert str(out["f_batched"].args[0].type) == "f64[3, K]"
    x = RNG.standard_normal((3, 5))
    w = RNG.standard_normal(3)
    np.testing.assert_allclose(adc.run(out, "f_batched", x=x, w=w)[0], w @ x, rtol=1e-12)


def test_nested_vmap_is_a_batch_of_batches():
    src = "def f(x: f64[3], param w: f64[3]) -> f64 {\n    return sum(tanh(x * w))\n}\n"
    x, w = RNG.standard_normal((4, 5, 3)), RNG.standard_normal(3)
    inner = adc.vmap(adc.grad(src, wrt="w"), in_axes={"x": 0})
    outer = adc.vmap(inner, in_axes={"x": 0})
    g = adc.grad(src, wrt="w")
    want = np.array([[g(x[i, j], w) for j in range(5)] for i in range(4)])
    np.testing.assert_allclose(outer(x, w), want, rtol=1e-12)
    with pytest.raises(adc.AdcError, match="inner batch axes at 0"):
        adc.vmap(adc.vmap(src, in_axes={"x": 1}), in_axes={"x": 0})


def test_vmap_of_running_statistics_is_a_run_per_example():
    """Each example normalizes with its own batch's statistics and returns its own updated
    running statistics (batched, though the running ones given are shared), as a loop of
    runs from the same state; in evaluation, with the running ones, per example too."""
    src = """
def f(x: f64[R, 3], param g: f64[3], param b: f64[3], state mean: f64[3],
      state var: f64[3] = 1) -> f64[R, 3] {
    y, mean, var = batchnorm_running(x, g, b, mean, var, axis=1, momentum=0.2)
    return y
}
"""
    X = RNG.standard_normal((5, 4, 3))
    g, b = RNG.uniform(0.5, 1.5, 3), RNG.standard_normal(3)
    mean, var = RNG.standard_normal(3), RNG.uniform(0.5, 1.5, 3)
    for training in (True, False):
        one = adc.function(src, training=training)
        y, m, v = adc.vmap(one, in_axes={"x": 0})(X, g, b, mean, var)
        assert y.shape == (5, 4, 3) and m.shape == v.shape == (5, 3)
        for i in range(5):
            want = one(X[i], g, b, mean, var)
            for got, w in zip((y[i], m[i], v[i]), want):
                np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-15)
        assert np.allclose(m[0], mean) != training     # moved only in training
