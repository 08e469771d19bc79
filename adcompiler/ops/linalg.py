"""Linear algebra: matmul (`@`), transpose, einsum."""
from __future__ import annotations

import math

from ..diagnostics import ShapeError
from ..ir.types import TensorType, broadcast_shapes, join_dtypes
from .batching import expand_to, rank
from .patterns import P, Pattern
from .registry import Option, register
from . import roles


# ---- matmul ---------------------------------------------------------------------------

def _matmul(types, attrs):
    a, b = types
    if a.rank == 0 or b.rank == 0:
        raise ShapeError(f"matmul needs operands of rank >= 1, got {a} and {b}")
    dtype = join_dtypes(a.dtype, b.dtype)
    ka = a.shape[-1]
    kb = b.shape[0] if b.rank == 1 else b.shape[-2]
    if ka != kb:
        raise ShapeError(f"matmul contracts dims that differ: {a} @ {b} ({ka} vs {kb})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m = a.shape[-2:-1]                      # () for a 1-D left operand
    n = b.shape[-1:] if b.rank >= 2 else ()
    return TensorType(dtype, batch + m + n)


def swap_last2(b, x):
    """`x` with its last two axes swapped."""
    perm = list(range(x.type.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return b.emit("transpose", x, perm=perm)


def _matmul_vjp(b, op, cts):
    """Promote 1-D operands to matrices (as NumPy does), use the matrix rule, then drop the
    inserted axes. Cotangents keep the broadcast batch shape; the driver sums them down."""
    (ct,) = cts
    x, y = op.operands
    k = x.type.shape[-1]
    x2 = x if x.type.rank >= 2 else b.emit("reshape", x, shape=[1, k])
    y2 = y if y.type.rank >= 2 else b.emit("reshape", y, shape=[k, 1])
    if y.type.rank == 1:
        ct = b.emit("expand_dims", ct, axis=-1)
    if x.type.rank == 1:
        ct = b.emit("expand_dims", ct, axis=-2)
    gx = b.emit("matmul", ct, swap_last2(b, y2))    # [..., m, k]
    gy = b.emit("matmul", swap_last2(b, x2), ct)    # [..., k, n]
    if x.type.rank == 1:
        gx = b.emit("squeeze", gx, axis=-2)
    if y.type.rank == 1:
        gy = b.emit("squeeze", gy, axis=-1)
    return [gx, gy]


def _product_rule(b, op, tangents, emit):
    """matmul and einsum are multilinear: the tangent is the sum, over operands with a
    tangent, of the op with that operand replaced by its tangent."""
    out = None
    for i, t in enumerate(tangents):
        if t is None or not op.operands[i].type.is_float:
            continue
        args = list(op.operands)
        args[i] = t
        term = emit(args)
        out = term if out is None else b.emit("add", out, term)
    return [out]


def _matmul_jvp(b, op, tangents):
    return _product_rule(b, op, tangents, lambda args: b.emit("matmul", *args))


def _matmul_flops(op, elements):
    """2*m*n*k per batch entry: two per result element per step of the contraction."""
    k = elements(op.operands[0].type.shape[-1:])
    return 2 * elements(op.results[0].type.shape) * k


def _matmul_batch(b, op, args, batched, n):
    """A batched matmul: a 1-D operand becomes a row (a) or a column (b) as NumPy reads it,
    batched operands get size-1 axes behind the batch axis until their batch axes outnumber
    the shared operand's, so matmul broadcasts the examples; the added axes are squeezed."""
    ranks = [rank(x, f) for x, f in zip(args, batched)]
    (a, bb), squeeze = list(args), []
    if ranks[0] == 1:
        a, squeeze = b.emit("expand_dims", a, axis=-2), squeeze + [-2]
    if ranks[1] == 1:
        bb, squeeze = b.emit("expand_dims", bb, axis=-1), squeeze + [-1]
    mats = [a, bb]
    lead = max(max(r, 2) - 2 for r in ranks)
    mats = [expand_to(b, x, lead + 2) if f else x for x, f in zip(mats, batched)]
    out = b.emit("matmul", *mats)
    for axis in sorted(squeeze, reverse=True) if len(squeeze) < 2 else (-1, -1):
        out = b.emit("squeeze", out, axis=axis)
    return [out]


register("matmul", _matmul, operands=("a", "b"), vjp=_matmul_vjp, traits=("heavy",),
         doc="NumPy matmul: 1-D, 2-D and batched with broadcast batch axes",
         jvp=_matmul_jvp, flops=_matmul_flops, batch=_matmul_batch, fresh=True,
         param_role=roles.product)


# ---- transpose ------------------------------------------------------------------------

def full_perm(perm, rank: int) -> tuple[int, ...]:
    """The permutation `perm` means (None: reversed axes), validated, negatives normalized."""
    if perm is None:
        return tuple(range(rank - 1, -1, -1))
    perm = tuple(perm)
    if not all(isinstance(p, int) and not isinstance(p, bool) and -rank <= p < rank
               for p in perm) or sorted(p % rank for p in perm) != list(range(rank)):
        raise ShapeError(f"perm {list(perm)} is not a permutation of the {rank} axes")
    return tuple(p % rank for p in perm)


def _transpose(types, attrs):
    t = types[0]
    perm = full_perm(attrs["perm"], t.rank)
    return t.with_shape(t.shape[p] for p in perm)


def _transpose_vjp(b, op, cts):
    perm = full_perm(op.attrs["perm"], op.operands[0].type.rank)
    inverse = [0] * len(perm)
    for k, p in enumerate(perm):
        inverse[p] = k
    return [b.emit("transpose", cts[0], perm=inverse)]


def _transpose_batch(b, op, args, batched, n):
    perm = full_perm(op.attrs["perm"], rank(args[0], True))
    return [b.emit("transpose", args[0], perm=[0] + [p + 1 for p in perm])]


def _identity_transpose(b, m):
    p = full_perm(m["op"].attrs["perm"], m["x"].type.rank)
    return m["x"] if p == tuple(sorted(p)) else None


def _transpose_transpose(b, m):
    """One transpose for two, or none if they cancel."""
    outer, inner = m["op"], m["op"].operands[0].defining_op
    rank = m["x"].type.rank
    p1, p2 = full_perm(inner.attrs["perm"], rank), full_perm(outer.attrs["perm"], rank)
    q = [p1[j] for j in p2]
    return m["x"] if q == sorted(q) else b.emit("transpose", m["x"], perm=tuple(q))


register("transpose", _transpose, options=(Option("perm", "ints", None),),
         traits=("linear", "view"), vjp=_transpose_vjp, flops=0, batch=_transpose_batch,
         rewrites=(Pattern(P("transpose", "x"), _identity_transpose,
                           "transpose by the identity -> x"),
                   Pattern(P("transpose", P("transpose", "x")), _transpose_transpose,
                           "transpose(transpose(x)) -> one transpose, or x")))


# ---- einsum ---------------------------------------------------------------------------

def parse_spec(spec: str, n_operands: int | None = None):
    """Split an explicit einsum spec ``"ij,jk->ik"`` into input and output subscripts.

    Only explicit specs with single-letter subscripts are accepted: no implicit output,
    no ellipsis, and no letter repeated within one term (diagonals).
    """
    if not isinstance(spec, str) or spec.count("->") != 1:
        raise ShapeError(f"einsum spec {spec!r} must have exactly one '->' "
                         "(the output subscripts are required)")
    lhs, out = spec.replace(" ", "").split("->")
    ins = lhs.split(",")
    for term in ins + [out]:
        if "." in term:
            raise ShapeError(f"einsum spec {spec!r}: ellipsis '...' is not supported")
        if not all(c.isalpha() for c in term):
            raise ShapeError(f"einsum spec {spec!r}: subscripts must be letters")
        if len(set(term)) != len(term):
            raise ShapeError(f"einsum spec {spec!r}: repeated subscript in '{term}' "
                             "(diagonals and traces are not supported)")
    missing = set(out) - set("".join(ins))
    if missing:
        raise ShapeError(f"einsum spec {spec!r}: output subscript "
                         f"'{''.join(sorted(missing))}' appears in no input")
    if n_operands is not None and len(ins) != n_operands:
        raise ShapeError(f"einsum spec {spec!r} has {len(ins)} input terms but "
                         f"{n_operands} operands were given")
    return ins, out


def _einsum(types, attrs):
    ins, out = parse_spec(attrs["spec"], len(types))
    sizes: dict = {}
    for term, t in zip(ins, types):
        if len(term) != t.rank:
            raise ShapeError(f"einsum term '{term}' has {len(term)} subscripts but its "
                             f"operand is {t}")
        for c, d in zip(term, t.shape):
            if sizes.setdefault(c, d) != d:
                raise ShapeError(f"einsum subscript '{c}' has sizes {sizes[c]} and {d}")
    return TensorType(join_dtypes(*(t.dtype for t in types)), tuple(sizes[c] for c in out))


def _einsum_vjp(b, op, cts):
    """Operand i's cotangent contracts the output cotangent with the other operands onto
    operand i's subscripts; letters summed away by operand i alone are broadcast back."""
    ins, out = parse_spec(op.attrs["spec"])
    ct = cts[0]
    grads = []
    for i, (term, x) in enumerate(zip(ins, op.operands)):
        others = [(t, v) for j, (t, v) in enumerate(zip(ins, op.operands)) if j != i]
        avail = set(out).union(*(set(t) for t, _ in others))
        kept = "".join(c for c in term if c in avail)
        spec = ",".join([out] + [t for t, _ in others]) + "->" + kept
        g = b.emit("einsum", ct, *(v for _, v in others), spec=spec)
        if kept != term:
            shape = [d if c in avail else 1 for c, d in zip(term, x.type.shape)]
            g = b.emit("reshape", g, shape=shape)
            g = b.emit("broadcast_to", g, shape=x.type.shape)
        grads.append(g)
    return grads


def _einsum_jvp(b, op, tangents):
    spec = op.attrs["spec"]
    return _product_rule(b, op, tangents, lambda args: b.emit("einsum", *args, spec=spec))


def _einsum_flops(op, elements):
    """Two per point of the full index space."""
    spec = op.attrs["spec"].replace(" ", "")
    ins = spec.split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for sub, v in zip(ins, op.operands):
        shape = [elements((d,)) for d in v.type.shape]
        letters = [c for c in sub if c.isalpha()]
        for c, d in zip(letters[-len(shape):] if shape else [], shape[-len(letters):]):
            sizes[c] = max(sizes.get(c, 1), d)
    extra = elements(op.results[0].type.shape) if "..." in spec else 1
    return 2 * math.prod(sizes.values()) * max(extra, 1)


def _einsum_batch(b, op, args, batched, n):
    """A new letter for the examples, on the batched operands and in front of the output."""
    ins, out = parse_spec(op.attrs["spec"])
    letter = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA"
                  if c not in op.attrs["spec"])
    terms = [letter + t if f else t for t, f in zip(ins, batched)]
    return [b.emit("einsum", *args, spec=",".join(terms) + "->" + letter + out)]


register("einsum", _einsum, operands=("*operands",), options=(Option("spec", "str"),),
         positional=("spec", "*operands"), vjp=_einsum_vjp, traits=("heavy",),
         jvp=_einsum_jvp, flops=_einsum_flops, batch=_einsum_batch,
         fresh=lambda op: len(op.operands) > 1, param_role=roles.product)  # one operand: `ij->ji` is a view
