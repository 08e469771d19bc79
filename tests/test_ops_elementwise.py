"""Elementwise ops: values against NumPy, reverse mode against finite differences, the kink
conventions exactly, type errors, and finiteness of the sensitive ops at magnitude 1e4."""
from __future__ import annotations

import math

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

RNG = np.random.default_rng(1234)


# ---- helpers -------------------------------------------------------------------------

def apply(op, *args, **attrs):
    """Run the one-op program ``op(*args)`` and return its result."""
    args = [np.asarray(a) for a in args]
    body = Block([TensorType(DTYPE_OF_NUMPY[a.dtype.name], a.shape) for a in args],
                 [f"a{k}" for k in range(len(args))])
    b = Builder(body)
    y = b.emit(op, *body.args, **attrs)
    b.ret([y])
    fn = Function("f", body, [y.type])
    return run(Module({"f": fn}), "f", {f"a{k}": a for k, a in enumerate(args)})[0]


def grads(op, *args, **attrs):
    """Reverse-mode gradients of ``sum(op(*args))`` with respect to the float args."""
    args = [np.asarray(a) for a in args]
    module = one_op_module(op, args, attrs, weighted=False)
    wrt = tuple(f"a{k}" for k, a in enumerate(args) if a.dtype.kind == "f")
    adj = Reverse(wrt=wrt, fn="f")(module)
    outs = run(adj, "f_grad", {f"a{k}": a for k, a in enumerate(args)})
    return outs[1:]


def anywhere(shape):
    """Normal samples kept at least 0.1 away from 0 (and from relu/abs/sign kinks)."""
    x = RNG.standard_normal(shape)
    return np.asarray(np.where(np.abs(x) < 0.1, np.sign(x + 1e-12) * 0.1 + x, x))


def positive(shape):
    return np.asarray(RNG.uniform(0.5, 2.0, shape))


def off_grid(shape):
    """Values k + 0.3: away from the integers and half-integers where rounding jumps."""
    return np.asarray(RNG.integers(-3, 3, shape) + 0.3)


def gelu_ref(x):
    from scipy.special import erf
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


# ---- unary ---------------------------------------------------------------------------

# name: (NumPy reference, input sampler)
UNARY = {
    "neg": (np.negative, anywhere),
    "exp": (np.exp, anywhere),
    "log": (np.log, positive),
    "log1p": (np.log1p, positive),
    "expm1": (np.expm1, anywhere),
    "sqrt": (np.sqrt, positive),
    "rsqrt": (lambda x: 1 / np.sqrt(x), positive),
    "abs": (np.abs, anywhere),
    "sign": (np.sign, anywhere),
    "sin": (np.sin, anywhere),
    "cos": (np.cos, anywhere),
    "tanh": (np.tanh, anywhere),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), anywhere),
    "relu": (lambda x: np.maximum(x, 0), anywhere),
    "gelu": (gelu_ref, anywhere),
    "erf": (lambda x: __import__("scipy.special").special.erf(x), anywhere),
    "softplus": (lambda x: np.log1p(np.exp(x)), anywhere),
    "square": (np.square, anywhere),
    "reciprocal": (np.reciprocal, anywhere),
    "round": (np.round, off_grid),
    "floor": (np.floor, off_grid),
    "ceil": (np.ceil, off_grid),
}
UNARY_SHAPES = [(), (5,), (2, 3)]


