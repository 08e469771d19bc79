"""Core ATen convolution, pooling, normalization and softmax as TDSL."""
from __future__ import annotations

from ..importer.names import ints, number
from .table import lowers


@lowers("aten._softmax.default", "aten._log_softmax.default")
def softmax(n):
    x = n.x(0)
    dim = n.arg(1)
    if n.arg(2, False):
        n.refuse("half_to_float is not supported")
    fn = "log_softmax" if "log" in n.op else "softmax"
    n.emit(f"{fn}({x.name}, axis={dim})")


@lowers("aten.native_layer_norm.default")
def layer_norm(n):
    x = n.x(0)
    shape = list(n.arg(1))
    eps = number(n.arg(4), x.dtype)
    w = n.x(2) if n.has(2) else None
    b = n.x(3) if n.has(3) else None
    n._read.update({2, 3})
    if len(shape) == 1 and w is not None and b is not None:
        n.emit_multi([f"layernorm({x.name}, {w.name}, {b.name}, axis=-1, eps={eps})",
                      None, None])
        return
    axes = ints(range(x.rank - len(shape), x.rank))
    expr = (f"({x.name} - mean({x.name}, axis={axes}, keepdims=true)) * "
            f"rsqrt(var({x.name}, axis={axes}, keepdims=true) + {eps})")
    if w is not None:
        expr += f" * {w.name}"
    if b is not None:
        expr += f" + {b.name}"
    n.emit_multi([expr, None, None])


@lowers("aten.convolution.default")
def convolution(n):
    x, w = n.x(0), n.x(1)
    stride, pad, dil = n.arg(3), n.arg(4), n.arg(5)
    transposed, outpad, groups = n.arg(6), n.arg(7), n.arg(8)
    k = x.rank - 2
    if transposed:
        if k != 2:
            n.refuse("only 2-d transposed convolution is supported")
        expr = (f"conv_transpose2d({x.name}, {w.name}, stride={ints(stride)}, "
                f"padding={ints(pad)}, output_padding={ints(outpad)}, "
                f"dilation={ints(dil)}, groups={groups})")
    else:
        if k not in (1, 2):
            n.refuse(f"{k}-d convolution is not supported")
        if any(outpad):
            n.refuse("output_padding on a convolution")
        expr = (f"conv{k}d({x.name}, {w.name}, stride={ints(stride)}, padding={ints(pad)}, "
                f"dilation={ints(dil)}, groups={groups})")
    if n.has(2):
        expr += f" + reshape({n.x(2).name}, {ints([-1] + [1] * k)})"
    n._read.add(2)
    n.emit(expr)


@lowers("aten._native_batch_norm_legit_no_training.default")
def batch_norm_eval(n):
    """Evaluation mode: the running statistics normalize; they are buffers (constants)."""
    x = n.x(0)
    shape = ints([-1] + [1] * (x.rank - 2))
    w = n.x(1) if n.has(1) else None
    b = n.x(2) if n.has(2) else None
    n._read.update({1, 2})
    m, v = n.x(3, frozen=True), n.x(4, frozen=True)
    n.arg(5)   # momentum: only training reads it
    eps = number(n.arg(6), x.dtype)
    scale = f"rsqrt({v.name} + {eps})" if w is None else f"{w.name} * rsqrt({v.name} + {eps})"
    expr = f"({x.name} - reshape({m.name}, {shape})) * reshape({scale}, {shape})"
    if b is not None:
        expr += f" + reshape({b.name}, {shape})"
    n.emit_multi([expr, None, None])


@lowers("aten._native_batch_norm_legit_functional.default")
def batch_norm_train(n):
    """Training mode: the batch's statistics normalize and the running ones, state inputs,
    move towards them (``batchnorm_running``); results 1 and 2 (the batch's mean and
    inverse deviation, which only torch's own backward reads) are not computed."""
    x = n.x(0)
    if not n.arg(5):
        n.refuse("training=False with running statistics that the program updates")
    m, v = n.x(3), n.x(4)
    for i, s in ((3, m), (4, v)):
        if s.name not in n.imp.writer.state_names():
            n.refuse(f"argument {i}: the running statistics must be the module's buffers")
    momentum, eps = n.arg(6), n.arg(7)
    if momentum is None:
        n.refuse("momentum=None (a cumulative average) is not supported")
    if x.rank < 2:
        n.refuse("batch norm needs a channel axis (axis 1)")
    c = x.shape[1]
    w = n.x(1).name if n.has(1) else _fixed(n, "ones", c, x.dtype)
    b = n.x(2).name if n.has(2) else _fixed(n, "zeros", c, x.dtype)
    n._read.update({1, 2})
    n.emit_together(["y", None, None, "mean", "var"],
                    f"batchnorm_running({x.name}, {w}, {b}, {m.name}, {v.name}, "
                    f"eps={number(eps, 'f64')}, momentum={number(momentum, 'f64')})")


