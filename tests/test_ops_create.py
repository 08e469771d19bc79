"""Constructors: values, dtypes, symbolic sizes, and their (zero) derivatives."""
import numpy as np
import pytest

from adcompiler.diagnostics import ShapeError
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import TensorType
from adc_runtime.executor import run_function
from gradcheck import check_grads
from test_ops_shape import evaluate, rand


def construct(op, dims=None, **attrs):
    """Run a constructor with no operands; `dims` binds symbolic sizes."""
    body = Block()
    b = Builder(body)
    y = b.emit(op, **attrs)
    b.ret([y])
    outs, _ = run_function(Module({"f": Function("f", body, [y.type])}), "f", {}, dims=dims)
    return y.type, outs[0]


@pytest.mark.parametrize("op,attrs,want", [
    ("const", {"value": 2.5}, np.float32(2.5)),
    ("const", {"value": 3, "dtype": "i64"}, np.int64(3)),
    ("zeros", {"shape": [2, 3], "dtype": "f64"}, np.zeros((2, 3))),
    ("ones", {"shape": [4]}, np.ones(4, np.float32)),
    ("full", {"shape": [2, 2], "value": -1.5}, np.full((2, 2), -1.5, np.float32)),
    ("full", {"shape": [3], "value": 7, "dtype": "i32"}, np.full(3, 7, np.int32)),
    ("full", {"shape": [], "value": 0.25, "dtype": "f16"}, np.float16(0.25)),
    ("arange", {"n": 5}, np.arange(5)),
    ("arange", {"n": 0, "dtype": "f32"}, np.arange(0, dtype=np.float32)),
    ("dim_value", {"n": 6}, np.float32(6)),
])
def test_static_values(op, attrs, want):
    t, got = construct(op, **attrs)
    assert got.dtype == np.asarray(want).dtype and got.shape == np.shape(want)
    assert t.shape == np.shape(want)
    np.testing.assert_array_equal(got, want)


def test_symbolic_sizes():
    t, got = construct("arange", dims={"N": 4}, n="N")
    assert t == TensorType("i64", ("N",))
    np.testing.assert_array_equal(got, np.arange(4))
    t, got = construct("full", dims={"B": 2}, shape=["B", 3], value=2.0)
    assert t.shape == ("B", 3)
    np.testing.assert_array_equal(got, np.full((2, 3), 2.0, np.float32))
    t, got = construct("dim_value", dims={"B": 3, "T": 5}, n="2*B*T", dtype="f64")
    assert t == TensorType("f64", ())
    assert got == 30.0


@pytest.mark.parametrize("op,fill", [("zeros_like", 0), ("ones_like", 1)])
def test_like_values_and_zero_derivative(op, fill):
    for x in (rand(2, 3), rand(3).astype(np.float32), np.arange(4)):
        got = evaluate(op, [x])
        assert got.dtype == x.dtype and got.shape == x.shape
        np.testing.assert_array_equal(got, np.full_like(x, fill))
    grads = check_grads(op, [rand(2, 3)])
    np.testing.assert_array_equal(grads["a0"], np.zeros((2, 3)))


@pytest.mark.parametrize("op,attrs,message", [
    ("arange", {"n": -1}, "a size >= 0"),
    ("arange", {"n": 2.5}, "needs a dimension"),
    ("full", {"shape": [2]}, "needs the option 'value'"),
    ("dim_value", {"n": [2]}, "needs a dimension"),
])
def test_type_errors(op, attrs, message):
    with pytest.raises(ShapeError, match=message):
        Builder(Block()).emit(op, **attrs)
