"""What convolution and pooling share: options given per spatial axis, padding, output sizes
and the checks of their type rules, and the batching and cropping helpers of their rules.

An option "per spatial axis" is an int (the same on every axis) or a list of one int per
axis; `padding` may also be ``"valid"`` (none) or ``"same"`` (the output keeps the input's
size: stride 1, ``dilation * (kernel - 1)`` elements split with the odd one after, as
PyTorch does). Every check raises `ShapeError` naming the op, the option and the shapes.
"""
from __future__ import annotations

import math

from ..diagnostics import ShapeError
from ..ir.types import TensorType, dim_mul, join_dtypes
from .batching import materialize

LAYOUT = {1: "[N, C, L]", 2: "[N, C, H, W]"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_text(x) for x in v) + "]"
    return str(v)


def per_axis(op: str, name: str, value, n: int, minimum: int = 0) -> tuple[int, ...]:
    """`value` (an int or a list of `n` ints, each at least `minimum`) as `n` ints."""
    if _is_int(value):
        vals = (value,) * n
    elif isinstance(value, (list, tuple)) and len(value) == n and all(map(_is_int, value)):
        vals = tuple(value)
    else:
        raise ShapeError(f"{op}: {name} must be an int or a list of {n} int"
                         f"{'s' if n > 1 else ''} (one per spatial axis), got {_text(value)}")
    if any(v < minimum for v in vals):
        what = "positive" if minimum == 1 else f"at least {minimum}"
        raise ShapeError(f"{op}: {name} must be {what}, got {_text(value)}")
    return vals


def padding_pairs(op: str, padding, n: int, kernel, dilation, stride):
    """The (before, after) padding of each spatial axis."""
    if padding == "valid":
        return ((0, 0),) * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ShapeError(f'{op}: padding="same" needs stride 1, got stride {_text(stride)}')
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)
    if isinstance(padding, str):
        raise ShapeError(f'{op}: padding must be an int, a list of ints, "same" or "valid", '
                         f"got {_text(padding)}")
    return tuple((p, p) for p in per_axis(op, "padding", padding, n, 0))


def static(op: str, what: str, t: TensorType, axes) -> None:
    """The sizes of `axes` of `t` must be integers (channels, spatial sizes, kernels)."""
    if not all(_is_int(t.shape[a]) for a in axes):
        raise ShapeError(f"{op}: {what} {t} needs static channel and spatial sizes "
                         "(only the batch size N may be symbolic)")


def batched_input(op: str, x: TensorType, n: int) -> None:
    if x.rank != n + 2:
        raise ShapeError(f"{op} expects x of rank {n + 2} {LAYOUT.get(n, '')}, got {x}")
    if not x.is_float:
        raise ShapeError(f"{op} expects a float tensor, got {x}")
    static(op, "x", x, range(1, x.rank))


def same_float(op: str, *types: TensorType) -> str:
    for t in types:
        if not t.is_float:
            raise ShapeError(f"{op} expects float tensors, got {t}")
    return join_dtypes(*(t.dtype for t in types))


def window_count(op: str, size: int, lo: int, hi: int, extent: int, stride: int,
                 what: str) -> int:
    """The number of windows of `extent` elements, `stride` apart, in ``size + lo + hi``."""
    if size + lo + hi < extent:
        raise ShapeError(f"{op}: the {what} is larger than the padded input ({what} "
                         f"{extent} > input {size} + padding {lo + hi})")
    return (size + lo + hi - extent) // stride + 1


def windows(op: str, x: TensorType, kernel, stride, pads, dilation, what="kernel"):
    """The output's spatial sizes of windows of `kernel` over the spatial axes of `x`."""
    spatial = x.shape[x.rank - len(kernel):]
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    if any(e > s + lo + hi for e, s, (lo, hi) in zip(extents, spatial, pads)):
        raise ShapeError(f"{op}: the {what} {_text(list(kernel))}"
                         + (f" (dilation {_text(list(dilation))}: extent {_text(extents)})"
                            if any(d != 1 for d in dilation) else "")
                         + f" is larger than the padded input: x {x} with padding "
                         + _text([list(p) for p in pads]))
    return tuple(window_count(op, s, lo, hi, e, st, what)
                 for s, (lo, hi), e, st in zip(spatial, pads, extents, stride))


def flops_of_windows(op, elements) -> int:
    """Two per result element and multiply-add of the channels and taps it sums."""
    w = op.operands[1].type
    return 2 * elements(op.results[0].type.shape) * math.prod(w.shape[1:])


# ---- rule helpers ------------------------------------------------------------------------

def crop(b, y, spatial):
    """`y` cut to the leading `spatial` sizes of its spatial axes (a no-op when they match)."""
    have = y.type.shape[2:]
    if tuple(have) == tuple(spatial):
        return y
    idx = [[None, None, None]] * 2 + [[0, s, None] for s in spatial]
    return b.emit("index", y, idx=tuple(tuple(e) for e in idx))


def fold(b, v):
    """A batch `[n, N, ...]` as `[n*N, ...]`: the examples folded into the batch axis."""
    n, lead = v.type.shape[:2]
    return b.emit("reshape", v, shape=(dim_mul(n, lead),) + tuple(v.type.shape[2:]))


def unfold(b, y, n, lead):
    """`y` of shape `[n*N, ...]` back to `[n, N, ...]`."""
    return b.emit("reshape", y, shape=(n, lead) + tuple(y.type.shape[1:]))


def channels_of_examples(b, v):
    """A batch `[n, N, C, ...]` as `[N, n*C, ...]`: each example's channels a group of its own."""
    n, lead, c = v.type.shape[:3]
    perm = [1, 0] + list(range(2, v.type.rank))
    v = b.emit("transpose", v, perm=tuple(perm))
    return b.emit("reshape", v, shape=(lead, dim_mul(n, c)) + tuple(v.type.shape[3:]))


def examples_of_channels(b, y, n):
    """`y` of shape `[N, n*C, ...]` back to `[n, N, C, ...]`."""
    lead, nc = y.type.shape[:2]
    y = b.emit("reshape", y, shape=(lead, n, nc // n) + tuple(y.type.shape[2:]))
    return b.emit("transpose", y, perm=(1, 0) + tuple(range(2, y.type.rank)))


def shared_to_batch(b, args, batched, n):
    return [a if f else materialize(b, a, n) for a, f in zip(args, batched)]
