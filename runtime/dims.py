"""Symbolic dimensions at run time, without the compiler: evaluating a dim string (an integer
polynomial in symbols such as ``"2*B*T"`` or ``"T-1"``) and the rule for slices of a symbolic
axis, which the compiler uses for the slice's length and the runtime for its precondition."""
from __future__ import annotations

import re
from typing import Mapping

from .errors import UnboundDimError

_TERM = re.compile(r"\s*([+-]?)\s*([^+-]+)")


def eval_dim(d, dims: Mapping[str, int]) -> int:
    """The value of `d` (an int or a polynomial string); `UnboundDimError` (a KeyError)
    names an unbound symbol."""
    if isinstance(d, int):
        return d
    total = 0
    for sign, term in _TERM.findall(str(d)):
        value = -1 if sign == "-" else 1
        for factor in term.split("*"):
            factor = factor.strip()
            if factor.isdigit():
                value *= int(factor)
            elif factor in dims:
                value *= dims[factor]
            else:
                raise UnboundDimError(factor)
        total += value
    return total


def symbolic_slice(start, stop, step):
    """A slice ``[start:stop:step]`` (ints or None, step 1 or -1) of an axis of unknown size D,
    as ``(c, k, need)``: its length is ``c*D + k`` (c is 0 or 1) for every ``D >= need``, the
    sizes where NumPy clamps neither bound. None when the length is not of that form
    (``x[-2:5]`` shrinks as D grows).

    Positions are ``(c, k)`` = ``c*D + k``; the bounds are valid when the start lies in the
    axis (or the slice is empty), the stop in ``[0, D]`` (step 1) or ``[-1, D-1]`` (step -1).
    """
    step = 1 if step is None else step
    assert step in (1, -1), step
    need = 0

    def pos(v, default, low, high):
        # low/high: the valid range of the position as offsets from (0, .) and (D, .)
        nonlocal need
        if v is None:
            return default
        if v >= 0:
            need = max(need, v - high)    # v <= D + high
            return 0, v
        need = max(need, low - v)         # D + v >= low
        return 1, v

    if step == 1:
        if start == 0:
            start = None
        a = pos(start, (0, 0), 0, 0)
        b = pos(stop, (1, 0), 0, 0)
        c, k = b[0] - a[0], b[1] - a[1]
    else:
        if start == -1:
            start = None
        a = pos(start, (1, -1), 0, -1)
        b = pos(stop, (0, -1), -1, -1)
        c, k = a[0] - b[0], a[1] - b[1]
    if c < 0:
        return None
    if c == 0 and k <= 0:
        return 0, 0, 0          # empty for every D: NumPy's clamping keeps it empty
    if c == 1:
        need = max(need, -k)    # the length c*D + k is not negative
    return c, k, need
