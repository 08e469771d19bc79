"""Output files: written by `adc_runtime.files.write_atomic` (atomic when regular,
written through otherwise, modes kept), and refused early, before the work that fills
them, when they cannot be written or when they are one of the command's inputs."""
from __future__ import annotations

import os
from typing import Mapping, Sequence

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


def check_writable(path: str, option: str) -> None:
    """`check_output`, and a file or folder the user may not write is refused too."""
    check_output(path, option)
    if os.path.lexists(path) and not os.path.isdir(path):
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise AdcError(f"{option}: cannot write '{path}': permission denied")
    elif not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK | os.X_OK):
        raise AdcError(f"{option}: cannot write '{path}': its folder is not writable")


def _identity(path: str):
    """What `path` names: its device and inode when it exists (links followed), else its
    absolute path with links resolved."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return os.path.realpath(path)


def check_not_inputs(outputs: Mapping[str, str | None],
                     inputs: Mapping[str, str | Sequence[str] | None],
                     allowed: Sequence[tuple[str, str]] = ()) -> None:
    """Refuse an output that is one of the inputs (the same file, however it is named:
    links are followed), or two outputs in one place: writing it would destroy what the
    command reads. `allowed`: (output, input) pairs that may be one file (a checkpoint
    that a resumed run replaces)."""
    seen: dict = {}
    for option, path in inputs.items():
        for p in [path] if isinstance(path, str) else (path or ()):
            if p and not p.startswith("/dev/"):
                seen.setdefault(_identity(p), (option, p))
    written: dict = {}
    for option, path in outputs.items():
        if not path or path.startswith("/dev/"):
            continue
        key = _identity(path)
        if key in seen and (option, seen[key][0]) not in allowed:
            what, name = seen[key]
            also = f" ('{name}')" if name != path else ""
            raise AdcError(f"{option} '{path}' is the {what} file{also}: writing it would "
                           "destroy an input of this command; choose another output")
        if key in written:
            raise AdcError(f"{written[key]} and {option} both name '{path}': choose one file "
                           "for each output")
        written[key] = option


def save_text(path: str, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