def _fixed(n, kind: str, c, dtype: str) -> str:
    """The gain (ones) or bias (zeros) of a batch norm without them, as a constant."""
    import numpy as np
    from ..onnx.node import Const
    if not isinstance(c, int):
        n.refuse("batch norm without weight or bias needs a static channel count")
    value = getattr(np, kind)(c, dtype={"f16": np.float16, "f32": np.float32}.get(dtype,
                                                                                  np.float64))
    name = f"{n.imp.result_hint(n, 0)}_{kind}"
    return n.imp.materialize(name, Const(value, name, True), True).name


@lowers("aten._native_batch_norm_legit.default", "aten.native_batch_norm.default")
def batch_norm_inplace(n):
    n.refuse("batch norm that updates its running statistics in place; export the module "
             "with torch.export (which makes the update functional) or in eval mode")


@lowers("aten.native_dropout.default", "aten.dropout.default")
def dropout(n):
    """``dropout(x, p)``: in training its mask scales by 1 / (1 - p), in evaluation the
    identity, as torch's module in train and eval mode; torch's mask itself (result 1)
    is not available. Exported with train=False it is the identity."""
    x = n.x(0)
    p = float(n.arg(1))
    train = n.arg(2)
    if train is None or not train:
        n.emit_multi([x.name, None]) if "native" in n.op else n.alias(x)
        return
    if not 0.0 <= p < 1.0:
        n.refuse(f"dropout probability {p}: dropout takes p in [0, 1)")
    expr = f"dropout({x.name}, {number(p, 'f64')})"
    n.emit_multi([expr, None]) if "native" in n.op else n.emit(expr)


def _pair(v, default):
    v = default if v in (None, []) else v
    return [v, v] if isinstance(v, int) else list(v) * (2 // len(v))


@lowers("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default")
def max_pool(n):
    """The indices of ``max_pool2d_with_indices`` are max_pool2d_indices' (written only
    where the graph reads them)."""
    x = n.x(0)
    kernel = _pair(n.arg(1), None)
    stride = _pair(n.arg(2, [], "stride"), kernel)
    pad = _pair(n.arg(3, 0, "padding"), 0)
    dilation = _pair(n.arg(4, 1, "dilation"), 1)
    ceil = "true" if n.arg(5, False, "ceil_mode") else "false"
    opts = (f"{ints(kernel)}, stride={ints(stride)}, padding={ints(pad)}, "
            f"dilation={ints(dilation)}, ceil_mode={ceil}")
    expr = f"max_pool2d({x.name}, {opts})"
    if n.op.endswith("with_indices.default"):
        reads = any(u.args[1:2] == (1,) for u in n.fx.users)   # getitem(node, 1)
        n.emit_multi([expr, f"max_pool2d_indices({x.name}, {opts})" if reads else None])
    else:
        n.emit(expr)


@lowers("aten.avg_pool2d.default")
def avg_pool(n):
    x = n.x(0)
    kernel = _pair(n.arg(1), None)
    stride = _pair(n.arg(2, [], "stride"), kernel)
    pad = _pair(n.arg(3, 0, "padding"), 0)
    ceil = "true" if n.arg(4, False, "ceil_mode") else "false"
    cip = "true" if n.arg(5, True, "count_include_pad") else "false"
    divisor = n.arg(6, None, "divisor_override")
    more = "" if divisor is None else f", divisor_override={int(divisor)}"
    n.emit(f"avg_pool2d({x.name}, {ints(kernel)}, stride={ints(stride)}, padding={ints(pad)}, "
           f"ceil_mode={ceil}, count_include_pad={cip}{more})")


@lowers("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def adaptive_avg_pool(n):
    x = n.x(0)
    out = _pair(n.arg(1), None)
    h, w = x.shape[2:]
    if out == [1, 1]:
        n.emit(f"mean({x.name}, axis=[2, 3], keepdims=true)")
    elif isinstance(h, int) and isinstance(w, int) and h % out[0] == 0 and w % out[1] == 0:
        k = [h // out[0], w // out[1]]
        n.emit(f"avg_pool2d({x.name}, {ints(k)})")
    else:
        n.refuse("adaptive pooling with uneven windows is not supported")