@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_unary_values(name, shape, dtype):
    ref, sample = UNARY[name]
    x = sample(shape).astype(dtype)
    y = apply(name, x)
    assert y.dtype == x.dtype and y.shape == x.shape
    rtol = {"float16": 4e-3, "float32": 1e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_grads(name, shape):
    _, sample = UNARY[name]
    check_grads(name, [sample(shape)])


@pytest.mark.parametrize("slope", [None, 0.2])
def test_leaky_relu(slope):
    attrs = {} if slope is None else {"slope": slope}
    x = anywhere((3, 4))
    want = np.where(x > 0, x, (0.01 if slope is None else slope) * x)
    np.testing.assert_allclose(apply("leaky_relu", x, **attrs), want, rtol=1e-12)
    check_grads("leaky_relu", [x], attrs)


def test_rounding_ops_keep_integers():
    x = np.array([-2, 0, 3], dtype=np.int64)
    for name in ("round", "floor", "ceil"):
        y = apply(name, x)
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(apply("neg", x), -x)


def test_round_is_half_to_even():
    x = np.array([-1.5, -0.5, 0.5, 1.5, 2.5])
    np.testing.assert_array_equal(apply("round", x), [-2.0, -0.0, 0.0, 2.0, 2.0])


# ---- binary --------------------------------------------------------------------------

def spaced(shape, offset=0.0):
    """Multiples of 0.1 (plus `offset`): two samplers with offset 0 and 0.05 never tie."""
    return np.asarray(RNG.integers(-20, 20, shape) / 10 + offset)


# name: (NumPy reference, sampler of a, sampler of b)
BINARY = {
    "add": (np.add, anywhere, anywhere),
    "sub": (np.subtract, anywhere, anywhere),
    "mul": (np.multiply, anywhere, anywhere),
    "div": (np.divide, anywhere, anywhere),
    "pow": (np.power, positive, anywhere),
    "maximum": (np.maximum, spaced, lambda s: spaced(s, 0.05)),
    "minimum": (np.minimum, spaced, lambda s: spaced(s, 0.05)),
}
BINARY_SHAPES = [((2, 3), (2, 3)), ((3, 1), (1, 4)), ((2, 3), (3,)), ((), (2, 3)),
                 ((4, 1, 3), (2, 1))]


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_binary_values(name, shapes, dtype):
    ref, sa, sb = BINARY[name]
    a, b = sa(shapes[0]).astype(dtype), sb(shapes[1]).astype(dtype)
    y = apply(name, a, b)
    assert y.dtype == np.dtype(dtype)
    assert y.shape == np.broadcast_shapes(*shapes)
    rtol = {"float16": 4e-3, "float32": 1e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(y, ref(a.astype(np.float64), b.astype(np.float64)),
                               rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_grads(name, shapes):
    _, sa, sb = BINARY[name]
    check_grads(name, [sa(shapes[0]), sb(shapes[1])])


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
def test_binary_with_integer_operand(name):
    """An integer operand is converted to the float dtype and gets no cotangent."""
    a, n = positive((2, 3)).astype(np.float32), np.array([1, 2, 3], dtype=np.int64)
    y = apply(name, a, n)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, BINARY[name][0](a, n.astype(np.float32)), rtol=1e-6)
    check_grads(name, [a.astype(np.float64), n])


def test_mul_by_bool_mask():
    x, m = anywhere((2, 3)), np.array([True, False, True])
    np.testing.assert_allclose(apply("mul", x, m), x * m)
    (dx,) = grads("mul", x, m)
    np.testing.assert_array_equal(dx, np.broadcast_to(m, (2, 3)).astype(float))


# ---- comparisons and where -----------------------------------------------------------

COMPARISONS = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
               "eq": np.equal, "ne": np.not_equal}


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparison_values(name, shapes):
    a, b = spaced(shapes[0]), spaced(shapes[1])  # on one grid, so some pairs are equal
    y = apply(name, a, b)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, COMPARISONS[name](a, b))
    assert registry.get(name).has("no_grad") and registry.get(name).vjp is None


def test_comparison_of_integers_and_floats():
    i, x = np.array([1, 2, 3], dtype=np.int64), np.array([1.5, 2.0, 2.5], dtype=np.float32)
    np.testing.assert_array_equal(apply("le", i, x), [True, True, False])


