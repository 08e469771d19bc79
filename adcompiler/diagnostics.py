"""Source locations and user-facing errors.

Every error a user's program or data can cause is an `AdcError` (the hierarchy is listed in
`adc_runtime.errors`); the CLI renders it as ``FILE:LINE:COL: error: MESSAGE`` followed by
the source line and a caret.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# the root of the hierarchy lives in the runtime, so that its RunError is an AdcError too
from adc_runtime.errors import AdcError, InternalError, RunError, UnboundDimError  # noqa: F401

# The line breaks of TDSL and IR text: both parsers normalize them to "\n" first, and the
# renderer splits on the same set, so a form feed or U+2028 never shifts the reported line.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Loc:
    """A position in a source file; line and col count from 1."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class ShapeError(AdcError):
    """Raised by op type rules; the caller attaches the location of the op."""


def normalize_newlines(text: str) -> str:
    """`text` with every line break the languages know (``\\r\\n``, ``\\r``) made ``\\n``."""
    return _LINE_BREAK.sub("\n", text)


def source_lines(text: str) -> list[str]:
    """The lines of `text` as the lexers count them (not `str.splitlines`, which also breaks
    at form feeds, U+2028 and other characters that are not line breaks here)."""
    return _LINE_BREAK.split(text)


def render(err: AdcError, source: str | None = None, severity: str = "error") -> str:
    """Format `err` as the spec's ``FILE:LINE:COL: error: MESSAGE`` plus source line and caret."""
    message = err.message.translate(_ESCAPES)  # one line, whatever text the message quotes
    if err.loc is None:
        return f"{severity}: {message}"
    text = f"{err.loc}: {severity}: {message}"
    if source is not None:
        lines = source_lines(source)
        if 1 <= err.loc.line <= len(lines):
            line = _printable(lines[err.loc.line - 1])
            col = min(max(err.loc.col, 1), len(line) + 1)
            text += f"\n{line}\n{' ' * (col - 1)}^"
    return text


# control and line-separating characters, shown escaped in messages (as repr() shows them)
_ESCAPES = {c: repr(chr(c))[1:-1] for c in [*range(32), 0x7f, 0x85, 0x2028, 0x2029]
            if chr(c) != "\t"}


def _printable(line: str) -> str:
    """`line` with each control or separator character shown as one space, so that the
    caret below it stays in its column (tabs, form feeds, NUL, U+2028, ...)."""
    return "".join(" " if (c < " " or c == "\x7f" or c in "\x85\u2028\u2029") else c
                   for c in line)
