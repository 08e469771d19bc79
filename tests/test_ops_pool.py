"""Pooling's options: max_pool2d's dilation and ceil_mode and max_pool2d_indices, avg_pool2d's
ceil_mode, count_include_pad and divisor_override, and one image [C, H, W] as input. Values
and indices against loops written out here (and against torch.nn.functional where torch is
installed), derivatives against central differences, forward mode, second order, batching,
emitted Python, and the type errors."""
from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

import adcompiler as adc
from gradcheck import check_grads, check_second_order
from test_ops_shape import evaluate

RNG = np.random.default_rng(17)


def r(*shape):
    return RNG.standard_normal(shape)


def _axes(v):
    return (v, v) if isinstance(v, int) else tuple(v)


# ---- references: one window at a time ---------------------------------------------------

def window_starts(size, k, s, p, d, ceil):
    """The first position of each window along an axis, from the definitions: a window
    lies in the padded input (floor), or (ceil) starts inside the input or the left padding
    and follows a window that did not reach the end of the padded input."""
    extent, padded = d * (k - 1) + 1, size + 2 * p
    starts, o = [], 0
    while True:
        start = o * s - p
        if not ceil and start + p + extent > padded:
            break
        if ceil and (start >= size or (o > 0 and (o - 1) * s + extent >= padded)):
            break
        starts.append(start)
        o += 1
    return starts


