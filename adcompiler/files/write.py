"""Output files: written by `adc_runtime.files.write_atomic` (atomic when regular,
written through otherwise, modes kept), and refused early when they cannot be written."""
from __future__ import annotations

import os

from adc_runtime.files import save_npz, write_atomic  # noqa: F401  (re-exported)

from ..diagnostics import AdcError


def check_output(path: str | None, option: str) -> None:
    """Refuse an output path that cannot be written before the work that fills it: a
    directory, or a file in a folder that does not exist."""
    if not path:
        return
    if os.path.isdir(path):
        raise AdcError(f"{option}: cannot write '{path}': it is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise AdcError(f"{option}: cannot write '{path}': folder '{folder}' does not exist")


def save_text(path: str, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
