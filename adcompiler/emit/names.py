"""Readable, unique identifiers for IR values in emitted source (Python, DOT), and text from
programs made safe to quote in it."""
from __future__ import annotations

import keyword
import re

from ..ir.types import Dim


class Namer:
    """Gives each value an identifier derived from its name hint, unique in one scope.

    Rebinding a TDSL name makes a new SSA value with the same hint, and the adjoint program
    uses both, so later values get a suffix: ``h``, ``h_1``, ``h_2``.
    """

    def __init__(self, reserved=()):
        self.used: set[str] = set(reserved)
        self.names: dict[object, str] = {}
        self.counts: dict[str, int] = {}

    def fresh(self, hint: str | None, default: str = "t") -> str:
        base = sanitize(hint) if hint else default
        k = self.counts.get(base, 0)
        name = base if hint and k == 0 else f"{base}{'_' if hint else ''}{k}"
        while name in self.used:
            k += 1
            name = f"{base}{'_' if hint else ''}{k}"
        self.counts[base] = k + 1
        self.used.add(name)
        return name

    def __call__(self, value) -> str:
        if value not in self.names:
            self.names[value] = self.fresh(getattr(value, "name", None))
        return self.names[value]


def sanitize(hint: str) -> str:
    """A Python (and C) identifier close to `hint` (``x.grad`` -> ``x_grad``, ``if`` ->
    ``if_``). ASCII only: Python folds some other letters together (NFKC), which could make
    two names one."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
    if name[0].isdigit():
        name = "v" + name
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        name += "_"
    return name


def dim_expr(d: Dim, symbols: dict[str, str] | None = None) -> str:
    """A Python expression for a dimension: ``4``, ``B``, ``2*B*T``, ``T-1``; `symbols`
    renames."""
    if isinstance(d, int):
        return str(d)
    symbols = symbols or {}
    return re.sub(r"[A-Za-z_][A-Za-z0-9_]*", lambda m: symbols.get(m.group(), m.group()), d)


def comment_text(text: str) -> str:
    """`text` (a file name, a source line) safe inside a one-line comment of generated source:
    each character that is not printable (a line break of any kind, NUL, a lone surrogate
    from an undecodable file name, ...) is written as its Python escape."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)


def string_literal(text: str, quotes: str = '"""') -> str:
    """`text` as a Python string literal: between `quotes` when that reads back exactly, else
    as `repr` writes it."""
    if text.isprintable() and "\\" not in text and '"' not in text and "'" not in text:
        return f"{quotes}{text}{quotes}"
    return repr(text)
