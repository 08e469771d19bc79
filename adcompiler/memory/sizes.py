"""Byte sizes of values and of budgets written as text (``64MiB``, ``1.5GB``, ``4096``)."""
from __future__ import annotations

import math
import re
from typing import Mapping

from ..diagnostics import AdcError
from ..ir.core import Value
from ..ir.types import DTYPE_BYTES, TensorType, resolve_dim

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """``"64MiB"`` -> 67108864; plain numbers are bytes."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise AdcError(f"bad memory size '{text}' (examples: 4096, 512KiB, 64MiB, 1.5GB)")
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise AdcError(f"memory size '{text}' is too large")
    return int(value)


def format_bytes(n: int) -> str:
    """A short human reading of a byte count (binary units)."""
    for unit, size in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def type_bytes(t: TensorType, dims: Mapping[str, int]) -> int:
    return DTYPE_BYTES[t.dtype] * math.prod(resolve_dim(d, dims) for d in t.shape)


def value_bytes(v: Value, dims: Mapping[str, int]) -> int:
    return type_bytes(v.type, dims)


def trip_count(n, dims: Mapping[str, int]) -> int | None:
    """A loop's trip count, or None when it depends on an unbound symbol."""
    try:
        return resolve_dim(n, dims)
    except KeyError:
        return None
