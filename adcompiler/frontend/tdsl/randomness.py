"""Where random ops get their keys (tdsl.md section 9, `adcompiler.ops.random`).

A function that draws, itself or through a function it calls, gets a trailing input
``rng_key`` (``i64[2]``). A loop body draws from ``rng_fold(key, i)`` (its iteration index
folded in at the loop's site), a call of a drawing function passes ``rng_fold(key, 0)`` at
the call's site, and each random op names its own site: so two ops, two iterations and two
calls never share bits, and the same program draws the same bits at every run.
"""
from __future__ import annotations

import dataclasses

from ...ops import registry
from ...ops.random import KEY, KEY_INPUT, site_of
from . import ast


def _calls(node, out: list) -> list:
    """Every `ast.Call` under `node` (statements and expressions)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
        elif dataclasses.is_dataclass(n) and not isinstance(n, type):
            if isinstance(n, ast.Call):
                out.append(n)
            stack.extend(getattr(n, f.name) for f in dataclasses.fields(n)
                         if f.name not in ("span", "op_span", "close_span", "count_span"))
    return out


def is_random_op(name: str, functions) -> bool:
    d = registry.REGISTRY.get(name)
    return name not in functions and d is not None and "key" in d.operands


def drawing_functions(defs: dict[str, ast.FuncDef]) -> set[str]:
    """The functions of the file that draw, directly or through calls."""
    calls = {name: [c.func for c in _calls(d.body, [])] for name, d in defs.items()}
    drawing = {n for n, cs in calls.items() if any(is_random_op(c, defs) for c in cs)}
    changed = True
    while changed:
        changed = False
        for n, cs in calls.items():
            if n not in drawing and any(c in drawing for c in cs):
                drawing.add(n)
                changed = True
    return drawing


class Keys:
    """The key of each block being lowered: the function's key input at the bottom, one
    entry per loop body above it (made on first use, in the body that uses it)."""

    def __init__(self, fn_name: str, key_arg):
        self.fn_name = fn_name
        self.entries: list[list] = [[key_arg, None, None, None]]   # value, index, site, block

    def push(self, index, span, block) -> None:
        self.entries.append([None, index, self.site(span), block])

    def pop(self) -> None:
        self.entries.pop()

    def site(self, span) -> int:
        return site_of(self.fn_name, span.line, span.col)

    def key(self, b, level: int | None = None):
        """The key of entry `level` (default: the innermost), emitted at `b` if needed;
        kept only by the entry whose block `b` is in."""
        level = len(self.entries) - 1 if level is None else level
        value, index, site, block = self.entries[level]
        if value is not None:
            return value
        outer = self.key(b, level - 1)
        value = b.emit("rng_fold", outer, index, site=site)
        if b.block is block:
            self.entries[level][0] = value
        return value


__all__ = ["KEY", "KEY_INPUT", "Keys", "drawing_functions", "is_random_op"]
