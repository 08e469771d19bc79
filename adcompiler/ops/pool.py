"""Pooling: max_pool2d (and max_pool2d_indices) and avg_pool2d, with their adjoint ops.

As ``torch.nn.functional``: windows of `kernel`, `stride` apart (default: the kernel), over
`x: [N, C, H, W]` or one example `[C, H, W]`, padded by `padding` on each side (at most half
the kernel). Max pooling may space a window's taps `dilation` apart; with ``ceil_mode`` the
pooled size rounds up, so a last window may reach past the padding (its part outside the
input and padding is not read) as long as it starts inside the input or the left padding
(PyTorch's ``pooling_output_shape``). A window that holds no element of `x` (possible only
with dilation) is refused: PyTorch's kernel gives -inf there and an index outside the plane.

Max pooling reads the padding as -inf and picks, in each window, its first maximal element
in row-major order; its derivative flows through that element:

* ``max_pool2d_grad(x, g)`` scatters `g` (pooled shape) to the picked elements (x's shape);
* ``max_pool2d_select(x, t)`` gathers the picked elements' entries of `t` (its transpose,
  and max_pool2d's JVP);
* ``max_pool2d_indices(x)`` is the picked element's flat index ``h * W + w`` in its (N, C)
  plane, as PyTorch's ``return_indices=True`` (i64, no derivative).

The first two are linear in their second operand and constant in `x` (the pick changes
only where the maximum is tied). Average pooling divides each window's sum by the number of
its elements in the input and padding (PyTorch's ``count_include_pad=True``), in the input
alone (``count_include_pad=false``), or by ``divisor_override``; ``avg_pool2d_grad(g;
shape)`` is its transpose.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..ir.types import TensorType
from .batching import materialize
from .registry import Option, register
from .windows import _is_int, _text, fold, per_axis, static, unfold

WINDOW = (Option("kernel", "spatial"), Option("stride", "spatial", None),
          Option("padding", "spatial", 0))
MAX_OPTIONS = WINDOW + (Option("dilation", "spatial", 1), Option("ceil_mode", "bool", False))
AVG_OPTIONS = WINDOW + (Option("ceil_mode", "bool", False),
                        Option("count_include_pad", "bool", True),
                        Option("divisor_override", "int", None))


def geometry(op: str, attrs):
    """kernel, stride, padding, dilation and ceil_mode of a pooling op, checked."""
    kernel = per_axis(op, "kernel", attrs["kernel"], 2, 1)
    stride = kernel if attrs["stride"] is None else per_axis(op, "stride", attrs["stride"], 2, 1)
    if isinstance(attrs["padding"], str):
        raise ShapeError(f"{op}: padding must be an int or a list of 2 ints, got "
                         f"{_text(attrs['padding'])}")
    padding = per_axis(op, "padding", attrs["padding"], 2, 0)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ShapeError(f"{op}: padding {_text(attrs['padding'])} must be at most half the "
                         f"kernel {_text(list(kernel))}")
    dilation = per_axis(op, "dilation", attrs.get("dilation", 1), 2, 1)
    ceil = attrs.get("ceil_mode", False)
    if not isinstance(ceil, bool):
        raise ShapeError(f"{op}: ceil_mode must be true or false, got {_text(ceil)}")
    return kernel, stride, padding, dilation, ceil


def pooled_size(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """The number of windows along one axis (PyTorch's ``pooling_output_shape``): with
    `ceil`, rounded up, less a last window that would start past the input and the left
    padding."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _empty_window(size: int, k: int, s: int, p: int, d: int, count: int):
    """The first window along an axis whose taps all miss the input, or None."""
    for o in range(count):
        start = o * s - p
        if not any(0 <= start + t * d < size for t in range(k)):
            return o
    return None


def pool_input(op: str, x: TensorType) -> None:
    if x.rank not in (3, 4):
        raise ShapeError(f"{op} expects x of rank 4 [N, C, H, W] or 3 [C, H, W], got {x}")
    if not x.is_float:
        raise ShapeError(f"{op} expects a float tensor, got {x}")
    static(op, "x", x, range(x.rank - 3, x.rank))


def pooled(op: str, x, attrs):
    """The type of the pooled `x`."""
    pool_input(op, x)
    kernel, stride, padding, dilation, ceil = geometry(op, attrs)
    out = []
    for axis, (size, k, s, p, d) in enumerate(zip(x.shape[-2:], kernel, stride, padding,
                                                   dilation)):
        count = pooled_size(size, k, s, p, d, ceil)
        extent = d * (k - 1) + 1
        if count < 1:
            raise ShapeError(f"{op}: the kernel {_text(list(kernel))}"
                             + (f" (dilation {_text(list(dilation))}: extent {extent})"
                                if d != 1 else "")
                             + f" is larger than the padded input: x {x} with padding "
                             + _text(list(padding)))
        empty = _empty_window(size, k, s, p, d, count)
        if empty is not None:
            raise ShapeError(f"{op}: window {empty} along spatial axis {axis} holds no element "
                             f"of x {x} (kernel {k}, dilation {d}, padding {p}, stride {s}): "
                             "its taps all fall in the padding")
        out.append(count)
    return x.with_shape(tuple(x.shape[:-2]) + tuple(out))


def _pool_type(op: str):
    return lambda types, attrs: pooled(op, types[0], attrs)


def _divisor(op: str, attrs) -> None:
    d = attrs["divisor_override"]
    if d is not None and (not _is_int(d) or d == 0):
        raise ShapeError(f"{op}: divisor_override must be a nonzero int, got {_text(d)}")


def _avg_type(types, attrs):
    _divisor("avg_pool2d", attrs)
    return pooled("avg_pool2d", types[0], attrs)


def _indices_type(types, attrs):
    return pooled("max_pool2d_indices", types[0], attrs).with_dtype("i64")


def _same(op: str, what: str, have, want) -> None:
    if have.shape != want.shape or have.dtype != want.dtype:
        raise ShapeError(f"{op}: {what} {have} must have the type {want}")


def _max_grad_type(types, attrs):
    x, g = types
    _same("max_pool2d_grad", "g", g, pooled("max_pool2d_grad", x, attrs))
    return x


def _max_select_type(types, attrs):
    x, t = types
    _same("max_pool2d_select", "t", t, x)
    return pooled("max_pool2d_select", x, attrs)


def _avg_grad_type(types, attrs):
    (g,) = types
    shape = per_axis("avg_pool2d_grad", "shape", attrs["shape"], 2, 1)
    if g.rank not in (3, 4):
        raise ShapeError(f"avg_pool2d_grad expects g of rank 3 or 4, got {g}")
    _divisor("avg_pool2d_grad", attrs)
    x = g.with_shape(tuple(g.shape[:-2]) + shape)
    _same("avg_pool2d_grad", "g", g, pooled("avg_pool2d_grad", x, attrs))
    return x


def _window_attrs(op):
    return {k: v for k, v in op.attrs.items() if k != "shape"}


def _max_vjp(b, op, cts):
    return [b.emit("max_pool2d_grad", op.operands[0], cts[0], **_window_attrs(op))]


def _max_jvp(b, op, tangents):
    t = tangents[0]
    return [None if t is None else
            b.emit("max_pool2d_select", op.operands[0], t, **_window_attrs(op))]


def _through_pick(other: str):
    """The rules of max_pool2d_grad and max_pool2d_select: linear in the second operand,
    whose transpose is the `other` op; the first (which picks) gets no derivative."""
    def vjp(b, op, cts):
        return [None, b.emit(other, op.operands[0], cts[0], **_window_attrs(op))]

    def jvp(b, op, tangents):
        t = tangents[1]
        return [None if t is None else
                b.emit(op.name, op.operands[0], t, **_window_attrs(op))]
    return vjp, jvp


def _avg_vjp(b, op, cts):
    return [b.emit("avg_pool2d_grad", cts[0], shape=tuple(op.operands[0].type.shape[-2:]),
                   **_window_attrs(op))]


def _avg_grad_vjp(b, op, cts):
    return [b.emit("avg_pool2d", cts[0], **_window_attrs(op))]


def _fold_batch(b, op, args, batched, n):
    """Every operand's examples folded into its batch axis N; examples of one image
    ``[C, H, W]`` are the batch axis itself."""
    args = [a if f else materialize(b, a, n) for a, f in zip(args, batched)]
    if op.operands[0].type.rank == 3:
        return [b.emit(op.name, *args, **dict(op.attrs))]
    y = b.emit(op.name, *[fold(b, a) for a in args], **dict(op.attrs))
    return [unfold(b, y, n, args[0].type.shape[1])]


def _window_flops(pooled):
    """One per element of each window of the pooled value, ``pooled(op)``."""
    def flops(op, elements):
        kernel = per_axis(op.name, "kernel", op.attrs["kernel"], 2, 1)
        return elements(pooled(op).type.shape) * kernel[0] * kernel[1]
    return flops


RESULT, LAST = _window_flops(lambda op: op.results[0]), _window_flops(lambda op: op.operands[-1])


_grad_rules, _select_rules = _through_pick("max_pool2d_select"), _through_pick("max_pool2d_grad")
register("max_pool2d", _pool_type("max_pool2d"), options=MAX_OPTIONS, vjp=_max_vjp,
         jvp=_max_jvp, flops=RESULT, batch=_fold_batch, fresh=True,
         doc="the maximum of each window; padding reads as -inf")
register("max_pool2d_indices", _indices_type, options=MAX_OPTIONS, traits=("no_grad",),
         flops=RESULT, batch=_fold_batch, fresh=True,
         doc="the flat index in its plane of the first maximal element of each window")
register("max_pool2d_grad", _max_grad_type, operands=("x", "g"), options=MAX_OPTIONS,
         vjp=_grad_rules[0], jvp=_grad_rules[1], flops=LAST, batch=_fold_batch,
         fresh=True, doc="g scattered to the first maximal element of each window of x")
register("max_pool2d_select", _max_select_type, operands=("x", "t"), options=MAX_OPTIONS,
         vjp=_select_rules[0], jvp=_select_rules[1], flops=RESULT, batch=_fold_batch,
         fresh=True, doc="the entry of t at the first maximal element of each window of x")
register("avg_pool2d", _avg_type, options=AVG_OPTIONS, traits=("linear",),
         vjp=_avg_vjp, flops=RESULT, batch=_fold_batch, fresh=True,
         doc="the mean of each window (divisor as count_include_pad, divisor_override)")
register("avg_pool2d_grad", _avg_grad_type, operands=("g",),
         options=AVG_OPTIONS + (Option("shape", "ints"),), traits=("linear",),
         vjp=_avg_grad_vjp, flops=LAST, batch=_fold_batch,
         fresh=True, doc="the transpose of avg_pool2d for an input of spatial size shape")
