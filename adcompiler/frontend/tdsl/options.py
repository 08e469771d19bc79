"""Op options: constant evaluation of option expressions and checks of their kinds.

Option kinds are those of docs/ops.md: ``int float number bool str dtype axes ints shape
dim spatial padding``. Lists become tuples (hashable attributes). A bare name is a dtype for
a ``dtype`` option and a symbolic dimension for ``shape``/``dim`` options.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.types import DTYPES
from . import ast
from .values import Weak, fold

MAX_DEPTH = 64

KIND_TEXT = {
    "int": "an integer", "float": "a number", "number": "a number", "bool": "true or false",
    "str": "a string", "dtype": f"a dtype ({', '.join(DTYPES)})",
    "axes": "an integer or a list of integers", "ints": "a list of integers",
    "shape": "a list of dimensions (integers or symbolic names)",
    "dim": "a dimension (an integer or a symbolic name)",
    "spatial": "an integer or a list of integers (one per spatial axis)",
    "padding": 'an integer, a list of integers, "same" or "valid"',
}


@dataclass
class Sym:
    """A bare name in an option: a dtype or a symbolic dimension, depending on the kind."""

    name: str
    bound: object       # the variable's binding (Value or Weak) if the name is a variable
    span: ast.Span


class ConstEval:
    """Evaluates option expressions to Python constants.

    `lookup(name)` returns a variable's binding or None; `error(msg, span)` builds an
    `AdcError`; `symbols` are the symbolic dimensions of the function's inputs.
    """

    def __init__(self, lookup, error, symbols, subst=None):
        self.lookup = lookup
        self.error = error
        self.symbols = symbols
        self.subst = subst or {}     # a specialization's symbol -> dim
        self.what = ""               # the option being checked, for messages

    def value(self, e, depth: int = 0):
        if depth > MAX_DEPTH:
            raise self.error("option value is nested too deeply", e.span)
        if isinstance(e, (ast.Number, ast.String, ast.Bool)):
            return e.value
        if isinstance(e, ast.Name):
            return Sym(e.id, self.lookup(e.id), e.span)
        if isinstance(e, ast.ListExpr):
            return [self.value(x, depth + 1) for x in e.items]
        if isinstance(e, ast.Neg):
            v = self.number(self.value(e.operand, depth + 1), e.operand.span)
            return -v
        if isinstance(e, ast.Binary) and e.op in ("+", "-", "*", "/", "**"):
            a = self.number(self.value(e.left, depth + 1), e.left.span)
            b = self.number(self.value(e.right, depth + 1), e.right.span)
            return fold(e.op, a, b, lambda m: self.error(m, e.op_span))
        raise self.error("an option must be a constant", e.span)

    def number(self, v, span):
        if isinstance(v, Sym):
            v = self.resolve(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error("expected a number", span)
        return v

    def resolve(self, s: Sym):
        """A name used where a number is expected: only a variable holding a literal."""
        if s.bound is None:
            raise self.error(f"unknown name '{s.name}'", s.span)
        if isinstance(s.bound, Weak):
            return s.bound.value
        which = f" ({self.what})" if self.what else ""
        raise self.error(f"'{s.name}' is a tensor value; an option must be a constant{which}",
                         s.span)

    # ---- kinds -----------------------------------------------------------------------
    def check(self, kind: str, v, what: str, span):
        """`v` (from `value`) as an attribute of option `kind`; `what` names the option."""
        self.what = what
        def bad():
            return self.error(f"{what} expects {KIND_TEXT.get(kind, kind)}, "
                              f"got {describe(v)}", span)

        if kind == "dtype":
            if isinstance(v, Sym) and v.name in DTYPES:
                return v.name
            raise bad()
        if kind in ("shape", "dim"):
            def dim(x):
                if isinstance(x, Sym):
                    if x.name in self.symbols or x.bound is None:
                        return self.subst.get(x.name, x.name)
                    x = self.resolve(x)
                if isinstance(x, int) and not isinstance(x, bool):
                    return x
                raise bad()
            if kind == "dim":
                return dim(v)
            if not isinstance(v, list):
                raise bad()
            return tuple(dim(x) for x in v)
        v = self.plain(v)
        if kind == "int":
            if _is_int(v):
                return v
        elif kind == "float":
            if _is_int(v) or isinstance(v, float):
                return float(v)
        elif kind == "number":
            if _is_int(v) or isinstance(v, float):
                return v
        elif kind == "bool":
            if isinstance(v, bool):
                return v
        elif kind == "str":
            if isinstance(v, str):
                return v
        elif kind == "axes":
            if _is_int(v):
                return v
            if isinstance(v, list) and all(_is_int(x) for x in v):
                return tuple(v)
        elif kind == "ints":
            if isinstance(v, list) and all(_is_int(x) for x in v):
                return tuple(v)
        elif kind in ("spatial", "padding"):
            if _is_int(v) or v is None or (kind == "padding" and isinstance(v, str)):
                return v
            if isinstance(v, list) and all(_is_int(x) for x in v):
                return tuple(v)
        else:
            return _tuples(v)
        raise bad()

    def plain(self, v):
        """Replace names by the literals their variables hold."""
        if isinstance(v, Sym):
            return self.resolve(v)
        if isinstance(v, list):
            return [self.plain(x) for x in v]
        return v


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def describe(v) -> str:
    if isinstance(v, Sym):
        return f"the name '{v.name}'"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'the string "{v}"'
    if isinstance(v, list):
        return "a list"
    return f"{v}"
