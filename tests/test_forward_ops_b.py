"""JVP rules of linear algebra, shape and neural-net ops (and the adjoint helpers that
forward-over-reverse meets), on the op test tables; plus every registered op has a
forward-mode rule and is checked here or in test_forward_ops."""
import numpy as np
import pytest

import test_forward_ops as elementwise_tables
import test_ops_conv
import test_ops_linalg
import test_ops_nn
import test_ops_norm_attention
import test_ops_shape
from gradcheck import run
from test_forward_ops import check_op, op_module
from test_ops_shape import i64, rand
from adcompiler.ir.builder import Builder
from adcompiler.ops import registry
from adcompiler.passes.jvp import JVP

CHECKED = set()


def checked(op, *args, **kw):
    CHECKED.add(op)
    return check_op(op, *args, **kw)


def _id(case):
    return f"{case[0]}-{[np.shape(a) for a in case[1]]}-{case[2]}"


@pytest.mark.parametrize("case", test_ops_shape.CASES + test_ops_nn.CASES
                         + test_ops_norm_attention.JVP_CASES, ids=_id)
def test_table_cases(case):
    op, args, attrs, _ = case
    checked(op, args, attrs, roundtrip=True)


def _first_of_each(cases):
    return list({c[0]: c[:3] for c in reversed(cases)}.values())


@pytest.mark.parametrize("case", _first_of_each(test_ops_conv.CASES + test_ops_conv.ADJOINTS),
                         ids=lambda c: c[0])
def test_conv_pool_pad(case):
    """One case per op here (test_ops_conv checks them all)."""
    checked(*case)


@pytest.mark.parametrize("sa,sb", test_ops_linalg.MATMUL_SHAPES, ids=str)
def test_matmul(sa, sb):
    checked("matmul", [rand(*sa), rand(*sb)])


@pytest.mark.parametrize("spec,shapes", test_ops_linalg.EINSUMS,
                         ids=[e[0] for e in test_ops_linalg.EINSUMS])
def test_einsum(spec, shapes):
    checked("einsum", [rand(*s) for s in shapes], {"spec": spec}, roundtrip=True)


@pytest.mark.parametrize("op,args,attrs", [
    ("transpose", [rand(2, 3, 4)], {"perm": [2, 0, 1]}),
    ("concat", [rand(2, 3), rand(2, 1), rand(2, 2)], {"axis": 1}),
    ("stack", [rand(2, 3), rand(2, 3)], {"axis": -1}),
    ("split", [rand(2, 6)], {"axis": 1, "shape": [1, 3, 2]}),
    ("index_grad", [rand(2, 2), i64(1)], {"idx": ("?", [None, None, -2]), "shape": [3, 4, 2]}),
    ("take_grad", [rand(2, 3, 3), i64([[0, 4, 0], [-1, 2, 0]])], {"axis": 0, "shape": [5, 3]}),
    ("sum_to", [rand(2, 3, 4)], {"shape": [1, 4]}),
    ("cast", [rand(2, 3)], {"dtype": "f64"}),
    ("zeros_like", [rand(3)], {}),
    ("ones_like", [rand(3)], {}),
])
def test_linear_and_constant_ops(op, args, attrs):
    checked(op, args, attrs)


def test_stop_gradient_and_one_hot_have_zero_tangent():
    x = rand(3)
    m = op_module("mul", [x, x])
    body = m["f"].body
    ret = body.ops.pop()
    b = Builder(body)
    y = b.emit("stop_gradient", ret.operands[0])
    oh = b.emit("one_hot", b.emit("cast", body.args[0], dtype="i64"), n=3, dtype="f64")
    b.ret([y, b.emit("mul", oh, body.args[1])])
    m["f"].result_types = [y.type, oh.type]
    jm = JVP(wrt=("a0",), fn="f")(m)
    _, _, t_y, t_oh = run(jm, "f_jvp", {"a0": x, "a1": x, "t_a0": np.ones(3)})
    np.testing.assert_array_equal(t_y, 0.0)
    np.testing.assert_array_equal(t_oh, 0.0)
    CHECKED.update({"stop_gradient", "one_hot"})


def test_max_pool2d_indices_has_no_tangent():
    checked("max_pool2d_indices", [rand(1, 2, 5, 5)], {"kernel": 2, "ceil_mode": True})


def test_concat_with_one_tangent_fills_zeros():
    a, c = rand(2, 3), rand(1, 3)
    jm = JVP(wrt=("a1",), fn="f")(op_module("concat", [a, c], {"axis": 0}))
    _, tan = run(jm, "f_jvp", {"a0": a, "a1": c, "t_a1": np.ones((1, 3))})
    np.testing.assert_array_equal(tan, [[0, 0, 0], [0, 0, 0], [1, 1, 1]])


@pytest.mark.parametrize("src,dst", [("f64", "f32"), ("f32", "f64"), ("f64", "i64")])
def test_cast(src, dst):
    np_dtype = {"f32": np.float32, "f64": np.float64, "i64": np.int64}
    x = np.array([1.5, -2.0], dtype=np_dtype[src])
    jm = JVP(wrt=("a0",), fn="f")(op_module("cast", [x], {"dtype": dst}))
    _, tan = run(jm, "f_jvp", {"a0": x, "t_a0": np.array([3.0, 4.0], dtype=np_dtype[src])})
    assert tan.dtype == np_dtype[dst]
    np.testing.assert_array_equal(tan, [0, 0] if dst == "i64" else [3.0, 4.0])


