"""Pooling: max_pool2d and avg_pool2d, with their adjoint ops.

As ``torch.nn.functional``: windows of `kernel`, `stride` apart (default: the kernel), over
`x: [N, C, H, W]` padded by `padding` on each side (at most half the kernel, so every window
holds an element of `x`). Max pooling reads the padding as -inf and picks, in each window,
its first maximal element in row-major order; its derivative flows through that element:

* ``max_pool2d_grad(x, g)`` scatters `g` (pooled shape) to the picked elements (x's shape);
* ``max_pool2d_select(x, t)`` gathers the picked elements' entries of `t` (its transpose,
  and max_pool2d's JVP).

Both are linear in their second operand and constant in `x` (the pick changes only where
the maximum is tied). Average pooling counts the padding in the divisor (PyTorch's
``count_include_pad=True``); ``avg_pool2d_grad(g; shape)`` is its transpose.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from .batching import materialize
from .registry import Option, register
from .windows import _text, batched_input, fold, per_axis, unfold, windows

OPTIONS = (Option("kernel", "spatial"), Option("stride", "spatial", None),
           Option("padding", "spatial", 0))


def geometry(op: str, attrs):
    """kernel, stride, padding of a pooling op, checked."""
    kernel = per_axis(op, "kernel", attrs["kernel"], 2, 1)
    stride = kernel if attrs["stride"] is None else per_axis(op, "stride", attrs["stride"], 2, 1)
    if isinstance(attrs["padding"], str):
        raise ShapeError(f"{op}: padding must be an int or a list of 2 ints, got "
                         f"{_text(attrs['padding'])}")
    padding = per_axis(op, "padding", attrs["padding"], 2, 0)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ShapeError(f"{op}: padding {_text(attrs['padding'])} must be at most half the "
                         f"kernel {_text(list(kernel))}")
    return kernel, stride, padding


def pooled(op: str, x, attrs):
    """The type of the pooled `x`."""
    batched_input(op, x, 2)
    kernel, stride, padding = geometry(op, attrs)
    out = windows(op, x, kernel, stride, [(p, p) for p in padding], (1, 1))
    return x.with_shape(x.shape[:2] + out)


def _pool_type(op: str):
    return lambda types, attrs: pooled(op, types[0], attrs)


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
    x = g.with_shape(tuple(g.shape[:2]) + shape)
    _same("avg_pool2d_grad", "g", g, pooled("avg_pool2d_grad", x, attrs))
    return x


def _window_attrs(op):
    return {k: op.attrs[k] for k in ("kernel", "stride", "padding")}


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
    return [b.emit("avg_pool2d_grad", cts[0], shape=tuple(op.operands[0].type.shape[2:]),
                   **_window_attrs(op))]


def _avg_grad_vjp(b, op, cts):
    return [b.emit("avg_pool2d", cts[0], **_window_attrs(op))]


def _fold_batch(b, op, args, batched, n):
    """Every operand's examples folded into its batch axis N."""
    args = [a if f else materialize(b, a, n) for a, f in zip(args, batched)]
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
register("max_pool2d", _pool_type("max_pool2d"), options=OPTIONS, vjp=_max_vjp, jvp=_max_jvp,
         flops=RESULT, batch=_fold_batch, fresh=True,
         doc="the maximum of each window; padding reads as -inf")
register("max_pool2d_grad", _max_grad_type, operands=("x", "g"), options=OPTIONS,
         vjp=_grad_rules[0], jvp=_grad_rules[1], flops=LAST, batch=_fold_batch,
         fresh=True, doc="g scattered to the first maximal element of each window of x")
register("max_pool2d_select", _max_select_type, operands=("x", "t"), options=OPTIONS,
         vjp=_select_rules[0], jvp=_select_rules[1], flops=RESULT, batch=_fold_batch,
         fresh=True, doc="the entry of t at the first maximal element of each window of x")
register("avg_pool2d", _pool_type("avg_pool2d"), options=OPTIONS, traits=("linear",),
         vjp=_avg_vjp, flops=RESULT, batch=_fold_batch, fresh=True,
         doc="the mean of each window, padding counted as zeros in the divisor")
register("avg_pool2d_grad", _avg_grad_type, operands=("g",),
         options=OPTIONS + (Option("shape", "ints"),), traits=("linear",), vjp=_avg_grad_vjp,
         flops=LAST, batch=_fold_batch,
         fresh=True, doc="the transpose of avg_pool2d for an input of spatial size shape")
