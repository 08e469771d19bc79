"""batchnorm, rmsnorm, attention, argmax, argmin and cumsum: values against NumPy formulas
written here (and against PyTorch where it is installed), reverse mode against central
differences in float64, tangents, second order and Hessian-vector products, batching, the
emitted Python, edge shapes, large inputs in f32, and located errors."""
from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

from adcompiler.cli import main as adc_main
from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_source
from adcompiler.passes.reverse import Reverse
from gradcheck import check_grads, check_second_order, one_op_module, run
from test_forward_ops import check_op
from test_hvp import check_hvp
from test_ops_shape import evaluate, i64

RNG = np.random.default_rng(25)


def rand(*shape):
    return RNG.standard_normal(shape)


# ---- NumPy references, written apart from the kernels ---------------------------------

def along(p, ndim, axis):
    return p.reshape([-1 if k == axis else 1 for k in range(ndim)])


def np_batchnorm(x, g, b, axis=1, eps=1e-5):
    """Channels first, every other element of a channel in one row."""
    axis %= x.ndim
    rows = np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
    mu = rows.sum(1) / rows.shape[1]
    var = ((rows - mu[:, None]) ** 2).sum(1) / rows.shape[1]
    y = (rows - mu[:, None]) / np.sqrt(var[:, None] + eps) * g[:, None] + b[:, None]
    return np.moveaxis(y.reshape(np.moveaxis(x, axis, 0).shape), 0, axis)


def np_rmsnorm(x, g, axis=-1, eps=1e-6):
    axis %= x.ndim
    ms = (x ** 2).sum(axis, keepdims=True) / x.shape[axis]
    return x / np.sqrt(ms + eps) * along(g, x.ndim, axis)


def np_attention(q, k, v, causal=False, scale=0.0):
    s = scale or 1 / np.sqrt(q.shape[-1])
    scores = np.einsum("...id,...jd->...ij", q, k) * s
    if causal:
        tq, tk = scores.shape[-2:]
        seen = np.arange(tk)[None, :] <= np.arange(tq)[:, None]
        scores = np.where(seen, scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("...ij,...jd->...id", e / e.sum(-1, keepdims=True), v)


def np_arg(x, axis=-1, pick=np.max):
    """The smallest index holding the extremum: ties go to the first."""
    if x.ndim == 0:
        return np.asarray(0)
    axis %= x.ndim
    idx = along(np.arange(x.shape[axis]), x.ndim, axis)
    hit = x == pick(x, axis=axis, keepdims=True)
    return np.where(hit, idx, x.shape[axis]).min(axis)


def np_cumsum(x, axis, reverse=False):
    """A product with a triangular matrix of ones."""
    if x.ndim == 0:
        return x
    n = x.shape[axis]
    tri = np.tril(np.ones((n, n))) if reverse else np.triu(np.ones((n, n)))
    return np.moveaxis(np.moveaxis(x, axis, -1) @ tri, -1, axis)


X4, G3, B3 = rand(4, 3, 2, 2), rand(3), rand(3)
X2, G5, B5 = rand(6, 5), rand(5), rand(5)
Q, K, V = rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 3)
QB, KB, VB = rand(2, 1, 4, 3), rand(3, 2, 3), rand(1, 2, 2)   # batch axes that broadcast
TIES = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, -5.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
C = rand(3, 4)