def loop_max_pool(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Values and flat indices: each window's taps in row-major order, those inside x only;
    a tap wins if greater than the best so far or NaN."""
    k = _axes(kernel)
    s = k if stride is None else _axes(stride)
    p, d = _axes(padding), _axes(dilation)
    one = x.ndim == 3
    x = x[None] if one else x
    h, w = x.shape[2:]
    rows = window_starts(h, k[0], s[0], p[0], d[0], ceil_mode)
    cols = window_starts(w, k[1], s[1], p[1], d[1], ceil_mode)
    out = np.zeros(x.shape[:2] + (len(rows), len(cols)))
    idx = np.zeros(out.shape, dtype=np.int64)
    for b, c, i, j in np.ndindex(out.shape):
        best, at = -np.inf, None
        for ti, tj in itertools.product(range(k[0]), range(k[1])):
            y, z = rows[i] + ti * d[0], cols[j] + tj * d[1]
            if not (0 <= y < h and 0 <= z < w):
                continue
            v = x[b, c, y, z]
            if at is None:
                at = y * w + z
            if v > best or np.isnan(v):
                best, at = v, y * w + z
        out[b, c, i, j], idx[b, c, i, j] = best, at
    return (out[0], idx[0]) if one else (out, idx)


def loop_avg_pool(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                  divisor_override=None):
    k = _axes(kernel)
    s = k if stride is None else _axes(stride)
    p = _axes(padding)
    one = x.ndim == 3
    x = x[None] if one else x
    h, w = x.shape[2:]
    rows = window_starts(h, k[0], s[0], p[0], 1, ceil_mode)
    cols = window_starts(w, k[1], s[1], p[1], 1, ceil_mode)
    out = np.zeros(x.shape[:2] + (len(rows), len(cols)))
    for b, c, i, j in np.ndindex(out.shape):
        total, inside, padded = 0.0, 0, 0
        for y in range(rows[i], rows[i] + k[0]):
            for z in range(cols[j], cols[j] + k[1]):
                if -p[0] <= y < h + p[0] and -p[1] <= z < w + p[1]:
                    padded += 1
                if 0 <= y < h and 0 <= z < w:
                    total += x[b, c, y, z]
                    inside += 1
        div = divisor_override or (padded if count_include_pad else inside)
        out[b, c, i, j] = total / div
    return out[0] if one else out


# ---- the table ---------------------------------------------------------------------------

MAX = [
    (r(1, 2, 3, 6), dict(kernel=3, stride=2, padding=1, dilation=[1, 2], ceil_mode=True)),
    (r(2, 1, 6, 6), dict(kernel=[3, 2], stride=[2, 1], padding=1, dilation=[1, 2])),
    (r(1, 1, 5, 7), dict(kernel=2, stride=2, ceil_mode=True)),        # a half window per axis
    (r(1, 2, 4, 5), dict(kernel=3, stride=3, padding=1, ceil_mode=True)),
    (r(2, 3, 6), dict(kernel=3, stride=2, padding=1, ceil_mode=True)),  # one image
    (r(2, 5, 5), dict(kernel=2, dilation=2)),
    (r(1, 1, 1, 1), dict(kernel=2, stride=2, ceil_mode=True)),  # the window past the input
    (r(1, 1, 7, 7), dict(kernel=3, stride=1, dilation=3)),      # the extent equals the input
]
AVG = [
    (r(1, 3, 9, 9), dict(kernel=3, stride=1, padding=1, ceil_mode=True,
                         count_include_pad=False, divisor_override=2)),
    (r(1, 3, 9, 9), dict(kernel=[4, 4], stride=[2, 3], padding=1, ceil_mode=True,
                         count_include_pad=False)),
    (r(1, 3, 9, 9), dict(kernel=[6, 6], stride=[3, 3], padding=[2, 3], ceil_mode=True,
                         count_include_pad=True, divisor_override=2)),
    (r(1, 1, 4, 4), dict(kernel=2, ceil_mode=False, count_include_pad=True,
                         divisor_override=-2)),
    (r(1, 2, 6, 6), dict(kernel=4, stride=2, padding=2, ceil_mode=True)),
    (r(1, 1, 5, 7), dict(kernel=2, ceil_mode=True, count_include_pad=False)),
    (r(3, 5, 4), dict(kernel=3, stride=2, padding=1, count_include_pad=False)),  # one image
]
CASES = ([("max_pool2d", x, a) for x, a in MAX] + [("avg_pool2d", x, a) for x, a in AVG])


def _id(case):
    return f"{case[0]}-{list(case[1].shape)}-{case[2]}"


@pytest.mark.parametrize("x,attrs", MAX, ids=[_id(("max",) + c) for c in MAX])
def test_max_values_and_indices_against_loops(x, attrs):
    want, where = loop_max_pool(x, **attrs)
    got = evaluate("max_pool2d", [x], attrs)
    idx = evaluate("max_pool2d_indices", [x], attrs)
    assert got.shape == want.shape and idx.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(idx, where)


@pytest.mark.parametrize("x,attrs", AVG, ids=[_id(("avg",) + c) for c in AVG])
def test_avg_values_against_loops(x, attrs):
    want = loop_avg_pool(x, **attrs)
    got = evaluate("avg_pool2d", [x], attrs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_grads(case):
    op, x, attrs = case
    check_grads(op, [x], attrs)


@pytest.mark.parametrize("case", CASES[::2], ids=_id)
def test_jvp_and_second_order(case):
    from test_forward_ops import check_op
    op, x, attrs = case
    check_op(op, [x], attrs, roundtrip=True)
    check_second_order(op, [x], attrs)


@pytest.mark.parametrize("op,args,attrs", [
    ("max_pool2d_grad", [r(1, 2, 3, 6), r(1, 2, 2, 3)],
     dict(kernel=3, stride=2, padding=1, dilation=[1, 2], ceil_mode=True)),
    ("max_pool2d_select", [r(2, 5, 5), r(2, 5, 5)], dict(kernel=2, dilation=2)),
    ("avg_pool2d_grad", [r(1, 3, 5, 4)], dict(kernel=[4, 4], stride=[2, 3], padding=1,
                                              ceil_mode=True, count_include_pad=False,
                                              shape=[9, 9])),
], ids=["grad", "select", "avg_grad"])
def test_the_adjoint_ops_with_the_new_options(op, args, attrs):
    from test_forward_ops import check_op
    check_grads(op, args, attrs)
    check_op(op, args, attrs)


# ---- against PyTorch ---------------------------------------------------------------------

def _torch_pool(F, op, x, a, indices=False):
    a = dict(a)
    kernel = a.pop("kernel")
    if op == "max_pool2d":
        return F.max_pool2d(x, kernel, **a, return_indices=indices)
    return F.avg_pool2d(x, kernel, **a)


def _grid():
    """Shapes and options as PyTorch's own op tests sweep them, and more."""
    for shape in [(1, 2, 3, 6), (2, 3, 6), (1, 1, 6, 5), (1, 1, 2, 3)]:
        for k, s, p, ceil in itertools.product([2, 3, [3, 2]], [None, 2, [2, 1], 3], [0, 1],
                                               [False, True]):
            if 2 * p > min(_axes(k)):
                continue
            for d in ([1, 2, [1, 2], 3]):
                yield "max_pool2d", shape, dict(kernel=k, stride=s, padding=p, dilation=d,
                                                ceil_mode=ceil)
            for cip, div in [(True, None), (False, None), (False, 3)]:
                yield "avg_pool2d", shape, dict(kernel=k, stride=s, padding=p, ceil_mode=ceil,
                                                count_include_pad=cip, divisor_override=div)


def _against_torch(cases) -> tuple[int, int]:
    """Values, indices and gradients; where PyTorch's windows hold no element of x (its
    kernel then gives -inf and an index outside the plane) adc refuses the call, and
    nowhere else. (checked, refused)"""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    checked = refused = 0
    for op, shape, attrs in cases:
        x = RNG.standard_normal(shape)
        x[..., 0, :2] = x[..., 1, :2].max()  # ties across rows
        xt = torch.tensor(x, requires_grad=True)
        try:
            want = _torch_pool(F, op, xt, attrs, indices=op == "max_pool2d")
        except RuntimeError:
            with pytest.raises(adc.AdcError):
                evaluate(op, [x], attrs)
            continue
        want, where = want if op == "max_pool2d" else (want, None)
        if op == "max_pool2d" and np.isinf(want.detach().numpy()).any():
            with pytest.raises(adc.AdcError, match="holds no element of x"):
                evaluate(op, [x], attrs)
            refused += 1
            continue
        g = RNG.standard_normal(tuple(want.shape))
        want.backward(torch.tensor(g))
        np.testing.assert_allclose(evaluate(op, [x], attrs), want.detach().numpy(),
                                   rtol=1e-13, atol=1e-14, err_msg=str((shape, attrs)))
        if op == "max_pool2d":
            np.testing.assert_array_equal(evaluate("max_pool2d_indices", [x], attrs), where)
            dx = evaluate("max_pool2d_grad", [x, g], attrs)
        else:
            dx = evaluate("avg_pool2d_grad", [g], dict(attrs, shape=list(shape[-2:])))
        np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-13, atol=1e-14,
                                   err_msg=str((shape, attrs)))
        checked += 1
    return checked, refused


