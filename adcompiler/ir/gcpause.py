"""Fewer garbage collections while a large program is built or rewritten.

Building IR allocates millions of small container objects (values, ops, operand lists)
that live on. CPython's default thresholds start a young collection every 700 new
objects and a full one as the heap grows, so a pass over a 100k-op program spends more
time in the collector than in the pass.

`collector_paused` stops the collector for a compilation step (the frontend, the IR
parser, a pipeline of passes). The young collections inside a compilation find almost
nothing to free (the IR lives on), and the full ones traverse the whole heap each time:
at 100k ops in hvp mode, 404 young and 19 middle collections took 4.4 s and freed 33
objects. With the collector paused, what the step made waits for the end of the step.

A step that left more than `MOVE_AFTER` new objects then moves every object the collector
tracks to its oldest generation unexamined (`gc.freeze` and `gc.unfreeze`: two list
splices). A full collection there cost 1.3 s at 100k ops in hvp mode (4.1 s before the IR's
objects got leaner), nearly all of it to find that the 5 million objects of the new IR are
alive. They are examined by the next full collection that CPython starts on its own
schedule: a program that runs on pays for that one instead of this one, and ``adc compile``
exits first (the collection at exit, which frees the whole heap, it ran before as well).
The step's garbage waits for that collection too, and is small: the passes break the
reference cycles of the ops they erase (`adcompiler.ir.core.release`), so reference counting
frees them at once; only the modules a pipeline replaced wait (peak memory +4% against a
full collection here, in benchmarks/results-compile.md).

CPython starts a full collection by counting its own collections, and a paused step, one
young collection where there would have been thousands, hardly advances that count: the
garbage of steps that only moved could pile up without end. So a step moves its objects
only if the steps since the last full collection moved no more than it made (what waits
unexamined stays under twice the largest step); otherwise, and where the caller has frozen
objects itself (a server before it forks; `gc.unfreeze` would thaw them), the step ends
with a full collection. After a smaller step the collector's next young collection finds
the new objects, as it would have.

`fewer_collections` only raises the thresholds: for a whole command, which may go on to
run a program for a long time after compiling it.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager

YOUNG = 50_000   # allocations between young collections (CPython's default: 700)
MIDDLE = 20      # young collections between middle-generation ones (default: 10)
MOVE_AFTER = 100_000  # new objects after which a step moves them to the oldest generation


@contextmanager
def fewer_collections():
    """Raise the collector's thresholds inside the block; restore them after."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG), max(old[1], MIDDLE), *old[2:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


@contextmanager
def collector_paused():
    """No collection inside the block; then the collector runs again, after moving what
    the block made to the oldest generation if it left more than `MOVE_AFTER` new objects.
    Inside a block that paused it already (or where the caller turned the collector off),
    nothing changes."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        # decided and done before the collector runs again: once it does, the first
        # allocation would start a young collection of everything the block made
        made = gc.get_count()[0]
        if made > MOVE_AFTER:
            to_oldest_generation(made)
        gc.enable()


_moved = 0     # objects moved unexamined since the last full collection
_fulls = None  # the count of full collections when `_moved` was last added to


def to_oldest_generation(made: int) -> None:
    """Move every object the collector tracks to its oldest generation without examining
    them, for a step that made `made` objects; a full collection instead where the steps
    since the last one moved more than that, or where the caller has frozen objects (see
    the module's docstring)."""
    global _moved, _fulls
    fulls = gc.get_stats()[2]["collections"]
    if fulls != _fulls:
        _moved, _fulls = 0, fulls
    if gc.get_freeze_count() or _moved > made:
        gc.collect()
    else:
        gc.freeze()
        gc.unfreeze()
        _moved += made
