"""Shape ops and indexing: values against NumPy, reverse mode against finite differences,
symbolic shapes and type errors. `evaluate` and `symbolic_grads` are shared by the other
family-B op tests."""
import numpy as np
import pytest

from adcompiler.diagnostics import ShapeError
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.types import DTYPE_OF_NUMPY, TensorType
from adcompiler.ir.verifier import verify
from adcompiler.passes.reverse import Reverse
from adc_runtime.executor import run_function
from gradcheck import check_grads, check_second_order, finite_difference

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def i64(v):
    return np.asarray(v, dtype=np.int64)


def _type(a, shape=None):
    return TensorType(DTYPE_OF_NUMPY[a.dtype.name], a.shape if shape is None else shape)


def build(op, args, attrs=None, shapes=None):
    """A module whose function ``f`` returns ``op(*args)``; `shapes` may make dims symbolic."""
    shapes = shapes or [None] * len(args)
    body = Block([_type(a, s) for a, s in zip(args, shapes)], [f"a{k}" for k in range(len(args))])
    b = Builder(body)
    outs = b.emit(op, *body.args, **(attrs or {}))
    outs = outs if isinstance(outs, list) else [outs]
    b.ret(outs)
    module = Module({"f": Function("f", body, [v.type for v in outs])})
    verify(module)
    return module


def evaluate(op, args, attrs=None, shapes=None, dims=None):
    """Run ``op(*args)`` through the builder, type rule and kernel; one array or a list."""
    module = build(op, args, attrs, shapes)
    outs, _ = run_function(module, "f", {f"a{k}": a for k, a in enumerate(args)}, dims=dims)
    for v, o in zip(module["f"].returned, outs):
        assert o.dtype.name == {"f16": "float16", "f32": "float32", "f64": "float64",
                                "i32": "int32", "i64": "int64", "bool": "bool"}[v.type.dtype]
    return outs[0] if len(outs) == 1 else outs


def symbolic_grads(op, args, attrs, shapes, seed=0):
    """check_grads for a one-op program whose inputs have symbolic `shapes`."""
    rng = np.random.default_rng(seed)
    body = Block([_type(a, s) for a, s in zip(args, shapes)], [f"a{k}" for k in range(len(args))])
    b = Builder(body)
    y = b.emit(op, *body.args, **attrs)
    w = body.add_arg(y.type, "w")
    s = b.emit("sum", b.emit("mul", y, w))
    b.ret([s])
    names = [f"a{k}" for k, a in enumerate(args) if a.dtype.kind == "f"]
    module = Module({"f": Function("f", body, [s.type], params=set(names))})
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    out_shape = evaluate(op, args, attrs, shapes).shape
    inputs["w"] = rng.standard_normal(out_shape)
    adj = Reverse(wrt=tuple(names), fn="f")(module)
    verify(adj)
    outs, _ = run_function(adj, "f_grad", inputs)
    for name, got in zip(names, outs[1:]):
        np.testing.assert_allclose(got, finite_difference(module, inputs, name),
                                   rtol=1e-6, atol=1e-7, err_msg=name)




# ---- values and gradients, one table --------------------------------------------------

X = rand(2, 3, 4)
C = rand(3, 1)
CASES = [  # (op, args, attrs, numpy reference)
    ("reshape", [X], {"shape": [6, 4]}, X.reshape(6, 4)),
    ("reshape", [X], {"shape": [4, -1]}, X.reshape(4, -1)),
    ("broadcast_to", [C], {"shape": [2, 3, 4]}, np.broadcast_to(C, (2, 3, 4))),
    ("expand_dims", [X], {"axis": 0}, X[None]),
    ("expand_dims", [X], {"axis": -1}, X[..., None]),
    ("expand_dims", [X], {"axis": 2}, X[:, :, None]),
    ("squeeze", [X[:, :1, None]], {}, X[:, 0]),
    ("squeeze", [X[:1, :, None]], {"axis": 2}, X[:1]),
    ("squeeze", [X[:1, :, None]], {"axis": [0, -2]}, X[0]),
    ("transpose", [X], {}, X.T),
    ("index", [X], {"idx": (1,)}, X[1]),
    ("index", [X], {"idx": (-1, 2)}, X[-1, 2]),
    ("index", [X], {"idx": ([None, None, None], -2)}, X[:, -2]),
    ("index", [X], {"idx": ([None, None, None], [1, 3, None], [None, None, 2])}, X[:, 1:3, ::2]),
    ("index", [X], {"idx": ([None, None, -1], [None, None, -2], [3, 0, -1])},
     X[::-1, ::-2, 3:0:-1]),
    ("index", [X], {"idx": (0, [-1, -4, -2], [-3, None, None])}, X[0, -1:-4:-2, -3:]),
    ("index", [X], {"idx": ([5, 9, None],)}, X[5:9]),                      # empty slice
    ("index", [X, i64(1)], {"idx": ("?",)}, X[1]),
    ("index", [X, i64(-1), i64(2)], {"idx": ("?", [1, None, None], "?")}, X[-1, 1:, 2]),
    ("index", [X, i64(2)], {"idx": ([None, None, -1], "?")}, X[::-1, 2]),
]


