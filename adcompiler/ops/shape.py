"""Shape ops: reshape, broadcast_to, expand_dims, squeeze, concat, stack, indexing; and the
adjoint helpers `split` (of concat) and `index_grad` (of index)."""
from __future__ import annotations

from ..diagnostics import ShapeError

from ..ir.types import (Dim, TensorType, broadcast_shapes, dim_add, dim_div, dim_mul,
                        num_elements, normalize_axis)
from .batching import axis_rule, expand_to, unsupported
from .patterns import P, Pattern, bound, re_emit
from .registry import Option, register

LINEAR = ("linear",)
VIEW = ("linear", "view")   # a view or re-indexing of its operand: no arithmetic


def _reshape(types, attrs):
    t, shape = types[0], list(attrs["shape"])
    if shape.count(-1) > 1:
        raise ShapeError("reshape allows at most one -1")
    if -1 in shape:
        known = num_elements([d for d in shape if d != -1])
        rest = dim_div(num_elements(t.shape), known)
        if rest is None:
            raise ShapeError(f"cannot reshape {t} to {shape}")
        shape[shape.index(-1)] = rest
    if num_elements(shape) != num_elements(t.shape):
        raise ShapeError(f"cannot reshape {t} to [{', '.join(map(str, shape))}]")
    return t.with_shape(shape)


def _back_to_operand(b, op, cts):
    """Cotangent of an op that only relabels its operand's elements: reshape back."""
    return [b.emit("reshape", cts[0], shape=op.operands[0].type.shape)]


def _with_batch_shape(b, op, args, batched, n):
    """An op whose ``shape`` option is an example's shape: the batch's is (n, *shape)."""
    return [b.emit(op.name, args[0], shape=(n,) + tuple(op.attrs["shape"]))]


register("reshape", _reshape, options=(Option("shape", "shape"),), traits=VIEW,
         vjp=_back_to_operand, flops=0, batch=_with_batch_shape,
         rewrites=(Pattern(P("reshape", "x"), bound("x"), "reshape to the same shape -> x"),
                   Pattern(P("reshape", P("reshape", "x")), re_emit,
                           "reshape(reshape(x)) -> reshape(x)")))


def _broadcast_to(types, attrs):
    shape = tuple(attrs["shape"])
    if broadcast_shapes(types[0].shape, shape) != shape:
        raise ShapeError(f"cannot broadcast {types[0]} to [{', '.join(map(str, shape))}]")
    return types[0].with_shape(shape)


# the VJP passes the cotangent on: the driver's unbroadcast sums it back to the operand
register("broadcast_to", _broadcast_to, options=(Option("shape", "shape"),), traits=VIEW,
         vjp=lambda b, op, ct: [ct[0]], flops=0,
         batch=lambda b, op, args, batched, n: _with_batch_shape(
             b, op, [expand_to(b, args[0], len(op.attrs["shape"]))], batched, n),
         rewrites=(Pattern(P("broadcast_to", "x"), bound("x"), "broadcast_to the same shape -> x"),
                   Pattern(P("broadcast_to", P("broadcast_to", "x")), re_emit,
                           "broadcast_to(broadcast_to(x)) -> broadcast_to(x)")))


# ---- expand_dims / squeeze ------------------------------------------------------------

def _expand_dims(types, attrs):
    t = types[0]
    axis = attrs["axis"]
    if not isinstance(axis, int):
        raise ShapeError(f"expand_dims takes one int axis, got {axis!r}")
    k = normalize_axis(axis, t.rank + 1)
    return t.with_shape(t.shape[:k] + (1,) + t.shape[k:])


register("expand_dims", _expand_dims, options=(Option("axis", "int"),), traits=VIEW,
         vjp=_back_to_operand, flops=0, batch=axis_rule)


def squeezed_axes(t: TensorType, axis) -> tuple[int, ...]:
    """The axes `squeeze` removes: `axis` (int, list or None = every axis of size 1)."""
    if axis is None:
        return tuple(k for k, d in enumerate(t.shape) if d == 1)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted({normalize_axis(a, t.rank) for a in axes}))
    for a in axes:
        if t.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of {t}: its size is {t.shape[a]}, not 1")
    return axes


def _squeeze(types, attrs):
    t = types[0]
    axes = squeezed_axes(t, attrs["axis"])
    return t.with_shape(d for k, d in enumerate(t.shape) if k not in axes)


def _squeeze_batch(b, op, args, batched, n):
    x = args[0]
    example = x.type.with_shape(x.type.shape[1:])
    axes = [a + 1 for a in squeezed_axes(example, op.attrs["axis"])]
    return [b.emit("squeeze", x, axis=axes) if axes else x]


register("squeeze", _squeeze, options=(Option("axis", "axes", None),), traits=VIEW,
         vjp=_back_to_operand, flops=0, batch=_squeeze_batch)


