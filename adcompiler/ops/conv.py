"""Convolution: conv1d, conv2d, conv_transpose2d, and the adjoint ops conv_input_grad and
conv_weight_grad.

Values and layout are those of ``torch.nn.functional``: cross-correlation, channels first
(``x: [N, C, *spatial]``, or one image ``[C, *spatial]``, ``w: [O, C/groups, *kernel]``).
Three ops close the family under
differentiation, each bilinear in its two operands: with ``conv(x, w)`` keeping the first
``G`` output positions (``G`` the spatial size of ``g``),

* ``conv_input_grad(g, w; shape)`` is the transpose of ``x -> conv(x, w)`` for an ``x`` of
  spatial size `shape` (the scatter of ``g`` through the windows);
* ``conv_weight_grad(x, g; kernel)`` is the transpose of ``w -> conv(x, w)``;

so every VJP and JVP below is one of the three, and a transposed convolution is
``conv_input_grad`` at its output's size. Their options are the forward op's, as written
(``padding="same"`` stays ``"same"``). The tape of a convolution holds its operands, the
input and the weight, and nothing else. The derivatives of a convolution of one image are
those of a batch of one (the adjoint ops always take a batch).
"""
from __future__ import annotations

import math

from types import SimpleNamespace

from ..diagnostics import ShapeError
from ..ir.types import TensorType
from .registry import Option, register
from .windows import (LAYOUT, _is_int, _text, batched_input, channels_of_examples, crop,
                      examples_of_channels, fold, padding_pairs, per_axis, same_float,
                      shared_to_batch, static, unfold, windows)
from .batching import materialize, unsupported
from . import roles

CONV = {1: "conv1d", 2: "conv2d"}
COMMON = ("stride", "padding", "dilation", "groups")


def _options(transpose: bool = False):
    opts = [Option("stride", "spatial", 1), Option("padding", "padding", 0)]
    if transpose:
        opts.append(Option("output_padding", "spatial", 0))
    return tuple(opts + [Option("dilation", "spatial", 1), Option("groups", "int", 1)])


def _groups(op: str, attrs) -> int:
    g = attrs["groups"]
    if not _is_int(g) or g < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {_text(g)}")
    return g


def _divides(op: str, what: str, count: int, groups: int, t: TensorType) -> None:
    if count % groups:
        raise ShapeError(f"{op}: the {count} {what} of {t} are not divisible by "
                         f"groups={groups}")


def geometry(op: str, x: TensorType, w: TensorType, attrs, n: int, kernel=None):
    """Check the options against `x` and the weight's kernel; (kernel, stride, pads,
    dilation, groups)."""
    if w.rank != n + 2 and kernel is None:
        raise ShapeError(f"{op} expects w of rank {n + 2} [O, C/groups, "
                         f"{', '.join('kernel' for _ in range(n))}], got {w}")
    kernel = tuple(w.shape[2:]) if kernel is None else per_axis(op, "kernel", kernel, n, 1)
    stride = per_axis(op, "stride", attrs["stride"], n, 1)
    dilation = per_axis(op, "dilation", attrs["dilation"], n, 1)
    pads = padding_pairs(op, attrs["padding"], n, kernel, dilation, stride)
    return kernel, stride, pads, dilation, _groups(op, attrs)


LAYOUT1 = {1: "[C, L]", 2: "[C, H, W]"}


def data_input(op: str, x: TensorType, n: int) -> tuple:
    """`x` checked as a batch ``[N, C, *spatial]`` or one image ``[C, *spatial]``; the
    result's leading axes: ``(N,)``, or none for one image."""
    if x.rank != n + 1:
        if x.rank != n + 2:
            raise ShapeError(f"{op} expects x of rank {n + 2} {LAYOUT[n]} or {n + 1} "
                             f"{LAYOUT1[n]}, got {x}")
        batched_input(op, x, n)
        return tuple(x.shape[:1])
    if not x.is_float:
        raise ShapeError(f"{op} expects a float tensor, got {x}")
    static(op, "x", x, range(x.rank))
    return ()