def _id(case):
    op, _, attrs, _ = case
    return f"{op}-{attrs}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_values(case):
    op, args, attrs, want = case
    got = evaluate(op, args, attrs)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_grads(case):
    op, args, attrs, _ = case
    check_grads(op, args, attrs)


@pytest.mark.parametrize("op,args,attrs", [
    ("reshape", [rand(2, 3)], {"shape": [3, 2]}),
    ("expand_dims", [rand(2, 3)], {"axis": 1}),
    ("squeeze", [rand(2, 1)], {}),
    ("concat", [rand(2, 3), rand(1, 3)], {}),
    ("stack", [rand(2), rand(2)], {"axis": 1}),
    ("split", [rand(5, 2)], {"axis": 0, "shape": [2, 3]}),
    ("index", [rand(3, 4), i64(1)], {"idx": ([None, None, -1], "?")}),
    ("index_grad", [rand(2), i64(1)], {"idx": ([None, None, 2], "?"), "shape": [4, 3]}),
])
def test_second_order(op, args, attrs):
    # these ops are linear: the second derivative is zero, and must come out so
    check_second_order(op, args, attrs)


def test_concat_and_stack_values():
    a, b, c = rand(2, 3), rand(2, 1), rand(2, 3)
    np.testing.assert_array_equal(evaluate("concat", [a, b, c], {"axis": 1}),
                                  np.concatenate([a, b, c], axis=1))
    np.testing.assert_array_equal(evaluate("concat", [a, c], {}), np.concatenate([a, c]))
    np.testing.assert_array_equal(evaluate("concat", [a, c], {"axis": -1}),
                                  np.concatenate([a, c], -1))
    for axis in (0, 1, 2, -1):
        np.testing.assert_array_equal(evaluate("stack", [a, c], {"axis": axis}),
                                      np.stack([a, c], axis))


@pytest.mark.parametrize("op,args,attrs", [
    ("concat", [rand(2, 3), rand(2, 1), rand(2, 2)], {"axis": 1}),
    ("concat", [rand(1, 3), rand(2, 3)], {"axis": 0}),
    ("concat", [rand(2, 3)], {"axis": -1}),
    ("stack", [rand(2, 3), rand(2, 3), rand(2, 3)], {"axis": 1}),
    ("stack", [rand(3), rand(3)], {"axis": -1}),
])
def test_concat_and_stack_grads(op, args, attrs):
    check_grads(op, args, attrs)


def test_split_values_and_grads():
    x = rand(2, 6)
    parts = evaluate("split", [x], {"axis": 1, "shape": [1, 3, 2]})
    for got, want in zip(parts, np.split(x, [1, 4], axis=1)):
        np.testing.assert_array_equal(got, want)
    check_grads("split", [x], {"axis": -1, "shape": [4, 2]})


def test_index_grad_values_and_grads():
    ct = rand(2, 2)
    got = evaluate("index_grad", [ct, i64(1)], {"idx": ("?", [None, None, -2]),
                                                 "shape": [3, 4, 2]})
    want = np.zeros((3, 4, 2))
    want[1, ::-2] = ct
    np.testing.assert_array_equal(got, want)
    check_grads("index_grad", [ct, i64(-2)], {"idx": ("?", [3, None, -2]), "shape": [3, 4, 2]})


