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

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the core classes print through this module
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


class Namer(dict):
    """Unique printed names (``%h.1``) for the values of one function: ``namer[v]`` (or
    ``namer(v)``) is `v`'s name, assigned on first sight by `__missing__`, so printing a
    value already named costs one dict lookup.

    A hint gets ``.1``, ``.2``, ... after its first use, counted per hint; values without a
    hint are numbered. No two names can be equal, so none is ever searched for: a number
    is digits, a hint an identifier (no dot) or a quoted string (ending in a quote), and a
    suffix follows the name's last dot, so ``base.k`` is only ever made from one base and
    one count."""

    def __init__(self):
        super().__init__()
        self.next_number = 0
        self.next_suffix: dict[str, int] = {}  # printed hint -> its next suffix
        self.bases: dict[str, str] = {}        # hint -> ``%hint`` (quoted if need be)

    def __call__(self, v: Value) -> str:
        return self[v]

    def __missing__(self, v: Value) -> str:
        hint = v.name
        if not hint:
            name = f"%{self.next_number}"
            self.next_number += 1
        else:
            base = self.bases.get(hint)
            if base is None:
                base = self.bases[hint] = "%" + (hint if _IDENT.match(hint) else _quote(hint))
            k = self.next_suffix.get(base, 0)
            name = f"{base}.{k}" if k else base
            self.next_suffix[base] = k + 1
        self[v] = name
        return name


class Printer:
    def __init__(self):
        self.lines: list[str] = []
        self.name = Namer()
        # Texts of the types and locations printed so far. Types are interned (equal types
        # are one object, hashed by identity); locations are keyed by their id, cheaper to
        # hash than the frozen dataclass (whose generated hash runs in Python): a program of
        # a million ops has a location per source line. `keep` holds every location that
        # is a key, so that no id is reused while the printer lives.
        self.types: dict[TensorType, str] = {}
        self.locs: dict[int, str] = {}
        self.keep: list = []
        self.files: dict[str, str] = {}
        self.op_names: set[str] = set()

    def type(self, t: TensorType) -> str:
        text = self.types.get(t)
        if text is None:
            text = self.types[t] = format_type(t)
        return text

    def loc(self, loc) -> str:
        """`loc`'s text, after a space."""
        text = self.locs.get(id(loc))
        if text is None:
            f = self.files.get(loc.file)
            if f is None:
                f = self.files[loc.file] = _quote(loc.file)
            text = self.locs[id(loc)] = f" loc({f}:{loc.line}:{loc.col})"
            self.keep.append(loc)
        return text

    def check_op_name(self, name: str) -> None:
        if not _OP_NAME.match(name):
            raise ValueError(f"cannot print op name {name!r}")
        self.op_names.add(name)

    def function(self, f: Function) -> None:
        self.name = Namer()  # names are local to a function
        args = []
        for a in f.body.args:
            mark = " {param}" if a.name is not None and a.name in f.params else ""
            args.append(f"{self.name[a]}: {format_type(a.type)}{mark}")
        head = f"func @{f.name if _OP_NAME.match(f.name) else _quote(f.name)}({', '.join(args)})"
        head += " -> (" + ", ".join(format_type(t) for t in f.result_types) + ")"
        if f.attrs:
            head += " attributes " + format_attrs(f.attrs)
        if f.loc is not None:
            head += self.loc(f.loc)
        self.lines.append(head + " {")
        self.ops(f.body.ops, 1)
        self.lines.append("}")

    def ops(self, ops: list[Op], depth: int) -> None:
        """Append the lines of `ops` (regions included) indented `depth` levels.

        The printer's hot loop (a large derivative has a million ops): what it uses is bound
        to locals once, one result (the common case) is named and typed without a join, and
        type and location texts come from the caches without a call."""
        pad = INDENT * depth
        lines, op_names, types, locs = self.lines, self.op_names, self.types, self.locs
        name_of = self.name.__getitem__
        for op in ops:
            name = op.name
            if name not in op_names:
                self.check_op_name(name)
            results = op.results
            # results are named before operands: print_op names unnamed values in order
            if len(results) == 1:
                r = results[0]
                res = name_of(r)
                res_types = types.get(r.type) or self.type(r.type)
            elif results:
                res = ", ".join(map(name_of, results))
                res_types = ", ".join([self.type(r.type) for r in results])
            args = ", ".join(map(name_of, op.operands))
            attrs = " " + format_attrs(op.attrs) if op.attrs else ""
            loc = op.loc
            loc = "" if loc is None else locs.get(id(loc)) or self.loc(loc)
            if results:
                text = f"{pad}{res} = {name}({args}){attrs} : {res_types}{loc}"
            else:
                text = f"{pad}{name}({args}){attrs}{loc}"
            for region in op.regions:
                lines.append(text + " {")
                args = ", ".join(f"{name_of(a)}: {self.type(a.type)}" for a in region.args)
                lines.append(f"{pad}^({args}):")
                self.ops(region.ops, depth + 1)
                text = pad + "}"
            lines.append(text)


def print_function(f: Function) -> str:
    p = Printer()
    p.function(f)
    p.lines.append("")  # the text ends with a newline
    return "\n".join(p.lines)


def print_module(m: Module) -> str:
    """The whole module; functions are separated by a blank line (one join of all lines:
    the text of a large module is tens of megabytes, not copied again per function)."""
    p = Printer()
    for k, f in enumerate(m.functions.values()):
        if k:
            p.lines.append("")
        p.function(f)
    p.lines.append("")
    return "\n".join(p.lines)


def print_op(op: Op) -> str:
    """One op (regions included) with names local to it; for messages and debugging."""
    p = Printer()
    p.ops([op], 0)
    return "\n".join(p.lines)
