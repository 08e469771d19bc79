"""The TDSL frontend: source text -> syntax tree (`parse`) -> IR `Module` (`lower`).

    module = compile_source(text, "model.tdsl")
    module = compile_file("model.tdsl")

Every problem in the program is raised as an `AdcError` located at its line and column;
no other exception escapes for any input text.
"""
from __future__ import annotations

import os

from ...diagnostics import AdcError, Loc
from ...ir.core import Module
from ...ir.gcpause import collector_paused
from .lower import lower_module
from .parse import parse


def decode(data: bytes, filename: str = "<input>") -> str:
    """UTF-8 source text; an invalid byte is an error at its line and column."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        col = len(data[start:e.start].decode("utf-8", errors="replace")) + 1
        raise AdcError(f"the file is not valid UTF-8 (byte 0x{data[e.start]:02x})",
                       Loc(filename, line, col)) from None
    return text[1:] if text.startswith("\ufeff") else text


def compile_source(text: str | bytes, filename: str = "<input>") -> Module:
    """Compile TDSL source text to an IR module."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = decode(bytes(text), filename)
        with collector_paused():
            return lower_module(parse(text, filename), filename)
    except AdcError:
        raise
    except RecursionError:
        raise AdcError("the program is nested too deeply", Loc(filename, 1, 1)) from None
    except Exception as e:  # never let an internal failure escape as a traceback
        raise AdcError(f"internal compiler error ({type(e).__name__}: {e})",
                       Loc(filename, 1, 1)) from e


def compile_file(path) -> Module:
    """Compile the TDSL file at `path` (errors are located in that file)."""
    from ...files.read import read_bytes
    name = os.fspath(path)
    data = read_bytes(name, "program", f"cannot read '{name}': no such file")
    return compile_source(decode(data, name), name)


__all__ = ["compile_source", "compile_file", "decode", "parse", "lower_module"]