def test_dynamic_index_in_a_loop_gradient():
    """W[i] inside a loop: the adjoint scatters each step's cotangent into row i."""
    f64 = lambda *s: TensorType("f64", s)  # noqa: E731
    body = Block([f64(4, 3), f64(3)], ["W", "h0"])
    b = Builder(body)
    W, h0 = body.args
    lb = Block([TensorType("i64"), f64(3)], ["i", "h"])
    with b.inside(lb):
        row = b.emit("index", W, lb.args[0], idx=("?",))
        b.yield_([b.emit("exp", b.emit("mul", lb.args[1], row))])
    loop = b.for_(4, lb, [h0])
    s = b.emit("sum", loop.results[0])
    b.ret([s])
    module = Module({"f": Function("f", body, [s.type], params={"W", "h0"})})
    inputs = {"W": 0.3 * rand(4, 3), "h0": 0.5 * rand(3)}
    adj = Reverse(wrt=("W", "h0"), fn="f")(module)
    outs, _ = run_function(adj, "f_grad", inputs)
    for name, got in zip(("W", "h0"), outs[1:]):
        np.testing.assert_allclose(got, finite_difference(module, inputs, name),
                                   rtol=1e-6, atol=1e-8)


# ---- symbolic shapes ------------------------------------------------------------------

def _shape_of(op, shapes, attrs, dtypes=None):
    dtypes = dtypes or ["f32"] * len(shapes)
    body = Block([TensorType(d, s) for d, s in zip(dtypes, shapes)])
    return Builder(body).emit(op, *body.args, **attrs).type.shape


def test_symbolic_shapes():
    assert _shape_of("reshape", [("B", "T", 2)], {"shape": [-1]}) == ("2*B*T",)
    assert _shape_of("reshape", [("2*B*T",)], {"shape": ["B", -1]}) == ("B", "2*T")
    assert _shape_of("concat", [("B", 3), ("B", 3)], {"axis": 0}) == ("2*B", 3)
    assert _shape_of("concat", [("B", 3), ("2*B", 3)], {"axis": 0}) == ("3*B", 3)
    assert _shape_of("concat", [("B", 3), ("B", 1)], {"axis": 1}) == ("B", 4)
    assert _shape_of("stack", [("B",), ("B",)], {"axis": -1}) == ("B", 2)
    assert _shape_of("index", [("B", 4)], {"idx": ([None, None, -1], 1)}) == ("B",)
    assert _shape_of("index", [("2*B", 4)], {"idx": ([None, None, 2],)}) == ("B", 4)
    assert _shape_of("index", [("2*B", 4)], {"idx": ([-1, None, -2],)}) == ("B", 4)
    assert _shape_of("index", [("B", "T"), ()], {"idx": ("?",)},
                     ["f32", "i64"]) == ("T",)
    assert _shape_of("squeeze", [("B", 1, "T", 1)], {}) == ("B", "T")
    assert _shape_of("expand_dims", [("B", "T")], {"axis": 1}) == ("B", 1, "T")


@pytest.mark.parametrize("entry,length", [
    ([1, None, None], "T-1"), ([None, -1, None], "T-1"), ([2, -3, None], "T-5"),
    ([-3, None, None], 3), ([2, 5, None], 3), ([-3, -1, None], 2), ([5, 2, None], 0),
    ([3, None, -1], 4), ([None, 1, -1], "T-2"), ([-2, None, -1], "T-1"),
])
def test_slices_of_a_symbolic_axis(entry, length):
    """Constant bounds give a length in T, exact for every T long enough (checked against
    NumPy at the smallest such T and beyond), and the adjoint scatters into the full axis."""
    from adc_runtime.dims import symbolic_slice
    assert _shape_of("index", [("T", 2)], {"idx": (entry,)}) == (length, 2)
    need = symbolic_slice(*entry)[2]
    for t in range(need, need + 4):
        x = rand(t, 2)
        got = evaluate("index", [x], {"idx": (entry,)}, shapes=[("T", 2)])
        np.testing.assert_array_equal(got, x[slice(*entry)])
    symbolic_grads("index", [rand(need + 2, 2)], {"idx": (entry, 1)}, [("T", 2)])


def test_concat_of_symbolic_and_constant_axes():
    assert _shape_of("concat", [("B", 3), (2, 3)], {"axis": 0}) == ("B+2", 3)
    assert _shape_of("concat", [("T-1", 3), (1, 3)], {"axis": 0}) == ("T", 3)
    assert _shape_of("concat", [("B", 3), ("T", 3), (2, 3)], {"axis": 0}) == ("B+T+2", 3)
    x, y = rand(4, 3), rand(2, 3)
    got = evaluate("concat", [x, y], {"axis": 0}, shapes=[("B", 3), (2, 3)])
    np.testing.assert_array_equal(got, np.concatenate([x, y]))
    symbolic_grads("concat", [x, y], {"axis": 0}, [("B", 3), (2, 3)])


