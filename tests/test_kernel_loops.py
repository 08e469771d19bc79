"""The compiled loops of col2im and max pooling's adjoint (`adc_runtime.kernels.loops`) give
the bits of the kernels' NumPy form, over the options, ties, NaN, -inf and edge shapes;
and they run only under the row passes' gate."""
from __future__ import annotations

import numpy as np
import pytest

from adc_runtime.kernels import KERNELS, loops
from adc_runtime.kernels.pool import geometry

pytest.importorskip("numba")


def both(monkeypatch, call):
    """`call()` with the NumPy form, then with the loops."""
    monkeypatch.setattr(loops, "active", lambda: False)
    plain = call()
    monkeypatch.setattr(loops, "active", lambda: True)
    return plain, call()


POOLS = [  # (H, W), kernel, stride, padding, dilation, ceil_mode
    ((7, 9), 2, None, 0, 1, False),
    ((7, 9), 3, 2, 1, 1, True),
    ((8, 8), 3, 1, 1, 2, False),
    ((5, 6), (2, 3), (1, 2), (1, 1), 1, True),
    ((4, 4), 2, 2, 0, 1, False),
    ((1, 1), 1, 1, 0, 1, False),
    ((3, 5), (3, 1), 1, (1, 0), (1, 1), True),
]


@pytest.mark.parametrize("size,k,s,p,d,ceil", POOLS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_grad_loop_has_the_numpy_bits(monkeypatch, size, k, s, p, d, ceil, dtype):
    rng = np.random.default_rng(0)
    x = np.round(rng.standard_normal((2, 3) + size), 1).astype(dtype)   # ties
    x[0, 0, 0, :3] = np.nan
    x[1, 1, :2, :2] = -np.inf
    x[0, 2] = -np.inf                                 # a plane of -inf: first elements
    count = geometry(size, k, s, p, d, ceil)[-1]
    g = rng.standard_normal((2, 3) + count).astype(dtype)
    opts = dict(kernel=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
    for xs, gs in ((x, g), (x[1], g[1])):             # a batch, and one image
        plain, looped = both(monkeypatch,
                             lambda: KERNELS["max_pool2d_grad"](np, xs, gs, **opts))
        assert looped.dtype == plain.dtype and looped.shape == plain.shape
        assert np.array_equal(plain, looped, equal_nan=True)


def test_max_pool_grad_loop_of_an_empty_batch(monkeypatch):
    x, g = np.zeros((0, 2, 4, 4)), np.zeros((0, 2, 2, 2))
    plain, looped = both(monkeypatch, lambda: KERNELS["max_pool2d_grad"](np, x, g, kernel=2))
    assert looped.shape == plain.shape == (0, 2, 4, 4)


CONVS = [  # spatial, kernel, stride, padding, dilation, groups
    ((9, 9), (3, 3), 1, 1, 1, 1),
    ((9, 8), (3, 2), 2, 1, 2, 2),
    ((10,), (3,), 2, 1, 1, 1),
    ((6, 7), (2, 2), (2, 1), 0, (1, 2), 1),
    ((5, 5), (3, 3), 1, "same", 1, 4),
    ((1, 1), (1, 1), 1, 0, 1, 1),
]


@pytest.mark.parametrize("spatial,k,s,p,d,groups", CONVS)
def test_col2im_loop_has_the_numpy_bits(monkeypatch, spatial, k, s, p, d, groups):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4) + spatial)
    w = rng.standard_normal((8, 4 // groups) + k).astype(np.float32)
    opts = dict(stride=s, padding=p, dilation=d, groups=groups)
    y = KERNELS["conv2d" if len(spatial) == 2 else "conv1d"](np, x, w.astype(x.dtype), **opts)
    g = rng.standard_normal(y.shape).astype(np.float32)
    plain, looped = both(monkeypatch,
                         lambda: KERNELS["conv_input_grad"](np, g, w, spatial, **opts))
    assert looped.dtype == np.float32
    assert np.array_equal(plain, looped)


@pytest.mark.parametrize("spatial,k,s,p,d,groups", CONVS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_im2col_loop_has_the_numpy_bits(monkeypatch, spatial, k, s, p, d, groups, dtype):
    """The forward and the weight's adjoint read the same columns, padding included."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4) + spatial).astype(dtype)
    w = rng.standard_normal((8, 4 // groups) + k).astype(dtype)
    opts = dict(stride=s, padding=p, dilation=d, groups=groups)
    op = "conv2d" if len(spatial) == 2 else "conv1d"
    plain, looped = both(monkeypatch, lambda: KERNELS[op](np, x, w, **opts))
    assert looped.dtype == dtype and np.array_equal(plain, looped)
    g = rng.standard_normal(plain.shape).astype(dtype)
    plain, looped = both(monkeypatch,
                         lambda: KERNELS["conv_weight_grad"](np, x, g, k, **opts))
    assert looped.dtype == dtype and np.array_equal(plain, looped)
    plain, looped = both(monkeypatch, lambda: KERNELS[op](np, x[0], w, **opts))  # one image
    assert np.array_equal(plain, looped)


def test_the_loops_follow_the_row_passes_gate(monkeypatch):
    monkeypatch.setenv("ADC_FUSE", "0")
    assert not loops.active()
    monkeypatch.setenv("ADC_FUSE", "1")
    assert loops.active()


def test_gradients_through_the_loops_against_torch(monkeypatch):
    """A conv -> max pool network's gradient with the loops on, against PyTorch's."""
    torch = pytest.importorskip("torch")
    import adcompiler as adc
    monkeypatch.setenv("ADC_FUSE", "1")
    src = """
def f(x: f64[2, 3, 9, 9], w: f64[4, 3, 3, 3], g: f64[2, 4, 5, 5]) -> f64 {
    return sum(max_pool2d(conv2d(x, w, padding=1, stride=1), 3, stride=2, padding=1) * g)
}
"""
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal((2, 3, 9, 9)), "w": rng.standard_normal((4, 3, 3, 3)),
              "g": rng.standard_normal((2, 4, 5, 5))}
    _, (dx, dw) = adc.value_and_grad(adc.compile_source(src, "f.tdsl"), wrt=("x", "w"))(**inputs)
    t = {k: torch.tensor(v, requires_grad=k != "g") for k, v in inputs.items()}
    F = torch.nn.functional
    (F.max_pool2d(F.conv2d(t["x"], t["w"], padding=1), 3, stride=2, padding=1)
     * t["g"]).sum().backward()
    np.testing.assert_allclose(dx, t["x"].grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, t["w"].grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.dtype(">f4")])
def test_dtypes_the_loops_do_not_take_run_the_numpy_form(monkeypatch, dtype):
    """float16 and a swapped byte order: numba compiles neither, so the kernels run their
    NumPy form even with the loops on."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 6, 6)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    g = rng.standard_normal((2, 4, 6, 6)).astype(dtype)
    calls = [lambda: KERNELS["conv2d"](np, x, w, padding=1),
             lambda: KERNELS["conv_input_grad"](np, g, w, (6, 6), padding=1),
             lambda: KERNELS["conv_weight_grad"](np, x, g, (3, 3), padding=1),
             lambda: KERNELS["max_pool2d_grad"](np, x, x[:, :, :3, :3], kernel=2)]
    for call in calls:
        plain, looped = both(monkeypatch, call)
        assert np.array_equal(plain, looped)
