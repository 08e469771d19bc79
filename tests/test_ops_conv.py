"""Convolution, pooling and pad: values against loops written out here (and against
torch.nn.functional where torch is installed), reverse mode against central differences,
forward mode, second order, batching, emitted Python, and the type errors."""
from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

from adcompiler.diagnostics import ShapeError
from gradcheck import check_grads, check_second_order
from test_ops_shape import build, evaluate

RNG = np.random.default_rng(5)
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


def r(*shape):
    return RNG.standard_normal(shape)


# ---- references: one output element at a time ------------------------------------------

def _pairs(padding, kernel, dilation):
    n = len(kernel)
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                for k, d in zip(kernel, dilation)]
    return [(p, p) for p in padding]


def _axes(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def loop_conv(x, w, stride=1, padding=0, dilation=1, groups=1):
    n = x.ndim - 2
    kernel, stride, dilation = w.shape[2:], _axes(stride, n), _axes(dilation, n)
    pads = _pairs(padding if isinstance(padding, str) else _axes(padding, n), kernel, dilation)
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)
    out_sp = [(s - d * (k - 1) - 1) // st + 1
              for s, k, st, d in zip(xp.shape[2:], kernel, stride, dilation)]
    batch, c = x.shape[:2]
    o, cg = w.shape[:2]
    out = np.zeros((batch, o, *out_sp))
    for idx in np.ndindex(out.shape):
        b, oc, pos = idx[0], idx[1], idx[2:]
        g = oc // (o // groups)
        total = 0.0
        for ci in range(cg):
            for tap in np.ndindex(*kernel):
                at = tuple(p * st + t * d for p, st, t, d in zip(pos, stride, tap, dilation))
                total += xp[(b, g * cg + ci) + at] * w[(oc, ci) + tap]
        out[idx] = total
    return out


