"""Which ops of a function body the compiled executor runs as row passes (`row_passes`).

A *group* is one forward op (``softmax``, ``log_softmax``, ``layernorm``, ``rmsnorm``,
``gelu``, ``batchnorm`` and ``batchnorm_running`` in training) or the consecutive ops of
one adjoint as its VJP rule writes it (`row_patterns`: softmax's, log-softmax's,
cross-entropy's, layernorm's, rmsnorm's, both GELUs'), all run by one call at the group's
last op. The call computes the values of the group that are read after it (its outputs)
into their planned buffers or new arrays, the same bits as the ops' own kernels
(`row_passes`; rmsnorm's forward pass within a documented rounding bound, `row_norms`).
It declines, and the ops run one by one as before, when an operand is not C-contiguous
(rows would not be rows) or a row is empty (the table kernels raise or warn there).

Arrays of fewer than `MIN_ELEMENTS` elements keep their table kernels (a few microseconds
of NumPy calls, where a row pass would mostly buy numba's import and compilation).
A group is formed only where the call may run in the place of its ops: its ops are
consecutive (constants evaluated ahead of time aside), its outputs are not read before its
last op, and no planned output buffer overlaps an operand or another output except as that
very array (each loop reads a row before it writes the row). An operand that may be a view
of unknown memory keeps the group out when an output has a planned buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy

from . import row_gelu, row_losses, row_norms, row_passes
from .row_passes import rows_of
from .kernels import DTYPES
from .row_patterns import match_adjoint

# arrays of fewer elements keep the table kernels: their NumPy calls take microseconds,
# and a row pass there would mostly buy numba's import and compilation
MIN_ELEMENTS = 4096


@dataclass
class Group:
    """Ops run as one row-pass call: the ops (the last at index `last`), the external
    operands in the runner's order (`inputs`), the values it writes (`outputs`), those only
    read inside (`inner`), and ``run(*inputs, *buffers) -> tuple | None``."""

    ops: list
    last: int
    inputs: list
    outputs: list
    run: object
    inner: list = field(default_factory=list)


def _float_shape(v, resolve):
    """`v`'s resolved shape when it is an f32/f64 array of rank 1 or more, else None."""
    if v.type.dtype not in ("f32", "f64") or v.type.rank == 0:
        return None
    return tuple(resolve(v.type.shape))


def _last_axis(op) -> bool:
    axis = op.attrs.get("axis", -1)
    return axis in (-1, op.results[0].type.rank - 1)


def forward_group(op, resolve):
    """(inputs, runner) of a forward op that has a row pass, or None."""
    if op.name == "batchnorm_running":
        return _batchnorm_group(op, resolve)
    if len(op.results) != 1:
        return None
    r = op.results[0]
    shape = _float_shape(r, resolve)
    if shape is None or any(v.type.dtype != r.type.dtype for v in op.operands):
        return None
    dtype = numpy.dtype(DTYPES[r.type.dtype])
    if op.name == "softmax" and _last_axis(op) and _float_shape(op.operands[0], resolve) == shape:
        return list(op.operands), softmax_runner(shape, dtype)
    if op.name == "layernorm" and _last_axis(op):
        x, gamma, beta = op.operands
        n = shape[-1]
        if _float_shape(x, resolve) == shape and all(
                _float_shape(p, resolve) == (n,) for p in (gamma, beta)):
            return list(op.operands), layernorm_runner(shape, dtype, float(op.attrs["eps"]))
    if op.name == "gelu" and _float_shape(op.operands[0], resolve) == shape:
        if op.attrs.get("approximate") == "tanh":
            return list(op.operands), gelu_tanh_runner(shape, dtype)
        if op.attrs.get("approximate", "none") == "none":
            return list(op.operands), row_gelu.gelu_erf_runner(shape, dtype)
    if op.name == "log_softmax" and _last_axis(op) \
            and _float_shape(op.operands[0], resolve) == shape:
        return list(op.operands), row_losses.log_softmax_runner(shape, dtype)
    if op.name == "rmsnorm" and _last_axis(op):
        x, gamma = op.operands
        if _float_shape(x, resolve) == shape and _float_shape(gamma, resolve) == shape[-1:]:
            return list(op.operands), row_norms.rmsnorm_runner(shape, dtype,
                                                               float(op.attrs["eps"]))
    if op.name == "batchnorm":
        return _batchnorm_group(op, resolve)
    return None


def _batchnorm_group(op, resolve):
    """batchnorm, or `batchnorm_running` in training, with 1-D gamma and beta (and running
    statistics) along the channel axis, all of the result's float dtype."""
    r = op.results[0]
    shape = _float_shape(r, resolve)
    if shape is None or any(v.type.dtype != r.type.dtype for v in op.operands) or (
            op.name == "batchnorm_running" and not op.attrs.get("training")):
        return None
    axis = op.attrs.get("axis", 1) % len(shape)
    if _float_shape(op.operands[0], resolve) != shape or any(
            _float_shape(p, resolve) != (shape[axis],) for p in op.operands[1:]):
        return None
    running = (float(op.attrs["momentum"]),) if op.name == "batchnorm_running" else None
    return list(op.operands), row_norms.batchnorm_runner(
        shape, numpy.dtype(DTYPES[r.type.dtype]), axis, float(op.attrs["eps"]), running)


def _fits(arrays) -> bool:
    return all(a.flags.c_contiguous for a in arrays)


