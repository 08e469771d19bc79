"""Translators of PyTorch's neural-net OpInfo samples (losses, normalization, attention,
lookup, convolution, pooling, padding) into adc calls; see ``opinfo_map``."""
from __future__ import annotations

import torch

from opinfo_call import arg, call, extra, spatial


# ---- neural-net ops ------------------------------------------------------------------------

def softmax(op: str):
    def tr(c, s):
        x, dim = s.input, arg(s, 0, "dim")
        if x.dim() == 0:
            c.refuse("axis 0 of a 0-d tensor (PyTorch's scalar as a 1-element axis)")
        dtype = s.kwargs.get("dtype")
        return call(op, c.t(x), c.opt("axis", dim),
                    c.lacks("dtype", dtype) if dtype not in (None, x.dtype) else "")
    return tr


def reduced(c, s, expr: str) -> str:
    """A loss's ``reduction``: adc's ops are per element, reduced by `mean` or `sum`."""
    how = s.kwargs.get("reduction", "mean")
    return {"none": expr, "mean": f"mean({expr})", "sum": f"sum({expr})"}[how]


def cross_entropy(c, s):
    x, target = s.input, s.args[0]
    axis = 1 if x.dim() >= 2 else 0
    more = [c.lacks(k, v) for k, v in s.kwargs.items()
            if k not in ("reduction",) and not (k == "label_smoothing" and v == 0.0)]
    return reduced(c, s, call("cross_entropy", c.t(x), c.t(target), c.opt("axis", axis), *more))


def bce(op: str):
    """A ``weight`` multiplies each element's loss before the reduction, as PyTorch
    defines it."""
    def tr(c, s):
        expr = call(op, c.t(s.input), c.t(s.args[0]),
                    extra(c, s, {"reduction", "weight"}, 1))
        weight = s.kwargs.get("weight")
        if weight is not None:
            expr = f"mul({expr}, {c.f(weight)})"
        return reduced(c, s, expr)
    return tr


def mse_loss(c, s):
    how = s.kwargs.get("reduction", "mean")
    return call("mse", c.t(s.input), c.t(s.args[0]),
                c.lacks("reduction", how) if how != "mean" else "")


def _gamma(c, w, n: int, value: str) -> str:
    """A missing affine weight is PyTorch's identity: ones (or zeros for a bias)."""
    return c.t(w) if w is not None else f"{value}([{n}], dtype=f64)"


def layer_norm(c, s):
    x, shape = s.input, list(s.args[0])
    w, b = arg(s, 1, "weight"), arg(s, 2, "bias")
    eps = arg(s, 3, "eps", 1e-5)
    if len(shape) != 1:
        return call("layernorm", c.t(x), c.t(w), c.t(b),
                    c.lacks("axis", list(range(-len(shape), 0))))
    return call("layernorm", c.t(x), _gamma(c, w, shape[0], "ones"),
                _gamma(c, b, shape[0], "zeros"), c.opt("axis", -1), c.opt("eps", float(eps)))


def rms_norm(c, s):
    x, shape = s.input, list(s.args[0])
    w = arg(s, 1, "weight")
    eps = arg(s, 2, "eps")
    eps = torch.finfo(x.dtype).eps if eps is None else eps  # PyTorch's default
    if len(shape) != 1:
        return call("rmsnorm", c.t(x), c.t(w), c.lacks("axis", list(range(-len(shape), 0))))
    return call("rmsnorm", c.t(x), _gamma(c, w, shape[0], "ones"), c.opt("axis", -1),
                c.opt("eps", float(eps)))


def batch_norm(c, s):
    """Training mode only (the running statistics are adc state, not this op's result)."""
    x = s.input
    w, b = arg(s, 2, "weight"), arg(s, 3, "bias")
    training, eps = arg(s, 4, "training", False), arg(s, 6, "eps", 1e-5)
    n = x.shape[1] if x.dim() > 1 else 0
    if x.dim() < 2:
        c.refuse("an input without a channel axis")
    return call("batchnorm", c.t(x), _gamma(c, w, n, "ones"), _gamma(c, b, n, "zeros"),
                c.opt("axis", 1), c.opt("eps", float(eps)),
                c.lacks("training", False) if not training else "")


def sdpa(c, s):
    q, k, v = s.input, s.args[0], s.args[1]
    kw = s.kwargs
    parts = [c.opt("causal", bool(kw.get("is_causal", False)))]
    if kw.get("scale") is not None:
        parts.append(c.opt("scale", float(kw["scale"])))
    if kw.get("attn_mask") is not None:
        parts.append(c.lacks("attn_mask", "a tensor"))
    if kw.get("dropout_p", 0.0):
        parts.append(c.lacks("dropout_p", kw["dropout_p"]))
    if kw.get("enable_gqa"):
        parts.append(c.lacks("enable_gqa", True))
    return call("attention", c.t(q), c.t(k), c.t(v), *parts)


def embedding(c, s):  # lambda weight, idx: F.embedding(idx, weight)
    return call("take", c.t(s.input), c.t(s.args[0]), c.opt("axis", 0),
                extra(c, s, set(), 1))