def loop_conv_transpose(x, w, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """Each input element adds its weighted kernel into the output (a scatter)."""
    kernel = w.shape[2:]
    stride, dilation = _axes(stride, 2), _axes(dilation, 2)
    pad, extra = _axes(0 if padding == "valid" else padding, 2), _axes(output_padding, 2)
    cin, og = w.shape[:2]
    size = [(h - 1) * s - 2 * p + d * (k - 1) + a + 1 for h, s, p, d, k, a in
            zip(x.shape[2:], stride, pad, dilation, kernel, extra)]
    out = np.zeros((x.shape[0], og * groups, *size))
    for b, ci, h, v in np.ndindex(x.shape):
        g = ci // (cin // groups)
        for oc, i, j in np.ndindex(og, *kernel):
            p = h * stride[0] - pad[0] + i * dilation[0]
            q = v * stride[1] - pad[1] + j * dilation[1]
            if 0 <= p < size[0] and 0 <= q < size[1]:
                out[b, g * og + oc, p, q] += x[b, ci, h, v] * w[ci, oc, i, j]
    return out


def loop_pool(x, kernel, stride=None, padding=0, mode="max"):
    k = _axes(kernel, 2)
    s = k if stride is None else _axes(stride, 2)
    p = _axes(padding, 2)
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], constant_values=fill)
    size = [(h - kk) // ss + 1 for h, kk, ss in zip(xp.shape[2:], k, s)]
    out = np.zeros(x.shape[:2] + tuple(size))
    for b, c, i, j in np.ndindex(out.shape):
        win = xp[b, c, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
        out[b, c, i, j] = win.max() if mode == "max" else win.sum() / (k[0] * k[1])
    return out


def loop_pad(x, widths, value=0.0):
    out = np.full([d + widths[2 * a] + widths[2 * a + 1] for a, d in enumerate(x.shape)], value)
    for idx in np.ndindex(x.shape):
        out[tuple(i + widths[2 * a] for a, i in enumerate(idx))] = x[idx]
    return out


# ---- the table: (op, args, attrs, reference) ---------------------------------------------

def _image(loop, x, w, **attrs):
    """The loop's result for a batch, or for one image (rank one less than w's) as a batch
    of one."""
    if x.ndim == w.ndim:
        return loop(x, w, **attrs)
    return loop(x[None], w, **attrs)[0]


def _conv(x, w, **attrs):
    return ("conv1d" if w.ndim == 3 else "conv2d", [x, w], attrs,
            _image(loop_conv, x, w, **attrs))


def _transpose(x, w, **attrs):
    return ("conv_transpose2d", [x, w], attrs, _image(loop_conv_transpose, x, w, **attrs))


def _pool(op, x, **attrs):
    return (op, [x], attrs, loop_pool(x, mode=op[:3], **attrs))


CASES = [
    _conv(r(2, 3, 5, 4), r(4, 3, 3, 2)),
    _conv(r(2, 4, 5, 6), r(6, 2, 3, 2), stride=(2, 1), padding=1, groups=2),
    _conv(r(1, 2, 7, 5), r(3, 2, 2, 2), stride=2, padding=[1, 0], dilation=2),  # odd sizes
    _conv(r(1, 2, 5, 4), r(2, 2, 2, 3), padding="same", dilation=(2, 1)),  # odd split
    _conv(r(1, 2, 4, 4), r(2, 2, 3, 3), padding="valid"),
    _conv(r(2, 3, 4, 4), r(3, 1, 3, 3), padding=1, groups=3),             # depthwise
    _conv(r(1, 2, 3, 3), r(2, 2, 3, 3)),                                    # kernel = input
    _conv(r(2, 2, 1, 1), r(3, 2, 1, 1)),                                    # size-1 spatial
    _conv(r(2, 2, 7), r(4, 1, 3), stride=2, padding=1, groups=2),
    _conv(r(1, 2, 6), r(2, 2, 2), padding="same", dilation=3),
    _transpose(r(1, 2, 3, 4), r(2, 3, 3, 2)),
    _transpose(r(1, 4, 3, 3), r(4, 1, 3, 2), stride=2, padding=1, output_padding=1, groups=2),
    _transpose(r(1, 2, 3, 2), r(2, 2, 2, 2), stride=(2, 3), padding=(1, 0),
               output_padding=(1, 2), dilation=(1, 2)),
    _transpose(r(1, 2, 2, 2), r(2, 1, 2, 2), dilation=2, output_padding=1),  # op < dilation
    _conv(r(2, 7), r(4, 1, 3), stride=2, padding=1, groups=2),              # one image [C, L]
    _conv(r(4, 5, 6), r(6, 2, 3, 2), stride=(2, 1), padding=1, groups=2),
    _transpose(r(4, 3, 3), r(4, 1, 3, 2), stride=2, padding=1, output_padding=1, groups=2),
    _pool("max_pool2d", r(2, 2, 4, 4), kernel=2),
    _pool("max_pool2d", r(1, 2, 5, 5), kernel=3, stride=2, padding=1),
    _pool("max_pool2d", r(1, 1, 5, 4), kernel=[3, 2], stride=[1, 2], padding=[1, 1]),
    _pool("max_pool2d", r(1, 1, 1, 1), kernel=1),
    _pool("avg_pool2d", r(2, 2, 4, 4), kernel=2),
    _pool("avg_pool2d", r(1, 2, 5, 5), kernel=3, stride=2, padding=1),
    _pool("avg_pool2d", r(1, 1, 5, 3), kernel=[2, 3], stride=[2, 1], padding=[1, 1]),
    ("pad", [r(2, 3)], {"widths": [1, 0, 2, 1], "value": 3.0}, None),
    ("pad", [r(3)], {"widths": [0, 0]}, None),
    ("pad", [r(1, 2, 3)], {"widths": [0, 1, 1, 0, 2, 2], "value": -1.0}, None),
]
# pad's references: filled in from the arguments above
CASES = [(op, args, attrs, loop_pad(args[0], **attrs) if op == "pad" else want)
         for op, args, attrs, want in CASES]

# the adjoint ops, called directly (their values are checked through the VJPs above)
ADJOINTS = [
    ("conv_input_grad", [r(1, 4, 2, 2), r(4, 1, 3, 2)],
     {"shape": [5, 4], "stride": 2, "padding": [1, 0], "groups": 2}),
    ("conv_input_grad", [r(1, 2, 3), r(2, 2, 2)], {"shape": [6], "padding": "same",
                                                   "dilation": 3}),
    ("conv_weight_grad", [r(2, 2, 5, 4), r(2, 4, 2, 3)],
     {"kernel": [3, 2], "stride": 2, "padding": 1, "groups": 2}),
    ("conv_weight_grad", [r(1, 2, 5, 4), r(1, 2, 5, 4)],
     {"kernel": [2, 3], "padding": "same", "dilation": (2, 1)}),
    ("max_pool2d_grad", [r(1, 2, 5, 5), r(1, 2, 3, 3)], {"kernel": 3, "stride": 2,
                                                         "padding": 1}),
    ("max_pool2d_select", [r(1, 2, 4, 4), r(1, 2, 4, 4)], {"kernel": 2}),
    ("avg_pool2d_grad", [r(1, 2, 3, 3)], {"kernel": 3, "stride": 2, "padding": 1,
                                          "shape": [5, 5]}),
]


def _id(case):
    return f"{case[0]}-{[np.shape(a) for a in case[1]]}-{case[2]}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_values_against_loops(case):
    op, args, attrs, want = case
    got = evaluate(op, args, attrs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES + [c + (None,) for c in ADJOINTS], ids=_id)
def test_grads(case):
    op, args, attrs, _ = case
    check_grads(op, args, attrs)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "pad"][::3] + ADJOINTS[:4],
                         ids=_id)
