"""The ONNX lowering table: one entry per op type, each with the versions of the op it
handles (the ``since_version`` of each schema it was checked against).

An entry is a function of a `Node` (node.py) that writes the node's statements; it reads
every attribute and input it handles through the node, and the node refuses any it did not
read, so an option an entry does not know is never silently dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Entry:
    op: str
    versions: frozenset
    lower: Callable


TABLE: dict[str, Entry] = {}


def lowers(op: str, *versions: int):
    """Register the decorated function as the lowering of `op` at `versions`."""
    def deco(fn):
        if op in TABLE:
            raise ValueError(f"ONNX op {op} is lowered twice")
        TABLE[op] = Entry(op, frozenset(versions), fn)
        return fn
    return deco


def supported() -> list[str]:
    return sorted(TABLE)
