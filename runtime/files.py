"""Writing output files without losing data (the CLI's and an emitted program's).

A regular file (or a new one) is written to a temporary file in the same folder and renamed
over the target, so a reader never sees a half-written file and a failed or interrupted run
leaves an existing file as it was; the new file keeps the old one's mode (and owner, where
permitted), and a new file gets the usual mode (0666 less the umask). A symbolic link is
followed: its target is written, the link stays. Anything else that already exists (a
device such as /dev/null, a FIFO) is written through, never replaced. Failures are
`AdcError`s that name the file.
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import signal
import stat
import threading
from typing import Callable, IO

import numpy as np

from .errors import AdcError

# the signals that end a run early: the temporary file is removed before the signal acts
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def write_atomic(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Call `write` on a binary file object that ends up as `path` (see the module doc)."""
    target = os.path.realpath(path)  # a symlink's target (even a missing one)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise _error(path, e) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise AdcError(f"cannot write '{path}': it is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_through(path, target, write)
        return
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise AdcError(f"cannot write '{path}': folder '{folder}' does not exist")
    with _signals_clean_up(path):
        tmp, fd = _create_temporary(path, folder)
        try:
            if st is not None:
                _copy_mode_and_owner(fd, st)
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(e, OSError):
                raise _error(path, e) from None
            raise


def _create_temporary(path: str, folder: str) -> tuple[str, int]:
    """A new file ``.adc-XXXX.tmp`` in `folder`, created with mode 0666 (the umask applies)."""
    for _ in range(100):
        tmp = os.path.join(folder, f".adc-{secrets.token_hex(6)}.tmp")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(
                os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        except OSError as e:
            raise _error(path, e, f"cannot create a file in folder '{folder}'") from None
    raise AdcError(f"cannot write '{path}': no free temporary name in '{folder}'")


def _copy_mode_and_owner(fd: int, st: os.stat_result) -> None:
    os.fchmod(fd, stat.S_IMODE(st.st_mode))
    if hasattr(os, "fchown") and (st.st_uid, st.st_gid) != os.fstat(fd)[4:6]:
        with contextlib.suppress(OSError):  # only the superuser may give files away
            os.fchown(fd, st.st_uid, st.st_gid)


class _Stream(io.RawIOBase):
    """A write-only view of `f` that cannot seek or tell: a device such as /dev/null says
    it is at offset 0 whatever was written, which would corrupt a zip archive's offsets;
    given a stream, ``zipfile`` (and so ``np.savez``) writes a streaming archive."""

    def __init__(self, f):
        self.f = f

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        return self.f.write(b)

    def flush(self) -> None:
        if not self.f.closed:
            self.f.flush()


def _write_through(path: str, target: str, write: Callable[[IO[bytes]], None]) -> None:
    """Write into an existing non-regular file (a device, a FIFO) in place."""
    try:
        with open(target, "wb") as f:
            write(_Stream(f))
    except OSError as e:
        raise _error(path, e) from None


def _error(path: str, e: OSError, what: str = "") -> AdcError:
    reason = e.strerror or str(e)
    if e.errno == errno.ENOSPC:
        reason = "no space left on the device"
    return AdcError(f"cannot write '{path}': " + (f"{what}: " if what else "") + reason)


class _Stopped(BaseException):
    """A termination signal arrived while an output file was being written."""


@contextlib.contextmanager
def _signals_clean_up(path: str):
    """While writing, SIGTERM and SIGHUP raise `_Stopped`, so the temporary file is removed;
    the signal is then delivered again with its previous disposition (by default, the process
    ends as the signal says)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def stop(signum, frame):
        raise _Stopped(signum)

    previous = {}
    for sig in _SIGNALS:
        old = signal.getsignal(sig)
        if old is not None and old is not signal.SIG_IGN:  # None: set outside Python
            previous[sig] = signal.signal(sig, stop)
    try:
        yield
    except _Stopped as e:
        for sig, old in previous.items():
            signal.signal(sig, old)
        previous = {}
        os.kill(os.getpid(), e.args[0])
        raise AdcError(f"writing '{path}' was interrupted; it was left as it was") from None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def save_npz(path: str, arrays: dict) -> None:
    """`arrays` as an .npz archive at `path`, written as `write_atomic` says."""
    write_atomic(path, lambda f: np.savez(f, **arrays))
