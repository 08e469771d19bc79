"""Argument types of the ``adc`` command line: a value outside its range is a bad command
line (argparse's usage line and exit status 2), never a failure deep inside a command."""
from __future__ import annotations

import argparse
import math


def _number(text: str, kind, what: str):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None


def nonneg_int(text: str) -> int:
    value = _number(text, int, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    value = _number(text, int, "an integer >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float, "a number > 0")
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def nonneg_float(text: str) -> float:
    value = _number(text, float, "a number >= 0")
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def memory_size(text: str) -> str:
    """``--max-memory``: a size such as 8GiB (kept as text; `memory.limit` reads it)."""
    from ..diagnostics import AdcError
    from ..memory.sizes import parse_size
    try:
        size = parse_size(text)
    except AdcError as e:
        raise argparse.ArgumentTypeError(e.message) from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"expected a size > 0, got '{text}'")
    return text


def plugin_name(text: str) -> str:
    """``--plugin``: a module name or a .py file; an empty entry is a typo, not a no-op."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected a module name or a .py file, got "
                                         f"'{text}'")
    for n in names:
        if not n.endswith(".py") and not all(p.isidentifier() for p in n.split(".")):
            raise argparse.ArgumentTypeError(f"'{n}' is neither a module name (a.b.c) nor "
                                             "a .py file")
    return text