CASES = [  # (op, args, attrs, NumPy reference)
    ("batchnorm", [X4, G3, B3], {}, np_batchnorm(X4, G3, B3)),
    ("batchnorm", [X2, G5, B5], {"axis": -1, "eps": 1e-3}, np_batchnorm(X2, G5, B5, -1, 1e-3)),
    ("batchnorm", [X2.T, G5, B5], {"axis": 0}, np_batchnorm(X2.T, G5, B5, 0)),
    ("rmsnorm", [X2, G5], {}, np_rmsnorm(X2, G5)),
    ("rmsnorm", [X4, G3], {"axis": 1, "eps": 0.0}, np_rmsnorm(X4, G3, 1, 0.0)),
    ("attention", [Q, K, V], {}, np_attention(Q, K, V)),
    ("attention", [Q, K, V], {"causal": True, "scale": 0.3}, np_attention(Q, K, V, True, 0.3)),
    ("attention", [K, Q, Q], {"causal": True}, np_attention(K, Q, Q, True)),   # Tq > Tk
    ("attention", [QB, KB, VB], {"causal": True}, np_attention(QB, KB, VB, True)),
    ("argmax", [TIES], {}, np_arg(TIES)),
    ("argmax", [TIES], {"axis": 0}, np_arg(TIES, 0)),
    ("argmax", [X2], {"axis": 0}, np_arg(X2, 0)),
    ("argmin", [TIES], {}, np_arg(TIES, pick=np.min)),
    ("argmin", [X4], {"axis": 1}, np_arg(X4, 1, np.min)),
    ("cumsum", [C], {"axis": 1}, np_cumsum(C, 1)),
    ("cumsum", [C], {"axis": 0, "reverse": True}, np_cumsum(C, 0, True)),
    ("cumsum", [X4], {"axis": -2}, np_cumsum(X4, -2)),
]
FLOAT_OPS = ("batchnorm", "rmsnorm", "attention", "cumsum")
# a step of central differences moves an index tied for the extremum: no ties here
JVP_CASES = [c for c in CASES if c[1][0] is not TIES]


def _id(case):
    return f"{case[0]}-{[np.shape(a) for a in case[1]]}-{case[2]}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_values(case):
    op, args, attrs, want = case
    got = evaluate(op, args, attrs)
    assert got.shape == np.shape(want)
    if op.startswith("arg"):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in FLOAT_OPS], ids=_id)
def test_grads(case):
    op, args, attrs, _ = case
    check_grads(op, args, attrs)


@pytest.mark.parametrize("case", JVP_CASES, ids=_id)
def test_tangents(case):
    op, args, attrs, _ = case
    check_op(op, args, attrs, roundtrip=True)


@pytest.mark.parametrize("op,args,attrs", [
    ("batchnorm", [rand(3, 2), rand(2), rand(2)], {}),
    ("batchnorm", [rand(2, 2, 3), rand(2), rand(2)], {"axis": 1}),
    ("rmsnorm", [rand(2, 4), rand(4)], {}),
    ("rmsnorm", [rand(3, 2), rand(3)], {"axis": 0}),
    ("attention", [rand(3, 2), rand(4, 2), rand(4, 3)], {}),
    ("attention", [rand(2, 3, 2), rand(4, 2), rand(4, 3)], {"causal": True}),
    ("cumsum", [rand(2, 3)], {"axis": 1, "reverse": True}),
])
def test_second_order(op, args, attrs):
    check_second_order(op, args, attrs)


HVP_SRC = """
def f(param x: f64[3, 2, 2], param g: f64[2], param b: f64[2], param wq: f64[2, 2],
      param wk: f64[2, 2], param r: f64[2]) -> f64 {
    h = batchnorm(x, g, b)
    n = rmsnorm(h, r)
    a = attention(n @ wq, n @ wk, tanh(n), causal=true)
    return sum(cumsum(a * a, 1, reverse=true) * x)
}
"""


def test_hvp_of_a_model_with_every_op():
    names = ["x", "g", "b", "wq", "wk", "r"]
    shapes = [(3, 2, 2), (2,), (2,), (2, 2), (2, 2), (2,)]
    inputs = {n: rand(*s) for n, s in zip(names, shapes)}
    check_hvp(HVP_SRC, inputs, names)


# ---- PyTorch ----------------------------------------------------------------------------

