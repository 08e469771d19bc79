"""Fewer garbage collections while a large program is built or rewritten.

Building IR allocates millions of small container objects (values, ops, operand lists)
that live on. CPython's default thresholds start a young collection every 700 new
objects and a full one as the heap grows, so a pass over a 100k-op program spends more
time in the collector than in the pass. Raising the young threshold for the duration of
a compilation step keeps collections rare; garbage (the modules that earlier passes left
behind) is still collected, later and in fewer, larger batches.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager

YOUNG = 50_000   # allocations between young collections (CPython's default: 700)
MIDDLE = 20      # young collections between middle-generation ones (default: 10)


@contextmanager
def fewer_collections():
    """Raise the collector's thresholds inside the block; restore them after."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG), max(old[1], MIDDLE), *old[2:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
