"""Class labels and indices held by a function's inputs, against the bounds their ops declare
(`index_bound` in the op registry): one check, with one message, for the ``adc`` command's
input files and the library's callables.

Only integer labels have a range: probability labels (floats) are data like any other."""
from __future__ import annotations

from typing import Callable, Mapping

from .diagnostics import RunError
from .ir.core import Function
from .ir.types import resolve_dim
from .ops import registry


def _bounded(fn: Function) -> list[tuple[str, object, Callable]]:
    """(input name, op, its index_bound rule) for each op that reads an input as labels."""
    args = {a: a.name for a in fn.args}
    found = []
    for op in fn.walk():
        opdef = registry.REGISTRY.get(op.name)
        rule = opdef.index_bound if opdef is not None else None
        got = rule(op, lambda v, axis=None: 1) if rule is not None else None
        if got is not None and got[0] in args:
            found.append((args[got[0]], op, rule))
    return found


def index_bounds(fn: Function, env: Mapping[str, int], checked_only: bool = False,
                 bounded: list | None = None) -> dict[str, int]:
    """Exclusive upper bounds for the integer inputs that ops take as class labels or indices;
    with `checked_only`, only those where a value out of range is an error."""
    def size(v, axis=None):
        if axis is None:  # a dimension
            return resolve_dim(v, env)
        shape = v.type.shape
        return resolve_dim(shape[axis % len(shape)], env) if shape else None

    high: dict[str, int] = {}
    for name, op, rule in _bounded(fn) if bounded is None else bounded:
        got = rule(op, size)
        if got is None:
            continue
        _, bound, checked = got
        if bound and (checked or not checked_only):
            high[name] = min(high.get(name, bound), bound)
    return high


UNSIGNED = {1: "u1", 2: "u2", 4: "u4", 8: "u8"}  # itemsize -> unsigned dtype


def check_labels(fn: Function, inputs: Mapping, env: Mapping[str, int],
                 bounded: list | None = None) -> None:
    """A `RunError` naming the first input whose class labels lie outside ``[0, n)``
    (NumPy would read a wrong element, or wrap a negative label round)."""
    _check_ranges(inputs, index_bounds(fn, env, True, bounded))


SMALL = 32  # labels checked as Python ints up to this many: a NumPy reduction costs more


def _check_ranges(inputs: Mapping, highs: Mapping[str, int]) -> None:
    for name, high in highs.items():
        a = inputs[name]
        if not a.size:
            continue
        if a.size <= SMALL:
            values = a.ravel().tolist()
            lo, hi = min(values), max(values)
            if 0 <= lo and hi < high:
                continue
        elif a.dtype.kind == "i":  # one pass: a negative label is a huge unsigned one
            if int(a.view(UNSIGNED[a.dtype.itemsize]).max()) < high:
                continue
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= high:
            raise RunError(f"input '{name}' holds class labels outside [0, {high}) "
                           f"(found {lo} to {hi})")


def label_check(fn: Function) -> Callable[[Mapping, Mapping], None] | None:
    """`check_labels` for `fn` as a `Runner` check, ``check(inputs, dims)``, with the ops
    found once and the bounds worked out once per binding; None when no input holds
    labels."""
    bounded = _bounded(fn)
    if not bounded:
        return None
    highs: dict[tuple, dict] = {}

    def check(inputs: Mapping, dims: Mapping[str, int]) -> None:
        # a `Runner` hands the same binding object for the same shapes: known by identity
        known = highs.get(id(dims))
        if known is None or known[0] is not dims:
            if len(highs) > 64:
                highs.clear()
            known = highs[id(dims)] = (dims, index_bounds(fn, dims, True, bounded))
        _check_ranges(inputs, known[1])
    return check