# ---- concat / split / stack -----------------------------------------------------------

def _concat(types, attrs):
    if not types:
        raise ShapeError("concat needs at least one operand")
    first = types[0]
    if first.rank == 0:
        raise ShapeError("concat cannot join scalars (use stack)")
    axis = normalize_axis(attrs["axis"], first.rank)
    for t in types[1:]:
        if t.rank != first.rank or any(d != e for k, (d, e) in
                                       enumerate(zip(t.shape, first.shape)) if k != axis):
            raise ShapeError(f"concat along axis {axis} needs equal shapes elsewhere, "
                             f"got {first} and {t}")
    size = dim_add(*(t.shape[axis] for t in types))
    dtype = first.dtype
    if any(t.dtype != dtype for t in types):
        raise ShapeError(f"concat needs one dtype, got {', '.join(t.dtype for t in types)}")
    return first.with_shape(first.shape[:axis] + (size,) + first.shape[axis + 1:])


def _concat_vjp(b, op, cts):
    axis = normalize_axis(op.attrs["axis"], op.result.type.rank)
    if len(op.operands) == 1:
        return [cts[0]]
    pieces = b.emit("split", cts[0], axis=axis,
                    shape=[v.type.shape[axis] for v in op.operands])
    return list(pieces)


register("concat", _concat, operands=("*xs",), options=(Option("axis", "int", 0),),
         traits=LINEAR, vjp=_concat_vjp, flops=0, batch=axis_rule, fresh=True)


def _split(types, attrs):
    t = types[0]
    axis = normalize_axis(attrs["axis"], t.rank)
    sizes = list(attrs["shape"])
    if dim_add(*sizes) != t.shape[axis]:
        raise ShapeError(f"split of {t} along axis {axis} into pieces "
                         f"{sizes} does not add up to {t.shape[axis]}")
    return [t.with_shape(t.shape[:axis] + (d,) + t.shape[axis + 1:]) for d in sizes]


def _split_vjp(b, op, cts):
    x = op.operands[0]
    axis = normalize_axis(op.attrs["axis"], x.type.rank)
    parts = [c if c is not None else b.emit("zeros", shape=r.type.shape, dtype=r.type.dtype)
             for c, r in zip(cts, op.results)]
    return [b.emit("concat", *parts, axis=axis)]


# split(x; axis, shape): the pieces of `x` along `axis`, whose extents are listed in `shape`
# (so the executor resolves symbolic extents as it does every `shape`); concat's adjoint.
register("split", _split, options=(Option("axis", "int"), Option("shape", "shape")),
         traits=LINEAR, vjp=_split_vjp, flops=0, batch=axis_rule)


def _stack(types, attrs):
    if not types:
        raise ShapeError("stack needs at least one operand")
    first = types[0]
    if any(t != first for t in types[1:]):
        raise ShapeError(f"stack needs equal types, got {', '.join(map(str, types))}")
    axis = normalize_axis(attrs["axis"], first.rank + 1)
    return first.with_shape(first.shape[:axis] + (len(types),) + first.shape[axis:])


def _stack_vjp(b, op, cts):
    axis = normalize_axis(op.attrs["axis"], op.result.type.rank)
    whole = [[None, None, None]] * axis
    return [b.emit("index", cts[0], idx=tuple(whole + [k])) for k in range(len(op.operands))]


register("stack", _stack, operands=("*xs",), options=(Option("axis", "int", 0),),
         traits=LINEAR, vjp=_stack_vjp, flops=0, batch=axis_rule, fresh=True)


# ---- index / index_grad ---------------------------------------------------------------

def slice_length(d: Dim, start, stop, step) -> Dim:
    """The length of ``range(d)[start:stop:step]``.

    On a symbolic axis D: the whole axis with any step s when D is a multiple of s, and
    constant bounds with step 1 or -1 whose length is D plus a constant or a constant
    (``x[1:]`` is D-1, ``x[-3:]`` is 3), assuming D is long enough for NumPy to clamp neither
    bound; the runtime checks that premise (`adc_runtime.dims.symbolic_slice`).
    """
    written = ":".join("" if v is None else str(v) for v in (start, stop)) + (
        "" if step is None else f":{step}")
    step = 1 if step is None else step
    if step == 0:
        raise ShapeError("slice step cannot be zero")
    if isinstance(d, int):
        return len(range(d)[slice(start, stop, step)])
    whole_start = (None, 0) if step > 0 else (None, -1)
    if start in whole_start and stop is None:
        length = dim_div(d, abs(step))
        if length is not None:
            return length
    if step not in (1, -1):
        raise ShapeError(f"slice [{written}] of the symbolic axis {d}: a part of a symbolic "
                         f"axis takes step 1 or -1 only (its length with step {step} is not "
                         f"a dimension); reshape to static sizes first")
    from adc_runtime.dims import symbolic_slice  # the rule both sides share
    rule = symbolic_slice(start, stop, step)
    if rule is None:
        raise ShapeError(f"slice [{written}] of the symbolic axis {d} has a length that "
                         f"shrinks as {d} grows, which a dimension cannot express; count both "
                         f"bounds from the same end of the axis")
    c, k, _ = rule
    return dim_add(dim_mul(c, d), k)