def index_select(c, s):
    x, dim, idx = s.input, s.args[0], s.args[1]
    if x.dim() == 0:
        c.refuse("index_select of a 0-d tensor (PyTorch's scalar as a 1-element axis)")
    return call("take", c.t(x), c.t(idx), c.opt("axis", dim))


# ---- convolution, pooling, padding --------------------------------------------------------

def _batched(c, x, n: int) -> None:
    """A convolution takes a batch [N, C, ...] or one image [C, ...]."""
    if x.dim() not in (n + 1, n + 2):
        c.refuse(f"an input of rank other than {n + 1} or {n + 2}")


def _conv_padding(c, p, n: int) -> str:
    return c.opt("padding", p if isinstance(p, str) else spatial(p, n))


def _bias(c, expr: str, b, n: int) -> str:
    """The bias PyTorch adds per output channel, added as adc's docs write it."""
    if b is None:
        return expr
    return f"add({expr}, reshape({c.t(b)}, {c.lit([b.shape[0]] + [1] * n)}))"


def conv(n: int):
    def tr(c, s):
        x, w = s.input, s.args[0]
        _batched(c, x, n)
        b = arg(s, 1, "bias")
        expr = call(f"conv{n}d", c.t(x), c.t(w),
                    c.opt("stride", spatial(arg(s, 2, "stride", 1), n)),
                    _conv_padding(c, arg(s, 3, "padding", 0), n),
                    c.opt("dilation", spatial(arg(s, 4, "dilation", 1), n)),
                    c.opt("groups", arg(s, 5, "groups", 1)),
                    extra(c, s, {"bias", "stride", "padding", "dilation", "groups"}, 6))
        return _bias(c, expr, b, n)
    return tr


def conv_transpose2d(c, s):
    x, w = s.input, s.args[0]
    _batched(c, x, 2)
    b = arg(s, 1, "bias")
    expr = call("conv_transpose2d", c.t(x), c.t(w),
                c.opt("stride", spatial(arg(s, 2, "stride", 1), 2)),
                _conv_padding(c, arg(s, 3, "padding", 0), 2),
                c.opt("output_padding", spatial(arg(s, 4, "output_padding", 0), 2)),
                c.opt("groups", arg(s, 5, "groups", 1)),
                c.opt("dilation", spatial(arg(s, 6, "dilation", 1), 2)),
                extra(c, s, {"bias", "stride", "padding", "output_padding", "groups",
                             "dilation"}, 7))
    return _bias(c, expr, b, 2)


def _pool_common(c, x, kernel, stride, padding) -> list[str]:
    """kernel, stride (PyTorch's None or () is the kernel) and padding; a pool takes
    [N, C, H, W] or one image [C, H, W]."""
    if x.dim() not in (3, 4):
        c.refuse("an input of rank other than 3 or 4")
    k = spatial(kernel, 2)
    st = k if stride is None or stride == () or stride == [] else spatial(stride, 2)
    return [c.opt("kernel", k), c.opt("stride", st), c.opt("padding", spatial(padding, 2))]


def max_pool2d(c, s):
    """``return_indices=True``: the values are max_pool2d's (with every derivative), the
    indices max_pool2d_indices' with the same options."""
    x = s.input
    parts = _pool_common(c, x, arg(s, 0, "kernel_size"), arg(s, 1, "stride"),
                         arg(s, 2, "padding", 0))
    parts += [c.opt("dilation", spatial(arg(s, 3, "dilation", 1), 2)),
              c.opt("ceil_mode", bool(arg(s, 4, "ceil_mode", False)))]
    if arg(s, 5, "return_indices", False):
        c.pick = 0
        c.also.append((1, call("max_pool2d_indices", c.t(x), *parts)))
    return call("max_pool2d", c.t(x), *parts)


def avg_pool2d(c, s):
    x = s.input
    parts = _pool_common(c, x, arg(s, 0, "kernel_size"), arg(s, 1, "stride"),
                         arg(s, 2, "padding", 0))
    parts += [c.opt("ceil_mode", bool(arg(s, 3, "ceil_mode", False))),
              c.opt("count_include_pad", bool(arg(s, 4, "count_include_pad", True)))]
    divisor = arg(s, 5, "divisor_override")
    if divisor is not None:
        parts.append(c.opt("divisor_override", divisor))
    return call("avg_pool2d", c.t(x), *parts)


def pad(c, s):
    """PyTorch's pairs run from the last axis backwards and may stop early; adc's run over
    every axis in order."""
    x, pairs = s.input, list(arg(s, 0, "pad"))
    mode, value = arg(s, 1, "mode", "constant"), arg(s, 2, "value")
    n = x.dim()
    widths = []
    for axis in range(n):
        j = n - 1 - axis
        widths += pairs[2 * j:2 * j + 2] if 2 * j < len(pairs) else [0, 0]
    if any(v < 0 for v in widths):
        c.refuse("negative padding (PyTorch crops)")
    return call("pad", c.t(x), c.lit(widths), c.opt("value", float(value or 0.0)),
                c.lacks("mode", mode) if mode != "constant" else "")
