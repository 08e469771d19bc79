"""Source locations and user-facing errors.

Every error a user's program or data can cause is an `AdcError` (the hierarchy is listed in
`adc_runtime.errors`); the CLI renders it as ``FILE:LINE:COL: error: MESSAGE`` followed by
the source line and a caret.
"""
from __future__ import annotations

from dataclasses import dataclass

# the root of the hierarchy lives in the runtime, so that its RunError is an AdcError too
from adc_runtime.errors import AdcError, RunError, UnboundDimError  # noqa: F401


@dataclass(frozen=True)
class Loc:
    """A position in a source file; line and col count from 1."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class ShapeError(AdcError):
    """Raised by op type rules; the caller attaches the location of the op."""


def render(err: AdcError, source: str | None = None) -> str:
    """Format `err` as the spec's ``FILE:LINE:COL: error: MESSAGE`` plus source line and caret."""
    if err.loc is None:
        return f"error: {err.message}"
    text = f"{err.loc}: error: {err.message}"
    if source is not None:
        lines = source.splitlines()
        if 1 <= err.loc.line <= len(lines):
            line = lines[err.loc.line - 1].replace("\t", " ")
            text += f"\n{line}\n{' ' * (err.loc.col - 1)}^"
    return text
