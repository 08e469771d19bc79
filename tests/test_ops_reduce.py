"""Reductions: values against NumPy, reverse mode against finite differences for every axis
form, tie splitting of max/min, logsumexp at magnitude 1e4 in f32, symbolic dims, types."""
from __future__ import annotations

import numpy as np
import pytest

from gradcheck import check_grads, check_second_order, one_op_module, run

from adc_runtime.kernels import KERNELS
from adcompiler.diagnostics import ShapeError
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.ir.types import DTYPE_OF_NUMPY, TensorType
from adcompiler.ops import registry
from adcompiler.passes.reverse import Reverse

RNG = np.random.default_rng(99)


def apply(op, x, **attrs):
    x = np.asarray(x)
    body = Block([TensorType(DTYPE_OF_NUMPY[x.dtype.name], x.shape)], ["a0"])
    b = Builder(body)
    y = b.emit(op, body.args[0], **attrs)
    b.ret([y])
    return run(Module({"f": Function("f", body, [y.type])}), "f", {"a0": x})[0]


def grad(op, x, **attrs):
    """Reverse-mode gradient of ``sum(op(x))``."""
    module = one_op_module(op, [np.asarray(x)], attrs, weighted=False)
    adj = Reverse(wrt=("a0",), fn="f")(module)
    return run(adj, "f_grad", {"a0": np.asarray(x)})[1]


def np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min,
              "logsumexp": np_logsumexp, "var": np.var}
AXES = [None, 0, 1, -1, [0, 2], [-1, 0], [0, 1, 2]]
SHAPE = (2, 3, 4)


