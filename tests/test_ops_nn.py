"""Neural-net ops, stop_gradient and cast: values against NumPy references, reverse mode
against finite differences, broadcasting of layernorm's gamma/beta, cross_entropy with
integer labels and with probabilities, and finiteness at magnitude 1e4 in f32."""
import numpy as np
import pytest

from adcompiler.diagnostics import ShapeError
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import TensorType
from adcompiler.ir.verifier import verify
from adcompiler.passes.reverse import Reverse
from adc_runtime.executor import run_function
from gradcheck import check_grads, check_second_order, one_op_module
from test_ops_shape import evaluate, i64, rand, symbolic_grads

RNG = np.random.default_rng(1)


# ---- NumPy references -------------------------------------------------------------------

def np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def np_softmax(x, axis=-1):
    return np.exp(np_log_softmax(x, axis))


def np_ce_int(z, labels, axis=-1):
    ls = np_log_softmax(z, axis)
    return -np.squeeze(np.take_along_axis(ls, np.expand_dims(labels, axis), axis), axis)


def np_layernorm(x, g, b, axis=-1, eps=1e-5, along=False):
    axis = axis % x.ndim
    mu = x.mean(axis=axis, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axis, keepdims=True)
    if along:
        shape = [-1 if k == axis else 1 for k in range(x.ndim)]
        g, b = g.reshape(shape), b.reshape(shape)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_take_grad(ct, idx, axis, shape):
    out = np.zeros(shape)
    np.add.at(out, (slice(None),) * axis + (idx,), ct)
    return out


Z = rand(2, 3, 4)
LABELS = i64([[0, 3, 1], [2, 2, 0]])            # classes on the last axis of Z
LABELS_AX0 = i64([[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 1]])  # classes on axis 0 of Z
PROBS = np_softmax(rand(2, 3, 4))                # class probabilities on the last axis
PROBS1 = np_softmax(rand(2, 3, 4), 1)            # ... on axis 1
P = RNG.uniform(0.1, 0.9, (2, 3))
Y = RNG.uniform(0.0, 1.0, (2, 3))
G4, B4 = rand(4), rand(4)
G3, B3 = rand(3), rand(3)
TABLE = rand(5, 3)
IDX = i64([[0, 4, 0], [-1, 2, 0]])              # repeats and a negative index
CT = rand(2, 3, 3)
G214, B31, G211 = rand(2, 1, 4), rand(3, 1), rand(2, 1, 1)   # NumPy-broadcast gamma/beta

CASES = [  # (op, args, attrs, numpy reference)
    ("softmax", [Z], {}, np_softmax(Z)),
    ("softmax", [Z], {"axis": 0}, np_softmax(Z, 0)),
    ("log_softmax", [Z], {}, np_log_softmax(Z)),
    ("log_softmax", [Z], {"axis": 1}, np_log_softmax(Z, 1)),
    ("cross_entropy", [Z, LABELS], {}, np_ce_int(Z, LABELS)),
    ("cross_entropy", [Z, LABELS_AX0], {"axis": 0}, np_ce_int(Z, LABELS_AX0, 0)),
    ("cross_entropy", [Z, PROBS], {}, -(PROBS * np_log_softmax(Z)).sum(-1)),
    ("cross_entropy", [Z, PROBS1], {"axis": 1}, -(PROBS1 * np_log_softmax(Z, 1)).sum(1)),
    ("bce", [P, Y], {}, -(Y * np.log(P) + (1 - Y) * np.log(1 - P))),
    ("bce", [P, Y[0]], {}, -(Y[0] * np.log(P) + (1 - Y[0]) * np.log(1 - P))),
    ("bce_with_logits", [3 * Z[0], Y[0, :, None]], {},
     np.logaddexp(0, 3 * Z[0]) - 3 * Z[0] * Y[0, :, None]),
    ("mse", [P, Y], {}, np.mean((P - Y) ** 2)),
    ("mse", [Z, Z[0, 0]], {}, np.mean((Z - Z[0, 0]) ** 2)),
    ("layernorm", [Z, G4, B4], {}, np_layernorm(Z, G4, B4)),
    ("layernorm", [Z, G3, B3], {"axis": 1, "eps": 1e-3},
     np_layernorm(Z, G3, B3, axis=1, eps=1e-3, along=True)),
    ("layernorm", [Z, G214, B31], {}, np_layernorm(Z, G214, B31)),
    ("layernorm", [Z, G211, np.asarray(0.5)], {"axis": 0}, np_layernorm(Z, G211, 0.5, axis=0)),
    ("take", [TABLE, IDX], {}, np.take(TABLE, IDX, axis=0)),
    ("take", [Z, i64([3, 0, 3])], {"axis": -1}, np.take(Z, [3, 0, 3], axis=-1)),
    ("take_grad", [CT, IDX], {"axis": 0, "shape": [5, 3]}, np_take_grad(CT, IDX, 0, (5, 3))),
]