def test_values_and_gradients_against_pytorch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    t = torch.tensor

    def grads(op, args, attrs, fn):
        """adc's gradient of sum(op(...) * w) against torch.autograd's."""
        w = rand(*np.shape(evaluate(op, args, attrs)))
        m = one_op_module(op, args, attrs)
        ins = {**{f"a{k}": a for k, a in enumerate(args)}, "w0": w}
        names = tuple(f"a{k}" for k, a in enumerate(args) if a.dtype.kind == "f")
        value, *got = run(Reverse(wrt=names, fn="f")(m), "f_grad", ins)
        ts = [t(a, requires_grad=a.dtype.kind == "f") for a in args]
        out = fn(*ts)
        np.testing.assert_allclose(evaluate(op, args, attrs), out.detach().numpy(),
                                   rtol=1e-12, atol=1e-12, err_msg=op)
        (out * t(w)).sum().backward()
        for g, a in zip(got, [a for a in ts if a.requires_grad]):
            np.testing.assert_allclose(g, a.grad.numpy(), rtol=1e-10, atol=1e-12,
                                       err_msg=op)

    grads("batchnorm", [X4, G3, B3], {},
          lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True, eps=1e-5))
    grads("rmsnorm", [X2, G5], {}, lambda x, g: F.rms_norm(x, (5,), g, eps=1e-6))
    for causal in (False, True):
        for q, k, v in ((Q, K, V), (K, Q, Q), (rand(2, 3, 1, 4), rand(2, 3, 1, 4),
                                                rand(2, 3, 1, 2))):
            grads("attention", [q, k, v], {"causal": causal},
                  lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    grads("attention", [Q, K, V], {"scale": 0.25},
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.25))
    grads("cumsum", [X4], {"axis": 2}, lambda x: torch.cumsum(x, 2))
    for x, axis in ((TIES, -1), (TIES, 0), (X4, 1), (np.asarray(2.5), -1)):
        np.testing.assert_array_equal(evaluate("argmax", [x], {"axis": axis}),
                                      torch.argmax(t(x), axis).numpy())
        np.testing.assert_array_equal(evaluate("argmin", [x], {"axis": axis}),
                                      torch.argmin(t(x), axis).numpy())
    nan = np.array([[1.0, np.nan, 5.0, np.nan]])
    assert evaluate("argmax", [nan], {}) == torch.argmax(t(nan), -1).item() == 1
    assert evaluate("argmin", [nan], {}) == torch.argmin(t(nan), -1).item() == 1


# ---- edge shapes --------------------------------------------------------------------------

@pytest.mark.parametrize("op,args,attrs,want", [
    # size-1 axes
    ("batchnorm", [rand(1, 3, 2), G3, B3], {}, None),
    ("batchnorm", [rand(4, 1), rand(1), rand(1)], {}, None),
    ("rmsnorm", [rand(3, 1), rand(1)], {}, None),
    ("attention", [rand(1, 4), rand(1, 4), rand(1, 2)], {"causal": True}, None),   # T = 1
    ("attention", [rand(1, 4), rand(3, 4), rand(3, 2)], {"causal": True}, None),   # Tq = 1
    ("cumsum", [rand(3, 1)], {"axis": 1}, None),
    # empty where the op is defined
    ("batchnorm", [np.zeros((3, 0, 2)), np.zeros(0), np.zeros(0)], {}, np.zeros((3, 0, 2))),
    ("rmsnorm", [np.zeros((0, 4)), rand(4)], {}, np.zeros((0, 4))),
    ("attention", [np.zeros((0, 4)), K[0], V[0]], {}, np.zeros((0, 3))),           # Tq = 0
    ("attention", [Q, K, np.zeros((2, 5, 0))], {"causal": True}, np.zeros((2, 3, 0))),
    ("attention", [np.zeros((2, 0)), np.zeros((3, 0)), V[0, :3]], {"scale": 1.0},
     np.broadcast_to(V[0, :3].mean(0), (2, 3))),                                   # d = 0
    ("argmax", [np.zeros((0, 3))], {}, np.zeros(0, np.int64)),
    ("cumsum", [np.zeros((2, 0))], {"axis": 1}, np.zeros((2, 0))),
    # 0-d
    ("argmax", [np.asarray(3.0)], {}, np.asarray(0)),
    ("argmin", [np.asarray(3.0)], {"axis": 0}, np.asarray(0)),
    ("cumsum", [np.asarray(3.0)], {"axis": 0}, np.asarray(3.0)),
    ("cumsum", [np.asarray(3.0)], {"axis": -1, "reverse": True}, np.asarray(3.0)),
], ids=lambda v: str(v) if isinstance(v, (str, dict)) else None)
def test_edge_shapes(op, args, attrs, want):
    refs = {"batchnorm": np_batchnorm, "rmsnorm": np_rmsnorm, "attention": np_attention,
            "cumsum": np_cumsum}
    got = evaluate(op, args, attrs)
    if want is None:
        want = refs[op](*args, **attrs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if op in FLOAT_OPS and got.size and min(a.size for a in args) > 0:
        check_grads(op, args, attrs)
        check_op(op, args, attrs)


def test_bool_and_integer_cumsum():
    mask = np.array([[True, False, True], [True, True, False]])
    got = evaluate("cumsum", [mask], {"axis": 1})
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [[1, 1, 2], [1, 2, 2]])
    ints = np.array([5, -2, 7], dtype=np.int32)
    got = evaluate("cumsum", [ints], {"axis": 0, "reverse": True})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [10, 5, 7])
    np.testing.assert_array_equal(evaluate("argmax", [ints], {}), 2)


