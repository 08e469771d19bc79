"""Kernels of shape ops (and of `split`, `index_grad`, their adjoint helpers)."""
from .table import kernel, out_kernel


@kernel("reshape")
def reshape(xp, x, shape):
    return xp.reshape(x, tuple(shape))


@kernel("broadcast_to")
def broadcast_to(xp, x, shape):
    return xp.broadcast_to(x, tuple(shape))


@kernel("expand_dims")
def expand_dims(xp, x, axis):
    return xp.expand_dims(x, axis)


@kernel("squeeze")
def squeeze(xp, x, axis=None):
    # axis=None squeezes the axes of size 1 at run time; the type rule squeezes only axes
    # statically 1, so a symbolic dim bound to 1 would differ: lowering passes explicit axes
    # when it can.
    return xp.squeeze(x, axis=None if axis is None else
                      (axis if isinstance(axis, int) else tuple(axis)))


@kernel("concat")
def concat(xp, *xs, axis=0):
    return xp.concatenate(xs, axis=axis)


@kernel("split")
def split(xp, x, axis, shape):
    ends, total = [], 0
    for n in shape[:-1]:
        total += n
        ends.append(total)
    return tuple(xp.split(x, ends, axis=axis))


@kernel("stack")
def stack(xp, *xs, axis=0):
    return xp.stack(xs, axis=axis)


@out_kernel("concat")
def concat_out(xp, *xs, out, axis=0):
    return xp.concatenate(xs, axis=axis, out=out)


@out_kernel("stack")
def stack_out(xp, *xs, out, axis=0):
    return xp.stack(xs, axis=axis, out=out)


def index_key(idx, dyn) -> tuple:
    """The Python subscript of an `idx` attribute: ints, slices, and '?' from `dyn`."""
    dyn = iter(dyn)
    key = []
    for e in idx:
        if isinstance(e, str):        # "?": a dynamic index (an integer scalar array)
            key.append(int(next(dyn)))
        elif isinstance(e, (list, tuple)):
            key.append(slice(*e))
        else:
            key.append(e)
    return tuple(key)


@kernel("index")
def index(xp, x, *dyn, idx):
    return x[index_key(idx, dyn)]


@kernel("index_grad")
def index_grad(xp, ct, *dyn, idx, shape):
    return index_grad_out(xp, ct, *dyn, out=xp.empty(tuple(shape), dtype=ct.dtype), idx=idx)


@out_kernel("index_grad", rule="first")
def index_grad_out(xp, ct, *dyn, out, idx, shape=None):
    # basic indexing reaches each element at most once, so assignment scatters exactly
    out.fill(0)
    out[index_key(idx, dyn)] = ct
    return out


@kernel("pad")
def pad(xp, x, widths, value=0.0):
    """`x` inside an array of `value`, `widths[2k]` before and `widths[2k+1]` after axis k."""
    lo, hi = widths[0::2], widths[1::2]
    out = xp.full(tuple(d + a + b for d, a, b in zip(x.shape, lo, hi)), value, dtype=x.dtype)
    out[tuple(slice(a, a + d) for d, a in zip(x.shape, lo))] = x
    return out