def test_sensitive_ops_have_finite_tangents_at_1e4_in_f32():
    big = (1e4 * np.array([[1.0, -1.0, 0.5], [-1.0, 1.0, 0.3]])).astype(np.float32)
    for op, args in [("softmax", [big]), ("log_softmax", [big]),
                     ("cross_entropy", [big, np.array([0, 2])]),
                     ("bce_with_logits", [big, np.full((2, 3), 0.5, np.float32)])]:
        m = op_module(op, [np.asarray(a) for a in args])
        jm = JVP(wrt=("a0",), fn="f")(m)
        ins = {f"a{k}": a for k, a in enumerate(args)}
        outs = run(jm, "f_jvp", {**ins, "t_a0": np.ones_like(big)})
        assert all(np.all(np.isfinite(o)) for o in outs), op


def test_collectives_in_one_process():
    # allreduce_start packs, allreduce_wait averages over one process: f = sum(b*b*w)
    from adcompiler.frontend import compile_source
    from test_forward_ops import check_jvp
    m = compile_source("def f(a0: f64[2, 3], a1: f64[4], w: f64[10]) -> f64 {\n"
                       "    return sum(allreduce_wait(allreduce_start(a0 * a0, a1)) ** 2 * w)\n"
                       "}\n", "c.tdsl")
    rng = np.random.default_rng(0)
    inputs = {"a0": rng.standard_normal((2, 3)), "a1": rng.standard_normal(4),
              "w": rng.standard_normal(10)}
    check_jvp(m, inputs, ["a0", "a1"], roundtrip=True)
    CHECKED.update({"allreduce_start", "allreduce_wait"})


def test_dropout_tangent_is_dropout_of_the_tangent():
    # the JVP against directional differences (a derivative always trains: the values are
    # those of training mode); the draws have no derivative and the same bits every run
    key = np.array([5, 6], dtype=np.int64)
    x = np.random.default_rng(2).standard_normal((3, 4))
    checked("dropout", [x, key], {"p": 0.3, "site": 4, "training": True}, roundtrip=True)
    for op, attrs in [("uniform", {"shape": [3]}), ("normal", {"shape": [2], "dtype": "f64"}),
                      ("bernoulli", {"p": 0.5, "shape": [2]})]:
        a = run(op_module(op, [key], {**attrs, "site": 1}), "f", {"a0": key})[0]
        b = run(op_module(op, [key], {**attrs, "site": 1}), "f", {"a0": key})[0]
        np.testing.assert_array_equal(a, b)
        CHECKED.add(op)
    np.testing.assert_array_equal(
        run(op_module("rng_fold", [key, np.int64(3)], {"site": 2}), "f",
            {"a0": key, "a1": np.int64(3)})[0],
        run(op_module("rng_fold", [key, np.int64(3)], {"site": 2}), "f",
            {"a0": key, "a1": np.int64(3)})[0])
    CHECKED.add("rng_fold")


@pytest.mark.parametrize("training", [True, False])
def test_batchnorm_running_tangent_of_y(training):
    # y's tangent against directional differences in either mode (the JVP pass itself
    # always trains, so the rule is applied by `derive`, which leaves the mode as it is);
    # the running statistics get zero tangents
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((4, 3, 2)), 1 + rng.standard_normal(3), rng.standard_normal(3),
            rng.standard_normal(3), 0.5 + rng.random(3)]
    m = op_module("batchnorm_running", args, {"axis": 1, "training": training})
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    wrt = ("a0", "a1", "a2")
    tangents = {w: rng.standard_normal(np.shape(inputs[w])) for w in wrt}
    jm = JVP(wrt=wrt, fn="f").derive(m, "f")
    outs = run(jm, "f_jvp", {**inputs, **{f"t_{w}": t for w, t in tangents.items()}})
    eps = 1e-6
    plus = run(m, "f", {**inputs, **{w: inputs[w] + eps * t for w, t in tangents.items()}})
    minus = run(m, "f", {**inputs, **{w: inputs[w] - eps * t for w, t in tangents.items()}})
    np.testing.assert_allclose(outs[3], (plus[0] - minus[0]) / (2 * eps), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_array_equal(outs[4], 0.0)
    np.testing.assert_array_equal(outs[5], 0.0)
    CHECKED.add("batchnorm_running")


def test_every_op_has_a_forward_rule_and_a_test():
    from test_ops_elementwise import COMPARISONS
    covered = (CHECKED | set(elementwise_tables.UNARY) | set(elementwise_tables.BINARY)
               | set(elementwise_tables.REDUCTIONS) | set(COMPARISONS)
               | {"leaky_relu", "where", "clip", "sum_to", "const", "zeros", "ones", "full",
                  "arange", "dim_value"})
    for name, d in registry.REGISTRY.items():
        assert d.jvp or d.has("linear") or d.has("no_grad") or d.has("constructor"), name
    if len(CHECKED) > 10:   # the table tests ran in this session
        assert set(registry.REGISTRY) <= covered, set(registry.REGISTRY) - covered

