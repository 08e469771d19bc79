"""Translators of PyTorch's tensor-op OpInfo samples (elementwise, comparisons, reductions,
linear algebra, shapes, indexing) into adc calls; see ``opinfo_map``."""
from __future__ import annotations

import math

import torch

from opinfo_call import arg, axis_list, call, extra, normalize


# ---- elementwise ----------------------------------------------------------------------------

def unary(op: str, defaults: dict | None = None):
    """``op(x)``; keywords equal to PyTorch's defaults (`defaults`) are dropped."""
    defaults = defaults or {}

    def tr(c, s):
        kept = {k: v for k, v in s.kwargs.items() if not (k in defaults and v == defaults[k])}
        parts = [c.lacks(k, v) for k, v in kept.items()] + [c.lacks(f"arg{i}", v)
                                                          for i, v in enumerate(s.args)]
        return call(op, c.f(s.input), *parts)
    return tr


def gelu(c, s):
    return call("gelu", c.t(s.input), c.opt("approximate", s.kwargs.get("approximate", "none")),
                extra(c, s, {"approximate"}))


def leaky_relu(c, s):
    slope = arg(s, 0, "negative_slope", 0.01)
    return call("leaky_relu", c.t(s.input), c.opt("slope", float(slope)),
                extra(c, s, {"negative_slope", "inplace"}, 1))


def binary(op: str):
    def tr(c, s):
        alpha = s.kwargs.get("alpha")
        more = c.lacks("alpha", alpha) if alpha not in (None, 1) else ""
        return call(op, c.f(s.input), c.f(s.args[0]), more, extra(c, s, {"alpha"}, 1))
    return tr


def div(c, s):
    mode = s.kwargs.get("rounding_mode")
    more = c.lacks("rounding_mode", mode) if mode is not None else ""
    return call("div", c.f(s.input), c.f(s.args[0]), more)


def like(op: str):
    """``zeros_like(x)``; a dtype equal to x's and the CPU device are PyTorch's defaults."""
    def tr(c, s):
        x = s.input
        kept = {k: v for k, v in s.kwargs.items()
                if not ((k == "dtype" and v == x.dtype) or (k == "device" and str(v) == "cpu"))}
        return call(op, c.t(x), *[c.lacks(k, v) for k, v in kept.items()])
    return tr


def getitem(c, s):
    """Basic indexing (ints and slices) is adc's ``x[...]``; lists, tensors, Ellipsis and
    None are PyTorch's advanced indexing, which TDSL does not have."""
    index = s.args[0]
    items = list(index) if isinstance(index, tuple) else [index]
    parts = []
    for it in items:
        if isinstance(it, bool) or not isinstance(it, (int, slice)):
            c.refuse(f"the index {type(it).__name__}")
        if isinstance(it, slice):
            parts.append(":".join("" if v is None else str(v)
                                  for v in (it.start, it.stop, it.step)).rstrip(":") or ":")
        elif isinstance(it, torch.Tensor):
            parts.append(c.t(it))
        elif it is Ellipsis:
            parts.append("...")
        else:
            parts.append(c.lit(it) if not isinstance(it, list) else c.lit(list(it)))
    return f"{c.t(s.input)}[{', '.join(parts)}]"


def where(c, s):  # the OpInfo's op is lambda self, condition, other: where(condition, self, other)
    return call("where", c.t(s.args[0]), c.f(s.input), c.f(s.args[1]))


def clamp(c, s):
    lo, hi = arg(s, 0, "min"), arg(s, 1, "max")
    return call("clip", c.f(s.input), c.f(lo) if lo is not None else c.lit(None),
                c.f(hi) if hi is not None else c.lit(None))


# ---- reductions ------------------------------------------------------------------------

def reduce(op: str, dim_pos: int = 0):
    def tr(c, s):
        x = s.input
        dim, keep = arg(s, dim_pos, "dim"), arg(s, dim_pos + 1, "keepdim", False)
        axis = axis_list(dim, x.dim())
        dtype = s.kwargs.get("dtype")
        return call(op, c.t(x), c.opt("axis", axis) if axis is not None else "",
                    c.opt("keepdims", bool(keep)) if keep else "",
                    c.lacks("dtype", dtype) if dtype not in (None, x.dtype) else "",
                    extra(c, s, {"dim", "keepdim", "dtype"}, dim_pos + 2))
    return tr


def reduce_with_dim(op: str):
    """``max(x, dim, keepdim)`` returns (values, indices): the values are adc's `op`."""
    inner = reduce(op)

    def tr(c, s):
        c.pick = 0
        return inner(c, s)
    return tr


def ties_along(s) -> bool:
    """Does a reduced slice hold its extremum twice (``max(x, dim)``'s kink)."""
    x = s.input.detach()
    if x.dim() == 0:
        return False
    d = arg(s, 0, "dim")
    top = x.max(dim=d, keepdim=True).values
    bottom = x.min(dim=d, keepdim=True).values
    return bool(((x == top).sum(d) > 1).any() or ((x == bottom).sum(d) > 1).any())


