"""Writing the CLI's output files atomically: a reader never sees a half-written file, and a
failed run leaves an existing file as it was."""
from __future__ import annotations

import os
import tempfile
from typing import Callable, IO

import numpy as np

from ..diagnostics import AdcError


def write_atomic(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Call `write` on a temporary file in `path`'s folder, then rename it over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise AdcError(f"cannot write '{path}': folder '{folder}' does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".adc-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    write_atomic(path, lambda f: np.savez(f, **arrays))


def save_text(path: str, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