def test_batchnorm_with_one_element_per_channel_is_beta():
    # var = 0: x - mean = 0, so the result is beta and x gets no gradient
    x = rand(1, 3)
    np.testing.assert_allclose(evaluate("batchnorm", [x, G3, B3], {}), B3[None])
    grads = check_grads("batchnorm", [x, G3, B3], {})
    np.testing.assert_array_equal(grads["a0"], 0)


# ---- large inputs in f32 -----------------------------------------------------------------

def f32(*shape, scale=1.0):
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize("scale,eps", [(1e4, 1e-6), (1e20, 1e-6), (1e-25, 0.0)])
def test_rmsnorm_large_and_tiny_rows_in_f32(scale, eps):
    """Squares of 1e20 overflow f32 and those of 1e-25 underflow it (which matters when
    eps is 0): the value and the derivatives are still those of float64."""
    x, g = f32(3, 8, scale=scale), f32(8)
    for axis, xs in ((-1, x), (0, np.ascontiguousarray(x.T))):
        got = evaluate("rmsnorm", [xs, g], {"axis": axis, "eps": eps})
        want = np_rmsnorm(xs.astype(np.float64), g.astype(np.float64), axis, eps)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    grads = _grads("rmsnorm", [x, g], {"eps": eps})
    g64 = _grads("rmsnorm", [x.astype(np.float64) / scale, g.astype(np.float64)],
                 {"eps": eps})
    # rmsnorm is scale-invariant in x: d/dx at x is d/dx at x/scale divided by scale
    np.testing.assert_allclose(grads[0] * scale, g64[0], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(grads[1], g64[1], rtol=1e-4, atol=1e-5)


def test_rmsnorm_f16_rows_beyond_the_square_limit():
    x = np.array([[300.0, -200.0, 100.0, 0.0]], dtype=np.float16)   # 300^2 overflows f16
    got = evaluate("rmsnorm", [x, np.ones(4, np.float16)], {})
    want = np_rmsnorm(x.astype(np.float64), np.ones(4))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3)


def test_attention_and_batchnorm_finite_at_1e4_in_f32():
    for op, args, attrs in [
            ("attention", [f32(2, 3, 4, scale=1e4), f32(2, 5, 4, scale=1e4), f32(2, 5, 3)],
             {}),
            ("attention", [f32(4, 4, scale=1e4), f32(4, 4, scale=1e4), f32(4, 2)],
             {"causal": True}),
            ("batchnorm", [f32(4, 3, 2, scale=1e4), f32(3), f32(3)], {})]:
        value = evaluate(op, args, attrs)
        assert np.all(np.isfinite(value)), op
        want = {"attention": np_attention, "batchnorm": np_batchnorm}[op](
            *[a.astype(np.float64) for a in args], **attrs)
        np.testing.assert_allclose(value, want, rtol=1e-3, atol=1e-3)
        assert all(np.all(np.isfinite(g)) for g in _grads(op, args, attrs)), op
        tangents = check_op(op, [a.astype(np.float64) for a in args], attrs, rtol=1e-3,
                            atol=1e-3) if op == "batchnorm" else None
        assert tangents is None or np.all(np.isfinite(tangents[0]))


