"""``yield`` and ``return``: they end a block, so they take operands and define nothing."""
from __future__ import annotations


def verify(checker, op) -> None:
    if op.results or op.regions:
        checker.fail(op, "must have no results and no regions")