def test_options_against_torch():
    """Every 9th point of the grid, and a window of padding only."""
    empty = ("max_pool2d", (1, 1, 2, 3), dict(kernel=2, stride=1, padding=1, dilation=3))
    checked, refused = _against_torch(list(_grid())[::9] + [empty])
    assert checked > 100 and refused >= 1


@pytest.mark.slow
def test_the_whole_grid_against_torch():
    checked, refused = _against_torch(_grid())
    assert checked > 1000 and refused > 0


def test_ties_with_dilation_and_ceil_mode_go_to_the_first_maximum():
    """Equal values and -inf: each window's gradient and index go to its first maximal
    element in row-major order among the taps it reads, as the loop and PyTorch."""
    x = np.array([[[[1., 1., 2., 2., 0.], [1., 1., 2., 2., 2.], [3., 0., 3., 3., 3.],
                    [0., 3., -np.inf, -np.inf, 3.], [1., 1., -np.inf, -np.inf, 1.]]]])
    for attrs in (dict(kernel=2, dilation=2, ceil_mode=True, stride=2),
                  dict(kernel=3, stride=2, padding=1, dilation=[1, 2], ceil_mode=True),
                  dict(kernel=2, stride=[3, 1], padding=1, ceil_mode=True)):
        g = RNG.standard_normal(evaluate("max_pool2d", [x], attrs).shape)
        _, where = loop_max_pool(x, **attrs)
        want = np.zeros(x.size)
        np.add.at(want, where.ravel(), g.ravel())
        got = evaluate("max_pool2d_grad", [x, g], attrs)
        np.testing.assert_allclose(got, want.reshape(x.shape), rtol=1e-14, atol=1e-15)
        np.testing.assert_array_equal(evaluate("max_pool2d_indices", [x], attrs), where)
        torch = pytest.importorskip("torch")
        xt = torch.tensor(x, requires_grad=True)
        y, i = _torch_pool(torch.nn.functional, "max_pool2d", xt, attrs, indices=True)
        y.backward(torch.tensor(g))
        np.testing.assert_array_equal(i.numpy(), where)
        np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-14, atol=1e-15)