def _grads(op, args, attrs):
    m = one_op_module(op, args, attrs, weighted=False)
    names = tuple(f"a{k}" for k in range(len(args)))
    outs = run(Reverse(wrt=names, fn="f")(m), "f_grad", dict(zip(names, args)))
    return outs[1:]


# ---- batching, emitted Python, CuPy ----------------------------------------------------

def test_vmap_of_gradients_per_example():
    """Per-example gradients of a program with every op: the adjoint program batched,
    against a loop over the examples."""
    import adcompiler as adc
    src = ("def f(x: f64[4, 3], param g: f64[3], param b: f64[3], param w: f64[3, 3]) -> f64 {\n"
           "    h = batchnorm(rmsnorm(x, g, axis=1) @ w, g, b, axis=1)\n"
           "    a = attention(h, h, cumsum(h, 0), causal=true)\n"
           "    return sum(a * a) + sum(cast(argmax(a, axis=0), f64))\n}\n")
    m = adc.compile_source(src, "v.tdsl")
    grad = adc.value_and_grad(m, wrt=["g", "b", "w"])
    per = adc.vmap(grad, in_axes={"x": 0})
    xs, g, b, w = rand(3, 4, 3), rand(3), rand(3), rand(3, 3)
    value, grads = per(xs, g, b, w)
    for i in range(3):
        v_i, g_i = grad(xs[i], g, b, w)
        np.testing.assert_allclose(value[i], v_i, rtol=1e-12)
        for got, want in zip(grads, g_i):
            np.testing.assert_allclose(got[i], want, rtol=1e-10, atol=1e-12)


EMIT_SRC = """
def f(x: f32[2, 3, 4], param g: f32[3], param b: f32[3], param r: f32[4]) -> f32 {
    h = batchnorm(x, g, b)
    n = rmsnorm(h, r, eps=1e-5)
    a = attention(n, n, n, causal=true, scale=0.5)
    c = cumsum(a, axis=2) + expand_dims(cast(argmax(a, axis=1), f32), 1)
    return sum(c * c) - sum(cast(argmin(x), f32))
}
"""


