"""Every way into the compiler, each lowering to the same IR `Module`.

- `tdsl`: TDSL source text -> syntax tree with spans -> IR (`compile_source`, `compile_file`).

The TDSL entry points are re-exported here, as ``adcompiler.frontend.compile_source``.
"""
from __future__ import annotations

from .tdsl import compile_file, compile_source, decode

__all__ = ["compile_source", "compile_file", "decode"]
