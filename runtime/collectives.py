"""Communicators: what ``allreduce_start``/``allreduce_wait`` kernels talk to.

A communicator has a `rank`, a `size`, ``start(buffer)`` (begin an in-place all-reduce,
summing `buffer` over the processes, without waiting) and ``wait(buffer)`` (finish it). The
kernels divide by `size` after the wait: the gradients of equal shards are averaged, as
DistributedDataParallel does.

* `Local` — one process: nothing to exchange (the default).
* `MPI` — mpi4py's ``Iallreduce`` on the array's own memory (the buffer interface, never
  pickling), in place; on CuPy arrays mpi4py passes device pointers (CUDA-aware MPI).
* `NCCL` — ``cupy.cuda.nccl``: each bucket's all-reduce is queued on a communication stream
  after the compute stream's work so far, and the compute stream waits for it at the wait.

`using(comm)` makes a communicator current for the kernels run inside it.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager


class PeerFailed(SystemExit):
    """Another rank's setup failed and said why: this one ends quietly with exit 1."""


class Local:
    """One process: an all-reduce is the identity."""

    rank, size = 0, 1

    def start(self, buf) -> None:
        pass

    def wait(self, buf) -> None:
        pass

    def allreduce_mean(self, x):
        return x


class MPI:
    """An mpi4py communicator (default ``MPI.COMM_WORLD``)."""

    def __init__(self, comm=None):
        from mpi4py import MPI as mpi
        self._mpi = mpi
        self.comm = comm if comm is not None else mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self._pending: dict[int, object] = {}
        self.agreed = False

    def agree(self, failed: bool, timeout: float = 60.0) -> int | None:
        """Once per run, before the first all-reduce: the lowest rank whose setup failed
        (None if none did). Every rank takes part (a healthy one from its first collective
        or at the end of its run), so a mistake every rank makes alike ends each of them
        normally, with no MPI_Abort whose teardown could drop the message. None also when
        the others do not answer within `timeout` seconds (the caller then aborts)."""
        import time
        import numpy as np
        self.agreed = True
        first = np.array([self.rank if failed else self.size], dtype=np.int64)
        request = self.comm.Iallreduce(self._mpi.IN_PLACE, first, op=self._mpi.MIN)
        deadline = time.monotonic() + timeout
        while not request.Test():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.001)
        return int(first[0]) if first[0] < self.size else None

    def agree_plan(self, values) -> tuple[int, float, float] | None:
        """Before a run's first step, once every rank's setup is settled (`agree`): the
        first entry of `values` (numbers every rank must share: rows, steps, ...) that
        differs between ranks, with its smallest and largest value; None if none does.
        Every rank learns the same answer, so all can stop alike instead of waiting in
        different collectives forever."""
        import numpy as np
        self._agree_first()
        low = np.asarray(values, dtype=np.float64).copy()
        high = low.copy()
        self.comm.Allreduce(self._mpi.IN_PLACE, low, op=self._mpi.MIN)
        self.comm.Allreduce(self._mpi.IN_PLACE, high, op=self._mpi.MAX)
        for k, (a, b) in enumerate(zip(low, high)):
            if a != b:
                return k, float(a), float(b)
        return None

    def _agree_first(self) -> None:
        if not self.agreed and self.agree(False, timeout=float("inf")) is not None:
            raise PeerFailed(1)

    def start(self, buf) -> None:
        self._agree_first()
        if id(buf) in self._pending:
            raise RuntimeError("allreduce_start on a buffer already in flight")
        self._pending[id(buf)] = self.comm.Iallreduce(self._mpi.IN_PLACE, _as_buffer(buf),
                                                      op=self._mpi.SUM)

    def wait(self, buf) -> None:
        request = self._pending.pop(id(buf), None)
        if request is None:
            raise RuntimeError("allreduce_wait on a buffer that was not started")
        request.Wait()

    def allreduce_mean(self, x):
        """The mean of the array `x` over processes (a new array; blocking)."""
        import numpy as np
        self._agree_first()
        out = np.array(x, copy=True)
        self.comm.Allreduce(self._mpi.IN_PLACE, _as_buffer(out), op=self._mpi.SUM)
        return out / self.size

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)


class NCCL:
    """A ``cupy.cuda.nccl.NcclCommunicator`` of `size` ranks: the all-reduce of a bucket runs
    on a stream of its own, ordered after the compute stream by events."""

    def __init__(self, comm, rank: int, size: int):
        import cupy
        from cupy.cuda import nccl
        self._cupy, self._nccl, self.comm = cupy, nccl, comm
        self.rank, self.size = rank, size
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._pending: dict[int, object] = {}

    def start(self, buf) -> None:
        cupy, nccl = self._cupy, self._nccl
        ready = cupy.cuda.Event()
        ready.record(cupy.cuda.get_current_stream())
        self.stream.wait_event(ready)
        dtype = {"float16": nccl.NCCL_FLOAT16, "float32": nccl.NCCL_FLOAT32,
                 "float64": nccl.NCCL_FLOAT64}[str(buf.dtype)]
        ptr = _device_pointer(buf)
        self.comm.allReduce(ptr, ptr, buf.size, dtype, nccl.NCCL_SUM, self.stream.ptr)
        done = cupy.cuda.Event()
        done.record(self.stream)
        self._pending[id(buf)] = done

    def wait(self, buf) -> None:
        done = self._pending.pop(id(buf), None)
        if done is None:
            raise RuntimeError("allreduce_wait on a buffer that was not started")
        self._cupy.cuda.get_current_stream().wait_event(done)


def _device_pointer(a) -> int:
    """The address of `a`'s first element (CuPy: ``a.data.ptr``; a NumPy array, as the CPU
    stand-in of the tests passes: ``a.ctypes.data``)."""
    ptr = getattr(a.data, "ptr", None)
    return a.ctypes.data if ptr is None else ptr


def _as_buffer(a):
    """`a` as an mpi4py buffer specification: the array itself, which exposes its memory
    (NumPy: the buffer protocol; CuPy: ``__cuda_array_interface__``)."""
    if not a.flags.c_contiguous:
        raise ValueError("an all-reduce buffer must be contiguous")
    return a


_state = threading.local()
LOCAL = Local()


def current():
    """The communicator the collective kernels use now (`Local` unless `using` says)."""
    return getattr(_state, "comm", LOCAL)


@contextmanager
def using(comm):
    saved = current()
    _state.comm = comm
    try:
        yield comm
    finally:
        _state.comm = saved