@pytest.mark.parametrize("mode", ["forward", "reverse", "jvp", "hvp"])
def test_emitted_python_matches_the_executor(tmp_path, mode):
    src, out = tmp_path / "m.tdsl", tmp_path / "m.py"
    src.write_text(EMIT_SRC)
    assert adc_main(["compile", str(src), "--emit", "python", "--mode", mode,
                     "-o", str(out)]) == 0
    ins = {"x": f32(2, 3, 4), "g": f32(3), "b": f32(3), "r": f32(4)}
    tangents = {f"t_{k}": f32(*ins[k].shape) for k in ("g", "b", "r")}
    data = {**ins, **(tangents if mode in ("jvp", "hvp") else {})}
    np.savez(tmp_path / "in.npz", **data)
    proc = subprocess.run([sys.executable, str(out), str(tmp_path / "in.npz"),
                           str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    emitted = np.load(tmp_path / "out.npz")
    np.savez(tmp_path / "ins.npz", **ins)
    np.savez(tmp_path / "tangents.npz", **{k[2:]: v for k, v in tangents.items()})
    assert adc_main(["run", str(src), "--mode", mode, "--inputs", str(tmp_path / "ins.npz"),
                     *(["--tangents", str(tmp_path / "tangents.npz")]
                       if mode in ("jvp", "hvp") else []),
                     "--out", str(tmp_path / "ran.npz")]) == 0
    ran = np.load(tmp_path / "ran.npz")
    assert sorted(emitted.files) == sorted(ran.files)
    for name in ran.files:
        np.testing.assert_allclose(emitted[name], ran[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)


def test_kernels_call_only_what_cupy_has():
    """The CuPy path runs the same kernels with ``xp = cupy``: every function they take from
    the array module, with the keywords they pass, exists in CuPy (the arithmetic on a GPU
    is not checked here)."""
    cupy = pytest.importorskip("cupy")
    from adc_runtime.kernels import KERNELS
    calls = {}

    class Recorder:
        __name__ = "cupy"

        def __getattr__(self, name):
            fn = getattr(np, name)
            if not callable(fn):
                return fn

            def call(*args, **kwargs):
                calls.setdefault(name, set()).update(kwargs)
                return fn(*args, **kwargs)
            return call
    xp = Recorder()
    for op, args, attrs, _ in CASES + [("attention", [Q, K, V], {"causal": True}, None),
                                       ("cumsum", [TIES > 0], {"axis": 0}, None)]:
        KERNELS[op](xp, *args, **attrs)
    assert {"matmul", "exp", "tril", "copyto", "cumsum", "flip", "argmax"} <= set(calls)
    for name, keywords in calls.items():
        fn = getattr(cupy, name)
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):   # a compiled ufunc: its keywords are NumPy's
            continue
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            assert keywords <= set(params), (name, keywords - set(params))


# ---- errors -------------------------------------------------------------------------------

BAD = [
    ("q: f64[2, 3]", "attention(q, q[0], q)", "attention needs k of rank >= 2"),
    ("q: f64[2, 3], k: f64[4, 2]", "attention(q, k, k)", "same last axis"),
    ("q: f64[2, 3], k: f64[4, 3], v: f64[5, 2]", "attention(q, k, v)", "as many rows"),
    ("q: f64[2, 2, 3], k: f64[3, 4, 3]", "attention(q, k, k)", "do not broadcast"),
    ("q: f64[2, 3], k: f64[0, 3]", "attention(q, k, k)", "at least one key"),
    ("q: f64[2, 0], k: f64[3, 0]", "attention(q, k, k)", "needs a key size d > 0"),
    ("q: f64[2, 3], k: f32[4, 3]", "attention(q, k, k)", "one dtype"),
    ("x: f64[4, 3], g: f64[4]", "batchnorm(x, g, g)", "gamma f64[4] must have shape [3]"),
    ("x: f64[4, 3], g: f64[3], b: f64[1, 3]", "batchnorm(x, g, b)", "beta f64[1, 3]"),
    ("x: f64[4, 3], g: f64[3]", "batchnorm(x, g, g, axis=2)", "axis 2 is out of range"),
    ("x: f64[0, 3], g: f64[3]", "batchnorm(x, g, g)", "no elements"),
    ("x: f64[4, 3], g: f32[3]", "batchnorm(x, g, g)", "must have x's dtype f64"),
    ("x: f64[3], g: f64[3]", "batchnorm(x, g, g, axis=0, eps=-1.0)", "eps >= 0"),
    ("x: i64[4, 3], g: f64[3]", "batchnorm(x, g, g)", "expects a float tensor"),
    ("x: f64, g: f64[1]", "rmsnorm(x, g)", "rank >= 1"),
    ("x: f64[4, 3], g: f64[4]", "rmsnorm(x, g)", "gamma f64[4] must have shape [3]"),
    ("x: f64[4, 0], g: f64[0]", "rmsnorm(x, g)", "has no elements"),
    ("x: f64[4, 3]", "argmax(x, axis=2)", "axis 2 is out of range"),
    ("x: f64[4, 0]", "argmin(x)", "argmin of an empty axis"),
    ("x: f64", "argmax(x, axis=1)", "out of range for a 0-d tensor"),
    ("x: f64[4, 3]", "cumsum(x)", "needs the option 'axis'"),
    ("x: f64[4, 3]", "cumsum(x, -3)", "axis -3 is out of range"),
]


@pytest.mark.parametrize("args,call,message", BAD, ids=[b[1] for b in BAD])
def test_bad_input_is_a_located_error(args, call, message):
    src = f"def f({args}) -> f64 {{\n    y = {call}\n    return 0.0\n}}\n"
    with pytest.raises(AdcError, match=message.replace("[", r"\[").replace("]", r"\]")) as e:
        compile_source(src, "bad.tdsl")
    assert (e.value.loc.line, e.value.loc.col) == (2, 9), e.value.loc


def test_cli_reports_the_shapes_and_exits_1(tmp_path, capsys):
    path = tmp_path / "bad.tdsl"
    path.write_text("def f(param q: f32[8, 16], k: f32[8, 12], v: f32[8, 4]) -> f32 {\n"
                    "    return sum(attention(q, k, v, causal=true))\n}\n")
    assert adc_main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:16: error: attention: q f32[8, 16] and k f32[8, 12] must have the " \
           f"same last axis" in err


def test_symbolic_shapes():
    """Sizes bound at run time: the scale 1/sqrt(d) of a symbolic d and the causal mask of
    symbolic lengths are computed when the program runs."""
    src = ("def f(param q: f64[T, D], k: f64[S, D], v: f64[S, 2], param g: f64[D]) -> f64 {\n"
           "    a = attention(rmsnorm(q, g), k, v, causal=true)\n"
           "    return sum(cumsum(a, 0) * a) + sum(batchnorm(q, g, g, axis=1))\n}\n")
    import adcompiler as adc
    m = adc.compile_source(src, "s.tdsl")
    q, k, v, g = rand(3, 5), rand(4, 5), rand(4, 2), rand(5)
    value, (dq, dg) = adc.value_and_grad(m, wrt=["q", "g"])(q, k, v, g)
    h = np_rmsnorm(q, g)
    a = np_attention(h, k, v, causal=True)
    want = (np_cumsum(a, 0) * a).sum() + np_batchnorm(q, g, g, 1).sum()
    np.testing.assert_allclose(value, want, rtol=1e-12)
    fixed = adc.compile_source(src.replace("T", "3").replace("S", "4").replace("D", "5"))
    _, (fq, fg) = adc.value_and_grad(fixed, wrt=["q", "g"])(q, k, v, g)
    np.testing.assert_allclose(dq, fq, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dg, fg, rtol=1e-12, atol=1e-14)


def test_attention_reverse_sweep_keeps_no_score_matrix():
    """The forward part of the adjoint program makes no [Tq, Tk] value: the probabilities
    are recomputed in the reverse sweep from q and k."""
    m = Reverse(fn="f")(one_op_module("attention", [rand(6, 2), rand(7, 2), rand(7, 3)]))
    ops = list(m["f_grad"].body.ops)
    first = next(i for i, op in enumerate(ops) if op.name == "matmul")
    assert any(op.name == "attention" for op in ops[:first])
    assert all(r.type.shape[-2:] != (6, 7) for op in ops[:first] for r in op.results)


def test_flops():
    from adcompiler.memory.flops import op_flops
    m = one_op_module("attention", [rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 6)],
                      weighted=False)
    op = next(op for op in m["f"].body.ops if op.name == "attention")
    # per batch entry: 2*3*5*4 for the scores, 2*3*5*6 for the sum, 5*3*5 for the softmax
    assert op_flops(op, {}) == 2 * (2 * 3 * 5 * 4 + 2 * 3 * 5 * 6 + 5 * 3 * 5) + 2 * 3 * 4


@pytest.mark.parametrize("policy", ["sqrt", "min-memory", "revolve:2"])
def test_remat_policies_give_the_same_gradients(policy):
    import adcompiler as adc
    src = ("def f(param x: f64[3, 4], param g: f64[4], param w: f64[4, 4]) -> f64 {\n"
           "    h = rmsnorm(x @ w, g)\n    a = attention(h, h, tanh(h), causal=true)\n"
           "    n = batchnorm(cumsum(a, 0), g, g, axis=1)\n"
           "    return sum(n * n)\n}\n")
    args = (rand(3, 4), rand(4), rand(4, 4))
    want = adc.value_and_grad(src, wrt=["x", "g", "w"])(*args)
    got = adc.value_and_grad(src, wrt=["x", "g", "w"], remat=policy)(*args)
    np.testing.assert_array_equal(got[0], want[0])
    for a, b in zip(got[1], want[1]):
        np.testing.assert_array_equal(a, b)
