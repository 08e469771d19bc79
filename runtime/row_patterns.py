"""The adjoints that run as row passes, found by the shape of their ops.

Each pattern is the op tree its VJP rule emits (`adcompiler.ops.nn` for softmax,
log-softmax, cross-entropy and layernorm, `adcompiler.ops.norm` for rmsnorm with eps > 0,
`adcompiler.ops.elementwise` for both GELUs), rooted at the adjoint's last op: a tuple
``(op name, *operands)``, a name for an operand from outside the group (the same name, the
same value), ``("c", name)`` for a 0-d constant (the same name, the same bits), and names
in `DEFS` for shared subtrees. ``add`` and ``mul`` match in either operand order (IEEE
addition and multiplication are commutative, so the bits are the same); ``sum``, ``mean``
and ``max`` must reduce the last axis with ``keepdims``. The loops compute the same
operations on the bound values and constants (`row_passes`).
"""
from __future__ import annotations

import numpy

from . import row_gelu, row_losses, row_norms, row_passes
from .row_passes import full, rows_of
from .kernels import DTYPES

COMMUTATIVE = ("add", "mul")
REDUCTIONS = ("sum", "mean", "max")

SOFTMAX = ("mul", "y", ("sub", "dy", ("sum", ("mul", "dy", "y"))))

LAYERNORM = ("mul", "rstd", ("sub", ("sub", "g", ("mean", "g")),
                             ("mul", "xhat", ("mean", ("mul", "g", "xhat")))))
LAYERNORM_DEFS = {
    "rstd": ("rsqrt", ("add", ("mean", ("mul", "xc", "xc")), ("c", "eps"))),
    "xhat": ("mul", "xc", "rstd"),
    "xc": ("sub", "x", ("mean", "x")),
    "g": ("mul", "ct", "gamma"),
}

RMSNORM = ("mul", "rinv", ("sub", "g", ("mul", "xhat", ("mean", ("mul", "g", "xhat")))))
RMSNORM_DEFS = {
    "rinv": ("mul", "k", "inv"),
    "xhat": ("mul", "u", "k"),
    "k": ("rsqrt", ("add", ("mean", ("mul", "u", "u")),
                    ("mul", ("c", "eps"), ("mul", "inv", "inv")))),
    "u": ("mul", "x", "inv"),
    "inv": ("div", ("c", "one"), ("where", ("gt", "s", ("c", "thr")), "s", ("c", "one"))),
    "s": ("stop_gradient", ("max", ("abs", "x"))),
    "g": ("mul", "ct", "gamma"),
}

LOG_SOFTMAX = ("sub", "ct", ("mul", ("exp", "y"), ("sum", "ct")))

# cross-entropy's adjoint on integer labels: the cotangent with a last axis of 1 times the
# softmax less the one-hot labels (the one_hot op stays outside: `row_losses`)
CROSS_ENTROPY = ("mul", "cte", ("sub", "p", "oh"))

BATCHNORM = ("mul", ("sub", ("sub", ("mul", "ct", "gr"), ("mul", "per", ("reshape_c", "db"))),
                     ("mul", "xhat", ("mul", "per", ("reshape_c", "dg")))), "rstd")
BATCHNORM_DEFS = {
    "db": ("sum_c", "ct"),
    "dg": ("sum_c", ("mul", "ct", "xhat")),
    "per": ("div", "gr", ("c", "n")),
    "gr": ("reshape_c", "gamma"),
    "xhat": ("mul", "xc", "rstd"),
    "rstd": ("rsqrt", ("add", ("mean_c", ("mul", "xc", "xc")), ("c", "eps"))),
    "xc": ("sub", "x", ("mean_c", "x")),
}

GELU_ERF = ("mul", "ct", ("add", ("mul", ("c", "half"), ("add", ("c", "one"), "erf")),
                          ("mul", "x", ("mul", ("c", "c"), ("exp", ("mul", ("c", "mhalf"),
                                                                   ("square", "x")))))))
GELU_ERF_DEFS = {"erf": ("erf", ("mul", "x", ("c", "r2")))}

