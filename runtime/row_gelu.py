"""Row passes of the exact GELU, ``x Phi(x)`` with erf, forward and adjoint.

The same operations as the table kernel (`adc_runtime.kernels.elementwise.gelu`) and the
GELU rule's derivative (`adcompiler.ops.elementwise`), in the same order, so the results
have the same bits; erf and exp stay SciPy's and NumPy's own calls between the loops
(`row_passes` says why):

* forward ``(0.5 * x) * (1 + erf(x * sqrt(0.5)))``: the product, erf in place, then
  `row_passes.gelu_tanh_outer` (the same last step as the tanh GELU);
* adjoint ``ct * (0.5 * (1 + erf(x * sqrt(0.5))) + x * (c * exp(-0.5 * square(x))))``
  with ``c = 1 / sqrt(2 pi)``: both arguments in one loop, erf and exp in place, the rest
  in a second loop.
"""
from __future__ import annotations

import math

import numpy

from . import row_passes


def gelu_erf_grad_inner(x, t, u, r2, mhalf):
    """``t = x * sqrt(0.5)``, ``u = -0.5 * square(x)`` (flat arrays)."""
    for i in range(x.shape[0]):
        v = x[i]
        t[i] = v * r2
        u[i] = mhalf * (v * v)


def gelu_erf_grad_outer(x, t, u, ct, out, half, one, c):
    """``ct * (half * (1 + t) + x * (c * u))``, `t` the erf, `u` the exp."""
    for i in range(x.shape[0]):
        out[i] = ct[i] * ((half * (one + t[i])) + x[i] * (c * u[i]))


row_passes.register(globals(), (gelu_erf_grad_inner, gelu_erf_grad_outer))


def _erf():
    from scipy.special import erf
    return erf


def gelu_erf_runner(shape, dtype):
    """The exact GELU: ``x * sqrt(0.5)`` into a temporary, erf in place, ``0.5 x (1 +
    t)``. The temporary keeps the output free to be the operand's own buffer."""
    outer = row_passes.get("gelu_tanh_outer")
    r2, half, one = dtype.type(math.sqrt(0.5)), dtype.type(0.5), dtype.type(1.0)
    erf, multiply, out_for = _erf(), numpy.multiply, row_passes.out_for

    def run(x, out):
        out = out_for(shape, dtype, (x,), out)
        if out is None:
            return None
        xf = x.reshape(-1)
        t = multiply(xf, r2)
        erf(t, out=t)
        outer(xf, t, out.reshape(-1), half, one)
        return (out,)
    return run


def gelu_erf_adjoint(m, shape, np_dtype, dtype, resolve):
    """The runner of the exact GELU's adjoint matched by `row_patterns` (``x``, ``ct``)."""
    x, ct = m.env["x"], m.env["ct"]
    if not all(v.type.dtype == dtype and tuple(resolve(v.type.shape)) == shape
               for v in (x, ct)):
        return None
    c = {k: m.env["const:" + k][()] for k in ("half", "one", "r2", "mhalf", "c")}
    inner, outer = row_passes.get("gelu_erf_grad_inner"), row_passes.get("gelu_erf_grad_outer")
    erf, exp, empty, out_for = _erf(), numpy.exp, numpy.empty, row_passes.out_for

    def run(x_, ct_, out, _unused):
        out = out_for(shape, np_dtype, (x_, ct_), out)
        if out is None:
            return None
        xf = x_.reshape(-1)
        t, u = empty(xf.shape[0], np_dtype), empty(xf.shape[0], np_dtype)
        inner(xf, t, u, c["r2"], c["mhalf"])
        erf(t, out=t)
        exp(u, out=u)
        outer(xf, t, u, ct_.reshape(-1), out.reshape(-1), c["half"], c["one"], c["c"])
        return (out,)
    return [x, ct], (), run