def softmax_runner(shape, dtype):
    """softmax along the last axis: the shift, NumPy's exp in place, the normalization."""
    rows, n = rows_of(shape)
    shifted, norm = row_losses.shifter(shape, dtype), row_passes.get("normalize_rows")
    zero, exp = dtype.type(0), numpy.exp

    def run(x, out):
        done = shifted(x, out)
        if done is None:
            return None
        out, o2 = done
        exp(out, out=out)
        norm(o2, zero)
        return (out,)
    return run


def layernorm_runner(shape, dtype, eps: float):
    """layernorm along the last axis with 1-D gamma and beta, one pass per row."""
    rows, n = rows_of(shape)
    k = row_passes.get("layernorm_rows")
    zero, eps, empty = dtype.type(0), dtype.type(eps), numpy.empty

    def run(x, gamma, beta, out):
        if n == 0 or not _fits((x, gamma, beta)) or (out is not None
                                                    and not out.flags.c_contiguous):
            return None
        out = empty(shape, dtype) if out is None else out
        k(x.reshape(rows, n), gamma, beta, out.reshape(rows, n), eps, zero)
        return (out,)
    return run


def gelu_tanh_runner(shape, dtype):
    """The tanh GELU: its tanh argument, NumPy's tanh in place, ``0.5 x (1 + t)``. The
    argument goes to a temporary (the output may be the operand's own buffer)."""
    from .kernels.elementwise import GELU_K
    inner, outer = row_passes.get("gelu_tanh_inner"), row_passes.get("gelu_tanh_outer")
    a, k, half, one = (dtype.type(c) for c in (0.044715, GELU_K, 0.5, 1.0))
    tanh, empty = numpy.tanh, numpy.empty

    def run(x, out):
        if not x.flags.c_contiguous or (out is not None and not out.flags.c_contiguous):
            return None
        out = empty(shape, dtype) if out is None else out
        xf = x.reshape(-1)
        t = empty(xf.shape[0], dtype)
        inner(xf, t, a, k)
        tanh(t, out=t)
        outer(xf, t, out.reshape(-1), half, one)
        return (out,)
    return run


def match_rows(op, resolve, consts, read_at, index):
    """``(member ops, inputs, outputs, runner)`` of the row-pass group that ends at `op`:
    an adjoint (`row_patterns`) or a forward op, on arrays of `MIN_ELEMENTS` or more."""
    if not _large(op, resolve):
        return None
    found = match_adjoint(op, resolve, consts, read_at, index)
    if found is not None:
        return found
    made = forward_group(op, resolve)
    if made is None:
        return None
    inputs, run = made
    return [op], inputs, list(op.results), run


def plan(block, resolve, consts: dict, skip, exclude, memory, match=match_rows) -> dict:
    """The groups of `block` found by `match` (`match_rows`: the row passes): op index ->
    its `Group`, for every index of every group. `skip(op)`: evaluated ahead of time;
    `exclude(op)`: run some other way; ``memory(v) -> (kind, array)`` as for
    `fused_runs.plan`."""
    ops = block.ops
    index = {op: k for k, op in enumerate(ops)}
    read_at: dict = {}
    for k, op in enumerate(ops):
        for inner in op.walk():
            for v in inner.operands:
                read_at.setdefault(v, []).append(k)
    taken: set = set()
    out: dict = {}
    for k in range(len(ops) - 1, -1, -1):   # from the end: an adjoint's root comes last
        op = ops[k]
        if k in taken or exclude(op) or skip(op):
            continue
        found = match(op, resolve, consts, read_at, index)
        if found is None:
            continue
        members, inputs, outputs, run = found
        idx = sorted(index[m] for m in members)
        if any(i in taken or exclude(ops[i]) for i in idx):
            continue
        between = [i for i in range(idx[0], idx[-1] + 1) if not skip(ops[i])]
        if between != idx:
            continue  # other ops run in between
        if any(i <= idx[-1] for o in outputs for i in read_at.get(o, ()) if i not in idx):
            continue  # an output is read before the group's last op
        if not _safe(inputs, outputs, consts, memory):
            continue
        made = {r for m in members for r in m.results}
        group = Group([ops[i] for i in idx], idx[-1], inputs, outputs, run,
                      [r for r in made if r not in outputs])
        taken.update(idx)
        out.update((i, group) for i in idx)
    return out


def _large(op, resolve) -> bool:
    """Whether `op`'s first result has `MIN_ELEMENTS` elements or more (one result, or
    `batchnorm_running`'s three)."""
    if len(op.results) != 1 and op.name != "batchnorm_running":
        return False
    size = 1
    for d in resolve(op.results[0].type.shape):
        size *= d
    return size >= MIN_ELEMENTS


def _safe(inputs, outputs, consts, memory) -> bool:
    """No planned output buffer overlaps an operand or another output, but as that very
    array; no operand of unknown memory when an output has a planned buffer."""
    arrays = [v for v in inputs if v not in consts]
    places = {v: memory(v) for v in arrays + list(outputs)}
    planned = [o for o in outputs if places[o][0] == "arena"]
    if not planned:
        return True
    if any(kind == "unknown" for kind, _ in places.values()):
        return False
    for o in planned:
        buf = places[o][1]
        for v in arrays + list(outputs):
            kind, other = places[v]
            if v is o or kind != "arena":
                continue
            same = (v in arrays and other.__array_interface__["data"][0]
                    == buf.__array_interface__["data"][0] and other.shape == buf.shape)
            if numpy.may_share_memory(buf, other) and not same:
                return False
    return True
