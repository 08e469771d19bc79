"""ONNX shape ops, gathers, slices, padding and constants as TDSL."""
from __future__ import annotations

import numpy as np

from ..importer.names import ints, number
from .table import lowers

ALL = (1, 13, 14, 16, 19, 21, 23, 24, 25)


@lowers("Constant", 9, 11, 12, 13, 19, 21, 23, 24, 25)
def constant(n):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = n.attr(key, None)
        if v is not None:
            dt = {"value_float": np.float32, "value_floats": np.float32}.get(key, None)
            n.set_const(0, np.asarray(v, dtype=dt) if dt else
                        (np.asarray(v, np.int64) if key.startswith("value_int") else v))
            return
    n.refuse("only tensor, float and int constants are supported")


@lowers("ConstantOfShape", 9, 20, 21, 23, 24, 25)
def constant_of_shape(n):
    shape = n.ints(0, "shape")
    v = n.attr("value", None)
    v = np.zeros(1, np.float32) if v is None else np.asarray(v)
    if any(isinstance(d, str) for d in shape):
        n.refuse("a constant of symbolic shape is not supported")
    # a weight made from its shape (the light model zoo's way to ship small files) trains
    n.set_const(0, np.full(shape, v.reshape(-1)[0], dtype=v.dtype), frozen=False)


@lowers("Shape", 1, 13, 15, 19, 21, 23, 24, 25)
def shape(n):
    x = n.x(0)
    start, end = n.attr("start", 0), n.attr("end", None)
    dims = list(x.shape)[slice(start, end)]
    is_static = all(isinstance(d, int) for d in dims)
    n.set_const(0, np.array(dims, np.int64 if is_static else object))


@lowers("Size", 1, 13, 19, 21, 23, 24, 25)
def size(n):
    x = n.x(0)
    if not all(isinstance(d, int) for d in x.shape):
        n.refuse("Size of a tensor with a symbolic dimension is not supported")
    n.set_const(0, np.array(int(np.prod(x.shape, dtype=np.int64)), np.int64))


@lowers("Reshape", 5, 13, 14, 19, 21, 23, 24, 25)
def reshape(n):
    x = n.x(0)
    target = n.ints(1, "shape")
    allowzero = n.only("allowzero", (0, 1), 0) if n.version >= 14 else 0
    out = [x.shape[k] if d == 0 and not allowzero else d for k, d in enumerate(target)]
    n.emit(f"reshape({x.name}, {ints(out)})")


@lowers("Flatten", 1, 9, 11, 13, 21, 23, 24, 25)
def flatten(n):
    x = n.x(0)
    axis = int(n.attr("axis", 1))
    axis = axis + x.rank if axis < 0 else axis
    head, tail = x.shape[:axis], x.shape[axis:]
    if all(isinstance(d, int) for d in head):
        n.emit(f"reshape({x.name}, {ints([int(np.prod(head, dtype=np.int64)), -1])})")
    elif all(isinstance(d, int) for d in tail):
        n.emit(f"reshape({x.name}, {ints([-1, int(np.prod(tail, dtype=np.int64))])})")
    else:
        n.refuse("Flatten with symbolic dimensions on both sides is not supported")


@lowers("Transpose", 1, 13, 21, 23, 24, 25)
def transpose(n):
    x = n.x(0)
    perm = n.attr("perm", None)
    perm = list(range(x.rank))[::-1] if perm is None else [int(p) for p in perm]
    n.emit(x.name if perm == list(range(x.rank)) else f"transpose({x.name}, {ints(perm)})")


def _axes(n, since: int) -> list[int] | None:
    if n.version >= since:
        return n.ints(1, "axes") if n.has(1) else None
    a = n.attr("axes", None)
    return None if a is None else [int(v) for v in a]


@lowers("Squeeze", 1, 11, 13, 21, 23, 24, 25)
def squeeze(n):
    x = n.x(0)
    axes = _axes(n, 13)
    if axes is None:
        axes = [k for k, d in enumerate(x.shape) if d == 1]
    axes = sorted(a % x.rank for a in axes)
    n.emit(f"squeeze({x.name}, {ints(axes)})" if axes else x.name)


@lowers("Unsqueeze", 1, 11, 13, 21, 23, 24, 25)
def unsqueeze(n):
    x = n.x(0)
    axes = _axes(n, 13)
    if axes is None:
        n.refuse("axes are required")
    rank = x.rank + len(axes)
    expr = x.name
    for a in sorted(a % rank for a in axes):
        expr = f"expand_dims({expr}, {a})"
    n.emit(expr)


@lowers("Concat", 4, 11, 13)
def concat(n):
    xs = [n.x(i) for i in range(n.n_in)]
    axis = int(n.attr("axis")) % xs[0].rank
    xs = [x for x in xs if x.shape[axis] != 0] or xs[:1]
    n.emit(f"concat([{', '.join(x.name for x in xs)}], axis={axis})" if len(xs) > 1
           else xs[0].name)


def _slice_text(x, axis_slices: dict) -> str:
    subs = []
    for k in range(x.rank):
        s = axis_slices.get(k)
        if s is None:
            subs.append(":")
            continue
        a, b, st = s
        subs.append(("" if a is None else number(a, "i64")) + ":" +
                    ("" if b is None else number(b, "i64")) +
                    ("" if st == 1 else ":" + number(st, "i64")))
    while subs and subs[-1] == ":":
        subs.pop()
    return f"{x.name}[{', '.join(subs)}]" if subs else x.name