def _id(case):
    op, args, attrs, _ = case
    return f"{op}-{[a.shape for a in args]}-{attrs}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_values(case):
    op, args, attrs, want = case
    got = evaluate(op, args, attrs)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_grads(case):
    op, args, attrs, _ = case
    check_grads(op, args, attrs)


@pytest.mark.parametrize("op,args,attrs", [
    ("softmax", [rand(2, 3)], {}),
    ("log_softmax", [rand(2, 3)], {"axis": 0}),
    ("cross_entropy", [rand(2, 3), i64([2, 0])], {}),
    ("cross_entropy", [rand(2, 3), np_softmax(rand(2, 3))], {}),
    ("cross_entropy", [np_softmax(rand(2, 3)), rand(2, 3)], {}),   # d2/dlabels dlogits
    ("bce", [RNG.uniform(0.2, 0.8, (3,)), RNG.uniform(0, 1, (3,))], {}),
    ("bce", [RNG.uniform(0, 1, (3,)), RNG.uniform(0.2, 0.8, (3,))], {}),
    ("bce_with_logits", [rand(3), RNG.uniform(0, 1, (3,))], {}),
    ("mse", [rand(2, 3), rand(3)], {}),
    ("layernorm", [rand(2, 4), rand(4), rand(4)], {}),
    ("layernorm", [rand(3, 2), rand(3), rand(3)], {"axis": 0}),
    ("take", [rand(4, 2), i64([1, 1, 3])], {}),
    ("take_grad", [rand(3, 2), i64([1, 1, 3])], {"shape": [4, 2]}),
])
def test_second_order(op, args, attrs):
    # f_grad returns every operand's gradient, so d/da0 of their sum also exercises the
    # rules' terms for the other operands (layernorm's dgamma = sum(ct * xhat), say)
    check_second_order(op, args, attrs)


def test_cross_entropy_gradient_is_softmax_minus_onehot():
    grads = check_grads("cross_entropy", [Z, LABELS], {})
    w = np.random.default_rng(0).standard_normal(LABELS.shape)   # check_grads' weighting
    want = (np_softmax(Z) - np.eye(4)[LABELS]) * w[..., None]
    np.testing.assert_allclose(grads["a0"], want, rtol=1e-12, atol=1e-12)


def test_cross_entropy_with_one_hot_probabilities_matches_int_labels():
    onehot = np.eye(4)[LABELS]
    np.testing.assert_allclose(evaluate("cross_entropy", [Z, onehot]),
                               evaluate("cross_entropy", [Z, LABELS]), rtol=1e-13)