def parse_idx(idx, x: TensorType, dyn_types) -> tuple[Dim, ...]:
    """Check an `index` op's `idx` against `x` and the dynamic operands; the result shape."""
    if not isinstance(idx, (list, tuple)):
        raise ShapeError(f"index: idx must be a list of entries, got {idx!r}")
    if len(idx) > x.rank:
        raise ShapeError(f"too many indices ({len(idx)}) for {x}")
    n_dyn = sum(1 for e in idx if e == "?")
    if n_dyn != len(dyn_types):
        raise ShapeError(f"index has {n_dyn} dynamic ('?') entries but {len(dyn_types)} "
                         "dynamic operands")
    for t in dyn_types:
        if t.rank != 0 or t.dtype not in ("i32", "i64"):
            raise ShapeError(f"a dynamic index must be an integer scalar, got {t}")
    shape = []
    for axis, (e, d) in enumerate(zip(idx, x.shape)):
        if e == "?":
            continue
        if isinstance(e, bool) or not isinstance(e, (int, list, tuple)):
            raise ShapeError(f"index entry {e!r} must be an int, [start, stop, step] or '?'")
        if isinstance(e, int):
            if isinstance(d, int) and not -d <= e < d:
                raise ShapeError(f"index {e} is out of bounds for axis {axis} of size {d}")
            continue
        if len(e) != 3 or not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                                  for v in e):
            raise ShapeError(f"slice entry {list(e)!r} must be [start, stop, step] of ints "
                             "or none")
        shape.append(slice_length(d, *e))
    return tuple(shape) + tuple(x.shape[len(idx):])


def _index(types, attrs):
    x = types[0]
    return x.with_shape(parse_idx(attrs["idx"], x, types[1:]))


def _index_vjp(b, op, cts):
    x, dyn = op.operands[0], op.operands[1:]
    g = b.emit("index_grad", cts[0], *dyn, idx=op.attrs["idx"], shape=x.type.shape)
    return [g] + [None] * len(dyn)


def _index_batch(b, op, args, batched, n):
    """The batch axis is taken whole; an index that differs per example is a gather."""
    if any(batched[1:]):
        unsupported(op, "with an index that differs between examples (use take)")
    attrs = dict(op.attrs, idx=tuple([[None, None, None]] + list(op.attrs["idx"])))
    if op.name == "index_grad":
        attrs["shape"] = (n,) + tuple(op.attrs["shape"])
    return [b.emit(op.name, *args, **attrs)]


def _reads_row(op):
    """``x[i]`` with one run-time index on the first axis reads a row of `x`."""
    if len(op.operands) == 2 and op.attrs.get("idx") in (("?",), ["?"]):
        return op.operands[0], op.operands[1]
    return None


register("index", _index, operands=("x", "*dyn"), options=(Option("idx", "idx"),),
         traits=VIEW, vjp=_index_vjp, batch=_index_batch,
         doc="x[...]: entries int (drops an axis), [start, stop, step], '?' (next dyn)", flops=0,
         reads_row=_reads_row, sliced_shape=lambda op: op.operands[0].type.shape)


def _index_grad(types, attrs):
    ct, shape = types[0], tuple(attrs["shape"])
    want = parse_idx(attrs["idx"], ct.with_shape(shape), types[1:])
    if want != ct.shape:
        raise ShapeError(f"index_grad: cotangent {ct} does not match [{', '.join(map(str, want))}]"
                         f" = the shape of x[idx] for x of shape [{', '.join(map(str, shape))}]")
    return ct.with_shape(shape)


def _index_grad_vjp(b, op, cts):
    dyn = op.operands[1:]
    return [b.emit("index", cts[0], *dyn, idx=op.attrs["idx"])] + [None] * len(dyn)


# index_grad(ct, *dyn; idx, shape): zeros of `shape` with `ct` written at x[idx]; the adjoint
# of `index` (basic indexing selects each element at most once, so writing is enough).
register("index_grad", _index_grad, operands=("ct", "*dyn"),
         options=(Option("idx", "idx"), Option("shape", "shape")), traits=LINEAR,
         vjp=_index_grad_vjp, flops=0, batch=_index_batch,
         sliced_shape=lambda op: op.attrs["shape"], fresh=True)
