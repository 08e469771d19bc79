"""ONNX normalization, softmax and dropout ops as TDSL."""
from __future__ import annotations

import math

import numpy as np

from ..importer.names import ints, number
from .table import lowers


@lowers("BatchNormalization", 7, 9, 14, 15)
def batch_norm(n):
    """Inference form (every ONNX inference graph): the running statistics normalize; they
    are constants of the program (no gradient flows to them). Training mode (opset 14+):
    the batch's statistics normalize, and outputs 1 and 2 are the running ones moved
    towards the batch's with ONNX's momentum and its population variance."""
    x = n.x(0)
    if n.version >= 14 and n.attr("training_mode", 0):
        _batch_norm_training(n, x)
        return
    if n.version == 7:
        n.only("spatial", (1,), 1)
    n.attr("momentum", 0.9)   # only training updates read it
    if any(n.wants(k) for k in (1, 2, 3, 4)):
        n.refuse("the running statistics outputs exist in training mode only "
                 "(training_mode=1, opset 14)")
    eps = number(float(n.attr("epsilon", 1e-5)), x.dtype)
    shape = ints([-1] + [1] * (x.rank - 2))
    s, b = n.x(1), n.x(2)
    m, v = n.x(3, frozen=True), n.x(4, frozen=True)
    n.emit(f"({x.name} - reshape({m.name}, {shape})) * reshape({s.name} * rsqrt({v.name} + "
           f"{eps}), {shape}) + reshape({b.name}, {shape})")


def _batch_norm_training(n, x):
    if x.rank < 2:
        n.refuse("batch normalization needs a channel axis (axis 1)")
    eps = number(float(n.attr("epsilon", 1e-5)), x.dtype)
    momentum = float(n.attr("momentum", 0.9))
    s, b = n.x(1), n.x(2)
    m, v = n.x(3), n.x(4)
    n.emit(f"batchnorm({x.name}, {s.name}, {b.name}, eps={eps})")
    axes = ints([0] + list(range(2, x.rank)))
    keep, move = number(momentum, x.dtype), number(1 - momentum, x.dtype)
    if n.wants(1):
        n.emit(f"{m.name} * {keep} + mean({x.name}, axis={axes}) * {move}", 1)
    if n.wants(2):
        n.emit(f"{v.name} * {keep} + var({x.name}, axis={axes}) * {move}", 2)


@lowers("InstanceNormalization", 6, 22)
def instance_norm(n):
    x = n.x(0)
    eps = number(float(n.attr("epsilon", 1e-5)), x.dtype)
    axes = ints(range(2, x.rank))
    shape = ints([-1] + [1] * (x.rank - 2))
    s, b = n.x(1), n.x(2)
    mu = f"mean({x.name}, axis={axes}, keepdims=true)"
    var = f"var({x.name}, axis={axes}, keepdims=true)"
    n.emit(f"({x.name} - {mu}) * rsqrt({var} + {eps}) * reshape({s.name}, {shape}) + "
           f"reshape({b.name}, {shape})")


@lowers("LayerNormalization", 17)
def layer_norm(n):
    x = n.x(0)
    axis = int(n.attr("axis", -1)) % max(x.rank, 1)
    eps = number(float(n.attr("epsilon", 1e-5)), x.dtype)
    n.only("stash_type", (1,), 1) if x.dtype == "f32" else n.attr("stash_type", 1)
    if n.wants(1) or n.wants(2):
        n.refuse("the Mean and InvStdDev outputs are not supported")
    s = n.x(1)
    b = n.x(2).name if n.has(2) else "0"
    if axis == x.rank - 1 and s.rank == 1 and (n.has(2) is False or n.x(2).rank == 1):
        if not n.has(2):
            b = f"zeros_like({s.name})"
        n.emit(f"layernorm({x.name}, {s.name}, {b}, axis=-1, eps={eps})")
        return
    axes = ints(range(axis, x.rank))
    mu = f"mean({x.name}, axis={axes}, keepdims=true)"
    var = f"var({x.name}, axis={axes}, keepdims=true)"
    n.emit(f"({x.name} - {mu}) * rsqrt({var} + {eps}) * {s.name} + {b}")


