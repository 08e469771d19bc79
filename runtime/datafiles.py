"""Reading arrays from data files (``.npz`` and ``.json``) without trusting them: the rules of
``adc run --inputs``, here so that an emitted program run as a script reads its inputs file
by them too (``python prog.py IN.json``).

Every way such a file can be wrong is an `AdcError` that names the file: not a regular file
(a device such as /dev/zero would be read forever), not a zip archive, truncated, compressed
with an unknown method, an array of Python objects (which NumPy would unpickle: refused), an
array larger than the caller's size check allows (refused from its header, before it is
read); in JSON a syntax error (`JsonSyntaxError`, with its line and column), a duplicate key,
``NaN``/``Infinity`` (not JSON, and not data a derivative can be checked on), an integer or
float beyond every dtype, nesting beyond NumPy's 64 dimensions, ragged lists.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import tokenize
import zipfile
import zlib
from typing import Callable, Mapping, Sequence

import numpy as np

from .errors import AdcError, RunError

MAX_INT_DIGITS = 20      # more digits fit no integer dtype (uint64 has 20)
MAX_RANK = 64            # NumPy's limit on dimensions
_LINE_BREAK = re.compile(r"\r\n|\r|\n")   # as the lexers count lines
# what a damaged archive raises while being read (zlib, zipfile and NumPy's .npy reader,
# which tokenizes the header's text)
BROKEN = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, KeyError,
          NotImplementedError, RuntimeError, OverflowError, SyntaxError, tokenize.TokenError)


class JsonSyntaxError(AdcError):
    """A JSON file that does not parse; `line` and `col` (from 1) say where."""

    def __init__(self, path: str, message: str, line: int, col: int):
        super().__init__(f"{path}:{line}:{col}: invalid JSON: {message}")
        self.path, self.reason, self.line, self.col = path, message, line, col


def read_file(path: str, what: str = "inputs file") -> bytes:
    """The bytes of regular file `path`; anything else is refused before it is read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise AdcError(f"{what} '{path}' does not exist") from None
    except OSError as e:
        raise AdcError(f"cannot read {what} '{path}': {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise AdcError(f"{what} '{path}' is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise AdcError(f"{what} '{path}' is not a regular file")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise AdcError(f"cannot read {what} '{path}': {e.strerror}") from None


def load_arrays(path: str) -> dict[str, tuple[np.ndarray, bool]]:
    """The arrays of inputs file `path` (.npz or .json) by name, each with a flag "came from
    JSON" (JSON numbers have no dtype)."""
    if not path.endswith((".json", ".npz")):
        raise AdcError(f"inputs file '{path}' must end in .npz or .json")
    raw = read_file(path)
    if path.endswith(".json"):
        return {k: (v, True) for k, v in read_json_arrays(raw, path).items()}
    return {k: (v, False) for k, v in read_npz(raw, path).items()}


def read_npz(raw: bytes, path: str, check_size: Callable[[int, str], None] | None = None,
             check_headers: Callable[[dict], None] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive by name (the member name without ``.npy``).

    Every member's header is read first (a few hundred bytes of each, however far its data
    would inflate): `check_size(nbytes, what)` may refuse an array, then all of them
    together, and `check_headers({name: (shape, dtype)})` the archive (rows that disagree,
    say), all before any array's data is decompressed."""
    if not raw:
        raise AdcError(f"'{path}' is empty, not an .npz archive")
    if not raw.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise AdcError(f"'{path}' is not an .npz file (not a zip archive; write it with "
                       "numpy.savez)")
    out = {}
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            names = [n for n in z.namelist() if not n.endswith("/")]
            for name in names:
                if not name.endswith(".npy"):
                    raise AdcError(f"'{path}': member '{name}' is not a .npy array")
            headers, total = {}, 0
            for name in names:
                what = f"'{path}': array '{name[:-4]}'"
                with z.open(name) as f:
                    shape, _, dtype = read_npy_header(f, what)
                nbytes = math.prod(shape) * dtype.itemsize
                if check_size is not None:
                    check_size(nbytes, what)
                headers[name[:-4]], total = (shape, dtype), total + nbytes
            if check_size is not None and len(names) > 1:
                check_size(total, f"'{path}' (its {len(names)} arrays together)")
            if check_headers is not None:
                check_headers(headers)
            for name in names:
                with z.open(name) as f:
                    out[name[:-4]] = read_npy(f, f"'{path}': array '{name[:-4]}'", check_size)
    except AdcError:
        raise
    except BROKEN as e:
        raise AdcError(f"'{path}' is damaged or truncated ({type(e).__name__}: {e})") from None
    return out


def read_npy_header(f, what: str) -> tuple[tuple, bool, np.dtype]:
    """The shape, Fortran order and dtype in a ``.npy`` header; object arrays refused."""
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
    return shape, fortran, dtype


def read_npy(f, what: str, check_size: Callable[[int, str], None] | None = None) -> np.ndarray:
    shape, fortran, dtype = read_npy_header(f, what)
    nbytes = math.prod(shape) * dtype.itemsize
    if check_size is not None:
        check_size(nbytes, what)
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise AdcError(f"{what} is truncated ({len(data):,} of {nbytes:,} bytes)")
    arr = np.frombuffer(data, dtype=dtype)
    if fortran:
        return arr.reshape(shape[::-1]).transpose().copy()
    return arr.reshape(shape).copy()


class _JsonValueError(Exception):
    """A JSON value adc refuses; raised inside the decoder, reported with the file name."""


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
        before = _LINE_BREAK.split(text[:e.pos])
        raise JsonSyntaxError(path, e.msg, len(before), len(before[-1]) + 1) from None
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


class _Declared:
    """An input's declared type as `executor.bind_dims` reads it."""

    def __init__(self, shape: tuple, text: str):
        self.shape, self.text = shape, text

    def __str__(self) -> str:
        return self.text


class _Arg:
    def __init__(self, name: str, shape: tuple, text: str):
        self.name, self.type = name, _Declared(shape, text)


class _Signature:
    def __init__(self, args: list):
        self.args = args


def read_inputs(path: str, signature: Sequence[tuple[str, str, tuple, str]],
                dims: Mapping[str, int] | None = None) -> tuple[dict, dict[str, int]]:
    """The inputs of a function from inputs file `path`, checked as ``adc run`` checks them:
    `signature` lists ``(name, dtype, shape, type_text)`` per input (``("x", "f32", ("B",
    4), "f32[B, 4]")``). Returns the arrays in signature order, converted to their declared
    dtypes, and the symbolic dimensions their shapes bind (beside `dims`)."""
    from .executor import bind_dims
    from .inputs import convert_input
    from .random import KEY_INPUT, seed_key
    data = load_arrays(path)
    names = [s[0] for s in signature]
    for key in data:
        if key not in names:
            raise AdcError(f"{path}: unknown input '{key}' (the inputs are "
                           f"{', '.join(names) or 'none'})")
    out = {}
    try:
        for name, dtype, _, text in signature:
            if name not in data and name == KEY_INPUT and text == "i64[2]":
                out[name] = np.asarray(seed_key(0), dtype=np.int64)  # the key of seed 0
                continue
            if name not in data:
                raise RunError(f"missing input '{name}' ({text})")
            arr, from_json = data[name]
            out[name] = convert_input(name, arr, dtype, text, np, typed=not from_json)
        bound = bind_dims(_Signature([_Arg(n, tuple(s), t) for n, _, s, t in signature]),
                          list(out.values()), dims)
    except RunError as e:
        raise AdcError(f"{path}: {e.message}") from None
    return out, bound
