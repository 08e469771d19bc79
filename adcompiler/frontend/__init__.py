"""Every way into the compiler, each lowering to the same IR `Module`.

- `tdsl`: TDSL source text -> syntax tree with spans -> IR (`compile_source`, `compile_file`).

IR text (what `print_module` writes, parsed by `adcompiler.ir.parser`) is the other textual
form of a program. Which one a text is follows a rule, never a trial parse (`text_kind`):
a file by its extension, a string by its first line that is neither blank nor a comment.
"""
from __future__ import annotations

from .tdsl import compile_file, compile_source, decode

IR_SUFFIXES = (".ir", ".adcir")
IR_MARKER = "func @"   # every function of IR text starts so; TDSL has no `func` keyword


def path_kind(path: str) -> str:
    """``"ir"`` for a ``.ir`` or ``.adcir`` file, else ``"tdsl"``."""
    return "ir" if path.endswith(IR_SUFFIXES) else "tdsl"


def text_kind(text: str) -> str:
    """``"ir"`` when the first line that is neither blank nor a comment (``//`` in IR,
    ``#`` in TDSL) starts with ``func @``, else ``"tdsl"``."""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "//")):
            return "ir" if line.startswith(IR_MARKER) else "tdsl"
    return "tdsl"


__all__ = ["compile_source", "compile_file", "decode", "path_kind", "text_kind", "IR_SUFFIXES"]