def test_symbolic_shapes():
    # mse divides by a symbolic element count; layernorm and take with a symbolic batch
    symbolic_grads("mse", [rand(3, 2), rand(2)], {}, [("B", 2), (2,)])
    symbolic_grads("layernorm", [rand(3, 4), rand(4), rand(4)], {}, [("B", 4), (4,), (4,)])
    symbolic_grads("cross_entropy", [rand(3, 5), i64([0, 4, 2])], {}, [("B", "C"), ("B",)])
    symbolic_grads("take", [rand(4, 2), i64([1, 1, 3])], {}, [("V", 2), ("N",)])


# ---- one_hot, stop_gradient, cast -----------------------------------------------------

def test_one_hot():
    idx = i64([[0, 2], [1, -1]])
    got = evaluate("one_hot", [idx], {"n": 3})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array([[[1, 0, 0], [0, 0, 1]],
                                                 [[0, 1, 0], [0, 0, 0]]], dtype=np.float32))
    got = evaluate("one_hot", [idx], {"n": "C", "dtype": "i64"}, dims={"C": 4})
    assert got.dtype == np.int64 and got.shape == (2, 2, 4)


def _grads(build_fn, inputs, wrt):
    """Reverse-mode gradients of the scalar function that `build_fn(b, args)` returns."""
    body = Block([TensorType({"float32": "f32", "float64": "f64", "int64": "i64"}[a.dtype.name],
                             a.shape) for a in inputs.values()], list(inputs))
    b = Builder(body)
    out = build_fn(b, body.args)
    b.ret([out])
    module = Module({"f": Function("f", body, [out.type], params=set(wrt))})
    adj = Reverse(wrt=tuple(wrt), fn="f")(module)
    verify(adj)
    outs, _ = run_function(adj, "f_grad", inputs)
    return outs


def test_stop_gradient():
    x = rand(3)
    np.testing.assert_array_equal(evaluate("stop_gradient", [x]), x)
    # d/dx sum(stop_gradient(x) * x) = stop_gradient(x) = x
    _, g = _grads(lambda b, a: b.emit("sum", b.emit("mul", b.emit("stop_gradient", a[0]), a[0])),
                  {"x": x}, ["x"])
    np.testing.assert_array_equal(g, x)


def test_cast():
    x = np.array([1.7, -2.5, 3.0])
    got = evaluate("cast", [x], {"dtype": "f32"})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x.astype(np.float32))
    np.testing.assert_array_equal(evaluate("cast", [x], {"dtype": "i64"}), [1, -2, 3])
    np.testing.assert_array_equal(evaluate("cast", [i64([1, 0])], {"dtype": "bool"}), [True, False])
    # the cotangent is cast back to the operand's dtype
    w = np.array([0.5, 2.0, -1.0], dtype=np.float32)

    def f(b, a):
        return b.emit("sum", b.emit("mul", b.emit("cast", a[0], dtype="f32"), a[1]))
    _, g = _grads(f, {"x": x, "w": w}, ["x"])
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, w.astype(np.float64))
    # through an integer cast the derivative is zero
    _, g = _grads(lambda b, a: b.emit("sum", b.emit("cast", b.emit("cast", a[0], dtype="i64"),
                                                    dtype="f64")), {"x": x}, ["x"])
    np.testing.assert_array_equal(g, np.zeros(3))
    check_grads("cast", [x], {"dtype": "f64"})


# ---- finiteness at magnitude 1e4 in f32 -----------------------------------------------

BIG = (1e4 * np.array([[1.0, -1.0, 0.5, 0.0], [-1.0, 1.0, 0.3, -0.7]])).astype(np.float32)
BIG_CASES = [
    ("softmax", [BIG], {}),
    ("log_softmax", [BIG], {}),
    ("softmax", [BIG], {"axis": 0}),
    ("cross_entropy", [BIG, i64([1, 0])], {}),
    ("cross_entropy", [BIG, np_softmax(BIG.astype(np.float64) / 1e4).astype(np.float32)], {}),
    ("bce_with_logits", [BIG, np.float32(0.3) * np.ones_like(BIG)], {}),
]


