"""The memory a run may use: arrays whose predicted size exceeds it are refused before
anything is allocated, with the predicted size in the message (``--max-memory SIZE``).

The default is `DEFAULT_FRACTION` of the machine's memory (or of the container's limit,
where that is smaller): a request above it would fail or swap, and would fail late, after
the inputs were drawn and the compiler had run. The limit is one setting of the process,
set once by the command line (`set_limit`) and read where sizes become known.
"""
from __future__ import annotations

import os

from ..diagnostics import AdcError
from .sizes import format_bytes, parse_size

DEFAULT_FRACTION = 0.75
_limit: int | None = None


def physical_memory() -> int | None:
    """Bytes of memory of this machine, or of the cgroup it runs in when that is less."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and (total is None or int(text) < total):
            total = int(text)
    return total


def default_limit() -> int:
    total = physical_memory()
    return int(total * DEFAULT_FRACTION) if total else 2**62


def set_limit(size: str | int | None) -> None:
    """``--max-memory SIZE`` (None: the default)."""
    global _limit
    _limit = None if size is None else parse_size(size)


def current_limit() -> int:
    return default_limit() if _limit is None else _limit


def check_fits(nbytes: int, what: str, loc=None) -> None:
    """Refuse `what` (e.g. "the random inputs") if `nbytes` exceed the limit; `nbytes` may be
    any Python int, however large; `loc` points at the op that needs them, if one does."""
    limit = current_limit()
    if nbytes > limit:
        origin = "--max-memory" if _limit is not None else \
            f"{DEFAULT_FRACTION:.0%} of this machine's memory; raise it with --max-memory"
        raise AdcError(f"{what} would need {format_bytes(nbytes)} ({nbytes:,} bytes), more "
                       f"than the memory limit of {format_bytes(limit)} ({origin})", loc)


def check_run_fits(module, fn: str, dims) -> None:
    """Refuse to run `fn` of `module` when its predicted peak live memory (inputs, loop
    tapes and every intermediate, `memory.liveness`) exceeds the limit."""
    from .liveness import predict_peak
    prof = predict_peak(module, fn, dims)
    check_fits(prof.peak_bytes, f"running '{fn}' (predicted peak live memory, reached at "
               "this op)" if getattr(prof.peak_op, "loc", None) else f"running '{fn}' "
               "(predicted peak live memory)", getattr(prof.peak_op, "loc", None))


def check_arrays_fit(types, dims, what: str) -> None:
    """Refuse arrays of `types` (e.g. random inputs about to be drawn) above the limit."""
    from .sizes import type_bytes
    check_fits(sum(type_bytes(t, dims) for t in types), what)


def read_within_limit(f, what: str) -> bytes:
    """All of binary file `f`, refused (by its size, or once past the limit for a stream
    such as a pipe or /dev/zero) when it exceeds the memory limit."""
    try:
        size = os.fstat(f.fileno()).st_size
    except (OSError, AttributeError, ValueError):
        size = 0
    check_fits(size, what)
    limit, chunks, total = current_limit(), [], 0
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            check_fits(total, what + " (read so far)")