def test_second_order(case):
    check_second_order(*case[:3])


@pytest.mark.parametrize("case", CASES + [c + (None,) for c in ADJOINTS], ids=_id)
def test_jvp(case):
    from test_forward_ops import check_op
    op, args, attrs, _ = case
    check_op(op, args, attrs, roundtrip=op in ("conv2d", "max_pool2d"))


# ---- against PyTorch ---------------------------------------------------------------------

def _torch_call(op, args, attrs):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    a = dict(attrs)
    if op in ("max_pool2d", "avg_pool2d"):
        kernel = a.pop("kernel")
        return getattr(F, op)(*args, kernel, **a)
    if op == "pad":     # torch pads the last axis first
        widths = a.pop("widths")
        pairs = [widths[k:k + 2] for k in range(0, len(widths), 2)][::-1]
        return F.pad(*args, [w for p in pairs for w in p], value=a.pop("value", 0.0))
    return getattr(F, op)(*args, **a)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_values_and_grads_against_torch(case):
    torch = pytest.importorskip("torch")
    op, args, attrs, _ = case
    ts = [torch.tensor(a, requires_grad=True) for a in args]
    want = _torch_call(op, ts, attrs)
    ct = RNG.standard_normal(tuple(want.shape))
    want.backward(torch.tensor(ct))
    np.testing.assert_allclose(evaluate(op, args, attrs), want.detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    from adcompiler.passes.reverse import Reverse
    from gradcheck import one_op_module, run
    names = tuple(f"a{k}" for k in range(len(args)))
    module = Reverse(wrt=names, fn="f")(one_op_module(op, args, attrs))
    got = run(module, "f_grad", {**dict(zip(names, args)), "w0": ct})[1:]
    for g, t in zip(got, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-11, atol=1e-12)


def test_max_pool_ties_go_to_the_first_maximum_as_torch():
    """Windows full of equal values (and overlapping windows, and -inf beside the padding):
    the gradient goes to each window's first maximal element in row-major order."""
    x = np.array([[[[1., 1., 2., 2., 0.], [1., 1., 2., 2., 0.], [3., 0., 3., 3., 3.],
                    [0., 3., -np.inf, -np.inf, 3.], [1., 1., -np.inf, -np.inf, 1.]]]])
    for attrs in ({"kernel": 2}, {"kernel": 3, "stride": 1, "padding": 1},
                  {"kernel": [2, 3], "stride": [1, 2], "padding": [1, 1]}):
        g = RNG.standard_normal(evaluate("max_pool2d", [x], attrs).shape)
        got = evaluate("max_pool2d_grad", [x, g], attrs)
        # the reference: a loop over windows, the first maximum of each in row-major order
        k = _axes(attrs["kernel"], 2)
        s = _axes(attrs.get("stride", attrs["kernel"]), 2)
        p = _axes(attrs.get("padding", 0), 2)
        want = np.zeros_like(x)
        for b, c, i, j in np.ndindex(g.shape):
            rows = range(max(i * s[0] - p[0], 0), min(i * s[0] - p[0] + k[0], x.shape[2]))
            cols = range(max(j * s[1] - p[1], 0), min(j * s[1] - p[1] + k[1], x.shape[3]))
            at = max(itertools.product(rows, cols), key=lambda rc: (x[b, c, rc[0], rc[1]],
                                                                     -rc[0], -rc[1]))
            want[b, c, at[0], at[1]] += g[b, c, i, j]
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)  # sums of 2 or 3
        torch = pytest.importorskip("torch")
        xt = torch.tensor(x, requires_grad=True)
        a = dict(attrs)
        torch.nn.functional.max_pool2d(xt, a.pop("kernel"), **a).backward(torch.tensor(g))
        np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-14, atol=1e-15)