def var(c, s):
    x = s.input
    dim = arg(s, 0, "dim")
    if isinstance(dim, bool):  # var(x, unbiased) of the `unbiased` variant
        dim, unbiased = None, dim
    else:
        unbiased = s.kwargs.get("unbiased")
    correction = s.kwargs.get("correction")
    keep = s.kwargs.get("keepdim", False)
    if unbiased is not None:
        correction = 1 if unbiased else 0
    elif correction is None:  # PyTorch's default is the unbiased variance
        correction = 1
    how = c.opt("correction", correction) if correction else ""
    axis = axis_list(dim, x.dim())
    n = x.numel() if axis is None else math.prod(
        x.shape[a] for a in ([axis] if isinstance(axis, int) else axis))
    if n - correction <= 0:   # PyTorch: inf or NaN
        c.refuse(f"correction {correction} with {n} elements (no degrees of freedom)")
    return call("var", c.t(x), c.opt("axis", axis) if axis is not None else "",
                c.opt("keepdims", bool(keep)) if keep else "", how)


def arg_extremum(op: str):
    def tr(c, s):
        x = s.input
        dim, keep = s.kwargs.get("dim"), s.kwargs.get("keepdim", False)
        if dim is None and x.dim() > 1:  # PyTorch flattens first
            axis = c.lacks("axis", None)
        else:
            axis = c.opt("axis", -1 if dim is None else dim)
        return call(op, c.t(x), axis, c.lacks("keepdims", True) if keep else "")
    return tr


def cumsum(c, s):
    dtype = s.kwargs.get("dtype")
    return call("cumsum", c.t(s.input), c.lit(arg(s, 0, "dim")),
                c.lacks("dtype", dtype) if dtype not in (None, s.input.dtype) else "")


# ---- linear algebra and shapes ------------------------------------------------------------

def matmul(c, s):
    return call("matmul", c.t(s.input), c.t(s.args[0]))


def einsum(c, s):  # lambda tensors, equation: torch.einsum(equation, tensors)
    spec = s.args[0]
    terms = spec.replace(" ", "").split("->")[0].split(",")
    if "->" not in spec:
        c.refuse("an implicit output (no '->')")
    if "..." in spec:
        c.refuse("an ellipsis")
    if any(len(set(t)) != len(t) for t in terms if "..." not in t):
        c.refuse("a letter repeated within a term (a diagonal)")
    return call("einsum", c.lit(s.args[0]), *[c.t(x) for x in s.input])


def perm_of(c, x, perm) -> str:
    return call("transpose", c.t(x), c.lit([normalize(p, x.dim()) for p in perm]))


def transpose(c, s):
    x = s.input
    if x.dim() == 0:
        return perm_of(c, x, [])
    a, b = normalize(s.args[0], x.dim()), normalize(s.args[1], x.dim())
    perm = list(range(x.dim()))
    perm[a], perm[b] = perm[b], perm[a]
    return perm_of(c, x, perm)


def permute(c, s):
    return perm_of(c, s.input, list(s.args[0]))


def t(c, s):
    return perm_of(c, s.input, list(range(s.input.dim()))[::-1])


def mT(c, s):
    n = s.input.dim()
    return perm_of(c, s.input, list(range(n - 2)) + [n - 1, n - 2])


def movedim(c, s):
    x = s.input
    n = x.dim()
    src = [normalize(d, n) for d in s.args[0]]
    dst = [normalize(d, n) for d in s.args[1]]
    rest = iter(d for d in range(n) if d not in src)
    order = {b: a for a, b in zip(src, dst)}
    return perm_of(c, x, [order[i] if i in order else next(rest) for i in range(n)])


def reshape(c, s):
    return call("reshape", c.t(s.input), c.lit(list(s.args[0])))


def reshape_as(c, s):
    return call("reshape", c.t(s.input), c.lit(list(s.args[0].shape)))


def broadcast_to(c, s):
    return call("broadcast_to", c.t(s.input), c.lit(list(s.args[0])))


def expand(c, s):
    """-1 in ``expand`` keeps the size of the aligned axis of the input."""
    x, sizes = s.input, list(s.args[0])
    lead = len(sizes) - x.dim()
    shape = [x.shape[i - lead] if v == -1 else v for i, v in enumerate(sizes)]
    return call("broadcast_to", c.t(x), c.lit(shape))


def expand_as(c, s):
    return call("broadcast_to", c.t(s.input), c.lit(list(s.args[0].shape)))


def unsqueeze(c, s):
    return call("expand_dims", c.t(s.input), c.lit(s.args[0]))


def squeeze(c, s):
    """PyTorch skips named axes whose size is not 1 (and any axis of a 0-d tensor); adc, as
    NumPy, refuses them."""
    x = s.input
    if not s.args:
        return call("squeeze", c.t(x))
    dims = s.args[0]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if x.dim() == 0 or any(x.shape[d] != 1 for d in dims):
        c.refuse("squeeze of an axis whose size is not 1")
    return call("squeeze", c.t(x), c.opt("axis", dims))


def cat(c, s):
    xs = s.input
    if any(x.dim() == 1 and x.shape[0] == 0 for x in xs) and any(x.dim() != 1 for x in xs):
        c.refuse("PyTorch's legacy skipping of 1-D empty tensors in cat")
    return call("concat", c.ts(xs), c.opt("axis", arg(s, 0, "dim", 0)))


def stack(c, s):
    return call("stack", c.ts(s.input), c.opt("axis", arg(s, 0, "dim", 0)))


def hstack(c, s):
    xs = s.input
    return call("concat", c.ts(xs), c.opt("axis", 0 if xs[0].dim() == 1 else 1))