GELU_TANH = ("mul", "ct", ("mul", ("c", "half"), (
    "add", ("add", ("c", "one"), "t"),
    ("mul", ("mul", "x", ("sub", ("c", "one"), ("square", "t"))),
     ("mul", ("c", "k"), ("add", ("c", "one"), ("mul", ("c", "a3"), "sq")))))))
GELU_TANH_DEFS = {
    "t": ("tanh", ("mul", ("mul", ("c", "k"), "x"), ("add", ("c", "one"), ("mul", ("c", "a"), "sq")))),
    "sq": ("square", "x"),
}


# batchnorm's adjoint reduces over every axis but the channel's, and reshapes per-channel
# vectors to lie along it: these names match such ops only, all with the same channel axis
CHANNEL_OPS = {"mean_c": "mean", "sum_c": "sum", "reshape_c": "reshape"}


def _channel_op(op, m) -> bool:
    """Whether `op` is a `CHANNEL_OPS` op: a mean with keepdims or a sum without, over
    every axis but one, or a reshape of a vector to that axis of a rank that agrees."""
    if op.name == "reshape":
        shape = op.attrs.get("shape")
        if not isinstance(shape, (list, tuple)) or op.operands[0].type.rank != 1:
            return False
        axes = [k for k, d in enumerate(shape) if d != 1]
        ok = len(axes) <= 1 and len(op.attrs) == 1
        axis = axes[0] if axes else None
        rank = len(shape)
    else:
        rank = op.operands[0].type.rank
        reduced = op.attrs.get("axis")
        if not isinstance(reduced, (list, tuple)) or set(op.attrs) != {"axis", "keepdims"} \
                or bool(op.attrs["keepdims"]) != (op.name == "mean"):
            return False
        kept = set(range(rank)) - {a % rank for a in reduced}
        ok = len(kept) == 1 and len(reduced) == rank - 1
        axis = kept.pop() if ok else None
    if not ok:
        return False
    seen = m.const.setdefault("channel:", (axis, rank))
    if axis is None:
        return seen[1] == rank
    if seen[0] is None:
        m.const["channel:"] = (axis, rank)
        return seen[1] == rank
    return seen == (axis, rank)


class _Match:
    """One attempt: values bound to names, constants' bits, the ops matched."""

    def __init__(self, defs, consts, resolve):
        self.defs, self.consts, self.resolve = defs, consts, resolve
        self.env: dict = {}
        self.const: dict = {}
        self.ops: dict = {}   # op -> None, in the order found

    def copy(self):
        m = _Match(self.defs, self.consts, self.resolve)
        m.env, m.const, m.ops = dict(self.env), dict(self.const), dict(self.ops)
        return m


def _match(pat, v, m: _Match):
    """`m` extended by `v` matching `pat`, or None."""
    if isinstance(pat, str):
        if pat in m.env:
            return m if m.env[pat] is v else None
        if pat in m.defs:
            m = _match(m.defs[pat], v, m)
            if m is not None:
                m.env[pat] = v
            return m
        m.env[pat] = v
        return m
    if pat[0] == "c":
        c = m.consts.get(v)
        if c is None or c.shape != ():
            return None
        bits = (c.dtype.str, c.tobytes())
        if m.const.setdefault(pat[1], bits) != bits:
            return None
        m.env.setdefault("const:" + pat[1], c)
        return m
    op = v.defining_op
    if op is None or op.name != CHANNEL_OPS.get(pat[0], pat[0]) \
            or len(op.operands) != len(pat) - 1 \
            or len(op.results) != 1 or op.regions or op in m.ops:
        return None
    if pat[0] in CHANNEL_OPS:
        if not _channel_op(op, m):
            return None
    elif op.name in REDUCTIONS:
        axis = op.attrs.get("axis")
        rank = op.operands[0].type.rank
        if not op.attrs.get("keepdims") or axis not in (-1, rank - 1, [-1], [rank - 1]):
            return None
    elif op.attrs:
        return None
    orders = [pat[1:]]
    if op.name in COMMUTATIVE:
        orders.append(pat[1:][::-1])
    for order in orders:
        t = m.copy()
        t.ops[op] = None
        for p, w in zip(order, op.operands):
            t = _match(p, w, t)
            if t is None:
                break
        else:
            return t
    return None