def test_max_pool_nan_propagates_and_takes_the_gradient_as_torch():
    x = np.array([[[[1., np.nan, 0.], [np.nan, 5., 2.], [7., 1., np.nan]]]])
    g = np.array([[[[2., 3.], [5., 7.]]]])
    attrs = {"kernel": 2, "stride": 1}
    got = evaluate("max_pool2d", [x], attrs)
    assert np.isnan(got).all()
    dx = evaluate("max_pool2d_grad", [x, g], attrs)
    # each window's last NaN: (1, 0) for the two left windows, (0, 1) and (2, 2) for the others
    np.testing.assert_array_equal(dx, [[[[0., 3., 0.], [7., 0., 0.], [0., 0., 7.]]]])
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_pool2d(xt, 2, 1).backward(torch.tensor(g))
    np.testing.assert_array_equal(evaluate("max_pool2d_grad", [x, g], attrs), xt.grad.numpy())


# ---- second order, batching and the emitted program ---------------------------------------

NET = """\
def f(param x: f64[2, 2, 6, 6], param w: f64[4, 2, 3, 3], param u: f64[4, 2, 3, 3],
      param v: f64[2, 3, 7], param k: f64[4, 3, 2]) -> f64 {
    h = conv2d(x, w, padding=1, stride=[1, 1])
    p = max_pool2d(tanh(h), 2)
    a = avg_pool2d(h, kernel=[3, 3], stride=1, padding=1)
    t = conv_transpose2d(p, u, stride=2, padding=1, output_padding=1)
    s = conv1d(v, k, padding="same", dilation=2)
    q = pad(v, [0, 0, 1, 1, 2, 0], 0.5)
    return sum(p * p) + sum(a * h) / 10.0 + sum(t * x) + sum(tanh(s)) + sum(q * q) / 10.0
}
"""


def net_inputs(scale=0.5):
    rng = np.random.default_rng(11)
    shapes = {"x": (2, 2, 6, 6), "w": (4, 2, 3, 3), "u": (4, 2, 3, 3), "v": (2, 3, 7),
              "k": (4, 3, 2)}
    return {n: scale * rng.standard_normal(s) for n, s in shapes.items()}