WHERE_SHAPES = [((2, 3), (2, 3), (2, 3)), ((3, 1), (1, 4), ()), ((3,), (2, 3), (2, 1))]


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=str)
def test_where(shapes):
    c = RNG.random(shapes[0]) < 0.5
    a, b = anywhere(shapes[1]), anywhere(shapes[2])
    np.testing.assert_array_equal(apply("where", c, a, b), np.where(c, a, b))
    check_grads("where", [c, a, b])


def test_where_gradient_is_masked():
    c = np.array([True, False, True])
    da, db = grads("where", c, np.ones(3), np.ones(3))
    np.testing.assert_array_equal(da, [1, 0, 1])
    np.testing.assert_array_equal(db, [0, 1, 0])


# ---- clip ----------------------------------------------------------------------------

CLIP_SHAPES = [((2, 3), (), ()), ((2, 3), (3,), (2, 1)), ((4,), (4,), ())]


@pytest.mark.parametrize("shapes", CLIP_SHAPES, ids=str)
def test_clip(shapes):
    x = spaced(shapes[0], 0.05)                        # never equal to a bound
    lo = np.asarray(-0.5 - RNG.integers(0, 15, shapes[1]) / 10)
    hi = np.asarray(0.5 + RNG.integers(0, 15, shapes[2]) / 10)
    np.testing.assert_allclose(apply("clip", x, lo, hi), np.clip(x, lo, hi))
    check_grads("clip", [x, lo, hi])


def test_clip_boundaries_are_inclusive():
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    dx, dlo, dhi = grads("clip", x, np.array(-1.0), np.array(1.0))
    np.testing.assert_array_equal(dx, [0, 1, 1, 1, 0])
    assert dlo == 1 and dhi == 1
    dx, dlo, dhi = grads("clip", x, np.full(5, -1.0), np.full(5, 1.0))
    np.testing.assert_array_equal(dlo, [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(dhi, [0, 0, 0, 0, 1])


def test_clip_with_integer_bounds():
    x = np.array([-2.5, 0.5, 2.5], dtype=np.float32)
    y = apply("clip", x, np.array(-1), np.array(1))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [-1, 0.5, 1])


def test_clip_with_crossed_bounds_sends_the_gradient_to_hi():
    # lo > hi: the result is hi everywhere (NumPy's minimum(maximum(x, lo), hi)), so hi
    # gets the whole cotangent, as in PyTorch and JAX
    x = np.array([-2.0, 0.5, 2.0])
    lo, hi = np.full(3, 1.0), np.full(3, 0.0)
    np.testing.assert_array_equal(apply("clip", x, lo, hi), [0.0, 0.0, 0.0])
    dx, dlo, dhi = grads("clip", x, lo, hi)
    np.testing.assert_array_equal(dx, [0, 0, 0])
    np.testing.assert_array_equal(dlo, [0, 0, 0])
    np.testing.assert_array_equal(dhi, [1, 1, 1])


# ---- kink conventions ----------------------------------------------------------------

def test_relu_kink():
    (dx,) = grads("relu", np.array([-1.0, 0.0, 2.0]))
    np.testing.assert_array_equal(dx, [0, 0, 1])


def test_abs_kink():
    (dx,) = grads("abs", np.array([-1.0, 0.0, 2.0]))
    np.testing.assert_array_equal(dx, [-1, 0, 1])


def test_leaky_relu_kink_takes_slope():
    (dx,) = grads("leaky_relu", np.array([-1.0, 0.0, 2.0]), slope=0.1)
    np.testing.assert_array_equal(dx, [0.1, 0.1, 1])


@pytest.mark.parametrize("name", ["sign", "round", "floor", "ceil"])
def test_zero_derivative(name):
    (dx,) = grads(name, np.array([-1.5, 0.0, 0.5, 2.0]))
    np.testing.assert_array_equal(dx, np.zeros(4))


@pytest.mark.parametrize("name,a_wins", [("maximum", [0.5, 1, 0, 0.5]),
                                         ("minimum", [0.5, 0, 1, 0.5])])
def test_extremum_ties_split_equally(name, a_wins):
    a, b = np.array([1.0, 3.0, -1.0, 0.0]), np.array([1.0, 2.0, 5.0, 0.0])
    da, db = grads(name, a, b)
    np.testing.assert_array_equal(da, a_wins)
    np.testing.assert_array_equal(db, 1 - np.array(a_wins))


def test_maximum_ties_under_broadcasting():
    da, db = grads("maximum", np.array([[2.0], [1.0]]), np.array([2.0, 2.0, 0.0]))
    np.testing.assert_array_equal(da, [[2.0], [1.0]])   # 0.5 + 0.5 + 1 ; 0 + 0 + 1
    np.testing.assert_array_equal(db, [1.5, 1.5, 0])


def test_pow_at_zero_base():
    da, db = grads("pow", np.array([0.0, 0.0, 2.0]), np.array([2.0, 1.0, 3.0]))
    np.testing.assert_array_equal(da, [0.0, 1.0, 12.0])
    np.testing.assert_allclose(db, [0.0, 0.0, 8 * np.log(2.0)], rtol=1e-15)


def test_pow_zero_exponent_at_zero_base():
    # a ** 0 = 1 is constant: d/da = 0 also at a == 0 (not 0 * 0**-1 = NaN), as PyTorch and
    # JAX; d/db = log(a) a**b with log(0) read as 0
    da, db = grads("pow", np.array([0.0, 0.0, 2.0]), np.array([0.0, 0.0, 0.0]))
    np.testing.assert_array_equal(da, [0.0, 0.0, 0.0])
    np.testing.assert_allclose(db, [0.0, 0.0, np.log(2.0)], rtol=1e-15)


# ---- second order: the rules' own ops differentiate correctly -------------------------



@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY) + ["leaky_relu", "clip"])
def test_second_order(name):
    if name in UNARY:
        args = [UNARY[name][1]((3,))]
    elif name in BINARY:
        args = [BINARY[name][1]((3,)), BINARY[name][2]((3,))]
    elif name == "clip":
        args = [np.array([-2.0, 0.3, 2.0]), np.array(-1.0), np.array(1.0)]
    else:
        args = [anywhere((3,))]
    check_second_order(name, args)