@lowers("RMSNormalization", 23)
def rms_norm(n):
    x = n.x(0)
    axis = int(n.attr("axis", -1)) % max(x.rank, 1)
    eps = number(float(n.attr("epsilon", 1e-5)), x.dtype)
    n.attr("stash_type", 1)
    s = n.x(1)
    if axis == x.rank - 1 and s.rank == 1:
        n.emit(f"rmsnorm({x.name}, {s.name}, axis=-1, eps={eps})")
        return
    axes = ints(range(axis, x.rank))
    n.emit(f"{x.name} * rsqrt(mean(square({x.name}), axis={axes}, keepdims=true) + {eps}) "
           f"* {s.name}")


@lowers("LRN", 1, 13)
def lrn(n):
    """Across-channel local response normalization: the window sum of squares as an
    average pool over the channel axis (zero padded, the divisor is `size`)."""
    x = n.x(0)
    if x.rank != 4 or not all(isinstance(d, int) for d in x.shape[1:]):
        n.refuse("LRN needs an [N, C, H, W] input with static C, H, W")
    size = int(n.attr("size"))
    alpha, beta = float(n.attr("alpha", 1e-4)), float(n.attr("beta", 0.75))
    bias = float(n.attr("bias", 1.0))
    c, h, w = x.shape[1:]
    lo, hi = (size - 1) // 2, math.ceil((size - 1) / 2)
    sq = (f"reshape(square({x.name}), {ints([-1, 1, c, h * w])})")
    win = n.temp(f"avg_pool2d(pad({sq}, {ints([0, 0, 0, 0, lo, hi, 0, 0])}), "
                 f"{ints([size, 1])}, stride={ints([1, 1])})", "window_mean")
    d = x.dtype
    n.emit(f"{x.name} / ({number(bias, d)} + {number(alpha, d)} * reshape({win.name}, "
           f"{ints([-1, c, h, w])})) ** {number(beta, d)}")


def _softmax(op: str, fn: str):
    @lowers(op, 1, 11, 13)
    def lower(n):
        x = n.x(0)
        if n.version >= 13:
            axis = int(n.attr("axis", -1))
            n.emit(f"{fn}({x.name}, axis={axis})")
            return
        axis = int(n.attr("axis", 1)) % max(x.rank, 1)
        if axis == x.rank - 1:
            n.emit(f"{fn}({x.name}, axis=-1)")
            return
        if not all(isinstance(d, int) for d in x.shape[axis:]):
            n.refuse("opset < 13 softmax over symbolic trailing axes is not supported")
        inner = math.prod(x.shape[axis:])
        flat = f"reshape({x.name}, {ints([-1, inner])})"
        n.emit(f"reshape({fn}({flat}, axis=-1), {ints(x.shape)})")


_softmax("Softmax", "softmax")
_softmax("LogSoftmax", "log_softmax")


@lowers("Dropout", 7, 10, 12, 13, 22)
def dropout(n):
    """Inference (no training_mode, or false): the identity, the ratio unread. Training mode
    (opset 12+): ``dropout(x, ratio)``, which drops and scales by 1 / (1 - ratio) in
    training runs and is the identity in evaluation, as the exporting module's train and
    eval modes; its own random stream (`seed` is not ONNX's generator's). The mask output
    is not available."""
    x = n.x(0)
    n.attr("seed", None)
    ratio, train = 0.5, False
    if n.version >= 12:
        r = n.const(1) if n.has(1) else 0.5
        if n.has(2):
            t = n.const(2)
            if t is None:
                n.refuse("a training_mode computed at run time (it must be a constant)")
            train = bool(np.asarray(t))
        if train and r is None:
            n.refuse("a ratio computed at run time in training mode (it must be a constant)")
        ratio = 0.5 if r is None else float(np.asarray(r))
    else:
        ratio = n.attr("ratio", 0.5)
    n.unavailable(1, "the mask output of Dropout")
    if not train or ratio == 0:
        n.emit(x.name)
        return
    if not x.type.is_float:
        n.refuse("dropout of a non-float tensor")
    if not 0 <= ratio < 1:
        n.refuse(f"ratio {ratio}: dropout takes a ratio in [0, 1)")
    n.emit(f"dropout({x.name}, {number(ratio, 'f64')})")