@lowers("Slice", 10, 11, 13)
def slice_(n):
    x = n.x(0)
    starts, ends = n.ints(1, "starts"), n.ints(2, "ends")
    axes = n.ints(3, "axes") if n.has(3) else list(range(len(starts)))
    steps = n.ints(4, "steps") if n.has(4) else [1] * len(starts)
    spec = {}
    for a, s, e, st in zip(axes, starts, ends, steps):
        a %= x.rank
        size = x.shape[a]
        if st == 0:
            n.refuse("a step of 0")
        if not isinstance(size, int):
            if st != 1 or (s < 0) != (e < 0 and e > -(1 << 62)):
                n.refuse("slices of a symbolic axis need step 1 and bounds counted from one "
                         "end")
            big = 1 << 62   # bounds past the end read as the end
            spec[a] = (s or None, None if e >= big else e, st)
            continue
        # clamp as ONNX does, then write NumPy bounds that select the same elements
        lo, hi = (0, size) if st > 0 else (-1, size - 1)
        s = min(max(s + size if s < 0 else s, lo), hi)
        e = min(max(e + size if e < 0 else e, lo), hi)
        if st > 0:
            spec[a] = (s, max(e, s), st)
        else:
            spec[a] = (0, 0, 1) if s < 0 else (s, None if e < 0 else e, st)
    n.emit(_slice_text(x, spec))


@lowers("Gather", 1, 11, 13)
def gather(n):
    x = n.x(0)
    axis = int(n.attr("axis", 0)) % x.rank
    idx = n.const(1)
    if idx is not None and idx.ndim == 0 and isinstance(x.shape[axis], int):
        i = int(idx)
        if not -x.shape[axis] <= i < x.shape[axis]:
            n.refuse(f"index {i} is out of range for an axis of {x.shape[axis]}")
        subs = [":"] * axis + [number(i, "i64")]
        n.emit(f"{x.name}[{', '.join(subs)}]")
        return
    n.emit(f"take({x.name}, {n.x(1).name}, axis={axis})")


@lowers("Expand", 8, 13)
def expand(n):
    x = n.x(0)
    shape = n.ints(1, "shape")
    rank = max(len(shape), x.rank)
    a = [1] * (rank - x.rank) + list(x.shape)
    b = [1] * (rank - len(shape)) + list(shape)
    out = [p if q == 1 else q for p, q in zip(a, b)]
    n.emit(f"broadcast_to({x.name}, {ints(out)})" if out != list(x.shape) else x.name)


@lowers("Tile", 6, 13)
def tile(n):
    x = n.x(0)
    reps = n.ints(1, "repeats")
    expr = x.name
    for axis, r in enumerate(reps):
        if r == 0:
            n.refuse("a repeat count of 0 is not supported")
        if r > 1:
            expr = f"concat([{', '.join([expr] * r)}], axis={axis})" if r <= 8 else None
            if expr is None:
                n.refuse("repeat counts above 8 are not supported")
            expr = n.temp(expr, "tiled").name
    n.emit(expr)


@lowers("Split", 2, 11, 13, 18)
def split(n):
    x = n.x(0)
    axis = int(n.attr("axis", 0)) % x.rank
    size = x.shape[axis]
    if not isinstance(size, int):
        n.refuse("Split of a symbolic axis is not supported")
    parts = n.ints(1, "split") if n.version >= 13 and n.has(1) else n.attr("split", None)
    k = len(n.outputs)
    if n.version >= 18:
        num = n.attr("num_outputs", None)
        k = int(num) if num is not None else k
    if parts is None:
        step = -(-size // k)
        parts = [min(step, size - step * i) for i in range(k)]
    start = 0
    for i, p in enumerate(parts):
        if n.wants(i):
            n.emit(_slice_text(x, {axis: (start, start + int(p), 1)}), i)
        start += int(p)


@lowers("Pad", 11, 13, 18, 19, 21, 23, 24, 25)
def pad(n):
    x = n.x(0)
    n.only("mode", ("constant",), "constant")
    pads = n.ints(1, "pads")
    value = n.const(2) if n.has(2) else None
    if n.has(2) and value is None:
        n.refuse("constant_value must be a constant")
    axes = n.ints(3, "axes") if n.has(3) else list(range(x.rank))
    k = len(axes)
    widths = [0] * (2 * x.rank)
    for a, b, e in zip(axes, pads[:k], pads[k:]):
        widths[2 * (a % x.rank)], widths[2 * (a % x.rank) + 1] = b, e
    if any(w < 0 for w in widths):
        n.refuse("negative pads (cropping) are not supported")
    v = 0.0 if value is None or value.size == 0 else float(value.reshape(-1)[0])
    if not x.type.is_float:
        n.refuse("padding integer tensors is not supported")
    n.emit(f"pad({x.name}, {ints(widths)}, value={number(v, x.dtype)})")


@lowers("Range", 11, 27)
def range_(n):
    n.refuse("Range with inputs not known when importing is not supported")