# the adjoints that have one-pass row forms: name -> (root pattern, shared subtrees)
ADJOINTS = {"softmax": (SOFTMAX, {}), "layernorm": (LAYERNORM, LAYERNORM_DEFS),
            "rmsnorm": (RMSNORM, RMSNORM_DEFS), "gelu_tanh": (GELU_TANH, GELU_TANH_DEFS),
            "gelu_erf": (GELU_ERF, GELU_ERF_DEFS), "log_softmax": (LOG_SOFTMAX, {}),
            "cross_entropy": (CROSS_ENTROPY, {}), "batchnorm": (BATCHNORM, BATCHNORM_DEFS)}


def match_tree(name: str, v, consts):
    """The match of adjoint `name`'s pattern rooted at value `v`: an object whose ``env``
    binds the pattern's names (``const:NAME`` the constants' arrays) and whose ``ops`` are
    the ops matched, in the order found; None where `v` is not that adjoint's result.
    `consts`: value -> its array, for the 0-d constants."""
    pat, defs = ADJOINTS[name]
    return _match(pat, v, _Match(defs, consts, None))


def group_outputs(members, r, extra, read_at, index):
    """The values of the group `members` (rooted at `r`) read after it: `r`, and those of
    `extra` read outside; None where another member's value is read outside."""
    inside = {index[o] for o in members}
    outputs = [r]
    for o in members:
        res = o.results[0]
        if res is r or not set(read_at.get(res, ())) - inside:
            continue
        if res not in extra:
            return None
        outputs.append(res)
    return outputs


def match_adjoint(op, resolve, consts, read_at, index):
    """``(member ops, inputs, outputs, runner)`` of the adjoint rooted at `op`, or None."""
    if op.name not in ("mul", "sub") or len(op.results) != 1:
        return None
    r = op.results[0]
    dtype = r.type.dtype
    if dtype not in ("f32", "f64") or r.type.rank == 0:
        return None
    shape = tuple(resolve(r.type.shape))
    np_dtype = numpy.dtype(DTYPES[dtype])
    for name, make in (("softmax", _softmax), ("layernorm", _layernorm),
                       ("rmsnorm", _rmsnorm), ("gelu_tanh", _gelu_tanh),
                       ("gelu_erf", row_gelu.gelu_erf_adjoint),
                       ("log_softmax", row_losses.log_softmax_adjoint),
                       ("cross_entropy", row_losses.cross_entropy_adjoint),
                       ("batchnorm", row_norms.batchnorm_adjoint)):
        m = match_tree(name, r, consts)
        if m is None or any(c.dtype != np_dtype for k, c in m.env.items()
                            if k.startswith("const:")):
            continue
        made = make(m, shape, np_dtype, dtype, resolve)
        if made is None:
            continue
        inputs, extra, run = made
        members = list(m.ops)
        if any(v.defining_op in m.ops for v in inputs):
            continue   # an operand bound to a value made inside the group
        outputs = group_outputs(members, r, extra, read_at, index)
        if outputs is None:
            continue
        if getattr(run, "all_outputs", False):   # buffers and results in [r, *extra] order
            want = [r, *extra]
            return members, inputs, outputs, _reorder(run, len(inputs), len(want),
                                                      [want.index(o) for o in outputs])
        return members, inputs, outputs, _wrap(run, len(outputs))
    return None


def _reorder(run, n_in: int, n_out: int, pos: list):
    """`run` (`n_out` buffers and results in its own order) with buffers and results in
    the group's output order: output j is the runner's `pos[j]` (the others' buffers
    None, their results dropped)."""
    def reordered(*args):
        bufs = [None] * n_out
        for j, p in enumerate(pos):
            bufs[p] = args[n_in + j]
        got = run(*args[:n_in], *bufs)
        return None if got is None else tuple(got[p] for p in pos)
    return reordered


def _wrap(run, n_out):
    """The runner with a buffer slot for each output (an unused `xhat` slot is None)."""
    if n_out == 2:
        return run
    return lambda *args: run(*args, None)