def test_hvp_of_a_small_network():
    from test_hvp import check_hvp
    small = NET.replace("f64[2, 2, 6, 6]", "f64[1, 2, 4, 4]").replace(
        "f64[2, 3, 7]", "f64[1, 3, 5]")
    inputs = net_inputs()
    inputs["x"], inputs["v"] = inputs["x"][:1, :, :4, :4], inputs["v"][:1, :, :5]
    check_hvp(small, inputs, ["x", "w", "u", "k"])


def test_network_gradient_against_torch():
    torch = pytest.importorskip("torch")
    import adcompiler as adc
    F = torch.nn.functional
    inputs = net_inputs()
    value, grads = adc.value_and_grad(adc.compile_source(NET, "net.tdsl"))(**inputs)
    ts = {n: torch.tensor(a, requires_grad=True) for n, a in inputs.items()}
    h = F.conv2d(ts["x"], ts["w"], padding=1)
    p = F.max_pool2d(torch.tanh(h), 2)
    a = F.avg_pool2d(h, 3, stride=1, padding=1)
    t = F.conv_transpose2d(p, ts["u"], stride=2, padding=1, output_padding=1)
    s = F.conv1d(ts["v"], ts["k"], padding="same", dilation=2)
    q = F.pad(ts["v"], [2, 0, 1, 1], value=0.5)
    loss = ((p * p).sum() + (a * h).sum() / 10 + (t * ts["x"]).sum() + torch.tanh(s).sum()
            + (q * q).sum() / 10)
    loss.backward()
    np.testing.assert_allclose(value, loss.item(), rtol=1e-12)
    for name, g in zip(inputs, grads):
        np.testing.assert_allclose(g, ts[name].grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)


