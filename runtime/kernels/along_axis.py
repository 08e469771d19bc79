"""Kernels of the ops along one axis: argmax, argmin, cumsum.

A 0-d operand is one element along its only axis (argmax 0, cumsum itself). NumPy and CuPy
return the first index of an extremum on ties; cumsum is given its result dtype, since
NumPy sums a narrower integer in the platform's integer and a bool mask in int64.
"""
from .table import DTYPES, kernel


def _arg(name: str):
    def run(xp, x, axis=-1):
        if x.ndim == 0:
            return xp.zeros((), dtype="int64")
        if x.shape[axis] == 0:   # NumPy's own message names no axis
            raise ValueError(f"{name} of an empty axis: axis {axis} of an array of shape "
                             f"{tuple(x.shape)} has no elements")
        return getattr(xp, name)(x, axis=axis).astype("int64", copy=False)
    return run


kernel("argmax")(_arg("argmax"))
kernel("argmin")(_arg("argmin"))


@kernel("cumsum")
def cumsum(xp, x, axis, reverse=False):
    dtype = "int64" if x.dtype == bool else x.dtype
    if x.ndim == 0:
        return x.astype(dtype, copy=True)
    if not reverse:
        return xp.cumsum(x, axis=axis, dtype=dtype)
    # the running sum of the flipped axis written through a flipped view of the result:
    # one pass, and the result is an ordinary contiguous array
    out = xp.empty(x.shape, dtype=dtype)
    xp.cumsum(xp.flip(x, axis), axis=axis, dtype=dtype, out=xp.flip(out, axis))
    return out
