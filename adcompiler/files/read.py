"""Reading arrays from the user's data files (``.npz`` and ``.json``) without trusting them.

Every way such a file can be wrong is an `AdcError` that names the file: not a zip archive,
truncated, compressed with an unknown method, an array of Python objects (which NumPy would
unpickle: refused), an array larger than the memory limit (`memory.limit`; refused from its header, before
it is read); in JSON a syntax error (located), a duplicate key, ``NaN``/``Infinity`` (not
JSON, and not data a derivative can be checked on), an integer or float beyond every dtype,
nesting beyond NumPy's 64 dimensions, ragged lists.
"""
from __future__ import annotations

import io
import json
import math
import zipfile
import zlib

import numpy as np

from ..diagnostics import AdcError, Loc, source_lines
from ..memory.limit import check_fits

MAX_INT_DIGITS = 20      # more digits fit no integer dtype (uint64 has 20)
MAX_RANK = 64            # NumPy's limit on dimensions
# what a damaged archive raises while being read (zlib, zipfile and NumPy's .npy reader)
_BROKEN = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, KeyError,
           NotImplementedError, RuntimeError, OverflowError, SyntaxError)


def read_npz(raw: bytes, path: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive by name (the member name without ``.npy``)."""
    if not raw:
        raise AdcError(f"'{path}' is empty, not an .npz archive")
    if not raw.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise AdcError(f"'{path}' is not an .npz file (not a zip archive; write it with "
                       "numpy.savez)")
    out = {}
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            for name in z.namelist():
                if name.endswith("/"):
                    continue
                if not name.endswith(".npy"):
                    raise AdcError(f"'{path}': member '{name}' is not a .npy array")
                with z.open(name) as f:
                    out[name[:-4]] = _read_npy(f, f"'{path}': array '{name[:-4]}'")
    except AdcError:
        raise
    except _BROKEN as e:
        raise AdcError(f"'{path}' is damaged or truncated ({type(e).__name__}: {e})") from None
    return out


def _read_npy(f, what: str) -> np.ndarray:
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = fmt.read_array_header_2_0(f)
    else:
        raise AdcError(f"{what} is in .npy format version {version}, which adc does not read")
    if dtype.hasobject:
        raise AdcError(f"{what} holds Python objects (pickled data); adc reads only arrays "
                       "of numbers and bools")
    nbytes = math.prod(shape) * dtype.itemsize
    check_fits(nbytes, what)
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise AdcError(f"{what} is truncated ({len(data):,} of {nbytes:,} bytes)")
    arr = np.frombuffer(data, dtype=dtype)
    if fortran:
        return arr.reshape(shape[::-1]).transpose().copy()
    return arr.reshape(shape).copy()


def _no_constant(name: str):
    raise _JsonValueError(f"{name} is not a JSON number (write finite numbers; NaN and "
                          "infinities are not accepted as inputs)")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _JsonValueError(f"the integer {text[:12]}... ({len(text)} digits) does not fit "
                              "in any integer dtype")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _JsonValueError(f"the number {text[:30]} overflows every float dtype")
    return value


def _object(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _JsonValueError(f"duplicate key '{key}'")
        out[key] = value
    return out


class _JsonValueError(Exception):
    """A JSON value adc refuses; raised inside the decoder, reported with the file name."""


def read_json_arrays(raw: bytes, path: str) -> dict[str, np.ndarray]:
    """The arrays of a JSON object of nested lists, by name."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AdcError(f"inputs file '{path}' is not UTF-8 text") from None
    try:
        obj = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant,
                         parse_int=_int, parse_float=_float)
    except json.JSONDecodeError as e:
        raise AdcError(f"invalid JSON: {e.msg}", _json_loc(path, text, e.pos)) from None
    except _JsonValueError as e:
        raise AdcError(f"{path}: {e}") from None
    except RecursionError:
        raise AdcError(f"{path}: lists nested too deeply (at most {MAX_RANK} levels)") \
            from None
    if not isinstance(obj, dict):
        raise AdcError(f"{path}: expected a JSON object mapping input names to arrays")
    out = {}
    for name, value in obj.items():
        try:
            arr = np.array(value)
        except ValueError as e:
            reason = "is nested deeper than 64 levels" if "maximum number" in str(e) else \
                "is not a rectangular array"
            raise AdcError(f"{path}: input '{name}' {reason}") from None
        except OverflowError:
            raise AdcError(f"{path}: input '{name}' holds an integer that fits no dtype") \
                from None
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise AdcError(f"{path}: input '{name}' must be a number or nested lists of "
                           "numbers")
        out[name] = arr
    return out


def _json_loc(path: str, text: str, pos: int) -> Loc:
    """The line and column of offset `pos`, counted as the error renderer counts lines."""
    before = source_lines(text[:pos])
    return Loc(path, len(before), len(before[-1]) + 1)
