"""ONNX convolution and pooling ops as TDSL."""
from __future__ import annotations

from ..importer.names import ints
from .table import lowers


def _spatial(n, x, name: str, default: int) -> list[int]:
    k = x.rank - 2
    v = n.attr(name, None)
    return [default] * k if v is None else [int(a) for a in v]


def _pads(n, x, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """(before, after) padding per spatial axis, from `pads` or `auto_pad`."""
    k = x.rank - 2
    auto = n.only("auto_pad", ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"), "NOTSET")
    pads = n.attr("pads", None)
    if auto == "NOTSET":
        pads = [0] * (2 * k) if pads is None else [int(p) for p in pads]
        return pads[:k], pads[k:]
    if pads is not None and any(pads):
        n.refuse("pads together with auto_pad are not supported")
    if auto == "VALID":
        return [0] * k, [0] * k
    before, after = [], []
    for size, kk, s, d in zip(x.shape[2:], kernel, strides, dilations):
        if not isinstance(size, int):
            n.refuse(f"auto_pad={auto} on a symbolic spatial size is not supported")
        out = -(-size // s)
        total = max((out - 1) * s + (kk - 1) * d + 1 - size, 0)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        before.append(lo)
        after.append(total - lo)
    return before, after


def _padded(n, x, before, after, value: str = "0.0"):
    """`x` padded explicitly on its spatial axes (asymmetric padding), or as it is."""
    if not any(before) and not any(after):
        return x.name
    widths = [0, 0, 0, 0] + [v for ab in zip(before, after) for v in ab]
    return n.temp(f"pad({x.name}, {ints(widths)}, value={value})", "padded").name


def _bias(n, expr: str, k: int) -> str:
    if not n.has(2):
        return expr
    b = n.x(2)
    return f"{expr} + reshape({b.name}, {ints([-1] + [1] * k)})"


@lowers("Conv", 1, 11, 22)
def conv(n):
    x, w = n.x(0), n.x(1)
    k = x.rank - 2
    if k not in (1, 2):
        n.refuse(f"{k}-d convolution is not supported (supported: 1-d, 2-d)")
    kernel = n.attr("kernel_shape", None)
    kernel = list(w.shape[2:]) if kernel is None else [int(a) for a in kernel]
    if kernel != list(w.shape[2:]):
        n.refuse(f"kernel_shape {kernel} differs from the weight's {list(w.shape[2:])}")
    strides, dil = _spatial(n, x, "strides", 1), _spatial(n, x, "dilations", 1)
    before, after = _pads(n, x, kernel, strides, dil)
    group = int(n.attr("group", 1))
    if before == after:
        src, pad = x.name, before
    else:
        src, pad = _padded(n, x, before, after), [0] * k
    fn = "conv1d" if k == 1 else "conv2d"
    expr = (f"{fn}({src}, {w.name}, stride={ints(strides)}, padding={ints(pad)}, "
            f"dilation={ints(dil)}, groups={group})")
    n.emit(_bias(n, expr, k))


@lowers("ConvTranspose", 1, 11, 22)
def conv_transpose(n):
    x, w = n.x(0), n.x(1)
    if x.rank != 4:
        n.refuse("only 2-d transposed convolution is supported")
    kernel = n.attr("kernel_shape", None)
    if kernel is not None and [int(a) for a in kernel] != list(w.shape[2:]):
        n.refuse("kernel_shape differs from the weight's")
    strides, dil = _spatial(n, x, "strides", 1), _spatial(n, x, "dilations", 1)
    n.only("auto_pad", ("NOTSET",), "NOTSET")
    if n.attr("output_shape", None) is not None:
        n.refuse("output_shape is not supported (give pads and output_padding)")
    pads = [int(p) for p in n.attr("pads", [0] * 4)]
    if pads[:2] != pads[2:]:
        n.refuse(f"asymmetric pads {pads} are not supported")
    outpad = _spatial(n, x, "output_padding", 0)
    group = int(n.attr("group", 1))
    expr = (f"conv_transpose2d({x.name}, {w.name}, stride={ints(strides)}, "
            f"padding={ints(pads[:2])}, output_padding={ints(outpad)}, "
            f"dilation={ints(dil)}, groups={group})")
    n.emit(_bias(n, expr, 2))


def _pool(n, kind: str):
    x = n.x(0)
    if x.rank != 4:
        n.refuse("only 2-d pooling is supported")
    kernel = [int(a) for a in n.attr("kernel_shape")]
    strides = _spatial(n, x, "strides", 1)
    if _spatial(n, x, "dilations", 1) != [1, 1]:
        n.refuse("dilations other than 1 are not supported")
    before, after = _pads(n, x, kernel, strides, [1, 1])
    ceil = n.only("ceil_mode", (0, 1), 0)
    if ceil:   # exact when rounding up gives the same windows as rounding down
        for size, kk, s, b, a in zip(x.shape[2:], kernel, strides, before, after):
            span = size + b + a - kk
            if not isinstance(size, int) or span % s:
                n.refuse("ceil_mode=1 is not supported where it adds a window")
    cip = 1
    if kind == "max":
        n.only("storage_order", (0,), 0)
        n.unavailable(1, "the Indices output of MaxPool")
    else:
        cip = n.only("count_include_pad", (0, 1), 0)
    if kind == "avg" and not cip and (any(before) or any(after)):
        _avg_excluding_pad(n, x, kernel, strides, before, after)
        return
    pad, crop = _symmetric(n, x, kind, kernel, strides, before, after)
    if pad is not None:
        src = x.name
    elif kind == "avg":
        src = _padded(n, x, before, after)
    else:
        src = _padded_with_minus_inf(n, x, before, after)
    expr = (f"{kind}_pool2d({src}, {ints(kernel)}, stride={ints(strides)}, "
            f"padding={ints(pad or [0, 0])})")
    if crop:
        expr = f"({expr})[:, :, {crop[0]}, {crop[1]}]"
    n.emit(expr)


def _symmetric(n, x, kind, kernel, strides, before, after):
    """(padding, crop): a symmetric padding P per axis (at most half the kernel) and the
    slice of its windows that are those of (before, after): the windows of padding P start
    at -P + j*s, the wanted ones at -before + i*s, so they are j = i + (P - before)/s, and a
    kept window reads nothing outside [-before, size + after). ONNX's SAME_UPPER pads
    [0, 1] is P = 1 less the first window. (None, None) when there is none: the input is
    then padded explicitly."""
    if before == after and all(2 * p <= k for p, k in zip(before, kernel)):
        return before, None
    pad, crop = [], []
    for size, k, s, b, a in zip(x.shape[2:], kernel, strides, before, after):
        p = max(b, a)
        if 2 * p > k or (p - b) % s or not isinstance(size, int):
            return None, None
        first, count = (p - b) // s, (size + b + a - k) // s + 1
        pad.append(p)
        crop.append(f"{first}:{first + count}")
    return pad, crop


def _padded_with_minus_inf(n, x, before, after) -> str:
    """`x` padded with -inf on its spatial axes, as max pooling reads its padding: the
    zero-padded `x` where a padded mask of ones is set, else a constant -inf (a literal is
    finite). Nothing computes an infinity at run time, so nothing warns."""
    import numpy as np
    if not x.type.is_float:
        n.refuse("max pooling of a non-float tensor with explicit padding")
    widths = ints([0, 0, 0, 0] + [v for ab in zip(before, after) for v in ab])
    dtype = {"f16": np.float16, "f32": np.float32}.get(x.dtype, np.float64)
    low = n.imp.constant(f"minus_inf_{x.dtype}", np.array(-np.inf, dtype))
    return n.temp(f"where(pad(ones_like({x.name}), {widths}) > 0.5, pad({x.name}, {widths}), "
                  f"{low.name})", "padded").name


def _avg_excluding_pad(n, x, kernel, strides, before, after):
    """Average pooling whose divisor counts only the input's own elements
    (count_include_pad=0): the zero-padded window sums times K / (elements in the window),
    a constant of the spatial sizes."""
    import numpy as np
    h, w = x.shape[2:]
    if not (isinstance(h, int) and isinstance(w, int)):
        n.refuse("count_include_pad=0 with padding needs static spatial sizes")
    ones = np.pad(np.ones((h, w)), ((before[0], after[0]), (before[1], after[1])))
    oh = (ones.shape[0] - kernel[0]) // strides[0] + 1
    ow = (ones.shape[1] - kernel[1]) // strides[1] + 1
    count = np.array([[ones[i * strides[0]:i * strides[0] + kernel[0],
                            j * strides[1]:j * strides[1] + kernel[1]].sum()
                       for j in range(ow)] for i in range(oh)])
    ratio = (kernel[0] * kernel[1] / count).astype(np.dtype(x.dtype.replace("f", "float")))
    scale = n.imp.constant(f"{n.name}_divisor", ratio.reshape(1, 1, oh, ow))
    src = _padded(n, x, before, after)
    n.emit(f"avg_pool2d({src}, {ints(kernel)}, stride={ints(strides)}) * {scale.name}")


@lowers("MaxPool", 8, 10, 11, 12, 22)
def max_pool(n):
    _pool(n, "max")


@lowers("AveragePool", 7, 10, 11, 19, 22)
def avg_pool(n):
    _pool(n, "avg")


@lowers("GlobalAveragePool", 1, 22)
def global_avg_pool(n):
    x = n.x(0)
    n.emit(f"mean({x.name}, axis={ints(range(2, x.rank))}, keepdims=true)")


@lowers("GlobalMaxPool", 1, 22)
def global_max_pool(n):
    x = n.x(0)
    n.emit(f"max({x.name}, axis={ints(range(2, x.rank))}, keepdims=true)")