def test_nan_with_dilation_as_torch():
    x = np.array([[[1., np.nan, 0., 4.], [np.nan, 5., 2., np.nan], [7., 1., np.nan, 0.]]])
    attrs = dict(kernel=2, stride=1, dilation=[1, 2], ceil_mode=True)
    got = evaluate("max_pool2d", [x], attrs)
    idx = evaluate("max_pool2d_indices", [x], attrs)
    want, where = loop_max_pool(x, **attrs)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(idx, where)
    torch = pytest.importorskip("torch")
    y, i = torch.nn.functional.max_pool2d(torch.tensor(x), 2, 1, 0, [1, 2], True,
                                          return_indices=True)
    np.testing.assert_array_equal(got, y.numpy())
    np.testing.assert_array_equal(idx, i.numpy())


def test_edge_shapes():
    """An empty batch, a 1x1 image whose ceil_mode window reaches past it, kernel 1."""
    for op, x, attrs in [("max_pool2d", np.zeros((0, 2, 4, 4)), dict(kernel=2, dilation=2)),
                         ("avg_pool2d", np.zeros((0, 2, 3, 3)),
                          dict(kernel=2, ceil_mode=True, count_include_pad=False)),
                         ("max_pool2d_indices", np.zeros((0, 1, 3, 3)), dict(kernel=2))]:
        assert evaluate(op, [x], attrs).shape == (0,) + x.shape[1:2] + (
            (1, 1) if x.shape[2] == 4 else (2, 2) if "ceil_mode" in attrs else (1, 1))
    x = np.array([[[[3.0]]]])
    np.testing.assert_array_equal(evaluate("max_pool2d", [x], dict(kernel=2, ceil_mode=True)),
                                  x)
    np.testing.assert_array_equal(
        evaluate("avg_pool2d", [x], dict(kernel=2, ceil_mode=True, count_include_pad=True)),
        x)   # the part past the input and padding is not counted
    np.testing.assert_array_equal(evaluate("max_pool2d_indices", [r(2, 3, 4)],
                                           dict(kernel=1)), np.tile(np.arange(12), (2, 1))
                                  .reshape(2, 3, 4))


# ---- batching, the emitted program, FLOPs ------------------------------------------------

@pytest.mark.parametrize("op,shape,attrs", [
    ("max_pool2d", (2, 3, 6), dict(kernel=3, stride=2, padding=1, dilation=[1, 2],
                                   ceil_mode=True)),
    ("max_pool2d_indices", (1, 2, 5, 5), dict(kernel=2, ceil_mode=True)),
    ("avg_pool2d", (2, 5, 5), dict(kernel=2, ceil_mode=True, count_include_pad=False)),
], ids=["max", "indices", "avg"])
def test_vmap_of_pools_and_their_gradients(op, shape, attrs):
    import test_batch
    x = r(*shape)
    module = test_batch.one_op(op, [x], attrs)
    xs = np.stack([r(*shape) for _ in range(3)])
    test_batch.check_against_loop(module, "f", {"a0": xs}, {}, 3)
    if op != "max_pool2d_indices":
        from gradcheck import one_op_module
        grads = adc.run_pipeline(one_op_module(op, [x], attrs), "reverse{fn=f},cse,dce")
        w = r(*adc.function(module)(x).shape)
        test_batch.check_against_loop(grads, "f_grad", {"a0": xs}, {"w0": w}, 3)


