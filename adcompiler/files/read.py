"""Reading arrays from the user's data files (``.npz`` and ``.json``) without trusting them.

The rules are the runtime's (`adc_runtime.datafiles`, which an emitted program run as a
script reads its inputs with); here an array larger than the memory limit (`memory.limit`)
is refused from its header, before it is read, and a JSON syntax error is located as the
compiler's errors are (``FILE:LINE:COL`` with the line and a caret).
"""
from __future__ import annotations

import numpy as np

from adc_runtime.datafiles import JsonSyntaxError, read_json_arrays as _json_arrays
from adc_runtime.datafiles import read_npz as _npz

from ..diagnostics import AdcError, Loc
from ..memory.limit import check_fits

def read_npz(raw: bytes, path: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive by name (the member name without ``.npy``)."""
    return _npz(raw, path, check_size=check_fits)


def read_json_arrays(raw: bytes, path: str) -> dict[str, np.ndarray]:
    """The arrays of a JSON object of nested lists, by name."""
    try:
        return _json_arrays(raw, path)
    except JsonSyntaxError as e:
        raise AdcError(f"invalid JSON: {e.reason}", Loc(path, e.line, e.col)) from None