def test_vmap_and_per_example_gradients():
    """vmap of a conv net folds the examples into N (any batch size); per-example gradients
    batch the weight's adjoint through the groups, which needs a static batch size (a
    symbolic one is refused by name)."""
    import adcompiler as adc
    from adcompiler.passes.batch import Batch
    src = """\
def f(param x: f64[1, 2, 5, 5], param w: f64[3, 2, 3, 3]) -> f64 {
    h = max_pool2d(tanh(conv2d(x, w, padding=1, stride=2)), 2, 1)
    return sum(h * h) + sum(avg_pool2d(pad(x, [0, 0, 0, 0, 1, 1, 1, 1]), 3))
}
"""
    module = adc.compile_source(src, "v.tdsl")
    rng = np.random.default_rng(2)
    xs, w = rng.standard_normal((4, 1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    f = adc.function(module)
    np.testing.assert_allclose(adc.vmap(f, in_axes={"x": 0})(xs, w),
                               [f(x, w) for x in xs], rtol=1e-12)
    g = adc.grad(module)
    with pytest.raises(adc.AdcError, match="batch: conv_weight_grad needs a static batch"):
        adc.vmap(g, in_axes={"x": 0})
    grads = adc.run_pipeline(module, "reverse{fn=f},cse,dce")
    per = Batch(fn="f_grad", inputs=("x",), size="4")(grads)
    adc.verify(per)
    got = adc.run(per, "f_grad_batched", x=xs, w=w)
    for i in range(4):
        want = adc.run(grads, "f_grad", x=xs[i], w=w)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a[i], b, rtol=1e-12, atol=1e-12)


def _conv_batch_cases():
    import test_batch
    return [c for c in test_batch.CASES if c[0].startswith("conv")]


@pytest.mark.parametrize("case", _conv_batch_cases(), ids=lambda c: c[0])
def test_weights_per_example_batch_through_the_groups(case):
    """Every choice of batched operands, with a static batch size of 3."""
    import adcompiler as adc
    import test_batch
    from adcompiler.passes.batch import Batch
    op, makers, attrs = case
    module = test_batch.one_op(op, [m() for m in makers], attrs)
    for subset in test_batch._subsets(len(makers)):
        batched = {f"a{k}": np.stack([makers[k]() for _ in range(3)]) for k in subset}
        shared = {f"a{k}": makers[k]() for k in range(len(makers)) if k not in subset}
        bm = Batch(fn="f", inputs=tuple(batched), size="3")(module)
        adc.verify(bm)
        [got] = adc.run(bm, "f_batched", {**batched, **shared})
        for i in range(3):
            args = [batched[f"a{k}"][i] if k in subset else shared[f"a{k}"]
                    for k in range(len(makers))]
            np.testing.assert_allclose(got[i], evaluate(op, args, attrs), rtol=1e-12,
                                       atol=1e-12)


def test_emitted_python_matches_the_executor(tmp_path):
    import adcompiler as adc
    path = tmp_path / "net.tdsl"
    path.write_text(NET)
    out = tmp_path / "net_grad.py"
    done = subprocess.run([sys.executable, "-m", "adcompiler", "compile", str(path), "--emit",
                           "python", "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    namespace = {"__name__": "emitted"}
    exec(compile(out.read_text(), str(out), "exec"), namespace)
    inputs = net_inputs()
    got = namespace["f_grad"](*inputs.values())
    want = adc.value_and_grad(adc.compile_source(NET, "net.tdsl"))(**inputs)
    np.testing.assert_array_equal(got[0], want[0])
    for a, b in zip(got[1:], want[1]):
        np.testing.assert_array_equal(a, b)


def test_the_tape_of_a_convolution_holds_its_input_and_weight():
    """The adjoint reads the forward's operands only: no im2col columns or other
    intermediates of the forward are kept for the backward."""
    import adcompiler as adc
    src = """\
def f(param x: f32[2, 3, 8, 8], param w: f32[4, 3, 3, 3]) -> f32 {
    return sum(conv2d(x, w, padding=1))
}
"""
    g = adc.run_pipeline(adc.compile_source(src, "t.tdsl"), "reverse{wrt=x,w},cse,dce")
    fn = g["f_grad"]
    adjoints = [op for op in fn.walk() if op.name.startswith("conv_")]
    assert sorted(op.name for op in adjoints) == ["conv_input_grad", "conv_weight_grad"]
    x, w = fn.args
    reads = {v for op in adjoints for v in op.operands if v.defining_op is None or
             v.defining_op.name == "conv2d"}
    assert reads <= {x, w}


# ---- bad input: located errors naming the shapes or the option ----------------------------

BAD = [
    ("conv2d(x, w6, groups=4)", "the 6 input channels of f32[2, 6, 5, 5] are not divisible "
                                "by groups=4"),
    ("conv2d(x, w3, groups=3)", "w f32[6, 3, 3, 3] has 3 input channels per group; x "
                                "f32[2, 6, 5, 5] with groups=3 needs 2"),
    ("conv2d(x, w6, groups=3)", "the 4 output channels of f32[4, 3, 3, 3] are not divisible "
                                "by groups=3"),
    ("conv2d(x, w9)", "the kernel [9, 9] is larger than the padded input: x f32[2, 6, 5, 5] "
                      "with padding [[0, 0], [0, 0]]"),
    ("conv2d(x, w9, padding=1, dilation=[1, 2])", "the kernel [9, 9] (dilation [1, 2]: extent "
                                                  "[9, 17]) is larger than the padded input"),
    ("conv2d(x[0, 0], w6)", "conv2d expects x of rank 4 [N, C, H, W] or 3 [C, H, W], got "
                            "f32[5, 5]"),
    ("conv2d(x[0], w6)", "w f32[4, 3, 3, 3] has 3 input channels per group; x f32[6, 5, 5] "
                         "with groups=1 needs 6"),
    ("conv1d(x, w6)", "conv1d expects x of rank 3 [N, C, L] or 2 [C, L], got "
                      "f32[2, 6, 5, 5]"),
    ("conv2d(x, w6, stride=0)", "conv2d: stride must be positive, got 0"),
    ("conv2d(x, w6, stride=[1, 2, 3])", "stride must be an int or a list of 2 ints"),
    ("conv2d(x, w6, padding=-1)", "conv2d: padding must be at least 0, got -1"),
    ('conv2d(x, w6, padding="same", stride=2)', 'padding="same" needs stride 1, got stride '
                                                '[2, 2]'),
    ('conv2d(x, w6, padding="full")', 'padding must be an int, a list of ints, "same" or '
                                      '"valid", got "full"'),
    ("conv2d(x, w6, padding=1.5)", 'conv2d expects an integer, a list of integers, "same" '
                                   'or "valid", got 1.5'),
    ("conv2d(x, w6, groups=0)", "groups must be a positive int, got 0"),
    ("conv_transpose2d(x, w6, stride=2, output_padding=2)",
     "output_padding 2 must be smaller than the stride [2, 2] or the dilation [1, 1]"),
    ('conv_transpose2d(x, w6, padding="same")', 'padding="same" is not defined'),
    ("max_pool2d(x, 3, 1, 2)", "max_pool2d: padding 2 must be at most half the kernel [3, 3]"),
    ("max_pool2d(x, 6)", "max_pool2d: the kernel [6, 6] is larger than the padded input"),
    ("avg_pool2d(x, 2, stride=0)", "avg_pool2d: stride must be positive, got 0"),
    ("avg_pool2d(x[0, 0], 2)", "avg_pool2d expects x of rank 4 [N, C, H, W] or 3 [C, H, W], "
                               "got f32[5, 5]"),
    ("pad(x, [1, 1])", "pad: widths must be a list of 8 ints (before and after each of the 4 "
                       "axes), got [1, 1]"),
    ("pad(x, [0, 0, 0, 0, -1, 0, 0, 0])", "pad: widths must not be negative"),
]
HEAD = ("def f(x: f32[2, 6, 5, 5], w6: f32[4, 3, 3, 3], w3: f32[6, 3, 3, 3],\n"
        "      w9: f32[4, 6, 9, 9]) -> f32 {\n"
        "    y = ")


@pytest.mark.parametrize("call,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_located_error(call, message):
    import adcompiler as adc
    with pytest.raises(adc.AdcError) as e:
        adc.compile_source(HEAD + call + "\n    return sum(y)\n}\n", "bad.tdsl")
    assert message in e.value.message
    assert e.value.loc.line == 3 and e.value.loc.col >= 9   # the call, or its option


def test_bad_input_through_the_cli(tmp_path):
    path = tmp_path / "bad.tdsl"
    path.write_text(HEAD + "conv2d(x, w6, groups=4)\n    return sum(y)\n}\n")
    done = subprocess.run([sys.executable, "-m", "adcompiler", "check", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert (f"{path}:3:9: error: conv2d: the 6 input channels of f32[2, 6, 5, 5] are not "
            "divisible by groups=4") in done.stderr


def test_type_errors_of_the_adjoint_ops():
    with pytest.raises(ShapeError, match="more positions than the"):
        build("conv_input_grad", [r(1, 2, 4, 4), r(2, 1, 3, 3)], {"shape": [4, 4]})
    with pytest.raises(ShapeError, match="does not fit the windows"):
        build("conv_weight_grad", [r(1, 2, 4, 4), r(1, 2, 3, 3)], {"kernel": [3, 3]})
    with pytest.raises(ShapeError, match="must have the type"):
        build("max_pool2d_grad", [r(1, 2, 4, 4), r(1, 2, 3, 3)], {"kernel": 2})
    with pytest.raises(ShapeError, match="must have the type"):
        build("avg_pool2d_grad", [r(1, 2, 2, 2)], {"kernel": 2, "shape": [6, 5]})