def test_too_short_symbolic_axis_is_a_run_error():
    from adc_runtime.executor import RunError
    with pytest.raises(RunError, match=r"the slice \[2:5\] of axis 0 needs T >= 5, but T = 4"):
        evaluate("index", [rand(4, 2)], {"idx": ([2, 5, None],)}, shapes=[("T", 2)])
    with pytest.raises(RunError, match=r"the slice \[1:\] of axis 1 needs T >= 1, but T = 0"):
        evaluate("index", [rand(2, 0)], {"idx": (0, [1, None, None])}, shapes=[(2, "T")])


def test_symbolic_values_and_grads():
    x, y = rand(3, 2), rand(3, 2)
    got = evaluate("concat", [x, y], {"axis": 0}, shapes=[("B", 2), ("B", 2)])
    np.testing.assert_array_equal(got, np.concatenate([x, y]))
    symbolic_grads("concat", [x, y], {"axis": 0}, [("B", 2), ("B", 2)])
    x = rand(4, 3)
    got = evaluate("index", [x], {"idx": ([None, None, -2], 1)}, shapes=[("2*B", 3)],
                   dims={"B": 2})
    np.testing.assert_array_equal(got, x[::-2, 1])
    symbolic_grads("index", [x], {"idx": ([None, None, -1], 1)}, [("B", 3)])
    symbolic_grads("reshape", [rand(2, 3, 2)], {"shape": [-1, 2]}, [("B", "T", 2)])
    symbolic_grads("squeeze", [rand(3, 1)], {"axis": None}, [("B", 1)])


@pytest.mark.parametrize("op,shapes,attrs,message", [
    ("reshape", [(2, 3)], {"shape": [4, -1]}, "cannot reshape"),
    ("reshape", [(2, 3)], {"shape": [-1, -1]}, "at most one -1"),
    ("broadcast_to", [(2, 3)], {"shape": [3, 3]}, "cannot be broadcast"),
    ("squeeze", [(2, 3)], {"axis": 1}, "its size is 3, not 1"),
    ("expand_dims", [(2, 3)], {"axis": 3}, "out of range"),
    ("concat", [(2, 3), (3, 2)], {"axis": 0}, "equal shapes elsewhere"),
    ("stack", [(2, 3), (3, 2)], {}, "equal types"),
    ("transpose", [(2, 3, 4)], {"perm": [0, 0, 1]}, "not a permutation"),
    ("index", [(2, 3)], {"idx": (2,)}, "out of bounds for axis 0 of size 2"),
    ("index", [(2, 3)], {"idx": (0, 0, 0)}, "too many indices"),
    ("index", [(2, 3)], {"idx": ([None, None, 0],)}, "step cannot be zero"),
    ("index", [(2, 3)], {"idx": ("?",)}, "1 dynamic ('?') entries but 0"),
    ("index", [("B", 3)], {"idx": ([1, None, 2],)}, "step 1 or -1 only"),
    ("index", [("B", 3)], {"idx": ([None, 4, -2],)}, "step 1 or -1 only"),
    ("index", [("B", 3)], {"idx": ([None, None, 2],)}, "symbolic axis B"),
    ("index", [("B", 3)], {"idx": ([-2, 5, None],)}, "shrinks as B grows"),
])
def test_type_errors(op, shapes, attrs, message):
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("?", r"\?")):
        _shape_of(op, shapes, attrs)


def test_dynamic_index_must_be_integer_scalar():
    with pytest.raises(ShapeError, match="integer scalar"):
        _shape_of("index", [(2, 3), ()], {"idx": ("?",)}, ["f32", "f32"])


def test_index_attrs_round_trip_through_ir_text():
    module = build("index", [X, i64(1)], {"idx": ("?", [None, -1, -1], -2)})
    adj = Reverse(wrt=("a0",), fn="f")(Module({"f": Function(
        "f", module["f"].body, module["f"].result_types, params={"a0"})}))
    text = print_module(adj)
    assert 'idx = ("?", [none, -1, -1], -2)' in text
    assert "index_grad(" in text
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text
