"""Printing IR as text (the inverse of `parser`; grammar in ``grammar/ir.lark``).

    func @f(%x: f32[B, 3] {param}) -> (f32[B]) attributes {grad_of = "g"} loc("m.tdsl":1:1) {
      %s = sum(%x) {axis = (1,), keepdims = false} : f32[B] loc("m.tdsl":2:5)
      %c, %ys = for(%s, %x) {n = "B", n_carry = 1, reverse = false} : f32[B], f32[B, 3] {
      ^(%i: i64[], %c.1: f32[B], %x.1: f32[3]):
        yield(%c.1, %x.1)
      }
      return(%s) loc("m.tdsl":3:5)
    }

Values print as ``%hint`` when they have a name hint, with a ``.N`` suffix when the hint is
already taken in the function (``%x.1``), so parsing recovers the hint exactly; values
without a hint are numbered (``%0``). Attributes keep their Python types: ``1`` is an int,
``1.0`` a float, ``"B"`` a string, ``(0,)`` a tuple, ``[0]`` a list, ``none`` is None.
"""
from __future__ import annotations

import json
import math
import numbers
import re

import numpy as np

from .core import Block, Function, Module, Op, Value
from .types import TensorType, parse_dim

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
INDENT = "  "


def _quote(s: str) -> str:
    """A JSON string literal; characters that are not printable (U+2028, a lone surrogate
    from an undecodable file name, ...) escaped too, so the text is one line of UTF-8."""
    text = json.dumps(s, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)


def format_type(t: TensorType) -> str:
    for d in t.shape:
        if isinstance(d, str) and parse_dim(d) != d:  # it would read back as another dim
            raise ValueError(f"symbolic dim {d!r} is not in canonical form")
    return str(t)


def format_attr(v) -> str:
    """One attribute value; floats use `repr`, which round-trips exactly.

    NumPy scalars that slip into attrs print as the Python int, float or bool they equal."""
    if v is None:
        return "none"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        v = float(v)
        if math.isnan(v):
            return "nan"
        return float.__repr__(v)
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, list):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if isinstance(v, tuple):
        if len(v) == 1:
            return "(" + format_attr(v[0]) + ",)"
        return "(" + ", ".join(format_attr(x) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_quote(_key(k))}: {format_attr(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot print attribute value {v!r} of type {type(v).__name__}")


def _key(k) -> str:
    if not isinstance(k, str):
        raise TypeError(f"attribute dict keys must be strings, got {k!r}")
    return k


def format_attrs(attrs: dict) -> str:
    items = [f"{k if _IDENT.match(k) else _quote(k)} = {format_attr(v)}"
             for k, v in attrs.items()]
    return "{" + ", ".join(items) + "}"


def format_loc(loc) -> str:
    return f"loc({_quote(loc.file)}:{loc.line}:{loc.col})"


class Namer:
    """Unique printed names for the values of one function, assigned on first sight.

    A hint taken already gets the first free suffix ``.1``, ``.2``, ...; the search for it
    resumes where the last one for the same hint stopped (names are never released), so
    naming is linear in the number of values."""

    def __init__(self):
        self.names: dict[Value, str] = {}
        self.taken: set[str] = set()
        self.next_number = 0
        self.next_suffix: dict[str, int] = {}

    def __call__(self, v: Value) -> str:
        name = self.names.get(v)
        if name is None:
            name = self._fresh(v.name)
            self.names[v] = name
            self.taken.add(name)
        return "%" + name

    def _fresh(self, hint: str | None) -> str:
        if not hint:
            while str(self.next_number) in self.taken:
                self.next_number += 1
            self.next_number += 1
            return str(self.next_number - 1)
        base = hint if _IDENT.match(hint) else _quote(hint)
        if base not in self.taken:
            return base
        k = self.next_suffix.get(base, 1)
        while f"{base}.{k}" in self.taken:
            k += 1
        self.next_suffix[base] = k + 1
        return f"{base}.{k}"


class Printer:
    def __init__(self):
        self.lines: list[str] = []
        self.name = Namer()
        # texts of the types, file names and attribute keys printed so far: a program of
        # many ops has few distinct ones, each formatted once
        self.types: dict[TensorType, str] = {}
        self.files: dict[str, str] = {}
        self.op_names: set[str] = set()

    def type(self, t: TensorType) -> str:
        text = self.types.get(t)
        if text is None:
            text = self.types[t] = format_type(t)
        return text

    def loc(self, loc) -> str:
        f = self.files.get(loc.file)
        if f is None:
            f = self.files[loc.file] = _quote(loc.file)
        return f"loc({f}:{loc.line}:{loc.col})"

    def function(self, f: Function) -> None:
        args = []
        for a in f.body.args:
            mark = " {param}" if a.name is not None and a.name in f.params else ""
            args.append(f"{self.name(a)}: {format_type(a.type)}{mark}")
        head = f"func @{f.name if _OP_NAME.match(f.name) else _quote(f.name)}({', '.join(args)})"
        head += " -> (" + ", ".join(format_type(t) for t in f.result_types) + ")"
        if f.attrs:
            head += " attributes " + format_attrs(f.attrs)
        if f.loc is not None:
            head += " " + format_loc(f.loc)
        self.lines.append(head + " {")
        self.block_ops(f.body, 1)
        self.lines.append("}")

    def block_ops(self, block: Block, depth: int) -> None:
        for op in block.ops:
            self.op(op, depth)

    def op(self, op: Op, depth: int) -> None:
        pad = INDENT * depth
        if op.name not in self.op_names:
            if not _OP_NAME.match(op.name):
                raise ValueError(f"cannot print op name {op.name!r}")
            self.op_names.add(op.name)
        name = self.name
        text = pad
        if op.results:
            text += ", ".join([name(r) for r in op.results]) + " = "
        text += f"{op.name}({', '.join([name(v) for v in op.operands])})"
        if op.attrs:
            text += " " + format_attrs(op.attrs)
        if op.results:
            text += " : " + ", ".join([self.type(r.type) for r in op.results])
        if op.loc is not None:
            text += " " + self.loc(op.loc)
        for region in op.regions:
            self.lines.append(text + " {")
            args = ", ".join(f"{self.name(a)}: {self.type(a.type)}" for a in region.args)
            self.lines.append(f"{pad}^({args}):")
            self.block_ops(region, depth + 1)
            text = pad + "}"
        self.lines.append(text)


def print_function(f: Function) -> str:
    p = Printer()
    p.function(f)
    return "\n".join(p.lines) + "\n"


def print_module(m: Module) -> str:
    """The whole module; functions are separated by a blank line."""
    return "\n".join(print_function(f) for f in m.functions.values())


def print_op(op: Op) -> str:
    """One op (regions included) with names local to it; for messages and debugging."""
    p = Printer()
    p.op(op, 0)
    return "\n".join(p.lines)
