"""JVP rules op by op: the tangent of every result against central differences along the
same direction in float64, on the shapes of the op test tables."""
from __future__ import annotations

import numpy as np
import pytest

from gradcheck import run
from test_ops_elementwise import (BINARY, BINARY_SHAPES, CLIP_SHAPES, UNARY, UNARY_SHAPES,
                                  WHERE_SHAPES, anywhere, positive)
from test_ops_reduce import AXES, REDUCTIONS
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.types import DTYPE_OF_NUMPY, TensorType
from adcompiler.ir.verifier import verify
from adcompiler.passes.jvp import JVP

RNG = np.random.default_rng(2024)


def op_module(op: str, args: list[np.ndarray], attrs: dict | None = None) -> Module:
    """``f(a0, a1, ...) = op(a0, a1, ...)``, returning every result of the op."""
    body = Block([TensorType(DTYPE_OF_NUMPY[a.dtype.name], a.shape) for a in args],
                 [f"a{k}" for k in range(len(args))])
    b = Builder(body)
    outs = b.emit(op, *body.args, **(attrs or {}))
    outs = outs if isinstance(outs, list) else [outs]
    b.ret(outs)
    return Module({"f": Function("f", body, [y.type for y in outs])})


def directional_fd(module: Module, inputs: dict, tangents: dict, fn: str = "f",
                   eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of every result of `fn` along the direction `tangents`."""
    plus = {k: v + eps * tangents[k] if k in tangents else v for k, v in inputs.items()}
    minus = {k: v - eps * tangents[k] if k in tangents else v for k, v in inputs.items()}
    return [(np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2 * eps)
            for p, m in zip(run(module, fn, plus), run(module, fn, minus))]


def check_jvp(module: Module, inputs: dict, wrt: list[str], *, fn: str = "f", seed: int = 0,
              rtol: float = 1e-6, atol: float = 1e-7, roundtrip: bool = False) -> list:
    """Assert `fn_jvp`'s values equal `fn`'s and its tangents equal directional central
    differences for a random direction; returns the tangents."""
    rng = np.random.default_rng(seed)
    tangents = {w: rng.standard_normal(np.shape(inputs[w])) for w in wrt}
    jm = JVP(wrt=tuple(wrt), fn=fn)(module)
    verify(jm)
    if roundtrip:
        text = print_module(jm)
        assert print_module(parse_module(text)) == text
    jvp_fn = jm[f"{fn}_jvp"]
    t_names = [a.name for a in jvp_fn.args[len(module[fn].args):]]
    outs = run(jm, f"{fn}_jvp", {**inputs, **dict(zip(t_names, tangents.values()))})
    n = len(module[fn].result_types)
    for got, want in zip(outs[:n], run(module, fn, inputs)):
        np.testing.assert_array_equal(got, want)
    for k, (got, want) in enumerate(zip(outs[n:], directional_fd(module, inputs, tangents,
                                                                  fn))):
        assert got.shape == want.shape, f"tangent {k}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"tangent {k}")
    return outs[n:]


def check_op(op: str, args: list, attrs: dict | None = None, **kw) -> list:
    args = [np.asarray(a) for a in args]
    wrt = [f"a{k}" for k, a in enumerate(args) if a.dtype.kind == "f"]
    return check_jvp(op_module(op, args, attrs), {f"a{k}": a for k, a in enumerate(args)},
                     wrt, **kw)


# ---- elementwise ---------------------------------------------------------------------

@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, shape):
    check_op(name, [UNARY[name][1](shape)], roundtrip=shape == (5,))


@pytest.mark.parametrize("slope", [0.01, 0.2])
def test_leaky_relu(slope):
    check_op("leaky_relu", [anywhere((3, 4))], {"slope": slope})


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, shapes):
    _, sa, sb = BINARY[name]
    check_op(name, [sa(shapes[0]), sb(shapes[1])], roundtrip=shapes == BINARY_SHAPES[1])


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_integer_operand(name):
    check_op(name, [positive((2, 3)), np.array([1, 2, 3], dtype=np.int64)])
    check_op(name, [np.array([1, 2, 3], dtype=np.int64), positive((2, 3))])


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=str)
def test_where(shapes):
    cond = RNG.standard_normal(shapes[0]) > 0
    check_op("where", [cond, anywhere(shapes[1]), anywhere(shapes[2])])


@pytest.mark.parametrize("shapes", CLIP_SHAPES, ids=str)
def test_clip(shapes):
    x = RNG.integers(-20, 20, shapes[0]) / 10 + 0.05     # never on a bound
    lo, hi = np.full(shapes[1], -0.5), np.full(shapes[2], 0.8)
    check_op("clip", [x, lo + 0.01 * RNG.standard_normal(shapes[1]), hi])


def test_kink_conventions_match_reverse_mode():
    """At kinks and ties the JVP uses the same one-sided choices as the VJP."""
    x = np.array([-1.0, 0.0, 2.0])
    cases = {"relu": [0.0, 0.0, 1.0], "abs": [-1.0, 0.0, 1.0], "sign": [0.0, 0.0, 0.0]}
    for name, slope in cases.items():
        jm = JVP(wrt=("a0",), fn="f")(op_module(name, [x]))
        _, tan = run(jm, "f_jvp", {"a0": x, "t_a0": np.ones(3)})
        np.testing.assert_array_equal(tan, slope, err_msg=name)
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 5.0])
    jm = JVP(wrt=("a0", "a1"), fn="f")(op_module("maximum", [a, b]))
    _, tan = run(jm, "f_jvp", {"a0": a, "a1": b, "t_a0": np.ones(3), "t_a1": np.zeros(3)})
    np.testing.assert_array_equal(tan, [0.5, 1.0, 0.0])
    lo, hi = np.zeros(3), np.array([2.0, 2.0, 2.0])
    xs = np.array([0.0, 1.0, 2.0])
    jm = JVP(wrt=("a0",), fn="f")(op_module("clip", [xs, lo, hi]))
    _, tan = run(jm, "f_jvp", {"a0": xs, "a1": lo, "a2": hi, "t_a0": np.ones(3)})
    np.testing.assert_array_equal(tan, [1.0, 1.0, 1.0])   # bounds are inclusive
    lo, hi = np.ones(3), np.zeros(3)                      # crossed: the result is hi
    jm = JVP(wrt=("a0", "a1", "a2"), fn="f")(op_module("clip", [xs, lo, hi]))
    _, tan = run(jm, "f_jvp", {"a0": xs, "a1": lo, "a2": hi, "t_a0": np.ones(3),
                               "t_a1": np.full(3, 10.0), "t_a2": np.full(3, 100.0)})
    np.testing.assert_array_equal(tan, [100.0, 100.0, 100.0])
    a, b = np.array([0.0, 0.0, 2.0]), np.zeros(3)          # a ** 0: d/da = 0, also at 0
    jm = JVP(wrt=("a0",), fn="f")(op_module("pow", [a, b]))
    _, tan = run(jm, "f_jvp", {"a0": a, "a1": b, "t_a0": np.ones(3)})
    np.testing.assert_array_equal(tan, [0.0, 0.0, 0.0])


# ---- reductions ----------------------------------------------------------------------

@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction(name, axis, keepdims):
    x = RNG.permutation(np.arange(24.0)).reshape(2, 3, 4) / 7 - 1.5   # no ties
    check_op(name, [x], {"axis": axis, "keepdims": keepdims}, roundtrip=axis == [0, 2])


@pytest.mark.parametrize("name,want", [("max", [0.5, 0.5, 0.0]), ("min", [0.0, 0.0, 1.0])])
def test_reduction_ties_average_the_tangent(name, want):
    x = np.array([2.0, 2.0, -1.0])
    jm = JVP(wrt=("a0",), fn="f")(op_module(name, [x]))
    _, tan = run(jm, "f_jvp", {"a0": x, "t_a0": np.array([1.0, 3.0, 5.0])})
    np.testing.assert_allclose(tan, np.dot(want, [1.0, 3.0, 5.0]))


def test_sum_to():
    check_op("sum_to", [anywhere((2, 3, 4))], {"shape": (3, 1)})
