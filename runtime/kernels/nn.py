"""Kernels of neural-net ops, stop_gradient and cast.

Softmax-like kernels subtract the maximum along the axis so that exp never overflows;
bce_with_logits uses max(z, 0) - z*y + log1p(exp(-|z|)). Python scalars keep the array's
dtype (NumPy >= 2 promotion), so every kernel computes in its input dtype.
"""
from .table import DTYPES, kernel, out_kernel


def _shifted(xp, x, axis):
    if x.size == 0:  # an empty axis has no maximum (NumPy raises), and nothing to shift
        return x.copy()
    return x - xp.max(x, axis=axis, keepdims=True)


def _log_softmax(xp, x, axis):
    s = _shifted(xp, x, axis)
    return s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))


@kernel("softmax")
def softmax(xp, x, axis=-1):
    e = xp.exp(_shifted(xp, x, axis))
    return e / xp.sum(e, axis=axis, keepdims=True)


@out_kernel("softmax", rule="float")
def softmax_out(xp, x, out, axis=-1):
    """`softmax` computed in `out`: the shift, the exponential and the division in place."""
    if x.size == 0:
        return out
    xp.subtract(x, xp.max(x, axis=axis, keepdims=True), out=out)
    xp.exp(out, out=out)
    return xp.divide(out, xp.sum(out, axis=axis, keepdims=True), out=out)


@kernel("log_softmax")
def log_softmax(xp, x, axis=-1):
    return _log_softmax(xp, x, axis)


@kernel("cross_entropy")
def cross_entropy(xp, logits, labels, axis=-1):
    ls = _log_softmax(xp, logits, axis)
    if labels.dtype.kind == "f":
        return -xp.sum(labels * ls, axis=axis)
    n = logits.shape[axis]
    if labels.size:  # NumPy would wrap a negative label round, CuPy read out of bounds
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= n:
            raise ValueError(f"class labels outside [0, {n}) (found {lo} to {hi})")
    picked = xp.take_along_axis(ls, xp.expand_dims(labels, axis), axis=axis)
    return -xp.squeeze(picked, axis=axis)


@kernel("bce")
def bce(xp, p, y):
    return -(y * xp.log(p) + (1 - y) * xp.log1p(-p))


@kernel("bce_with_logits")
def bce_with_logits(xp, z, y):
    return xp.maximum(z, 0) - z * y + xp.log1p(xp.exp(-xp.abs(z)))


@kernel("mse")
def mse(xp, a, b):
    d = a - b
    return xp.mean(d * d)


@kernel("layernorm")
def layernorm(xp, x, gamma, beta, axis=-1, eps=1e-5):
    axis = axis % x.ndim
    xc = x - xp.mean(x, axis=axis, keepdims=True)
    var = xp.mean(xc * xc, axis=axis, keepdims=True)
    xhat = xc / xp.sqrt(var + eps)
    return xhat * _placed(xp, gamma, x, axis) + _placed(xp, beta, x, axis)


@out_kernel("layernorm", rule="float")
def layernorm_out(xp, x, gamma, beta, out, axis=-1, eps=1e-5):
    """`layernorm` with the centred `x`, its normalized form and the affine map computed
    in `out`, and one temporary for the squares (the table kernel makes five arrays)."""
    axis = axis % x.ndim
    xc = xp.subtract(x, xp.mean(x, axis=axis, keepdims=True), out=out)
    var = xp.mean(xp.multiply(xc, xc), axis=axis, keepdims=True)
    xp.add(var, eps, out=var)
    xp.divide(xc, xp.sqrt(var, out=var), out=out)
    xp.multiply(out, _placed(xp, gamma, x, axis), out=out)
    return xp.add(out, _placed(xp, beta, x, axis), out=out)


def _placed(xp, p, x, axis):
    """A 1-D gamma/beta lies along `axis` (see `adcompiler.ops.nn.affine_along_axis`)."""
    if p.ndim == 1 and axis != x.ndim - 1 and p.shape[0] == x.shape[axis]:
        return xp.reshape(p, [p.shape[0] if k == axis else 1 for k in range(x.ndim)])
    return p


@kernel("take")
def take(xp, table, idx, axis=0):
    return xp.take(table, idx, axis=axis)


@kernel("take_grad")
def take_grad(xp, ct, idx, axis, shape):
    return take_grad_out(xp, ct, idx, out=xp.empty(tuple(shape), dtype=ct.dtype), axis=axis)


@out_kernel("take_grad", rule="first")
def take_grad_out(xp, ct, idx, out, axis, shape=None):
    """Scatter-add `ct` into zeros of `shape` at `idx` along `axis`.

    NumPy's ``add.at`` accumulates repeated indices (plain ``out[key] += ct`` would not);
    on CuPy the same unbuffered scatter is ``cupyx.scatter_add``.
    """
    out.fill(0)
    key = (slice(None),) * axis + (idx,)
    if xp.__name__ == "numpy":
        xp.add.at(out, key, ct)
    else:
        import cupyx
        cupyx.scatter_add(out, key, ct)
    return out


@kernel("one_hot")
def one_hot(xp, idx, n, dtype="f32"):
    return (xp.expand_dims(idx, -1) == xp.arange(n)).astype(DTYPES[dtype])


@kernel("stop_gradient")
def stop_gradient(xp, x):
    return x


@kernel("cast")
def cast(xp, x, dtype):
    return x.astype(DTYPES[dtype])