def np_axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_reduction_values(name, axis, keepdims, dtype):
    x = RNG.standard_normal(SHAPE).astype(dtype)
    y = apply(name, x, axis=axis, keepdims=keepdims)
    want = REDUCTIONS[name](x.astype(np.float64), axis=np_axis(axis), keepdims=keepdims)
    assert y.dtype == x.dtype and y.shape == np.shape(want)
    rtol = {"float16": 4e-3, "float32": 1e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(y, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_grads(name, axis, keepdims):
    # distinct values (a shuffled grid) so max/min are unique and differentiable
    x = RNG.permutation(np.arange(24.0)).reshape(SHAPE) / 7 - 1.5
    check_grads(name, [x], {"axis": axis, "keepdims": keepdims})


@pytest.mark.parametrize("axis", [None, 1], ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_second_order(name, axis):
    check_second_order(name, [RNG.permutation(np.arange(6.0)).reshape(2, 3) / 3],
                       {"axis": axis})


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_of_vector_and_scalar(name):
    v = np.array([0.3, -1.2, 2.0, 0.7])
    check_grads(name, [v])
    check_grads(name, [v], {"axis": 0, "keepdims": True})
    s = np.array(1.5)
    np.testing.assert_allclose(apply(name, s), REDUCTIONS[name](s))
    check_grads(name, [s])


def test_integer_reductions():
    x = np.array([[1, 5, 2], [7, 0, 3]], dtype=np.int32)
    for name in ("sum", "max", "min"):
        y = apply(name, x, axis=1)
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, REDUCTIONS[name](x, axis=1))
    mask = np.array([[True, False, True], [True, True, True]])
    y = apply("sum", mask, axis=-1)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, [2, 3])


# ---- ties of max/min -----------------------------------------------------------------

@pytest.mark.parametrize("name,x,axis,want", [
    ("max", [[3.0, 1.0, 3.0], [2.0, 2.0, 2.0]], 1, [[0.5, 0, 0.5], [1 / 3, 1 / 3, 1 / 3]]),
    ("max", [[3.0, 1.0, 3.0], [2.0, 2.0, 2.0]], None, [[0.5, 0, 0.5], [0, 0, 0]]),
    ("max", [[3.0, 1.0, 3.0], [2.0, 2.0, 2.0]], 0, [[1, 0, 1], [0, 1, 0]]),
    ("min", [[3.0, 1.0, 1.0], [0.0, 0.0, 0.0]], 1, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]]),
    ("min", [[3.0, 1.0, 1.0], [0.0, 0.0, 0.0]], None, [[0, 0, 0], [1 / 3, 1 / 3, 1 / 3]]),
    ("min", [[5.0, 5.0], [5.0, 5.0]], [0, 1], [[0.25, 0.25], [0.25, 0.25]]),
])
@pytest.mark.parametrize("keepdims", [False, True])
def test_extremum_ties_split_equally(name, x, axis, want, keepdims):
    g = grad(name, np.array(x), axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(g, want, rtol=1e-15)


# ---- logsumexp at magnitude 1e4 in f32 -----------------------------------------------

@pytest.mark.parametrize("axis", [None, 1, -1])
def test_logsumexp_finite_at_1e4_in_f32(axis):
    x = np.array([[1e4, 1e4 - 1, -1e4], [-1e4, -1e4, -1e4]], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = apply("logsumexp", x, axis=axis)
        g = grad("logsumexp", x, axis=axis)
    assert y.dtype == np.float32 and g.dtype == np.float32
    want = np_logsumexp(x.astype(np.float64), axis=axis)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert np.all(np.isfinite(g))
    if axis is not None:   # each row's gradient is its softmax
        # exp(x - lse) inherits the rounding of lse ~ 1e4 in f32 (half an ulp, 5e-4)
        p = np.exp(x.astype(np.float64) - want[:, None])
        np.testing.assert_allclose(g, p, rtol=1e-3)
        np.testing.assert_allclose(g.sum(axis=1), 1, rtol=1e-3)


def test_logsumexp_of_all_minus_infinity():
    with np.errstate(divide="ignore"):   # log(0) = -inf is the answer
        y = apply("logsumexp", np.full((2, 3), -np.inf), axis=1)
    np.testing.assert_array_equal(y, [-np.inf, -np.inf])


# ---- mean and var with symbolic dimensions -------------------------------------------

@pytest.mark.parametrize("name", ["mean", "var", "sum"])
def test_symbolic_reduced_dims(name):
    body = Block([TensorType("f64", ("N", 3))], ["a0"])
    b = Builder(body)
    y = b.emit("sum", b.emit(name, body.args[0], axis=0))
    b.ret([y])
    module = Module({"f": Function("f", body, [y.type], params={"a0"})})
    adj = Reverse(wrt=("a0",), fn="f")(module)
    x = RNG.standard_normal((5, 3))
    got = run(adj, "f_grad", {"a0": x})[1]
    want = {"mean": np.full((5, 3), 1 / 5), "sum": np.ones((5, 3)),
            "var": 2 * (x - x.mean(axis=0)) / 5}[name]
    np.testing.assert_allclose(got, want, rtol=1e-12)


# ---- var's correction ----------------------------------------------------------------

@pytest.mark.parametrize("correction", [1, 1.3, 0.5, -5, 2])
@pytest.mark.parametrize("axis", [None, 1, [0, 2]], ids=str)
def test_var_correction(axis, correction):
    """Divides the sum of squares by N - correction: values against the formula (and
    PyTorch), gradients against central differences, the tangent, second order."""
    from test_forward_ops import check_op
    x = RNG.standard_normal(SHAPE)
    attrs = dict(axis=axis, keepdims=axis == 1, correction=correction)
    ax = np_axis(axis)
    n = x.size if axis is None else np.prod([x.shape[a] for a in np.atleast_1d(ax)])
    want = ((x - x.mean(axis=ax, keepdims=True)) ** 2).sum(axis=ax, keepdims=axis == 1)
    np.testing.assert_allclose(apply("var", x, **attrs), want / (n - correction), rtol=1e-13)
    check_grads("var", [x], attrs)
    check_op("var", [x], attrs)
    check_second_order("var", [x], attrs)
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.var(xt, dim=ax, correction=correction, keepdim=axis == 1)
    ct = RNG.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(ct))
    np.testing.assert_allclose(apply("var", x, **attrs), yt.detach().numpy(), rtol=1e-13)
    module = one_op_module("var", [x], attrs)
    got = run(Reverse(wrt=("a0",), fn="f")(module), "f_grad", {"a0": x, "w0": ct})[1]
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_var_correction_errors():
    with pytest.raises(ShapeError, match=r"var: correction=3 leaves no degrees of freedom: "
                                         r"3 elements reduced in f32\[2, 3\]"):
        reduce_type("var", TensorType("f32", (2, 3)), axis=1, correction=3)
    with pytest.raises(ShapeError, match="var: correction=1 needs static sizes of the "
                                         "reduced axes"):
        reduce_type("var", TensorType("f32", ("N", 3)), axis=0, correction=1)
    assert reduce_type("var", TensorType("f32", ("N", 3)), axis=1,
                       correction=1) == TensorType("f32", ("N",))


# ---- type rules ----------------------------------------------------------------------

def reduce_type(op, t, **attrs):
    body = Block([t])
    return Builder(body).emit(op, body.args[0], **attrs).type


def test_reduction_types():
    t = TensorType("f32", ("B", 3, 4))
    assert reduce_type("sum", t) == TensorType("f32", ())
    assert reduce_type("max", t, axis=-1) == TensorType("f32", ("B", 3))
    assert reduce_type("var", t, axis=[0, 2], keepdims=True) == TensorType("f32", (1, 3, 1))
    assert reduce_type("mean", t, axis=(-3,)) == TensorType("f32", (3, 4))


@pytest.mark.parametrize("name", ["mean", "logsumexp", "var"])
def test_float_reductions_reject_integers(name):
    with pytest.raises(ShapeError, match=f"{name} expects a float tensor, got i64"):
        reduce_type(name, TensorType("i64", (3,)))


def test_reduction_axis_errors():
    t = TensorType("f32", (2, 3))
    with pytest.raises(ShapeError, match="sum: axis 2 is out of range for a tensor of rank 2"):
        reduce_type("sum", t, axis=2)
    with pytest.raises(ShapeError, match="max: axis .* is out of range"):
        reduce_type("max", t, axis=[-3])
    with pytest.raises(ShapeError, match=r"axis \[1, -1\] names an axis twice"):
        reduce_type("mean", t, axis=[1, -1])
    with pytest.raises(ShapeError, match="max expects a numeric tensor, got bool"):
        reduce_type("max", TensorType("bool", (2,)))


def test_sum_to():
    x = RNG.standard_normal((4, 2, 3))
    np.testing.assert_allclose(apply("sum_to", x, shape=(2, 1)),
                               x.sum(axis=(0, 2)).reshape(2, 1), rtol=1e-12)
    check_grads("sum_to", [x], {"shape": (2, 1)})
    check_grads("sum_to", [x], {"shape": (3,)})


@pytest.mark.parametrize("keepdims", [False, True])
def test_adjoints_verify_and_print_back(keepdims):
    for name in sorted(REDUCTIONS):
        m = Reverse(fn="f")(one_op_module(name, [np.ones((2, 3, 4))],
                                          {"axis": [0, -1], "keepdims": keepdims}))
        verify(m)
        text = print_module(m)
        assert print_module(parse_module(text)) == text, name


def test_every_documented_reduction_is_registered_tested_and_has_a_kernel():
    for name in list(REDUCTIONS) + ["sum_to"]:
        d = registry.get(name)
        assert d.has("reduction") and d.vjp is not None and name in KERNELS
    assert set(REDUCTIONS) == set("sum mean max min logsumexp var".split())
