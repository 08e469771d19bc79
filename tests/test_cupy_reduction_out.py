"""CuPy 14's max/min pass `out` to their CUB reduction where its `dtype` goes, and fail
(seen on an H100 with CuPy 14.2): the in-place reduction kernels must never hand `out` to
a non-NumPy array module's max or min, and must still fill `out`."""
import types

import numpy as np
import pytest

from adc_runtime.kernels import OUT_KERNELS


def _module_refusing_out():
    def refuse(name):
        def f(x, axis=None, keepdims=False, out=None):
            if out is not None:
                raise TypeError(f"{name}: out= reaches CUB as its dtype")
            return getattr(np, name)(x, axis=axis, keepdims=keepdims)
        return f
    xp = types.SimpleNamespace(__name__="cupy", max=refuse("max"), min=refuse("min"),
                               copyto=np.copyto)
    return xp


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("axis, keepdims", [((0, 2), False), (1, True), (None, False)])
def test_max_min_fill_out_without_passing_it_to_cupy(name, axis, keepdims):
    x = np.random.default_rng(0).standard_normal((5, 3, 4))
    x[1, 2, 3] = np.nan
    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    out = np.empty_like(want)
    got = OUT_KERNELS[name](_module_refusing_out(), x, axis=axis, keepdims=keepdims, out=out)
    assert got is out
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("name", ["max", "min"])
def test_numpy_keeps_writing_into_out(name):
    x = np.arange(12.0).reshape(3, 4)
    out = np.empty(4)
    assert OUT_KERNELS[name](np, x, axis=0, out=out) is out
    np.testing.assert_array_equal(out, getattr(np, name)(x, axis=0))
