"""Reading the user's files without trusting them: programs, data files (``.npz`` and
``.json``) and checkpoints.

`read_bytes` refuses a directory or a device (``/dev/zero``, or a link to it named like a
checkpoint, would be read until the memory ran out) before reading, and reads anything
else (a regular file, a pipe) only up to the memory limit.

The rules are the runtime's (`adc_runtime.datafiles`, which an emitted program run as a
script reads its inputs with); here an array larger than the memory limit (`memory.limit`)
is refused from its header, before it is read, and a JSON syntax error is located as the
compiler's errors are (``FILE:LINE:COL`` with the line and a caret).
"""
from __future__ import annotations

import os
import stat

import numpy as np

from adc_runtime.datafiles import JsonSyntaxError, read_json_arrays as _json_arrays
from adc_runtime.datafiles import read_npz as _npz

from ..diagnostics import AdcError, Loc
from ..memory.limit import check_fits, read_within_limit


def read_bytes(path: str, what: str, missing: str | None = None) -> bytes:
    """The bytes of the file `what` at `path` (module docstring); every failure is an
    `AdcError` naming it (`missing`: the message when there is no such file)."""
    try:
        st = os.stat(path)   # follows links: a link to /dev/zero is the device
    except FileNotFoundError:
        raise AdcError(missing or f"{what} '{path}' does not exist") from None
    except OSError as e:
        raise AdcError(f"cannot read {what} '{path}': {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise AdcError(f"{what} '{path}' is a directory, not a file")
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        raise AdcError(f"{what} '{path}' is a device, not a file")
    try:
        with open(path, "rb") as f:
            return read_within_limit(f, f"reading {what} '{path}'")
    except OSError as e:
        raise AdcError(f"cannot read {what} '{path}': {e.strerror}") from None


def read_npz(raw: bytes, path: str, same_rows: bool = False) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive by name (the member name without ``.npy``), each
    and all refused from their headers when past the memory limit; with `same_rows`
    (training data: one row per example in every array), arrays whose leading axes differ
    are refused from their headers too, before any is decompressed, when reading them would
    cost (`COSTLY` bytes together; a small file is read and its arrays are checked one by
    one, with the messages that name an array the program does not take)."""
    return _npz(raw, path, check_size=check_fits,
                check_headers=(lambda h: _same_rows(h, path)) if same_rows else None)


COSTLY = 16 << 20


def _same_rows(headers: dict, path: str) -> None:
    import math
    if sum(math.prod(s) * d.itemsize for s, d in headers.values()) < COSTLY:
        return
    first = None
    for name, (shape, _) in headers.items():
        if not shape:
            continue   # a 0-d array: refused, by name, where the data is checked
        if first is None:
            first = (name, shape[0])
        elif shape[0] != first[1]:
            raise AdcError(f"{path}: array '{name}' has {shape[0]:,} rows but '{first[0]}' has "
                           f"{first[1]:,} (read from the file's headers)")


def read_json_arrays(raw: bytes, path: str) -> dict[str, np.ndarray]:
    """The arrays of a JSON object of nested lists, by name."""
    try:
        return _json_arrays(raw, path)
    except JsonSyntaxError as e:
        raise AdcError(f"invalid JSON: {e.reason}", Loc(path, e.line, e.col)) from None