@pytest.mark.parametrize("op,args,attrs", BIG_CASES, ids=lambda v: str(v)[:40])
def test_finite_at_1e4_in_f32(op, args, attrs):
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        value, grads = _value_and_grads(op, args, attrs)
    assert value.dtype == np.float32 and np.all(np.isfinite(value))
    ref = evaluate(op, [a.astype(np.float64) if a.dtype.kind == "f" else a for a in args], attrs)
    np.testing.assert_allclose(value, ref, rtol=1e-5, atol=1e-5)
    for g in grads:
        assert g.dtype == np.float32 and np.all(np.isfinite(g)), (op, g)
    # reference derivative for the logits: softmax - target, or sigmoid(z) - y
    z = args[0].astype(np.float64)
    if op == "cross_entropy" and args[1].dtype.kind == "i":
        want = np_softmax(z) - np.eye(z.shape[-1])[args[1]]
    elif op == "cross_entropy":
        want = np_softmax(z) * args[1].sum(-1, keepdims=True) - args[1]
    elif op == "bce_with_logits":
        want = 0.5 * (1 + np.tanh(0.5 * z)) - args[1]
    elif op == "log_softmax":
        want = 1 - z.shape[-1] * np_softmax(z)
    else:
        want = np.zeros_like(z)                 # sum(softmax) is constant
    np.testing.assert_allclose(grads[0], want, rtol=1e-4, atol=1e-4)


def _value_and_grads(op, args, attrs):
    """The op's value and the reverse-mode gradients of sum(op(...)) for its float operands."""
    value = evaluate(op, args, attrs)
    module = one_op_module(op, args, attrs)
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    inputs.update({a.name: np.ones([int(d) for d in a.type.shape], np.float32)
                   for a in module["f"].args if a.name.startswith("w")})
    wrt = tuple(f"a{k}" for k, a in enumerate(args) if a.dtype.kind == "f")
    outs, _ = run_function(Reverse(wrt=wrt, fn="f")(module), "f_grad", inputs)
    return value, outs[1:]


@pytest.mark.parametrize("op,types,attrs,message", [
    ("softmax", [("i64", (3,))], {}, "expects a float tensor"),
    ("softmax", [("f32", (3,))], {"axis": 1}, "out of range"),
    ("cross_entropy", [("f32", (2, 3)), ("i64", (3,))], {}, "integer labels"),
    ("cross_entropy", [("f32", (2, 3)), ("f32", (2, 1))], {}, "probability labels"),
    ("cross_entropy", [("f32", (2, 3)), ("f64", (2, 3))], {}, "probability labels"),
    ("bce", [("f32", (2,)), ("f64", (2,))], {}, "mixed float dtypes"),
    ("layernorm", [("f32", (2, 3)), ("f32", (2,)), ("f32", (3,))], {}, "gamma f32\\[2\\]"),
    ("take", [("f32", (4, 2)), ("f32", (3,))], {}, "integer tensor"),
    ("take_grad", [("f32", (3, 3)), ("i64", (3,))], {"shape": [4, 2]}, "does not match"),
    ("one_hot", [("f32", (3,))], {"n": 4}, "integer tensor"),
])
def test_type_errors(op, types, attrs, message):
    body = Block([TensorType(d, s) for d, s in types])
    with pytest.raises(ShapeError, match=message):
        Builder(body).emit(op, *body.args, **attrs)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,axis", [((5, 0, 0), -1), ((2, 0), 1), ((0, 3), 0), ((0, 3), 1)])
def test_softmax_of_an_empty_array(op, shape, axis):
    """An empty array has nothing to normalize: the result is empty, of its shape, in every
    mode (NumPy's max has no value on an empty axis, which the kernels must not ask for)."""
    x = np.zeros(shape)
    got = evaluate(op, [x], {"axis": axis})
    assert got.shape == shape and got.dtype == np.float64
    check_grads(op, [x], {"axis": axis})
    check_second_order(op, [x], {"axis": axis})
