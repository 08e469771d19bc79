"""Names, comments and literals of imported programs.

A model's names and strings never become code: a name that is a valid TDSL identifier is
kept, any other is rewritten deterministically (`Names.take`); a comment quotes a name with
every character outside printable ASCII escaped, so it cannot end its line; numbers are
written so that they parse back to the same value of their dtype.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..tdsl.descent import KEYWORDS

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BAD = re.compile(r"[^A-Za-z0-9_]+")
MAX_NAME = 64


def sanitize(name: str, fallback: str = "v") -> str:
    """A TDSL identifier for `name`: itself when valid (and not a keyword), else its runs of
    other characters replaced by ``_``, a leading digit prefixed, a keyword suffixed."""
    if _IDENT.match(name) and name not in KEYWORDS and len(name) <= MAX_NAME:
        return name
    s = _BAD.sub("_", name).strip("_") or fallback
    if s[0].isdigit():
        s = f"{fallback}_{s}"
    if len(s) > MAX_NAME:  # keep the end, which tells apart the layers of a long path
        s = s[:16].rstrip("_") + "_" + s[-(MAX_NAME - 17):].lstrip("_")
    if s in KEYWORDS:
        s += "_"
    return s


class Names:
    """Unique identifiers: `take` returns `sanitize(name)`, with ``_2``, ``_3``, ... when it
    is taken; the same source name always gets the same identifier from one `Names`."""

    def __init__(self, reserved=()):
        self.used: set[str] = set(reserved)
        self.given: dict[tuple[str, str], str] = {}

    def take(self, name: str, fallback: str = "v") -> str:
        key = (name, fallback)
        if key in self.given:
            return self.given[key]
        base = sanitize(name, fallback)
        out, k = base, 2
        while out in self.used:
            out, k = f"{base}_{k}", k + 1
        self.used.add(out)
        self.given[key] = out
        return out

    def fresh(self, hint: str) -> str:
        """A new identifier from `hint`, never handed out before."""
        base = sanitize(hint)
        out, k = base, 2
        while out in self.used:
            out, k = f"{base}_{k}", k + 1
        self.used.add(out)
        return out


def quote(text: str) -> str:
    """`text` for a comment: printable ASCII kept, everything else escaped (``\\n``,
    ``\\xe9``, ``\\u2028``), at most 120 characters."""
    out = "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in str(text))
    return out if len(out) <= 120 else out[:117] + "..."


def number(value, dtype: str = "f64") -> str:
    """A TDSL literal for a finite number; negative values are written ``-x`` (a unary
    minus, since literals are unsigned). Floats are the shortest text that reads back as the
    same value of `dtype` (``1e-05`` for float32's 1e-5)."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError("a bool is not a number literal")
    if dtype.startswith("i") or isinstance(value, (int, np.integer)) and not \
            dtype.startswith("f"):
        v = int(value)
        return str(v) if v >= 0 else f"-{-v}"
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{v} has no literal")
    if dtype in ("f32", "f16"):
        x = (np.float32 if dtype == "f32" else np.float16)(abs(v))
        text = np.format_float_positional(x, unique=True, trim="0") \
            if 1e-4 <= abs(v) < 1e16 or v == 0 else \
            np.format_float_scientific(x, unique=True, trim="-")
    else:
        text = repr(abs(v))
    text = text.replace("e+", "e")
    if text.endswith("."):
        text += "0"
    if "." not in text and "e" not in text:
        text += ".0"
    return f"-{text}" if math.copysign(1.0, v) < 0 and v != 0 else text


def ints(values) -> str:
    """A TDSL list of ints (or dim names): ``[1, -1, B]``."""
    return "[" + ", ".join(v if isinstance(v, str) else number(int(v), "i64")
                           for v in values) + "]"


def type_text(t) -> str:
    """A tensor type as TDSL writes it: ``f32[B, 3]``, ``i64``."""
    if not t.shape:
        return t.dtype
    return f"{t.dtype}[{', '.join(str(d) for d in t.shape)}]"
