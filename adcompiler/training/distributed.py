"""Data-parallel training over processes: the communicator, each rank's shard of a global
batch, and failing together.

``mpiexec -n N adc train ... --distributed mpi`` runs N copies of one program. Every rank
draws the same global batch (same seed, same permutation) and takes its own contiguous
slice of its rows, so the batches, the shuffling and the results do not depend on N; the
training step averages the loss and gradients over ranks (the ``allreduce`` pass), which
for a loss that is a mean over rows and equal shards is the gradient of the global batch.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

from ..diagnostics import AdcError


def communicator(kind: str):
    """The communicator for ``--distributed KIND``: ``none`` (None) or ``mpi``."""
    if kind in ("", "none"):
        return None
    if kind != "mpi":
        raise AdcError(f"unknown --distributed '{kind}' (choose none or mpi)")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise AdcError("--distributed mpi needs mpi4py and an MPI library: "
                       "pip install -e '.[mpi]'") from None
    from adc_runtime.collectives import MPI
    return MPI()


def shard(rows, rank: int, size: int):
    """This rank's contiguous share of the global batch `rows` (indices or arrays)."""
    n = len(rows)
    if n % size:
        raise AdcError(f"a global batch of {n} rows does not split evenly over {size} "
                       f"processes: choose a batch that is a multiple of {size}")
    per = n // size
    return rows[rank * per:(rank + 1) * per]


@contextmanager
def fail_together(comm):
    """Run the body so that every rank ends when one fails.

    A rank that fails before any all-reduce (a mistake in the options or the data, made
    alike on every rank) settles it with the others (`MPI.agree`): the lowest failing rank
    reports its error, the others exit 1 quietly, and nothing aborts. A rank that fails
    later says which rank and why on stderr and aborts every rank (MPI_Abort), so that none
    waits forever in a collective."""
    from adc_runtime.collectives import PeerFailed
    try:
        yield
    except PeerFailed:
        raise
    except BaseException as e:
        if comm is None or comm.size == 1 or isinstance(e, SystemExit) and not e.code \
                or getattr(e, "every_rank_knows", False):   # each ends alike, no abort
            raise
        if not getattr(comm, "agreed", True):
            first = comm.agree(True)
            if first == comm.rank:
                raise
            if first is not None:
                raise PeerFailed(1) from None
        what = str(e) or type(e).__name__
        print(f"adc: rank {comm.rank} of {comm.size} failed: {what}", file=sys.stderr,
              flush=True)
        # the launcher tears every rank down on MPI_Abort, and may do so before it has
        # forwarded what the ranks just wrote: give it a moment to pass the message on
        time.sleep(0.5)
        comm.abort(1)
        os._exit(1)   # MPI_Abort may return before the launcher ends this process
    else:
        if comm is not None and not getattr(comm, "agreed", True):
            comm.agree(False)   # a run with no all-reduce still answers the others