def _softmax(m, shape, np_dtype, dtype, resolve):
    y, dy = m.env["y"], m.env["dy"]
    if not (full(y, shape, dtype, resolve) and full(dy, shape, dtype, resolve)):
        return None
    rows, n = rows_of(shape)
    k, zero, empty = row_passes.get("softmax_adjoint_rows"), np_dtype.type(0), numpy.empty

    def run(dy_, y_, out, _unused):
        if not (dy_.flags.c_contiguous and y_.flags.c_contiguous) or (
                out is not None and not out.flags.c_contiguous):
            return None
        out = empty(shape, np_dtype) if out is None else out
        k(dy_.reshape(rows, n), y_.reshape(rows, n), out.reshape(rows, n), zero)
        return (out,)
    return [dy, y], (), run


def _layernorm(m, shape, np_dtype, dtype, resolve):
    x, ct, gamma = m.env["x"], m.env["ct"], m.env["gamma"]
    rows, n = rows_of(shape)
    if not (full(x, shape, dtype, resolve) and full(ct, shape, dtype, resolve)
            and full(gamma, (n,), dtype, resolve)) or n == 0:
        return None
    k = row_passes.get("layernorm_adjoint_rows")
    eps, zero, one = m.env["const:eps"][()], np_dtype.type(0), np_dtype.type(1)
    empty = numpy.empty

    def run(x_, ct_, gamma_, out, xhat):
        if not (x_.flags.c_contiguous and ct_.flags.c_contiguous and gamma_.flags.c_contiguous) \
                or any(b is not None and not b.flags.c_contiguous for b in (out, xhat)):
            return None
        out = empty(shape, np_dtype) if out is None else out
        keep = xhat is not None
        h = xhat if keep else out   # not written unless kept
        k(x_.reshape(rows, n), ct_.reshape(rows, n), gamma_, out.reshape(rows, n),
          h.reshape(rows, n), eps, zero, one, keep)
        return (out, xhat) if keep else (out,)
    return [x, ct, gamma], (m.env["xhat"],), run


def _rmsnorm(m, shape, np_dtype, dtype, resolve):
    x, ct, gamma = m.env["x"], m.env["ct"], m.env["gamma"]
    rows, n = rows_of(shape)
    if not (full(x, shape, dtype, resolve) and full(ct, shape, dtype, resolve)
            and full(gamma, (n,), dtype, resolve)) or n == 0:
        return None
    k = row_passes.get("rmsnorm_adjoint_rows")
    thr, one, eps = (m.env["const:" + c][()] for c in ("thr", "one", "eps"))
    zero, empty = np_dtype.type(0), numpy.empty

    def run(x_, ct_, gamma_, out, xhat):
        if not (x_.flags.c_contiguous and ct_.flags.c_contiguous and gamma_.flags.c_contiguous) \
                or any(b is not None and not b.flags.c_contiguous for b in (out, xhat)):
            return None
        out = empty(shape, np_dtype) if out is None else out
        keep = xhat is not None
        h = xhat if keep else out   # not written unless kept
        k(x_.reshape(rows, n), ct_.reshape(rows, n), gamma_, out.reshape(rows, n),
          h.reshape(rows, n), thr, one, eps, zero, keep)
        return (out, xhat) if keep else (out,)
    return [x, ct, gamma], (m.env["xhat"],), run


def _gelu_tanh(m, shape, np_dtype, dtype, resolve):
    x, ct = m.env["x"], m.env["ct"]
    if not (full(x, shape, dtype, resolve) and full(ct, shape, dtype, resolve)):
        return None
    c = {k: m.env["const:" + k][()] for k in ("half", "one", "k", "a", "a3")}
    inner = row_passes.get("gelu_tanh_grad_inner")
    outer = row_passes.get("gelu_tanh_grad_outer")
    tanh, empty = numpy.tanh, numpy.empty

    def run(x_, ct_, out, _unused):
        if not (x_.flags.c_contiguous and ct_.flags.c_contiguous) or (
                out is not None and not out.flags.c_contiguous):
            return None
        out = empty(shape, np_dtype) if out is None else out
        xf = x_.reshape(-1)
        t = empty(xf.shape[0], np_dtype)
        inner(xf, t, c["k"], c["a"], c["one"])
        tanh(t, out=t)
        outer(xf, t, ct_.reshape(-1), out.reshape(-1), c["k"], c["a3"], c["half"], c["one"])
        return (out,)
    return [x, ct], (), run
