"""The BLAS thread count, read and limited through threadpoolctl.

Matrix products run in the BLAS library NumPy links (OpenBLAS, MKL, ...), whose own thread
pool sizes itself from the environment (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS``) or the machine's cores. adc respects that choice and changes it only
when asked: `set_blas_threads(n)` for the rest of the process (``adc run --threads N``),
`blas_threads(n)` for a ``with`` block. On a machine shared with other work, or for the
small products of an overhead-bound program, one thread is often the faster choice.
"""
from __future__ import annotations

from contextlib import contextmanager

_limits = None  # the process-wide limit set by `set_blas_threads`, kept alive


def _threadpoolctl():
    import numpy  # noqa: F401  (threadpoolctl sees only the libraries already loaded)
    try:
        import threadpoolctl
    except ImportError as e:  # a declared dependency; a clear message all the same
        raise RuntimeError(f"setting the BLAS thread count needs threadpoolctl ({e})") from None
    return threadpoolctl


def blas_info() -> list[dict]:
    """One entry per BLAS library loaded: its name, version, CPU kernel and threads."""
    return [{k: i.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for i in _threadpoolctl().threadpool_info() if i.get("user_api") == "blas"]


def blas_thread_count() -> int | None:
    """The threads the loaded BLAS libraries use (the largest), or None if none is found."""
    counts = [i["num_threads"] for i in blas_info() if i.get("num_threads")]
    return max(counts) if counts else None


def set_blas_threads(n: int) -> None:
    """Limit BLAS to `n` threads for the rest of the process."""
    global _limits
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the BLAS thread count must be a positive integer, got {n!r}")
    _limits = _threadpoolctl().threadpool_limits(limits=n, user_api="blas")


@contextmanager
def blas_threads(n: int):
    """Limit BLAS to `n` threads inside the ``with`` block; restore the count after."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the BLAS thread count must be a positive integer, got {n!r}")
    with _threadpoolctl().threadpool_limits(limits=n, user_api="blas"):
        yield