PROGRAM = """\
def f(param x: f64[2, 2, 5, 7], param y: f64[3, 6, 6]) -> (f64, i64[2, 2, 3, 3]) {
    m = max_pool2d(x, 3, 2, 1, [1, 2], true)
    a = avg_pool2d(y, [2, 3], stride=2, ceil_mode=true, count_include_pad=false)
    b = avg_pool2d(x, 2, padding=1, divisor_override=3)
    return sum(m * m) + sum(tanh(a)) + sum(b * b), max_pool2d_indices(x, 3, 2, 1, [1, 2], true)
}
"""


def test_emitted_python_matches_the_executor(tmp_path):
    path = tmp_path / "pool.tdsl"
    path.write_text(PROGRAM)
    out = tmp_path / "pool_grad.py"
    done = subprocess.run([sys.executable, "-m", "adcompiler", "compile", str(path), "--emit",
                           "python", "-o", str(out), "--wrt", "x,y"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    namespace = {"__name__": "emitted"}
    exec(compile(out.read_text(), str(out), "exec"), namespace)
    x, y = r(2, 2, 5, 7), r(3, 6, 6)
    got = namespace["f_grad"](x, y)
    module = adc.compile_source(PROGRAM, "pool.tdsl")
    want = adc.run(adc.run_pipeline(module, "reverse{wrt=x,y},cse,dce"), "f_grad", x=x, y=y)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_network_gradient_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, y = r(2, 2, 5, 7), r(3, 6, 6)
    module = adc.compile_source(PROGRAM, "pool.tdsl")
    grad = adc.value_and_grad(module, wrt=("x", "y"), has_aux=True)
    (value, idx), grads = grad(x, y)
    xt, yt = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    m, i = F.max_pool2d(xt, 3, 2, 1, [1, 2], True, return_indices=True)
    a = F.avg_pool2d(yt, [2, 3], stride=2, ceil_mode=True, count_include_pad=False)
    b = F.avg_pool2d(xt, 2, padding=1, divisor_override=3)
    loss = (m * m).sum() + torch.tanh(a).sum() + (b * b).sum()
    loss.backward()
    np.testing.assert_allclose(value, loss.item(), rtol=1e-12)
    np.testing.assert_array_equal(idx, i.numpy())
    np.testing.assert_allclose(grads[0], xt.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(grads[1], yt.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_flops_count_each_window_element():
    from adcompiler.memory.flops import op_flops
    module = adc.compile_source(PROGRAM, "pool.tdsl")
    ops = {op.name: op for op in module["f"].walk()}
    for name in ("max_pool2d", "max_pool2d_indices"):
        assert op_flops(ops[name], {}) == 2 * 2 * 3 * 3 * 9   # the pooled elements' windows


# ---- bad input: located errors naming the option -----------------------------------------

BAD = [
    ("max_pool2d(x, [1, 2], 1, [0, 1], [1, 3])",
     "max_pool2d: window 0 along spatial axis 1 holds no element of x f32[2, 3, 4, 2] "
     "(kernel 2, dilation 3, padding 1, stride 1)"),
    ("max_pool2d_indices(x, 2, dilation=0)", "max_pool2d_indices: dilation must be positive"),
    ("max_pool2d(x, 2, ceil_mode=1)", "option 'ceil_mode' of max_pool2d expects true or false"),
    ("avg_pool2d(x, 2, divisor_override=0)",
     "avg_pool2d: divisor_override must be a nonzero int, got 0"),
    ("avg_pool2d(x, 2, dilation=2)", "dilation"),
    ("max_pool2d(x[0, 0], 2)", "max_pool2d expects x of rank 4 [N, C, H, W] or 3 [C, H, W], "
                               "got f32[4, 2]"),
    ("max_pool2d(x, 3)", "max_pool2d: the kernel [3, 3] is larger than the padded input"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_located_error(call, message):
    with pytest.raises(adc.AdcError) as e:
        adc.compile_source("def f(x: f32[2, 3, 4, 2]) -> f32 {\n    y = " + call
                           + "\n    return sum(cast(y, f32))\n}\n", "bad.tdsl")
    assert message in e.value.message
    assert e.value.loc.line == 2 and e.value.loc.col >= 9