def test_adjoints_verify_and_print_back():
    """Every rule's IR passes the verifier and survives a text round trip."""
    for name in sorted(ALL - set(COMPARISONS)):
        args = {"clip": [np.ones(3), np.ones(()), np.ones(())],
                "where": [np.ones((2, 1), bool), np.ones(3), np.ones(())]}.get(
            name, [np.ones((2, 1)), np.ones(3)] if name in BINARY else [np.ones((2, 3))])
        m = Reverse(fn="f")(one_op_module(name, args))
        verify(m)
        text = print_module(m)
        assert print_module(parse_module(text)) == text, name


# ---- numerically sensitive ops at magnitude 1e4 in f32 -------------------------------

BIG = np.array([-1e4, -30.0, -1.0, 0.0, 1.0, 30.0, 1e4], dtype=np.float32)


@pytest.mark.parametrize("name,value,slope", [
    ("sigmoid", [0, 0, 0.26894142, 0.5, 0.7310586, 1, 1], [0, 0, 0.19661193, 0.25, 0.19661193, 0, 0]),
    ("softplus", [0, 0, 0.31326169, 0.69314718, 1.3132617, 30, 1e4],
     [0, 0, 0.26894142, 0.5, 0.7310586, 1, 1]),
])
def test_sensitive_ops_finite_in_f32(name, value, slope):
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = apply(name, BIG)
        (dx,) = grads(name, BIG)
    assert y.dtype == np.float32 and dx.dtype == np.float32
    np.testing.assert_allclose(y, value, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(dx, slope, rtol=1e-5, atol=1e-12)


# ---- type rules ----------------------------------------------------------------------

def emit_types(op, *types, **attrs):
    body = Block(list(types))
    return Builder(body).emit(op, *body.args, **attrs).type


@pytest.mark.parametrize("name", sorted(set(UNARY) - {"neg", "round", "floor", "ceil"})
                         + ["leaky_relu"])
def test_float_only_unary_rejects_integers(name):
    for dtype in ("i32", "bool"):
        with pytest.raises(ShapeError, match=f"{name} expects a float tensor, got {dtype}"):
            emit_types(name, TensorType(dtype, (3,)))


def test_binary_type_rules():
    f32, f64 = TensorType("f32", (3, 1)), TensorType("f64", (4,))
    assert emit_types("add", f32, TensorType("f32", (4,))) == TensorType("f32", (3, 4))
    assert emit_types("mul", TensorType("i64", ()), TensorType("f32", (2,))).dtype == "f32"
    assert emit_types("add", TensorType("i32", (2,)), TensorType("i32", ())).dtype == "i32"
    assert emit_types("gt", f32, TensorType("f32", (4,))) == TensorType("bool", (3, 4))
    with pytest.raises(ShapeError, match="add: mixed float dtypes f32 and f64; use cast"):
        emit_types("add", f32, f64)
    with pytest.raises(ShapeError, match=r"mul: shapes \[2, 3\] and \[4\] cannot be broadcast"):
        emit_types("mul", TensorType("f32", (2, 3)), TensorType("f32", (4,)))
    with pytest.raises(ShapeError, match="div expects a float operand"):
        emit_types("div", TensorType("i32", (2,)), TensorType("i32", (2,)))
    with pytest.raises(ShapeError, match="pow expects a float operand"):
        emit_types("pow", TensorType("i64", ()), TensorType("i64", ()))
    with pytest.raises(ShapeError, match="sub expects numeric tensors"):
        emit_types("sub", TensorType("bool", (2,)), TensorType("bool", (2,)))
    with pytest.raises(ShapeError, match="lt: mixed float dtypes"):
        emit_types("lt", TensorType("f16", ()), TensorType("f32", ()))


def test_symbolic_shapes_broadcast():
    t = emit_types("add", TensorType("f32", ("B", 1)), TensorType("f32", (1, "T")))
    assert t == TensorType("f32", ("B", "T"))
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        emit_types("add", TensorType("f32", ("B",)), TensorType("f32", ("T",)))


def test_where_type_rules():
    c, x = TensorType("bool", (2, 1)), TensorType("f32", (3,))
    assert emit_types("where", c, x, TensorType("f32", ())) == TensorType("f32", (2, 3))
    assert emit_types("where", c, TensorType("bool", ()), TensorType("bool", ())).dtype == "bool"
    with pytest.raises(ShapeError, match="where expects a bool condition, got f32"):
        emit_types("where", x, x, x)
    with pytest.raises(ShapeError, match="where: mixed float dtypes"):
        emit_types("where", c, x, TensorType("f64", ()))


def test_clip_type_rule():
    t = emit_types("clip", TensorType("f32", (2, 3)), TensorType("f32", ()),
                   TensorType("f32", (3,)))
    assert t == TensorType("f32", (2, 3))


# ---- coverage ------------------------------------------------------------------------

ALL = (set(UNARY) | set(BINARY) | set(COMPARISONS)
       | {"leaky_relu", "clip", "where"})


def test_every_documented_op_is_registered_tested_and_has_a_kernel():
    documented = ("neg exp log log1p expm1 sqrt rsqrt abs sign sin cos tanh sigmoid relu gelu erf "
                  "softplus square reciprocal round floor ceil leaky_relu clip add sub mul div "
                  "pow maximum minimum lt le gt ge eq ne where").split()
    assert set(documented) == ALL
    for name in documented:
        d = registry.get(name)
        assert d.has("elementwise") and name in KERNELS
        assert d.vjp is not None or d.has("no_grad"), name