def _conv_type(n: int):
    name = CONV[n]

    def infer(types, attrs):
        x, w = types
        lead = data_input(name, x, n)
        dtype = same_float(name, x, w)
        if w.rank != n + 2:
            raise ShapeError(f"{name} expects w of rank {n + 2} [O, C/groups, kernel...], "
                             f"got {w}")
        static(name, "w", w, range(w.rank))
        kernel, stride, pads, dilation, groups = geometry(name, x, w, attrs, n)
        c, o = x.shape[-n - 1], w.shape[0]
        _divides(name, "input channels", c, groups, x)
        _divides(name, "output channels", o, groups, w)
        if w.shape[1] * groups != c:
            raise ShapeError(f"{name}: w {w} has {w.shape[1]} input channels per group; "
                             f"x {x} with groups={groups} needs {c // groups}")
        out = windows(name, x, kernel, stride, pads, dilation)
        return TensorType(dtype, lead + (o,) + out)
    return infer


def _input_grad_type(types, attrs):
    g, w = types
    n = g.rank - 2
    if n not in CONV or w.rank != g.rank:
        raise ShapeError(f"conv_input_grad expects g and w of rank 3 or 4, got {g} and {w}")
    dtype = same_float("conv_input_grad", g, w)
    static("conv_input_grad", "w", w, range(w.rank))
    shape = per_axis("conv_input_grad", "shape", attrs["shape"], n, 1)
    kernel, stride, pads, dilation, groups = geometry("conv_input_grad", g, w, attrs, n)
    if g.shape[1] != w.shape[0]:
        raise ShapeError(f"conv_input_grad: g {g} and w {w} differ in output channels")
    _divides("conv_input_grad", "output channels", w.shape[0], groups, w)
    x = TensorType(dtype, (g.shape[0], w.shape[1] * groups) + shape)
    room = windows("conv_input_grad", x, kernel, stride, pads, dilation)
    if any(a > r for a, r in zip(g.shape[2:], room)):
        raise ShapeError(f"conv_input_grad: g {g} has more positions than the {room} windows "
                         f"of an input of size {list(shape)}")
    return x


