"""When each value of a block dies: the rule the executor frees by and the compiler's
memory model and buffer planner predict with."""
from __future__ import annotations

from typing import Any


def last_uses(block) -> dict[int, list]:
    """For each op index, the values defined in `block` whose last use is that op (-1:
    arguments never used). The compiler's memory model uses this same rule."""
    last: dict[Any, int] = {}
    for v in block.args:
        last[v] = -1
    for k, op in enumerate(block.ops):
        for v in op.results:
            last[v] = k
        for inner in op.walk():
            for v in inner.operands:
                if v in last:
                    last[v] = k
    table: dict[int, list] = {}
    for v, k in last.items():
        table.setdefault(k, []).append(v)
    return table
