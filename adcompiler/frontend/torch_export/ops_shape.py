"""Core ATen views, reshapes, slices, concatenation and gathers as TDSL."""
from __future__ import annotations

from ..importer.names import ints, number
from .table import lowers


def _shape_list(n, x, shape) -> str:
    """A target shape for reshape: a symbolic entry that is one of x's dims is kept by
    name; other symbolic entries become the one -1."""
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, str) and d.isidentifier():
            out.append(d)
        else:
            out.append(-1)
    if out.count(-1) > 1:
        n.refuse(f"shape {shape} has more than one unknown size")
    return ints(out)


@lowers("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(n):
    x = n.x(0)
    shape = n.arg(1)
    if list(shape) == list(x.shape):
        n.emit(x.name)
        return
    n.emit(f"reshape({x.name}, {_shape_list(n, x, shape)})")


@lowers("aten.permute.default")
def permute(n):
    x = n.x(0)
    perm = [p % x.rank for p in n.arg(1)]
    n.emit(x.name if perm == list(range(x.rank)) else f"transpose({x.name}, {ints(perm)})")


@lowers("aten.t.default")
def t(n):
    x = n.x(0)
    n.emit(f"transpose({x.name})" if x.rank == 2 else x.name)


@lowers("aten.transpose.int")
def transpose(n):
    x = n.x(0)
    a, b = n.arg(1) % x.rank, n.arg(2) % x.rank
    perm = list(range(x.rank))
    perm[a], perm[b] = perm[b], perm[a]
    n.emit(x.name if a == b else f"transpose({x.name}, {ints(perm)})")


@lowers("aten.expand.default")
def expand(n):
    x = n.x(0)
    shape = list(n.arg(1))
    n.arg(2, False, "implicit")
    lead = len(shape) - x.rank
    out = [x.shape[k - lead] if d == -1 else d for k, d in enumerate(shape)]
    n.emit(x.name if out == list(x.shape) else f"broadcast_to({x.name}, {ints(out)})")


@lowers("aten.unsqueeze.default")
def unsqueeze(n):
    x = n.x(0)
    d = n.arg(1) % (x.rank + 1)
    n.emit(f"expand_dims({x.name}, {d})")


@lowers("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def squeeze(n):
    x = n.x(0)
    dims = n.arg(1, None, "dim")
    dims = [k for k, s in enumerate(x.shape) if s == 1] if dims is None else \
        [dims] if isinstance(dims, int) else dims
    dims = sorted(d % x.rank for d in dims if x.shape[d % x.rank] == 1)
    n.emit(f"squeeze({x.name}, {ints(dims)})" if dims else x.name)


def _bounds(n, size, start, end, step):
    """NumPy slice text for torch's clamped [start:end:step] on an axis of `size`."""
    big = 1 << 62
    if not isinstance(size, int):
        if step != 1:
            n.refuse("a strided slice of a symbolic axis is not supported")
        s = "" if start in (None, 0) else number(start, "i64")
        e = "" if end is None or end >= big else number(end, "i64")
        return f"{s}:{e}"
    start = 0 if start is None else start
    end = size if end is None else end
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    return f"{start}:{end}" + ("" if step == 1 else f":{step}")


@lowers("aten.slice.Tensor")
def slice_(n):
    x = n.x(0)
    dim = n.arg(1, 0, "dim") % x.rank
    start, end, step = n.arg(2, None, "start"), n.arg(3, None, "end"), n.arg(4, 1, "step")
    text = _bounds(n, x.shape[dim], start, end, step)
    if text in (":", f"0:{x.shape[dim]}"):
        n.emit(x.name)
        return
    n.emit(f"{x.name}[{', '.join([':'] * dim + [text])}]")


@lowers("aten.select.int")
def select(n):
    x = n.x(0)
    dim, idx = n.arg(1) % x.rank, n.arg(2)
    n.emit(f"{x.name}[{', '.join([':'] * dim + [number(idx, 'i64')])}]")


@lowers("aten.cat.default")
def cat(n):
    xs = [n.imp.env[a.name] for a in n.args[0]]
    n._read.add(0)
    vals = [n.imp.materialize(a.name, e, e.frozen) if not hasattr(e, "shape") else e
            for a, e in zip(n.args[0], xs)]
    rank = vals[0].rank
    dim = n.arg(1, 0, "dim") % rank
    vals = [v for v in vals if v.shape[dim] != 0] or vals[:1]
    n.emit(vals[0].name if len(vals) == 1 else
           f"concat([{', '.join(v.name for v in vals)}], axis={dim})")


@lowers("aten.split_with_sizes.default", "aten.split.Tensor")
def split(n):
    x = n.x(0)
    sizes = n.arg(1)
    dim = n.arg(2, 0, "dim") % x.rank
    total = x.shape[dim]
    if not isinstance(total, int):
        n.refuse("split of a symbolic axis is not supported")
    if isinstance(sizes, int):
        sizes = [min(sizes, total - k) for k in range(0, total, sizes)]
    exprs, start = [], 0
    for s in sizes:
        exprs.append(f"{x.name}[{', '.join([':'] * dim + [f'{start}:{start + s}'])}]")
        start += s
    n.emit_multi(exprs)


@lowers("aten.embedding.default")
def embedding(n):
    w, idx = n.x(0), n.x(1)
    n.arg(2, -1, "padding_idx")   # only the gradient reads it
    if n.arg(3, False, "scale_grad_by_freq") or n.arg(4, False, "sparse"):
        n.refuse("scale_grad_by_freq and sparse are not supported")
    n.emit(f"take({w.name}, {idx.name}, axis=0)")


@lowers("aten.index_select.default")
def index_select(n):
    x = n.x(0)
    dim = n.arg(1) % x.rank
    n.emit(f"take({x.name}, {n.x(2).name}, axis={dim})")
