"""Ops that read and replace state (tdsl.md section 9): `batchnorm_running`, batch
normalization with running statistics, as ``torch.nn.BatchNorm2d``.

``y, mean, var = batchnorm_running(x, gamma, beta, running_mean, running_var)``:

* in training (option ``training``, set by derivatives and training steps through the
  ``train-mode`` pass), y normalizes with the batch's mean and biased variance (`batchnorm`),
  and the running statistics move towards the batch's: ``(1 - momentum) * running +
  momentum * batch``, with the *unbiased* variance, as PyTorch;
* in evaluation, y normalizes with the running statistics, which come back unchanged.

The statistics results carry no derivative (their cotangents are ignored, their tangents
are zero) and the running statistics get none: gradients never flow through a state
update. The training derivative is `batchnorm`'s; the evaluation one is that of an affine
map per channel.

Batched (`adc.vmap`), each example is a run of its own, as ``jax.vmap`` maps a function
whose state goes in and comes out: it normalizes with its own batch's statistics (or the
running ones, in evaluation) and returns its own updated running statistics, so the
statistics results are batched even where the running statistics given are shared.
"""
from __future__ import annotations

from ..diagnostics import ShapeError
from ..ir.types import normalize_axis, num_elements
from .batching import all_batched, rank
from .create import dim_scalar
from .norm import _axis_of, _batchnorm, _batchnorm_batch, _batchnorm_jvp, _batchnorm_vjp, \
    _vector_along, along, others
from .registry import Option, register
from .rules import add_all, float_tangent
from . import roles


def _running(types, attrs):
    x, gamma, beta, mean, var = types
    y = _batchnorm([x, gamma, beta], attrs)
    axis = _axis_of(x, attrs["axis"], "batchnorm_running")
    _vector_along(x, axis, [mean, var], ("running_mean", "running_var"), "batchnorm_running")
    m = attrs["momentum"]
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1:
        raise ShapeError(f"batchnorm_running: momentum must be in [0, 1], got {m!r}")
    count = num_elements([d for k, d in enumerate(x.shape) if k != axis])
    if count == 1:
        raise ShapeError(f"batchnorm_running of {x}: one value per channel has no unbiased "
                         f"variance (PyTorch refuses it too in training)")
    return [y, mean, var]


class _View:
    """The first three operands of a `batchnorm_running` op, as `batchnorm`'s rules read
    them."""

    def __init__(self, op):
        self.operands, self.attrs = op.operands[:3], op.attrs


def _eval_parts(b, op):
    """(r, scale): the running statistics' ``rstd`` and ``gamma * rstd``, laid along the
    channel axis of x."""
    x, gamma, _, mean, var = op.operands
    rank, axis = x.type.rank, normalize_axis(op.attrs["axis"], x.type.rank)
    rstd = b.emit("rsqrt", b.emit("add", var, b.const(float(op.attrs["eps"]), x.type.dtype)))
    return along(b, rstd, rank, axis), along(b, b.emit("mul", gamma, rstd), rank, axis)


def _vjp(b, op, cts):
    ct = cts[0]
    if ct is None:
        return [None] * 5
    if op.attrs.get("training"):
        return _batchnorm_vjp(b, _View(op), [ct]) + [None, None]
    x, _, _, mean, _ = op.operands
    rank, axis = x.type.rank, normalize_axis(op.attrs["axis"], x.type.rank)
    axes = others(rank, axis)
    rstd, scale = _eval_parts(b, op)
    xhat = b.emit("mul", b.emit("sub", x, along(b, mean, rank, axis)), rstd)
    return [b.emit("mul", ct, scale), b.emit("sum", b.emit("mul", ct, xhat), axis=axes),
            b.emit("sum", ct, axis=axes), None, None]


def _jvp(b, op, tangents):
    if op.attrs.get("training"):
        return _batchnorm_jvp(b, _View(op), tangents[:3]) + [None, None]
    x, _, _, mean, _ = op.operands
    tx, tg, tb = (float_tangent(v, t) for v, t in zip(op.operands[:3], tangents[:3]))
    rank, axis = x.type.rank, normalize_axis(op.attrs["axis"], x.type.rank)
    rstd, scale = _eval_parts(b, op)
    parts = []
    if tx is not None:
        parts.append(b.emit("mul", tx, scale))
    if tg is not None:
        xhat = b.emit("mul", b.emit("sub", x, along(b, mean, rank, axis)), rstd)
        parts.append(b.emit("mul", xhat, along(b, tg, rank, axis)))
    if tb is not None:
        parts.append(along(b, tb, rank, axis))
    total = add_all(b, parts)
    if total is not None and total.type.shape != x.type.shape:   # dbeta alone
        total = b.emit("broadcast_to", total, shape=x.type.shape)
    return [total, None, None]


def _batch(b, op, args, batched, n):
    """Each example a run of its own (module docstring): every operand taken per example
    (shared ones repeated), the statistics over the example's axes but its channel, the
    running ones updated per example, as the kernel computes them."""
    x, gamma, beta, mean, var = all_batched(b, args, batched, n)
    r = rank(x, True)
    axis = normalize_axis(op.attrs["axis"], r)
    dt = x.type.dtype
    if not op.attrs.get("training"):   # y = x * scale + shift, the statistics unchanged
        scale = b.emit("div", gamma, b.emit("sqrt", b.emit("add", var, b.const(
            float(op.attrs["eps"]), dt))))
        shift = b.emit("sub", beta, b.emit("mul", mean, scale))
        y = b.emit("add", b.emit("mul", x, along(b, scale, r + 1, axis, lead=1)),
                   along(b, shift, r + 1, axis, lead=1))
        return [y, mean, var]
    y, = _batchnorm_batch(b, op, [x, gamma, beta], [True] * 3, n)
    axes = [k + 1 for k in others(r, axis)]
    batch_mean = b.emit("mean", x, axis=axes)
    xc = b.emit("sub", x, along(b, batch_mean, r + 1, axis, lead=1))
    count = num_elements([d for k, d in enumerate(x.type.shape[1:]) if k != axis])
    less = b.emit("sub", dim_scalar(b, count, dt), b.const(1.0, dt))
    unbiased = b.emit("div", b.emit("sum", b.emit("mul", xc, xc), axis=axes), less)
    m = b.const(float(op.attrs["momentum"]), dt)
    keep = b.emit("sub", b.const(1.0, dt), m)
    return [y] + [b.emit("add", b.emit("mul", keep, running), b.emit("mul", m, stat))
                  for running, stat in ((mean, batch_mean), (var, unbiased))]


def _flops(op, elements):
    return 8 * elements(op.operands[0].type.shape)


register("batchnorm_running", _running,
         operands=("x", "gamma", "beta", "running_mean", "running_var"),
         options=(Option("axis", "int", 1), Option("eps", "float", 1e-5),
                  Option("momentum", "float", 0.1), Option("training", "bool", False)),
         vjp=_vjp, jvp=_jvp, flops=_flops, fresh=True, param_role=roles.norm(gain=1, bias=2),
         batch=_batch,
         doc="batch normalization with running statistics: (y, new running_mean, new "
             "running_var); training: the batch's statistics, the running ones updated with "
             "momentum (unbiased variance); evaluation: the running ones")
