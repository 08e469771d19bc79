"""``for(inits..., xs...) {n, n_carry, reverse}``: a loop whose body takes the index, the
carried values and one slice of each scanned input, and yields the next carries and the
slices to stack (`adcompiler.ops.control`)."""
from __future__ import annotations

from ...ir.types import TensorType
from ...ir.verifier import ANNOTATION_ATTRS, types_text
from ...memory.sizes import trip_count, value_bytes
from ..registry import ends, has_trait
from .repeat import repeat_counts


def verify(checker, op) -> None:
    """Attrs, block arguments ``[i64[], carries..., x slices...]``, yield and result types."""
    n, nc, rev = op.attrs.get("n"), op.attrs.get("n_carry"), op.attrs.get("reverse")
    if set(op.attrs) - ANNOTATION_ATTRS != {"n", "n_carry", "reverse"} \
            or not isinstance(n, (int, str)) \
            or isinstance(n, bool) or not isinstance(nc, int) or isinstance(nc, bool) \
            or not isinstance(rev, bool):
        checker.fail(op, "needs exactly the attrs n (dim), n_carry (int), reverse (bool)")
        return
    why = _n_problem(n)
    if why:
        checker.fail(op, why)
        return
    if len(op.regions) != 1:
        checker.fail(op, f"needs one region, has {len(op.regions)}")
        return
    if not 0 <= nc <= len(op.operands):
        checker.fail(op, f"has n_carry = {nc} but {len(op.operands)} operands")
        return
    body = op.regions[0]
    carries = [v.type for v in op.operands[:nc]]
    xs = [v.type for v in op.operands[nc:]]
    for k, t in enumerate(xs):
        if not t.shape or t.shape[0] != n:
            checker.fail(op, f"scanned operand {nc + k} has type {t}, whose leading "
                             f"dim is not n = {n}")
            return
    want = [TensorType("i64", ())] + carries + [t.with_shape(t.shape[1:]) for t in xs]
    args = [a.type for a in body.args]
    if args != want:
        checker.fail(op, f"body arguments {types_text(args)} should be {types_text(want)} "
                         "(index, carries, slices)")
    term = body.ops[-1] if body.ops else None
    if term is None or not ends(term, "region"):
        return
    yielded = [v.type for v in term.operands]
    if yielded[:nc] != carries:
        checker.fail(term, f"yields carries {types_text(yielded[:nc])} but the loop carries "
                           f"{types_text(carries)}")
    want_res = carries + [t.with_shape((n,) + t.shape) for t in yielded[nc:]]
    res = [r.type for r in op.results]
    if res != want_res:
        checker.fail(op, f"has result types {types_text(res)} but its body gives "
                         f"{types_text(want_res)}")


def _n_problem(n) -> str | None:
    """What is wrong with a trip count `n`: an int >= 0 or a symbolic size."""
    from ...ir.types import parse_dim
    if isinstance(n, int):
        return None if n >= 0 else f"has a negative trip count n = {n}"
    try:
        parse_dim(n)
    except ValueError:
        return f"has trip count n = {n!r}, which is neither an int nor a symbolic size"
    return None


def flops(op, counter) -> int:
    """``n`` times the body, plus each ``repeat`` of the body its total count over the
    ``n`` iterations times its own body."""
    n = trip_count(op.attrs["n"], counter.dims) or 0
    body = op.regions[0]
    total = n * counter.block(body)
    for inner in body.ops:
        if has_trait(inner, "counted"):
            total += repeat_counts(inner, n)[1] * counter.block(inner.regions[0])
    return total


def memory(walk, op) -> None:
    """The stacked outputs from the loop's start, and one iteration's body on top (every
    iteration has the same profile); none for a loop that runs zero times."""
    nc = op.attrs["n_carry"]
    ys = sum(value_bytes(r, walk.dims) for r in op.results[nc:])
    walk.bump(ys)
    n = trip_count(op.attrs["n"], walk.dims)
    if n is None or n > 0:
        walk.block(op.regions[0])
    walk.live -= ys