def _weight_grad_type(types, attrs):
    x, g = types
    n = x.rank - 2
    if n not in CONV or g.rank != x.rank:
        raise ShapeError(f"conv_weight_grad expects x and g of rank 3 or 4, got {x} and {g}")
    dtype = same_float("conv_weight_grad", x, g)
    static("conv_weight_grad", "x", x, range(1, x.rank))
    static("conv_weight_grad", "g", g, range(1, g.rank))
    kernel, stride, pads, dilation, groups = geometry("conv_weight_grad", x, g, attrs, n,
                                                      kernel=attrs["kernel"])
    _divides("conv_weight_grad", "input channels", x.shape[1], groups, x)
    _divides("conv_weight_grad", "output channels", g.shape[1], groups, g)
    room = windows("conv_weight_grad", x, kernel, stride, pads, dilation)
    if x.shape[0] != g.shape[0] or any(a > r for a, r in zip(g.shape[2:], room)):
        raise ShapeError(f"conv_weight_grad: g {g} does not fit the windows {room} of x {x}")
    return TensorType(dtype, (g.shape[1], x.shape[1] // groups) + kernel)


def _transpose_type(types, attrs):
    op = "conv_transpose2d"
    x, w = types
    lead = data_input(op, x, 2)
    dtype = same_float(op, x, w)
    if w.rank != 4:
        raise ShapeError(f"{op} expects w of rank 4 [C, O/groups, kH, kW], got {w}")
    static(op, "w", w, range(4))
    if attrs["padding"] == "same":
        raise ShapeError(f'{op}: padding="same" is not defined for a transposed '
                         "convolution; give the padding as ints")
    kernel, stride, pads, dilation, groups = geometry(op, x, w, attrs, 2)
    out_pad = per_axis(op, "output_padding", attrs["output_padding"], 2, 0)
    for a, s, d in zip(out_pad, stride, dilation):
        if a >= s and a >= d:
            raise ShapeError(f"{op}: output_padding {_text(attrs['output_padding'])} must be "
                             f"smaller than the stride {_text(list(stride))} or the dilation "
                             f"{_text(list(dilation))}")
    if x.shape[-3] != w.shape[0]:
        raise ShapeError(f"{op}: w {w} must have x's {x.shape[-3]} input channels first")
    _divides(op, "input channels", x.shape[-3], groups, x)
    out = tuple((h - 1) * s - 2 * lo + d * (k - 1) + a + 1 for h, s, (lo, _), d, k, a in
                zip(x.shape[-2:], stride, pads, dilation, kernel, out_pad))
    if any(o < 1 for o in out):
        raise ShapeError(f"{op}: padding {_text(attrs['padding'])} leaves no output for x {x} "
                         f"and w {w} (output size {list(out)})")
    return TensorType(dtype, lead + (w.shape[1] * groups,) + out)


def transpose_shape(op) -> tuple[int, ...]:
    """The spatial size of a conv_transpose2d's result: that of conv_input_grad's input."""
    return tuple(op.results[0].type.shape[2:])


def _common(op, **more):
    return {**{k: op.attrs[k] for k in COMMON}, **more}


def _conv_of(b, x, w, attrs):
    return b.emit(CONV[x.type.rank - 2], x, w, **attrs)


# ---- derivative rules: every one is a conv, conv_input_grad or conv_weight_grad ----------

def _conv_vjp(b, op, cts):
    x, w = op.operands
    attrs = _common(op)
    return [b.emit("conv_input_grad", cts[0], w, shape=tuple(x.type.shape[2:]), **attrs),
            b.emit("conv_weight_grad", x, cts[0], kernel=tuple(w.type.shape[2:]), **attrs)]


def _input_grad_vjp(b, op, cts):
    g, w = op.operands
    attrs = _common(op)
    return [crop(b, _conv_of(b, cts[0], w, attrs), g.type.shape[2:]),
            b.emit("conv_weight_grad", cts[0], g, kernel=tuple(w.type.shape[2:]), **attrs)]


def _weight_grad_vjp(b, op, cts):
    x, g = op.operands
    attrs = _common(op)
    return [b.emit("conv_input_grad", g, cts[0], shape=tuple(x.type.shape[2:]), **attrs),
            crop(b, _conv_of(b, x, cts[0], attrs), g.type.shape[2:])]


def _transpose_vjp(b, op, cts):
    x, w = op.operands
    attrs = _common(op)
    return [crop(b, b.emit("conv2d", cts[0], w, **attrs), x.type.shape[2:]),
            b.emit("conv_weight_grad", cts[0], x, kernel=tuple(w.type.shape[2:]), **attrs)]


def _one_image(rule):
    """`rule` (a VJP of conv1d, conv2d or conv_transpose2d) for one image too: applied to
    the image and its cotangent as a batch of one, the image's cotangent reshaped back."""
    def vjp(b, op, cts):
        x, w = op.operands
        if x.type.rank == w.type.rank:
            return rule(b, op, cts)
        one = lambda v: b.emit("reshape", v, shape=(1,) + tuple(v.type.shape))  # noqa: E731
        batch = SimpleNamespace(name=op.name, operands=[one(x), w], attrs=op.attrs)
        dx, dw = rule(b, batch, [one(cts[0])])
        return [b.emit("reshape", dx, shape=tuple(x.type.shape)), dw]
    return vjp


def _bilinear_jvp(b, op, tangents):
    """Bilinear: the op with each operand in turn replaced by its tangent, summed."""
    out = None
    for k, t in enumerate(tangents):
        if t is not None:
            args = list(op.operands)
            args[k] = t
            term = b.emit(op.name, *args, **dict(op.attrs))
            out = term if out is None else b.emit("add", out, term)
    return [out]


# ---- batching: examples folded into N, or (weights per example) into the groups ----------

def _per_example_groups(b, op, args, batched, n, weight_shape):
    """Operands with examples on axis 0 as one op whose groups are the examples' groups."""
    if not _is_int(n):
        unsupported(op, "with weights that differ between examples needs a static batch size")
    x, w = shared_to_batch(b, args, batched, n)
    w = b.emit("reshape", w, shape=weight_shape(w.type.shape))
    y = b.emit(op.name, channels_of_examples(b, x), w,
               **dict(op.attrs, groups=op.attrs["groups"] * n))
    return [examples_of_channels(b, y, n)]


def _data_batch(b, op, args, batched, n):
    """conv1d, conv2d, conv_input_grad, conv_transpose2d: the second operand is the weight.
    Examples of one image each are a batch."""
    x, w = args
    if op.operands[0].type.rank < op.operands[1].type.rank:
        if not batched[1]:
            return [b.emit(op.name, x, w, **dict(op.attrs))]
        x = x if batched[0] else materialize(b, x, n)
        x = b.emit("reshape", x, shape=(n, 1) + tuple(x.type.shape[1:]))
        [y] = _per_example_groups(b, op, [x, w], [True, True], n,
                                  lambda s: (s[0] * s[1],) + tuple(s[2:]))
        return [b.emit("reshape", y, shape=(n,) + tuple(y.type.shape[2:]))]
    if not batched[1]:
        return [unfold(b, b.emit(op.name, fold(b, x), w, **dict(op.attrs)), n,
                       x.type.shape[1])]
    return _per_example_groups(b, op, args, batched, n,
                               lambda s: (s[0] * s[1],) + tuple(s[2:]))


def _weight_grad_batch(b, op, args, batched, n):
    if not _is_int(n):
        unsupported(op, "needs a static batch size")
    x, g = shared_to_batch(b, args, batched, n)
    y = b.emit(op.name, channels_of_examples(b, x), channels_of_examples(b, g),
               **dict(op.attrs, groups=op.attrs["groups"] * n))
    return [b.emit("reshape", y, shape=(n, y.type.shape[0] // n) + tuple(y.type.shape[1:]))]


# ---- FLOPs: two per multiply-add ---------------------------------------------------------

def _conv_flops(op, elements):
    return 2 * elements(op.results[0].type.shape) * math.prod(op.operands[1].type.shape[1:])


def _scatter_flops(op, elements):
    """conv_input_grad, conv_transpose2d: each element of the first operand meets a slice
    of the weight."""
    return 2 * elements(op.operands[0].type.shape) * math.prod(op.operands[1].type.shape[1:])


def _weight_grad_flops(op, elements):
    return 2 * elements(op.operands[1].type.shape) * math.prod(op.results[0].type.shape[1:])


HEAVY = ("heavy",)
for _n, _name in CONV.items():
    register(_name, _conv_type(_n), operands=("x", "w"), options=_options(), traits=HEAVY,
             vjp=_one_image(_conv_vjp), jvp=_bilinear_jvp, flops=_conv_flops,
             batch=_data_batch, fresh=True, param_role=roles.convolution,
             doc=f"{_n}-D cross-correlation, channels first, as "
                 f"torch.nn.functional.{_name}")
register("conv_transpose2d", _transpose_type, operands=("x", "w"),
         options=_options(transpose=True), traits=HEAVY,
         vjp=_one_image(_transpose_vjp), jvp=_bilinear_jvp, flops=_scatter_flops,
         batch=_data_batch, fresh=True, param_role=roles.convolution,
         doc="the transpose of conv2d, as torch.nn.functional.conv_transpose2d")
register("conv_input_grad", _input_grad_type, operands=("g", "w"),
         options=(Option("shape", "ints"),) + _options(), traits=HEAVY,
         vjp=_input_grad_vjp, jvp=_bilinear_jvp, flops=_scatter_flops, batch=_data_batch,
         fresh=True, doc="the adjoint of a convolution's input")
register("conv_weight_grad", _weight_grad_type, operands=("x", "g"),
         options=(Option("kernel", "ints"),) + _options(), traits=HEAVY,
         vjp=_weight_grad_vjp, jvp=_bilinear_jvp, flops=_weight_grad_flops,
         batch=_weight_grad_batch, fresh=True, doc="the adjoint of a convolution's weight")
